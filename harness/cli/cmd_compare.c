/* cmd_compare.c — `kvdrift compare`: two configurations side by side, tensor by tensor, and
 * each against the MPFR reference, for someone investigating one specific shift. */
#include "commands.h"
#include "kvd_util.h"

#include "case.h"
#include "classify.h"
#include "cli_util.h"
#include "config.h"
#include "kvd_engine.h"
#include "kvd_ref.h"
#include "metrics.h"
#include "runner.h"

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
    "  -p, --prompt TEXT     prompt text (BOS added when the vocabulary asks for it)\n"
    "      --tokens ID,...   prompt as token ids instead of text\n"
    "      --special         parse control tokens written in TEXT (\"<|im_start|>\") as tokens\n"
    "      --a CONFIG        first configuration (BACKEND[:step=N|full][:threads=T])\n"
    "      --b CONFIG        second configuration\n"
    "  -n, --n-gen N         greedy tokens to generate (default 8)\n"
    "      --prec BITS       reference precision (default 127)\n"
    "      --no-ref          skip the reference (A vs B only)\n"
    "      --cache DIR       reference cache folder (default $KVDRIFT_CACHE or ~/.cache/kvdrift)\n"
    "  -h, --help            this text\n\n"
    "Columns: max abs = max |x - y|; ulp = max float32 ULP distance; diff = elements whose bits\n"
    "differ; sig = significant digits vs the reference, -log10(max abs / max |R|); top1 = argmax.\n"
    "exit codes: 0 done, 2 usage or input error\n";

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

