/* cmd_search.c — `kvdrift search`: prompts ranked by the reference's smallest margin and by
 * split risk, the riskiest written as case files; the near-tie generator without a corpus; and
 * for an evaluation's JSONL, the expected number of completions two configurations disagree on. */
#include "cli/cli_util.h"
#include "cli/commands.h"

#include "fs.h"
#include "judge/split_risk.h"
#include "kvd_profile.h"
#include "plan/prompt.h"
#include "run/split_search.h"

#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage_text[] =
    "usage: kvdrift search MODEL (--corpus FILE | --jsonl FILE | [-p TEXT]) [options]\n"
    "Finds prompts whose greedy continuation sits near a tie: for each prompt, the reference's\n"
    "greedy path, its exact top-2 margin at every generated step and the profile's split-risk\n"
    "forecast (the probability that an engine whose rounding is like the profile's ensemble\n"
    "members' leaves that path within N tokens, with a 90% interval from the member count; the\n"
    "error model is in docs/DESIGN.md, \"Split risk\"). Ranks the prompts by risk and by smallest\n"
    "margin and writes the K riskiest as case files (tokens, profile, n_gen), CI cases where a\n"
    "changed bit most likely becomes a changed token.\n\n"
    "  --corpus FILE       prompts, one per line (blank lines skipped)\n"
    "  --jsonl FILE        prompts as JSON objects, one per line, each with a \"prompt\" string;\n"
    "                      adds the evaluation's line: expected completions that differ between\n"
    "                      two configurations under the profile, with an interval\n"
    "  -p, --prompt TEXT   without a corpus: the generator's starting prompt (default \"Once upon\n"
    "                      a time\"), edited token by token until the reference's margin at some\n"
    "                      generated step is below --threshold\n"
    "      --profile P     precision profile of the forecast (default f32; " "f32, f16kv, bf16,\n"
    "                      tf32, q8act, f16act)\n"
    "  -n, --n-gen N       generated tokens forecast (default 32)\n"
    "  -k N                prompts to keep (default 5)\n"
    "      --threshold X   near-tie margin (default 0.05): a corpus whose smallest margin never\n"
    "                      falls below it is an input error (exit 2), and the generator's goal\n"
    "      --rounds R      generator rounds, one token edited per round (default 32)\n"
    "      --seed S        generator seed (default 1)\n"
    "  -o, --output DIR    case files DIR/search-1.case ... (default: none written)\n"
    "      --ensemble M    members per envelope (default 8)\n"
    "      --cache DIR     reference/envelope cache (as sweep)\n"
    "  -j, --jobs N        engine runs in parallel (default 1)\n"
    "  -h, --help          this text\n\n"
    "Evaluation line (--jsonl): E = sum over prompts of pair_i, the probability that two\n"
    "configurations' completions differ within N tokens (1 - prod (1 - 2 p (1 - p)) over steps);\n"
    "interval [sum lo_i - 1.645 sd_lo, sum hi_i + 1.645 sd_hi], lo_i/hi_i from the member count\n"
    "and sd the binomial spread of the count (sqrt(sum q (1 - q))).\n\n"
    "exit codes: 0 done, 2 usage or input error (an empty corpus, a prompt longer than the\n"
    "context, a line that is not a JSON object, no margin below the threshold)\n";

enum { O_CORPUS = 1300, O_JSONL, O_PROFILE, O_THRESHOLD, O_ROUNDS, O_SEED, O_ENSEMBLE, O_CACHE };

typedef struct search_opts {
    const char *model, *corpus, *jsonl, *prompt, *profile, *out, *cache;
    uint32_t n_gen, k, rounds, ensemble, jobs;
    double threshold;
    uint64_t seed;
} search_opts;

typedef struct item {
    uint32_t line;            /* 1-based line in the corpus; 0 = generated */
    char *text;               /* the prompt as given (NULL: generated) */
    int32_t *ids;
    uint32_t n;
    hx_split_forecast f;
} item;

