/* cmd_compare.c — `kvdrift compare`: two configurations side by side, tensor by tensor, and
 * each against the MPFR reference, for someone investigating one specific shift. */
#include "cli/commands.h"
#include "kvd_util.h"

#include "plan/case.h"
#include "model/classify.h"
#include "cli/cli_util.h"
#include "judge/model_check.h"
#include "model/config.h"
#include "kvd_engine.h"
#include "kvd_ref.h"
#include "model/metrics.h"
#include "run/runner.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage_text[] =
    "usage: kvdrift compare MODEL (-p TEXT | --tokens ID,...) --a CONFIG --b CONFIG [options]\n"
    "Runs configurations A and B (e.g. --a blas:step=2048 --b blas:step=8192), generates N\n"
    "greedy tokens with each, evaluates both teacher-forced on A's greedy path, computes the\n"
    "MPFR reference on that path, and prints for every layer's K and V (after prefill) and every\n"
    "logits position: A vs B, A vs reference and B vs reference.\n\n"
    HX_CLI_PAIR_USAGE
    "  -n, --n-gen N         greedy tokens to generate (default 32, as sweep and trace)\n"
    "      --prec BITS       reference precision (default 127)\n"
    "      --no-ref          skip the reference (A vs B only)\n"
    "      --cache DIR       reference cache folder (default $KVDRIFT_CACHE or ~/.cache/kvdrift)\n"
    "  -h, --help            this text\n\n"
    "Columns: max abs = max |x - y|; ulp = max float32 ULP distance; diff = elements whose bits\n"
    "differ; sig = significant digits vs the reference, -log10(max abs / max |R|); top1 = argmax.\n"
    "The last line is the verdict: IDENTICAL (bitwise equal captures), SAME TOKENS (other bits,\n"
    "same argmax at every teacher-forced position and the same greedy tokens) or PARTED (the\n"
    "argmax differs somewhere or the greedy tokens part), with where.\n"
    "exit codes: 0 IDENTICAL or SAME TOKENS, 1 PARTED, 2 usage or input error\n";

static void ulp_text(char *buf, size_t n, uint64_t u)
{
    if (u == HX_ULP_NAN)
        snprintf(buf, n, "nan");
    else
        snprintf(buf, n, "%llu", (unsigned long long)u);
}

/* One line: A vs B, and A, B vs R when r is given. */
static void print_row(const char *name, const float *a, const float *b, const double *r, size_t n,
                      bool logits)
{
    hx_metrics ab, ar, br;
    char u1[24], u2[24], u3[24];
    hx_metrics_compute_f32(&ab, a, b, n);
    ulp_text(u1, sizeof u1, ab.max_ulp);
    printf("%-12s %10.3g %8s %7zu", name, ab.max_abs, u1, ab.n_diff_bits);
    if (r) {
        hx_metrics_compute(&ar, a, r, n);
        hx_metrics_compute(&br, b, r, n);
        ulp_text(u2, sizeof u2, ar.max_ulp);
        ulp_text(u3, sizeof u3, br.max_ulp);
        printf(" | %10.3g %8s %5.1f | %10.3g %8s %5.1f", ar.max_abs, u2, ar.sig_digits, br.max_abs,
               u3, br.sig_digits);
    }
    if (logits) {
        printf(" | top1 %d %d", (int)hx_argmax_f32(a, n), (int)hx_argmax_f32(b, n));
        if (r) {
            hx_logit_metrics la, lb;
            hx_logit_metrics_compute(&la, a, r, n);
            hx_logit_metrics_compute(&lb, b, r, n);
            printf(" R %d margin %.3g KL %.2g %.2g", (int)la.top1_r, la.r_margin, la.kl, lb.kl);
        }
    }
    putchar('\n');
}

enum { O_PREC = 256, O_NOREF, O_CACHE };

