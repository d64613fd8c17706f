/* cmd_synth.c — `kvdrift synth`: writes a deterministic synthetic llama model (GGUF). */
#include "cli/commands.h"
#include "kvd_util.h"
#include "cli/cli_util.h"
#include "plan/synth.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: kvdrift synth (--preset NAME | --arch llama [hyperparameters]) -o FILE.gguf\n"
            "                     [--seed S] [--type f32|f16|bf16|q4_k_m]\n\n"
            "Writes a model (llama; the gemma3, qwen3, qwen3moe and gptoss presets: those\n"
            "architectures) with\n"
            "deterministic weights (splitmix64 per tensor, see\n"
            "harness/synth.c) and a generated SentencePiece vocabulary; the output projection is\n"
            "tied to the embedding. The file is written atomically and streaming (header and\n"
            "tensor infos first, then each tensor generated and written in pieces of 2^20\n"
            "values: a few MiB of memory whatever the model's size); its size, parameter\n"
            "counts, SHA-256 and the time taken are printed.\n\n"
            "  --preset NAME     tiny (n_embd 64, 4 layers, vocab 512),\n"
            "                    smollm2-135m (n_embd 576, 30 layers, 9 heads, 3 KV heads,\n"
            "                    n_ff 1536, vocab 49152, rope theta 100000),\n"
            "                    swa-5to1 (tiny-sized, 6 layers, sliding window 8 on 5 of 6),\n"
            "                    sinks-alt (window 8 / full alternating, learned sinks),\n"
            "                    moe (8 experts, top-2), moe-32x4 (32 experts, top-4,\n"
            "                    alternating windows and sinks: gpt-oss-like),\n"
            "                    tiny-draft (tiny's vocabulary, 1 layer of n_embd 32: a draft),\n"
            "                    tiny-mask (tiny with a <mask> control token: block sampler),\n"
            "                    gemma3 (Gemma 3 architecture, 6 layers, window 16 on 5 of 6,\n"
            "                    one KV head), qwen3 (Qwen 3 architecture: Q/K norms, NeoX RoPE),\n"
            "                    qwen3moe (Qwen 3 MoE architecture: qwen3 attention, 16\n"
            "                    experts, top-4, softmax renormalised over the 4),\n"
            "                    gptoss (gpt-oss architecture: biases, sinks, window 8 on even\n"
            "                    layers, YaRN, 16 experts top-4 with swiglu_oai),\n"
            "                    gptoss-mxfp4 (the same, n_ff_exp 64, experts in MXFP4 as\n"
            "                    gpt-oss ships them)\n"
            "                    Models at the sizes people run (tens of GB as float32: for\n"
            "                    commands and benchmarks; today's engine refuses to load what\n"
            "                    does not fit in memory):\n"
            "                    gptoss-20b (gpt-oss-20b's shapes: 24 layers, n_embd 2880, 64/8\n"
            "                    heads of 64, 32 experts of 2880 top-4 in MXFP4, window 128 on\n"
            "                    even layers, sinks, biases, YaRN, vocab 201088; BF16 elsewhere;\n"
            "                    12.8 GiB), gemma3-4b (34 layers, n_embd 2560, 8/4 heads of 256,\n"
            "                    n_ff 10240, window 1024 on 5 of 6, vocab 262144, q4_k_m),\n"
            "                    moe-26b-a4b (30 layers, 25 with window 1024 and 5 global,\n"
            "                    n_embd 2816, 16/8 heads of 256, 128 experts of 736 top-8 in\n"
            "                    MXFP4, untied output, vocab 262144, q4_k_m: 26.4B parameters,\n"
            "                    4.0B per token)\n"
            "  --arch llama      explicit hyperparameters instead (start: the tiny preset), with\n"
            "  --n-embd N --n-layer N --n-head N --n-head-kv N --n-ff N --n-vocab N\n"
            "  --n-ctx N --rope-theta X --rms-eps X   (these also override a preset's values)\n"
            "  -o, --output FILE model to write\n"
            "  --seed S          PRNG seed (default 0; decimal or 0x hex)\n"
            "  --type T          weight type: f32, f16, bf16, or q4_k_m: a Q4_K_M-like mix\n"
            "                    (embedding and output Q6_K, attn_v and ffn_down Q6_K on a third\n"
            "                    of the layers, other matrices Q4_K, router F32; rows multiples of\n"
            "                    256); norms stay f32, MXFP4 experts stay MXFP4; default: the\n"
            "                    preset's (f32 but for gptoss-20b bf16, gemma3-4b and\n"
            "                    moe-26b-a4b q4_k_m)\n"
            "  -h, --help        this help\n");
}