int cmd_compare(int argc, char **argv)
{
    enum { O_A = 256, O_B, O_TOKENS, O_PREC, O_NOREF, O_CACHE, O_SPECIAL };
    static const struct option opts[] = {
        {"prompt", required_argument, NULL, 'p'}, {"tokens", required_argument, NULL, O_TOKENS},
        {"a", required_argument, NULL, O_A},      {"b", required_argument, NULL, O_B},
        {"n-gen", required_argument, NULL, 'n'},  {"prec", required_argument, NULL, O_PREC},
        {"no-ref", no_argument, NULL, O_NOREF},   {"cache", required_argument, NULL, O_CACHE},
        {"special", no_argument, NULL, O_SPECIAL},
        {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0},
    };
    const char *text = NULL, *tok_s = NULL, *a_s = NULL, *b_s = NULL, *cache = NULL;
    uint32_t n_gen = 8, prec = REF_DEFAULT_PREC;
    bool no_ref = false, parse_special = false;
    optind = 1;
    opterr = 0;
    int o;
    lm_err err = {0};
    while ((o = getopt_long(argc, argv, ":p:n:h", opts, NULL)) != -1) {
        switch (o) {
        case 'p': text = optarg; break;
        case O_SPECIAL: parse_special = true; break;
        case O_TOKENS: tok_s = optarg; break;
        case O_A: a_s = optarg; break;
        case O_B: b_s = optarg; break;
        case O_NOREF: no_ref = true; break;
        case O_CACHE: cache = optarg; break;
        case 'n':
            if (!lm_parse_u32z(optarg, 0, 100000, &n_gen))
                return hx_cli_fail("compare", "-n '%s': expected an integer in 0..100000", optarg);
            break;
        case O_PREC:
            if (!lm_parse_u32z(optarg, REF_MIN_PREC, REF_MAX_PREC, &prec))
                return hx_cli_fail("compare", "--prec '%s': expected bits in %u..%u", optarg,
                                   REF_MIN_PREC, REF_MAX_PREC);
            break;
        case 'h': fputs(usage_text, stdout); return 0;
        default: return hx_cli_bad_option("compare", o, argv); /* ':' or unknown */
        }
    }
    if (optind + 1 != argc)
        return hx_cli_fail("compare", "expected exactly one MODEL argument (try --help)");
    if ((text == NULL) == (tok_s == NULL))
        return hx_cli_fail("compare",
                           "give exactly one of -p TEXT or --tokens ID,... (try --help)");
    if (a_s == NULL || b_s == NULL)
        return hx_cli_fail("compare", "both --a CONFIG and --b CONFIG are needed (try --help)");
    hx_config ca, cb;
    if (hx_config_parse(&ca, a_s, &err) != LM_OK || hx_config_parse(&cb, b_s, &err) != LM_OK)
        return hx_cli_fail("compare", "%s", err.msg);

    const char *model_path = argv[optind];
    lm_model *m = NULL;
    int32_t *prompt = NULL, *all = NULL, *path = NULL;
    uint32_t n_prompt = 0;
    hx_capture *xa = NULL, *xb = NULL;
    ref_capture ref = {0};
    bool have_ref = false;
    int st;
    if ((st = lm_model_load(&m, model_path, &err)) != LM_OK ||
        (st = hx_cli_prompt_ids(&prompt, &n_prompt, m, model_path, text, tok_s, parse_special,
                                 &err)) != LM_OK)
        goto fail;

    /* A first, free-running: its greedy continuation is the teacher path for B and R. */
    hx_run_stats sa, sb;
    hx_run_request rq = {.prompt = prompt, .n_prompt = n_prompt, .n_gen = n_gen};
    if ((st = hx_run_capture(&xa, &sa, m, &ca, &rq, &err)) != LM_OK)
        goto fail;
    if ((path = malloc((n_gen ? n_gen : 1) * sizeof *path)) == NULL) {
        st = LM_FAIL(&err, LM_E_NOMEM, "out of memory");
        goto fail;
    }
    memcpy(path, xa->tokens + n_prompt, n_gen * sizeof *path);
    hx_capture_free(xa);
    xa = NULL;
    rq.forced = path;
    rq.n_forced = n_gen;
    st = hx_run_capture(&xa, &sa, m, &ca, &rq, &err);
    if (st == LM_OK)
        st = hx_run_capture(&xb, &sb, m, &cb, &rq, &err);
    if (st == LM_OK && !no_ref) {
        all = malloc((size_t)(n_prompt + n_gen) * sizeof *all);
        if (all == NULL) {
            st = LM_FAIL(&err, LM_E_NOMEM, "out of memory");
        } else {
            memcpy(all, prompt, n_prompt * sizeof *all);
            memcpy(all + n_prompt, path, n_gen * sizeof *all);
            ref_request rr = {.tokens = all, .n_tokens = n_prompt + n_gen, .n_prompt = n_prompt,
                              .prec = prec};
            bool hit = false;
            st = ref_cached(&ref, m, &rr, cache, &hit, &err);
            have_ref = st == LM_OK;
        }
    }
    if (st != LM_OK)
        goto fail;

    char sa_s[HX_CONFIG_STR_MAX], sb_s[HX_CONFIG_STR_MAX];
    hx_config_format(sa_s, sizeof sa_s, &ca);
    hx_config_format(sb_s, sizeof sb_s, &cb);
    printf("compare %s: %u prompt tokens, %u generated; A = %s, B = %s; teacher path = A's "
           "greedy tokens%s\n", model_path, (unsigned)n_prompt, (unsigned)n_gen, sa_s, sb_s,
           have_ref ? "" : "; no reference");
    printf("prefill tok/s: A %.0f, B %.0f\n", (double)n_prompt / sa.prefill_s,
           (double)n_prompt / sb.prefill_s);
    int64_t g = hx_first_divergence(xa->tokens + n_prompt, n_gen, xb->tokens + n_prompt, n_gen);
    if (g < 0)
        printf("greedy: A and B generate the same %u tokens\n", (unsigned)n_gen);
    else
        printf("greedy: A and B part at generated index %lld (A id %d, B id %d)\n", (long long)g,
               (int)xa->tokens[n_prompt + g], (int)xb->tokens[n_prompt + g]);
    if (have_ref) {
        for (uint32_t j = 0; j < n_gen; ++j) {
            int64_t row = ref_capture_find_pos(&ref, n_prompt - 1 + j);
            int32_t rtop = row < 0 ? path[j]
                                   : hx_argmax_f64(ref.logits + (size_t)row * ref.n_vocab,
                                                   ref.n_vocab);
            if (rtop != path[j]) {
                printf("reference: its argmax leaves A's path at generated index %u (R id %d, A "
                       "id %d)\n", (unsigned)j, (int)rtop, (int)path[j]);
                break;
            }
        }
    }
    printf("%-12s %10s %8s %7s", "tensor", "A-B abs", "A-B ulp", "diff");
    if (have_ref)
        printf(" | %10s %8s %5s | %10s %8s %5s", "A-R abs", "A-R ulp", "sig", "B-R abs", "B-R ulp",
               "sig");
    printf("\n");
    size_t kv = hx_capture_kv_elems(&xa->shape), nv = xa->shape.n_vocab;
    char name[32];
    for (uint32_t l = 0; l < xa->shape.n_layer; ++l) {
        snprintf(name, sizeof name, "L%u.K", (unsigned)l);
        print_row(name, xa->k[l], xb->k[l], have_ref ? ref.k + l * kv : NULL, kv, false);
        snprintf(name, sizeof name, "L%u.V", (unsigned)l);
        print_row(name, xa->v[l], xb->v[l], have_ref ? ref.v + l * kv : NULL, kv, false);
    }
    for (uint32_t i = 0; i < xa->shape.n_pos; ++i) {
        snprintf(name, sizeof name, "logits@%u", (unsigned)xa->positions[i]);
        int64_t rr = have_ref ? ref_capture_find_pos(&ref, xa->positions[i]) : -1;
        print_row(name, xa->logits + i * nv, xb->logits + i * nv,
                  rr >= 0 ? ref.logits + (size_t)rr * nv : NULL, nv, true);
    }
    uint8_t ha[16], hb[16];
    char hxa[33], hxb[33];
    if ((st = hx_capture_hash(ha, xa, &err)) != LM_OK ||
        (st = hx_capture_hash(hb, xb, &err)) != LM_OK)
        goto fail;
    lm_hex_encode(hxa, ha, 16);
    lm_hex_encode(hxb, hb, 16);
    printf("XXH3-128: A %s, B %s (%s)\n", hxa, hxb, memcmp(ha, hb, 16) ? "differ" : "equal");
fail:
    if (st != LM_OK)
        fprintf(stderr, "kvdrift compare: %s\n", err.msg);
    hx_capture_free(xa);
    hx_capture_free(xb);
    if (have_ref)
        ref_capture_free(&ref);
    free(prompt);
    free(path);
    free(all);
    lm_model_free(m);
    return lm_status_exit_code(st);
}