typedef struct compare_opts {
    hx_cli_pair_opts ab; /* MODEL, prompt, --a, --b, -n */
    const char *cache;
    uint32_t prec;
    bool no_ref;
} compare_opts;

/* Everything one comparison computed (freed by compare_free). */
typedef struct compare_run {
    lm_model *m;
    ref_model *r;           /* the reference's own view of the file (NULL with --no-ref) */
    int32_t *prompt, *path; /* [n_prompt], [n_gen]: A's greedy tokens, the teacher path */
    uint32_t n_prompt;
    hx_capture *xa, *xb;    /* A and B teacher-forced on path */
    hx_run_stats sa, sb;
    ref_capture ref;        /* R on prompt + path (when have_ref) */
    bool have_ref;
} compare_run;

/* One option; 0 to go on, else the exit code. */
static int set_option(compare_opts *o, int opt, const char *arg)
{
    int code = hx_cli_pair_option(&o->ab, "compare", opt, arg);
    if (code != 1)
        return code;
    switch (opt) {
    case O_NOREF: o->no_ref = true; return 0;
    case O_CACHE: return hx_cli_cache_option(&o->cache, "compare", arg);
    case O_PREC:
        return hx_cli_setting("compare", &o->prec, HX_SET_PRECISION, "--prec", arg);
    default: return 2;
    }
}