static int bad(const char *msg, const char *arg)
{
    return hx_cli_fail("synth", "%s '%s' (try kvdrift synth --help)", msg, arg);
}

static int parse_float(const char *s, float *out)
{
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || *end || s[0] == '\0' || !(v > 0.0f) || v > 1e30f)
        return -1;
    *out = v;
    return 0;
}

enum { O_PRESET = 256, O_ARCH, O_EMBD, O_LAYER, O_HEAD, O_HEAD_KV, O_FF, O_VOCAB, O_CTX, O_THETA,
       O_EPS, O_SEED, O_TYPE };

typedef struct synth_opts {
    const char *preset, *arch, *out;
    uint64_t seed;
    lm_tensor_type type; /* --type's (type_given), else the preset's */
    bool type_given;
    uint32_t ov[8]; /* overrides of n_embd .. n_ctx, applied after the preset: 0 = not given */
    float theta, eps; /* 0.0f = not given */
} synth_opts;

/* One option (name: its long name for messages); 0 to go on, else the exit code. */
static int set_option(synth_opts *o, int c, const char *arg, const char *name)
{
    char what[64];
    switch (c) {
    case 'o': o->out = arg; return 0;
    case O_PRESET: o->preset = arg; return 0;
    case O_ARCH: o->arch = arg; return 0;
    case O_EMBD: case O_LAYER: case O_HEAD: case O_HEAD_KV: case O_FF: case O_VOCAB: case O_CTX:
        if (lm_parse_u32z(arg, 1, UINT32_MAX, &o->ov[c - O_EMBD]))
            return 0;
        snprintf(what, sizeof what, "--%s: expected a positive integer, got", name);
        return bad(what, arg);
    case O_THETA:
        return parse_float(arg, &o->theta) == 0
                   ? 0 : bad("--rope-theta: expected a positive number, got", arg);
    case O_EPS:
        return parse_float(arg, &o->eps) == 0
                   ? 0 : bad("--rms-eps: expected a positive number, got", arg);
    case O_SEED:
        return lm_parse_seed(arg, &o->seed)
                   ? 0 : bad("--seed: expected a non-negative integer (decimal or 0x hex), got",
                             arg);
    case O_TYPE:
        if (strcmp(arg, "f32") == 0) o->type = LM_TYPE_F32;
        else if (strcmp(arg, "f16") == 0) o->type = LM_TYPE_F16;
        else if (strcmp(arg, "bf16") == 0) o->type = LM_TYPE_BF16;
        else if (strcmp(arg, "q4_k_m") == 0) o->type = LM_TYPE_Q4_K;
        else return bad("--type: expected f32, f16, bf16 or q4_k_m, got", arg);
        o->type_given = true;
        return 0;
    default: return 2;
    }
}

