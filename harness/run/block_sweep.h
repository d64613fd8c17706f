/* block_sweep.h — `kvdrift sweep --sampler block`: the iterative block sampler (kvd_block.h)
 * and greedy autoregressive decoding run for every configuration of the sweep, compared with
 * the same backend's one-chunk run, beside the sweep's own verdict on the prefill (err/E):
 * how much a sampler amplifies rounding the engine is allowed to make. */
#ifndef KVD_SWEEP_BLOCK_H
#define KVD_SWEEP_BLOCK_H

#include "kvd_block.h"
#include "model/report.h"

#include <stdio.h>

typedef enum hx_block_opt {
    HX_OPT_SAMPLER = 1100,  /* --sampler greedy|block */
    HX_OPT_BLOCK_SIZE,      /* --block-size B */
    HX_OPT_BLOCKS,          /* --blocks N */
    HX_OPT_BLOCK_ITERS,     /* --block-iters S */
    HX_OPT_BLOCK_THRESHOLD, /* --block-threshold T */
    HX_OPT_BLOCK_CRITERION, /* --block-criterion confidence|entropy|low-confidence */
    HX_OPT_MASK_TOKEN       /* --mask-token ID */
} hx_block_opt;

#define HX_BLOCK_LONG_OPTIONS                                                                   \
    {"sampler", required_argument, NULL, HX_OPT_SAMPLER},                                       \
        {"block-size", required_argument, NULL, HX_OPT_BLOCK_SIZE},                             \
        {"blocks", required_argument, NULL, HX_OPT_BLOCKS},                                     \
        {"block-iters", required_argument, NULL, HX_OPT_BLOCK_ITERS},                           \
        {"block-threshold", required_argument, NULL, HX_OPT_BLOCK_THRESHOLD},                   \
        {"block-criterion", required_argument, NULL, HX_OPT_BLOCK_CRITERION},                   \
        {"mask-token", required_argument, NULL, HX_OPT_MASK_TOKEN}

#define HX_BLOCK_USAGE                                                                          \
    "\nIterative block sampler (a table after the sweep's, also DIR/block.txt; informational,\n" \
    "never fails):\n"                                                                          \
    "      --sampler block     run a masked-diffusion-style block sampler for every\n"         \
    "                          configuration (dense attention only) and greedy decoding of\n"  \
    "                          the same length, each against its one-chunk run\n"             \
    "      --block-size B      positions per block (default 8)\n"                             \
    "      --blocks N          blocks after the prompt (default 2)\n"                         \
    "      --block-iters S     iteration cap per block (default 8)\n"                         \
    "      --block-threshold T commit a masked position when its confidence >= T (default\n" \
    "                          0.9) or, with --block-criterion entropy, its entropy <= T\n"   \
    "      --block-criterion C confidence (default), entropy, or low-confidence: LLaDA's\n"    \
    "                          schedule, the ceil(masked / iterations left) most confident\n" \
    "                          positions per iteration, no threshold, no early stop\n"      \
    "      --mask-token ID     the mask token (default: the vocabulary's <mask>, else 0)\n"

typedef struct hx_block_opts {
    bool on;
    lm_block_params p;
    bool mask_set;
} hx_block_opts;

void hx_block_opts_init(hx_block_opts *o);
int hx_block_opts_set(hx_block_opts *o, int opt, const char *arg, lm_err *err);

/* Runs both samplers for every configuration (report->configs[i] <-> configs[i], whose
 * prefill classes it quotes) into report->block (rows malloc'd), verdict line included. */
int hx_block_check_run(hx_report *report, const lm_model *m, const int32_t *prompt,
                       uint32_t n_prompt, const hx_config *configs, size_t n_configs,
                       const hx_block_opts *o, lm_err *err);
/* Its table, legend and verdict line. */
void hx_block_print(FILE *f, const hx_block_report *b);

#endif