/* Options into *o; -1 to go on, else the exit code (0 after --help). */
static int parse_options(compare_opts *o, int argc, char **argv)
{
    static const struct option opts[] = {
        HX_CLI_PAIR_LONG_OPTIONS,
        {"prec", required_argument, NULL, O_PREC}, {"no-ref", no_argument, NULL, O_NOREF},
        {"cache", required_argument, NULL, O_CACHE}, {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *o = (compare_opts){.prec = REF_DEFAULT_PREC};
    hx_cli_pair_init(&o->ab);
    optind = 1;
    opterr = 0;
    hx_cli_optstate optstate = {0};
    for (int opt; (opt = hx_cli_getopt(&optstate, argc, argv, ":p:f:n:h", opts, NULL, NULL)) != -1;) {
        if (opt == 'h') {
            fputs(usage_text, stdout);
            return 0;
        }
        if (opt == ':' || opt == '?')
            return hx_cli_bad_option(&optstate, "compare", opt, argv);
        int code = set_option(o, opt, optarg);
        if (code != 0)
            return code;
    }
    return hx_cli_pair_finish(&o->ab, "compare", argc, argv);
}

/* R on prompt + path (cached). */
static int reference_of_path(compare_run *c, const compare_opts *o, lm_err *err)
{
    const uint32_t n = c->n_prompt + o->ab.n_gen;
    int32_t *all = malloc((size_t)n * sizeof *all);
    if (all == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    memcpy(all, c->prompt, c->n_prompt * sizeof *all);
    memcpy(all + c->n_prompt, c->path, o->ab.n_gen * sizeof *all);
    ref_request rr = {.tokens = all, .n_tokens = n, .n_prompt = c->n_prompt, .prec = o->prec,
                      .log = hx_cli_log, .log_user = "kvdrift compare"};
    bool hit = false;
    int st = hx_model_check(c->m, c->r, err);
    if (st == LM_OK)
        st = lm_model_file_unchanged(c->m, err);
    if (st == LM_OK)
        st = ref_cached(&c->ref, c->r, &rr, o->cache, &hit, err);
    c->have_ref = st == LM_OK;
    free(all);
    return st;
}

/* A free-running: its greedy continuation is the teacher path; then A and B on it, and R. */
static int run_compare(compare_run *c, const compare_opts *o, lm_err *err)
{
    const uint32_t n_gen = o->ab.n_gen;
    int st = hx_cli_pair_load(&c->m, o->no_ref ? NULL : &c->r, &c->prompt, &c->n_prompt, &o->ab,
                              "compare", err);
    hx_run_request rq = {.prompt = c->prompt, .n_prompt = c->n_prompt, .n_gen = n_gen};
    if (st == LM_OK)
        st = hx_run_capture(&c->xa, &c->sa, c->m, &o->ab.a, &rq, err);
    if (st == LM_OK && (c->path = malloc((n_gen ? n_gen : 1) * sizeof *c->path)) == NULL)
        st = LM_FAIL(err, LM_E_NOMEM, "out of memory");
    if (st != LM_OK)
        return st;
    memcpy(c->path, c->xa->tokens + c->n_prompt, n_gen * sizeof *c->path);
    hx_capture_free(c->xa);
    c->xa = NULL;
    rq.forced = c->path;
    rq.n_forced = n_gen;
    st = hx_run_capture(&c->xa, &c->sa, c->m, &o->ab.a, &rq, err);
    if (st == LM_OK)
        st = hx_run_capture(&c->xb, &c->sb, c->m, &o->ab.b, &rq, err);
    if (st == LM_OK && !o->no_ref)
        st = reference_of_path(c, o, err);
    return st;
}

/* The header lines: configurations, speeds, where the greedy paths part. */
static void print_summary(const compare_run *c, const compare_opts *o)
{
    const uint32_t n_prompt = c->n_prompt, n_gen = o->ab.n_gen;
    char sa_s[HX_CONFIG_STR_MAX], sb_s[HX_CONFIG_STR_MAX];
    hx_config_format(sa_s, sizeof sa_s, &o->ab.a);
    hx_config_format(sb_s, sizeof sb_s, &o->ab.b);
    printf("compare %s: %u prompt tokens, %u generated; A = %s, B = %s; teacher path = A's "
           "greedy tokens%s\n", o->ab.model, (unsigned)n_prompt, (unsigned)n_gen, sa_s, sb_s,
           c->have_ref ? "" : "; no reference");
    printf("prefill tok/s: A %.0f, B %.0f\n", (double)n_prompt / c->sa.prefill_s,
           (double)n_prompt / c->sb.prefill_s);
    const int32_t *ta = c->xa->tokens + n_prompt, *tb = c->xb->tokens + n_prompt;
    int64_t g = hx_first_divergence(ta, n_gen, tb, n_gen);
    if (g < 0)
        printf("greedy: A and B generate the same %u tokens\n", (unsigned)n_gen);
    else
        printf("greedy: A and B part at generated index %lld (A id %d, B id %d)\n", (long long)g,
               (int)ta[g], (int)tb[g]);
    for (uint32_t j = 0; c->have_ref && j < n_gen; ++j) {
        int64_t row = ref_capture_find_pos(&c->ref, n_prompt - 1 + j);
        int32_t rtop = row < 0 ? c->path[j]
                               : hx_argmax_f64(c->ref.logits + (size_t)row * c->ref.n_vocab,
                                               c->ref.n_vocab);
        if (rtop != c->path[j]) {
            printf("reference: its argmax leaves A's path at generated index %u (R id %d, A "
                   "id %d)\n", (unsigned)j, (int)rtop, (int)c->path[j]);
            break;
        }
    }
}

/* One row per K, V and logits row, then the two capture hashes. */
static int print_table(const compare_run *c, lm_err *err)
{
    const hx_capture *xa = c->xa, *xb = c->xb;
    const ref_capture *ref = c->have_ref ? &c->ref : NULL;
    printf("%-12s %10s %8s %7s", "tensor", "A-B abs", "A-B ulp", "diff");
    if (ref)
        printf(" | %10s %8s %5s | %10s %8s %5s", "A-R abs", "A-R ulp", "sig", "B-R abs", "B-R ulp",
               "sig");
    printf("\n");
    size_t kv = hx_capture_kv_elems(&xa->shape), nv = xa->shape.n_vocab;
    char name[32];
    for (uint32_t l = 0; l < xa->shape.n_layer; ++l) {
        snprintf(name, sizeof name, "L%u.K", (unsigned)l);
        print_row(name, xa->k[l], xb->k[l], ref ? ref->k + l * kv : NULL, kv, false);
        snprintf(name, sizeof name, "L%u.V", (unsigned)l);
        print_row(name, xa->v[l], xb->v[l], ref ? ref->v + l * kv : NULL, kv, false);
    }
    for (uint32_t i = 0; i < xa->shape.n_pos; ++i) {
        snprintf(name, sizeof name, "logits@%u", (unsigned)xa->positions[i]);
        int64_t rr = ref ? ref_capture_find_pos(ref, xa->positions[i]) : -1;
        print_row(name, xa->logits + i * nv, xb->logits + i * nv,
                  rr >= 0 ? ref->logits + (size_t)rr * nv : NULL, nv, true);
    }
    uint8_t ha[16], hb[16];
    char hxa[33], hxb[33];
    int st = hx_capture_hash(ha, xa, err);
    if (st == LM_OK && (st = hx_capture_hash(hb, xb, err)) == LM_OK) {
        lm_hex_encode(hxa, ha, 16);
        lm_hex_encode(hxb, hb, 16);
        printf("XXH3-128: A %s, B %s (%s)\n", hxa, hxb, memcmp(ha, hb, 16) ? "differ" : "equal");
    }
    return st;
}

/* The verdict line; returns the exit code (0 the same tokens, 1 parted). */
static int print_verdict(const compare_run *c, uint32_t n_gen)
{
    const hx_capture *xa = c->xa, *xb = c->xb;
    size_t nv = xa->shape.n_vocab, n_flip = 0;
    uint32_t np = c->n_prompt;
    int64_t first = -1;
    int64_t g = hx_first_divergence(xa->tokens + np, n_gen, xb->tokens + np, n_gen);
    uint8_t ha[16], hb[16];
    lm_err err = {0};
    if (hx_capture_hash(ha, xa, &err) == LM_OK && hx_capture_hash(hb, xb, &err) == LM_OK &&
        memcmp(ha, hb, 16) == 0) {
        printf("verdict: IDENTICAL: A and B are bitwise equal\n");
        return 0;
    }
    for (uint32_t i = 0; i < xa->shape.n_pos; ++i)
        if (lm_argmax(xa->logits + i * nv, (uint32_t)nv) !=
            lm_argmax(xb->logits + i * nv, (uint32_t)nv)) {
            n_flip++;
            first = first < 0 ? (int64_t)xa->positions[i] : first;
        }
    if (n_flip == 0 && g < 0) {
        printf("verdict: SAME TOKENS: other bits, the same argmax at all %u positions and the "
               "same greedy tokens\n", (unsigned)xa->shape.n_pos);
        return 0;
    }
    printf("verdict: PARTED: argmax differs at %zu of %u positions", n_flip,
           (unsigned)xa->shape.n_pos);
    if (first >= 0)
        printf(" (first at position %lld)", (long long)first);
    if (g >= 0)
        printf("; greedy tokens part at generated index %lld", (long long)g);
    printf("\n");
    return 1;
}

int cmd_compare(int argc, char **argv)
{
    compare_opts o;
    int code = parse_options(&o, argc, argv);
    if (code >= 0)
        return code;
    compare_run c = {0};
    lm_err err = {0};
    int st = run_compare(&c, &o, &err);
    int verdict = 0;
    if (st == LM_OK) {
        print_summary(&c, &o);
        st = print_table(&c, &err);
    }
    if (st == LM_OK)
        verdict = print_verdict(&c, o.ab.n_gen);
    if (st != LM_OK)
        fprintf(stderr, "kvdrift compare: %s\n", err.msg);
    hx_capture_free(c.xa);
    hx_capture_free(c.xb);
    if (c.have_ref)
        ref_capture_free(&c.ref);
    free(c.prompt);
    free(c.path);
    lm_model_free(c.m);
    ref_model_free(c.r);
    return st != LM_OK ? lm_status_exit_code(st) : verdict;
}