/* Options into *o; -1 to go on, else the exit code (0 after --help). */
static int parse_options(synth_opts *o, int argc, char **argv)
{
    static const struct option opts[] = {
        {"preset", required_argument, NULL, O_PRESET}, {"arch", required_argument, NULL, O_ARCH},
        {"n-embd", required_argument, NULL, O_EMBD}, {"n-layer", required_argument, NULL, O_LAYER},
        {"n-head", required_argument, NULL, O_HEAD},
        {"n-head-kv", required_argument, NULL, O_HEAD_KV},
        {"n-ff", required_argument, NULL, O_FF}, {"n-vocab", required_argument, NULL, O_VOCAB},
        {"n-ctx", required_argument, NULL, O_CTX},
        {"rope-theta", required_argument, NULL, O_THETA},
        {"rms-eps", required_argument, NULL, O_EPS}, {"seed", required_argument, NULL, O_SEED},
        {"type", required_argument, NULL, O_TYPE}, {"output", required_argument, NULL, 'o'},
        {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0},
    };
    *o = (synth_opts){.type = LM_TYPE_F32};
    opterr = 0;
    optind = 1;
    hx_cli_optstate optstate = {0};
    for (int c, li = -1; (c = hx_cli_getopt(&optstate, argc, argv, ":o:h", opts, &li, NULL)) != -1; li = -1) {
        if (c == 'h') {
            usage(stdout);
            return 0;
        }
        if (c == ':' || c == '?')
            return hx_cli_bad_option(&optstate, "synth", c, argv);
        int code = set_option(o, c, optarg, li >= 0 ? opts[li].name : "?");
        if (code != 0)
            return code;
    }
    if (optind < argc)
        return bad("unexpected argument", argv[optind]);
    if (o->out == NULL)
        return hx_cli_fail("synth", "missing -o FILE.gguf (try kvdrift synth --help)");
    if ((o->preset == NULL) == (o->arch == NULL))
        return hx_cli_fail("synth", "give exactly one of --preset NAME or --arch llama "
                                    "(try kvdrift synth --help)");
    if (o->arch != NULL && strcmp(o->arch, "llama") != 0)
        return bad("unsupported --arch (only llama)", o->arch);
    lm_err err = {0};
    if (hx_cli_check_out_file(o->out, &err) != LM_OK)
        return hx_cli_fail("synth", "-o %s", err.msg);
    return -1;
}

/* The preset (tiny for --arch llama) with the overrides applied. */
static int make_params(hx_synth_params *p, const synth_opts *o, lm_err *err)
{
    int rc = hx_synth_preset(p, o->preset ? o->preset : "tiny", err);
    if (rc != LM_OK)
        return rc;
    if (o->arch != NULL)
        snprintf(p->name, sizeof p->name, "kvdrift-synth-llama");
    uint32_t *f[7] = {&p->n_embd, &p->n_layer, &p->n_head, &p->n_head_kv, &p->n_ff, &p->n_vocab,
                      &p->n_ctx};
    for (int i = 0; i < 7; ++i)
        if (o->ov[i])
            *f[i] = o->ov[i];
    /* --n-head alone keeps plain multi-head attention rather than the preset's ratio. */
    if (o->ov[O_HEAD - O_EMBD] && !o->ov[O_HEAD_KV - O_EMBD])
        p->n_head_kv = p->n_head;
    if (o->theta > 0.0f)
        p->rope_theta = o->theta;
    if (o->eps > 0.0f)
        p->rms_eps = o->eps;
    return LM_OK;
}

int cmd_synth(int argc, char **argv)
{
    synth_opts o;
    int code = parse_options(&o, argc, argv);
    if (code >= 0)
        return code;
    lm_err err = {0};
    hx_synth_params p;
    hx_synth_info info;
    const double t0 = lm_now_s();
    int rc = make_params(&p, &o, &err);
    const lm_tensor_type type = o.type_given ? o.type : p.weight_type;
    if (rc == LM_OK)
        rc = hx_synth_write_info(&info, o.out, &p, o.seed, type, &err);
    if (rc != LM_OK)
        return hx_cli_status("synth", rc, false, &err);
    char hex[65];
    for (int i = 0; i < 32; ++i)
        snprintf(hex + 2 * i, 3, "%02x", info.sha256[i]);
    fprintf(stderr, "kvdrift synth: wrote %s (%s: n_embd %u, %u layers, %u/%u heads, n_ff %u, "
                    "vocab %u, %s, seed 0x%" PRIx64 ")\n", o.out, p.name, p.n_embd, p.n_layer,
            p.n_head, p.n_head_kv, p.n_ff, p.n_vocab,
            type == LM_TYPE_Q4_K ? "q4_k_m" : lm_tensor_type_name(type), o.seed);
    const bool big = info.n_params >= 1000000000u;
    const double unit = big ? 1e9 : 1e6;
    fprintf(stderr, "kvdrift synth: %" PRIu64 " bytes (%.2f GiB), %" PRIu64 " tensors, %.2f%s "
                    "parameters (%.2f%s per token), %.1f s\n", info.bytes,
            (double)info.bytes / 1073741824.0, info.n_tensors, (double)info.n_params / unit,
            big ? "B" : "M", (double)info.n_active / unit, big ? "B" : "M", lm_now_s() - t0);
    printf("%s  %s\n", hex, o.out); /* sha256sum's format */
    return 0;
}