static int parse_u32(uint32_t *out, const char *opt, const char *arg, uint32_t lo)
{
    char *end;
    unsigned long v = strtoul(arg, &end, 10);
    if (*arg == '-' || *end || v < lo || v > UINT32_MAX / 4)
        return hx_cli_fail("search", "%s '%s': expected an integer >= %u", opt, arg,
                           (unsigned)lo);
    *out = (uint32_t)v;
    return -1;
}

static int parse_options(search_opts *o, int argc, char **argv)
{
    static const struct option opts[] = {
        {"corpus", required_argument, NULL, O_CORPUS}, {"jsonl", required_argument, NULL, O_JSONL},
        {"prompt", required_argument, NULL, 'p'}, {"profile", required_argument, NULL, O_PROFILE},
        {"n-gen", required_argument, NULL, 'n'}, {"threshold", required_argument, NULL, O_THRESHOLD},
        {"rounds", required_argument, NULL, O_ROUNDS}, {"seed", required_argument, NULL, O_SEED},
        {"output", required_argument, NULL, 'o'}, {"ensemble", required_argument, NULL, O_ENSEMBLE},
        {"cache", required_argument, NULL, O_CACHE}, {"jobs", required_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    *o = (search_opts){.profile = "f32", .n_gen = 32, .k = 5, .rounds = 32, .threshold = 0.05,
                       .seed = 1, .jobs = 1};
    optind = 1;
    opterr = 0;
    hx_cli_optstate st = {0};
    for (int c; (c = hx_cli_getopt(&st, argc, argv, ":p:n:k:o:j:h", opts, NULL, NULL)) != -1;) {
        int rc = -1;
        char *end;
        switch (c) {
        case O_CORPUS: o->corpus = optarg; break;
        case O_JSONL: o->jsonl = optarg; break;
        case 'p': o->prompt = optarg; break;
        case O_PROFILE:
            if (lm_profile_find(optarg) == NULL)
                return hx_cli_fail("search", "--profile '%s': unknown (expected %s)", optarg,
                                   lm_profile_expected());
            o->profile = optarg;
            break;
        case 'n': rc = parse_u32(&o->n_gen, "-n", optarg, 1); break;
        case 'k': rc = parse_u32(&o->k, "-k", optarg, 1); break;
        case O_ROUNDS: rc = parse_u32(&o->rounds, "--rounds", optarg, 1); break;
        case O_ENSEMBLE: rc = parse_u32(&o->ensemble, "--ensemble", optarg, 8); break;
        case 'j': rc = parse_u32(&o->jobs, "-j", optarg, 1); break;
        case O_THRESHOLD:
            o->threshold = strtod(optarg, &end);
            if (*end || !(o->threshold > 0.0) || isinf(o->threshold))
                return hx_cli_fail("search", "--threshold '%s': expected a number > 0", optarg);
            break;
        case O_SEED:
            o->seed = strtoull(optarg, &end, 0);
            if (*end || *optarg == '-')
                return hx_cli_fail("search", "--seed '%s': expected an integer", optarg);
            break;
        case 'o': o->out = optarg; break;
        case O_CACHE: /* 0 is hx_cli_cache_option's success; this loop goes on at -1 */
            if (hx_cli_cache_option(&o->cache, "search", optarg) != 0)
                return 2;
            break;
        case 'h': fputs(usage_text, stdout); return 0;
        default: return hx_cli_bad_option(&st, "search", c, argv);
        }
        if (rc >= 0)
            return rc;
    }
    if (argc - optind != 1)
        return hx_cli_fail("search", "expected one MODEL (try --help)");
    o->model = argv[optind];
    if ((o->corpus != NULL) + (o->jsonl != NULL) + (o->prompt != NULL) > 1)
        return hx_cli_fail("search", "give one of --corpus, --jsonl and -p");
    lm_err err = {0};
    if (o->out != NULL && hx_cli_check_out_dir(o->out, &err) != LM_OK)
        return hx_cli_fail("search", "-o %s", err.msg);
    return -1;
}

/* The prompts of a corpus (one per line) or a JSONL file (objects with a "prompt" string) into
 * items[*n] (texts malloc'd). One line naming FILE:LINE for a bad line; an empty corpus too. */
static int read_prompts(item **items, size_t *n, const char *path, bool jsonl, lm_err *err)
{
    char *data = NULL;
    size_t len = 0;
    int rc = lm_read_file(&data, &len, path, (size_t)64 << 20, err);
    if (rc != LM_OK)
        return rc;
    *items = NULL;
    *n = 0;
    size_t cap = 0;
    uint32_t line = 0;
    for (char *s = data, *e; rc == LM_OK && s < data + len; s = e + 1) {
        e = memchr(s, '\n', (size_t)(data + len - s));
        if (e == NULL)
            e = data + len;
        *e = '\0';
        ++line;
        if (e > s && e[-1] == '\r')
            e[-1] = '\0';
        if (strspn(s, " \t\r") == strlen(s))
            continue;
        char *text = NULL;
        if (jsonl) {
            json_error_t je;
            json_t *j = json_loads(s, JSON_REJECT_DUPLICATES, &je);
            const json_t *pj = json_is_object(j) ? json_object_get(j, "prompt") : NULL;
            if (!json_is_object(j))
                rc = LM_FAIL(err, LM_E_INPUT, "%s:%u: not a JSON object%s%s", path,
                             (unsigned)line, j == NULL ? ": " : "", j == NULL ? je.text : "");
            else if (!json_is_string(pj))
                rc = LM_FAIL(err, LM_E_INPUT, "%s:%u: no \"prompt\" string", path,
                             (unsigned)line);
            else
                text = strdup(json_string_value(pj));
            json_decref(j);
        } else {
            text = strdup(s);
        }
        if (rc == LM_OK && text == NULL)
            rc = LM_FAIL(err, LM_E_NOMEM, "out of memory");
        if (rc == LM_OK && *n == cap) {
            cap = cap ? 2 * cap : 64;
            item *ni = realloc(*items, cap * sizeof *ni);
            if (ni == NULL)
                rc = LM_FAIL(err, LM_E_NOMEM, "out of memory");
            else
                *items = ni;
        }
        if (rc == LM_OK)
            (*items)[(*n)++] = (item){.line = line, .text = text};
        else
            free(text);
    }
    free(data);
    if (rc == LM_OK && *n == 0)
        rc = LM_FAIL(err, LM_E_INPUT, "%s: no prompts (empty corpus)", path);
    return rc;
}

static int by_risk(const void *a, const void *b)
{
    const item *x = a, *y = b;
    if (x->f.risk != y->f.risk)
        return x->f.risk < y->f.risk ? 1 : -1;
    return x->f.min_margin < y->f.min_margin ? -1 : x->f.min_margin > y->f.min_margin;
}

static int by_margin(const void *a, const void *b)
{
    const item *x = *(const item *const *)a, *y = *(const item *const *)b;
    return x->f.min_margin < y->f.min_margin ? -1 : x->f.min_margin > y->f.min_margin;
}

/* The first 40 bytes of a prompt on one line. */
static void excerpt(char *buf, size_t n, const item *it)
{
    if (it->text == NULL) {
        snprintf(buf, n, "(generated, %u tokens)", (unsigned)it->n);
        return;
    }
    snprintf(buf, n, "%.40s%s", it->text, strlen(it->text) > 40 ? "..." : "");
}

/* The model value a case file resolves as given here: synth: as written, a file by its absolute
 * path (a relative one would be read relative to the case file's folder). */
static void case_model(char *buf, size_t n, const char *model)
{
    char abs[PATH_MAX];
    if (strncmp(model, "synth:", 6) == 0 || realpath(model, abs) == NULL)
        snprintf(buf, n, "%s", model);
    else
        snprintf(buf, n, "%s", abs);
}

static int write_case(const search_opts *o, const item *it, size_t rank, lm_err *err)
{
    char path[4200], model[PATH_MAX + 8], *txt = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&txt, &len);
    if (f == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    char p[16], lo[16], hi[16];
    hx_split_pct(p, sizeof p, it->f.risk);
    hx_split_pct(lo, sizeof lo, it->f.lo);
    hx_split_pct(hi, sizeof hi, it->f.hi);
    case_model(model, sizeof model, o->model);
    fprintf(f, "; kvdrift search: rank %zu by split risk under %s within %u tokens: %s [%s, %s];\n"
               "; the reference's smallest margin %.4g at generated step %lld",
            rank, it->f.profile, (unsigned)it->f.n_steps, p, lo, hi, it->f.min_margin,
            (long long)it->f.min_step);
    if (it->line > 0)
        fprintf(f, " (prompt from line %u of %s)", (unsigned)it->line,
                o->corpus ? o->corpus : o->jsonl);
    fprintf(f, "\n[case]\nname = search-%zu\nmodel = %s\ntokens = ", rank, model);
    for (uint32_t i = 0; i < it->n; ++i)
        fprintf(f, "%s%d", i ? "," : "", (int)it->ids[i]);
    fprintf(f, "\nsteps = 1,2,3,5,8,16,full\nbackends = naive,blas\nthreads = 1\nprofile = %s\n"
               "n_gen = %u\n", it->f.profile, (unsigned)o->n_gen);
    fclose(f);
    snprintf(path, sizeof path, "%s/search-%zu.case", o->out, rank);
    int rc = lm_mkdir_p(o->out, err);
    if (rc == LM_OK)
        rc = lm_write_file(path, txt, len, err);
    if (rc == LM_OK)
        printf("wrote %s\n", path);
    free(txt);
    return rc;
}

static void print_table(const item *items, size_t n, size_t k, const search_opts *o)
{
    printf("%-5s %-6s %-22s %6s %9s %6s  %s\n", "rank", "line", "risk [90% interval]", "step",
           "margin", "@step", "prompt");
    for (size_t i = 0; i < n && i < k; ++i) {
        const item *it = &items[i];
        char p[16], lo[16], hi[16], ex[64], iv[64];
        hx_split_pct(p, sizeof p, it->f.risk);
        hx_split_pct(lo, sizeof lo, it->f.lo);
        hx_split_pct(hi, sizeof hi, it->f.hi);
        snprintf(iv, sizeof iv, "%s [%s, %s]", p, lo, hi);
        excerpt(ex, sizeof ex, it);
        printf("%-5zu %-6u %-22s %6lld %9.4g %6lld  %s\n", i + 1, (unsigned)it->line, iv,
               (long long)it->f.likely_step, it->f.min_margin, (long long)it->f.min_step, ex);
    }
    (void)o;
}

int cmd_search(int argc, char **argv)
{
    search_opts o;
    int code = parse_options(&o, argc, argv);
    if (code >= 0)
        return code;
    lm_err err = {0};
    lm_model *m = NULL;
    ref_model *r = NULL;
    char path[4096];
    item *items = NULL;
    size_t n = 0;
    int st = LM_OK;
    const char *file = o.corpus ? o.corpus : o.jsonl;
    if (file != NULL)
        st = read_prompts(&items, &n, file, o.jsonl != NULL, &err);
    if (st == LM_OK)
        st = hx_cli_model_load(&m, &r, path, sizeof path, o.model, o.cache, "search", NULL,
                               &err);
    hx_search_params sp = {.model = m, .ref = r, .model_label = o.model, .profile = o.profile,
                           .n_gen = o.n_gen, .ensemble = o.ensemble, .cache_dir = o.cache,
                           .jobs = o.jobs, .log = hx_cli_log, .log_user = "search"};
    if (st == LM_OK && file == NULL) {
        /* The generator. */
        int32_t *seed = NULL, *out = NULL;
        uint32_t ns = 0;
        bool reached = false;
        items = calloc(1, sizeof *items);
        st = items == NULL ? LM_FAIL(&err, LM_E_NOMEM, "out of memory")
                           : hx_prompt_tokenize(&seed, &ns, m, path,
                                                o.prompt ? o.prompt : "Once upon a time", false,
                                                "-p", &err);
        if (st == LM_OK)
            st = hx_search_generate(&out, &items[0].f, &reached, &sp, seed, ns, o.threshold,
                                    o.rounds, o.seed, &err);
        free(seed);
        if (st == LM_OK) {
            items[0].ids = out;
            items[0].n = ns;
            n = 1;
            printf("kvdrift search %s: generator, %u rounds from seed %llu, profile %s\n",
                   o.model, (unsigned)o.rounds, (unsigned long long)o.seed, o.profile);
            print_table(items, n, 1, &o);
            if (!reached)
                st = LM_FAIL(&err, LM_E_INPUT, "%s: after %u rounds the reference's smallest "
                             "margin is %.4g, not below %g: this model's margins are never small "
                             "here (more --rounds or a larger --threshold)", o.model,
                             (unsigned)o.rounds, items[0].f.min_margin, o.threshold);
        }
    } else if (st == LM_OK) {
        for (size_t i = 0; i < n && st == LM_OK; ++i) {
            st = hx_prompt_tokenize(&items[i].ids, &items[i].n, m, path, items[i].text, false,
                                    file, &err);
            if (st == LM_OK)
                st = hx_search_forecast(&items[i].f, &sp, items[i].ids, items[i].n, &err);
            if (st != LM_OK) {
                lm_err e2 = err;
                lm_err_clear(&err);
                st = LM_FAIL(&err, st, "%s:%u: %s", file, (unsigned)items[i].line, e2.msg);
            }
        }
        if (st == LM_OK) {
            qsort(items, n, sizeof *items, by_risk);
            printf("kvdrift search %s: %zu prompts, profile %s, split risk within %u tokens\n",
                   o.model, n, o.profile, (unsigned)o.n_gen);
            print_table(items, n, o.k, &o);
            const item **bm = malloc(n * sizeof *bm);
            if (bm == NULL)
                st = LM_FAIL(&err, LM_E_NOMEM, "out of memory");
            for (size_t i = 0; bm != NULL && i < n; ++i)
                bm[i] = &items[i];
            if (bm != NULL) {
                qsort(bm, n, sizeof *bm, by_margin);
                printf("by the reference's smallest margin:");
                for (size_t i = 0; i < n && i < o.k; ++i)
                    printf(" line %u %.4g@%lld%s", (unsigned)bm[i]->line, bm[i]->f.min_margin,
                           (long long)bm[i]->f.min_step, i + 1 < n && i + 1 < o.k ? "," : "\n");
                if (bm[0]->f.min_margin >= o.threshold)
                    st = LM_FAIL(&err, LM_E_INPUT, "%s: the reference's smallest margin over "
                                 "%zu prompts is %.4g, never below %g: no near ties here "
                                 "(other prompts, or a larger --threshold)", o.model, n,
                                 bm[0]->f.min_margin, o.threshold);
            }
            free(bm);
        }
        if (st == LM_OK && o.jsonl != NULL) {
            double e = 0.0, lo = 0.0, hi = 0.0, vlo = 0.0, vhi = 0.0;
            for (size_t i = 0; i < n; ++i) {
                e += items[i].f.pair;
                lo += items[i].f.pair_lo;
                hi += items[i].f.pair_hi;
                vlo += items[i].f.pair_lo * (1.0 - items[i].f.pair_lo);
                vhi += items[i].f.pair_hi * (1.0 - items[i].f.pair_hi);
            }
            lo = fmax(0.0, lo - HX_SPLIT_Z * sqrt(vlo));
            hi = fmin((double)n, hi + HX_SPLIT_Z * sqrt(vhi));
            printf("evaluation: expected completions that differ between two configurations "
                   "under %s within %u tokens: %.2f of %zu [%.2f, %.2f] (90%%)\n", o.profile,
                   (unsigned)o.n_gen, e, n, lo, hi);
        }
    }
    for (size_t i = 0; st == LM_OK && o.out != NULL && i < n && i < o.k; ++i)
        st = write_case(&o, &items[i], i + 1, &err);
    if (st != LM_OK)
        fprintf(stderr, "kvdrift search: %s\n", err.msg);
    for (size_t i = 0; i < n; ++i) {
        free(items[i].text);
        free(items[i].ids);
    }
    free(items);
    lm_model_free(m);
    ref_model_free(r);
    return st != LM_OK ? lm_status_exit_code(st) : 0;
}
