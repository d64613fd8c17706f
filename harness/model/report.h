/* report.h — the in-memory result of one case (or one sweep): per configuration its class,
 * metrics against the reference and the baseline, envelope, golden status and speed; and the
 * prototypes of the writers in harness/report/ (report.json, report.md, report.html, JUnit XML,
 * GitHub annotations, the terminal table and its CSV/TSV/JSONL/Markdown forms).
 *
 * Ownership: hx_report owns its configs, each config owns its rows; hx_report_free frees all. */
#ifndef HX_REPORT_H
#define HX_REPORT_H

#include "model/classify.h"
#include "model/config.h"
#include "kvd_common.h"
#include "kvd_profile.h"
#include "model/metrics.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define HX_REPORT_SCHEMA_VERSION 1

typedef enum hx_golden_status {
    HX_GOLDEN_NA = 0,     /* not checked (sweep) */
    HX_GOLDEN_MATCH,      /* hash equal to the golden for this platform */
    HX_GOLDEN_MISMATCH,   /* a golden exists and differs */
    HX_GOLDEN_ABSENT,     /* no golden for this case/config/platform */
    HX_GOLDEN_STALE       /* a golden exists but was blessed for other input (model, prompt
                             token ids or kvdrift version): always fails, "re-bless" */
} hx_golden_status;

/* "n/a", "match", "mismatch", "absent", "stale". */
const char *hx_golden_status_name(hx_golden_status s);

/* One compared tensor of one configuration. */
typedef struct hx_tensor_row {
    char name[32];         /* "L3.K", "L3.V", "logits@17" (absolute position) */
    bool is_logits;
    hx_class cls;
    char reason[256];
    hx_metrics vs_ref;     /* x vs R */
    double e;              /* envelope E used */
    double e_gap;          /* logits: envelope of R's top-1 minus chosen logit; NaN otherwise */
    hx_logit_metrics lg;   /* logits only */
} hx_tensor_row;

/* Where a judged dump's K/V rows first leave the envelope (judge/kv_locate.h): rows in forward
 * order (layer-major, then position, K before V), each row's error max |dump - R| over its
 * n_kv_head x head_dim values held against the E of its layer's K or V tensor (the envelope has
 * one E per tensor, so a tensor is DRIFT exactly when one of its rows is outside). */
typedef struct hx_kv_first {
    bool checked;              /* the dump's K/V rows were compared (else nothing below) */
    int32_t layer;             /* of the first row outside; -1 = every row within */
    int32_t pos;               /* its position (0 = first prompt token) */
    char tensor;               /* 'K' or 'V' */
    double err;                /* that row's max |dump - R| (+Inf: a NaN or Inf value) */
    double e;                  /* its tensor's E */
    uint32_t n_outside, n_rows; /* rows outside, rows compared */
} hx_kv_first;

/* One hidden state of a judged dump against the reference and its E (judge/hidden_locate.h). */
typedef struct hx_hidden_state {
    int32_t layer;             /* -1: the embedding; else the layer whose output it is */
    double err;                /* max |dump - R| over its rows (+Inf: a NaN or Inf value) */
    double e;                  /* its E */
    double ratio;              /* err / E (+Inf when E == 0 < err, 0 when both are 0) */
    uint32_t n_outside;        /* rows (positions) outside */
} hx_hidden_state;

/* Where a judged dump's hidden states first leave the envelope: states in forward order (the
 * embedding, then layer 0's output, ...), in each the positions 0..n_prompt-1; a row (one
 * position's n_embd values) is outside when classified as a whole tensor against its state's
 * E it fails (hx_classify_tensor: DRIFT or NONFINITE). */
typedef struct hx_hidden_first {
    bool checked;              /* the dump's hidden states were compared (else nothing below) */
    bool no_envelope;          /* the dump holds hidden states, but this profile's envelope
                                  measured none (its members record none): not compared */
    bool outside;              /* some row is outside: layer, pos, err and e name the first */
    int32_t layer;             /* -1: the embedding */
    int32_t pos;
    double err, e;
    uint32_t n_outside, n_rows;
    uint32_t n_states;
    hx_hidden_state *states;   /* [n_states] the dump's states in forward order; malloc'd,
                                  freed by hx_config_report_free_parts */
} hx_hidden_first;

typedef struct hx_config_report {
    char config[HX_CONFIG_STR_MAX]; /* canonical config string */
    hx_class cls;              /* worst over rows and the greedy sequence */
    char reason[320];          /* the deciding row's name and reason */
    int64_t first_divergent;   /* first generated index (0 = first generated token) where the
                                  greedy tokens differ from the reference path; -1 = none */
    hx_class divergent_cls;    /* class of the logits at that position (valid when >= 0) */
    bool bitwise_baseline;     /* capture bitwise equal to the baseline's */
    bool must_be_exact;        /* a class other than EXACT fails (a case's invariant_bits) */
    hx_metrics vs_ref;         /* all rows folded with hx_metrics_merge_max */
    hx_metrics vs_base;        /* vs the baseline's float32 values, folded the same way */
    hx_logit_agg logits;       /* over the teacher-forced logits rows */
    double e_logits_max;       /* largest E over the logits rows */
    double worst_ratio;        /* max over rows of err/E (Inf when E == 0 < err; 0 when none) */
    double sig_digits;         /* min over rows of vs_ref.sig_digits */
    double ulp_rel;            /* max over rows of max_abs in float32 ULPs of the row's largest
                                  reference magnitude (hx_ulp_rel): the headline ULP figure;
                                  raw ULP distances across zero are meaningless */
    char hash_hex[33];         /* XXH3-128 of the capture ("" when not hashed) */
    hx_golden_status golden;
    char golden_key[17];       /* the key its golden was looked up under ("" when not checked) */
    char golden_note[256];     /* why the golden status is what it is, one line */
    double wall_s;             /* wall seconds of its engine run; 0 = not measured */
    bool skipped;              /* not run: its case was skipped (hx_report.skipped says why);
                                  a skipped configuration never fails */
    double prefill_tps;        /* prompt tokens / prefill seconds; 0 = not measured */
    double decode_tps;         /* generated tokens / decode seconds; 0 = not measured */
    uint64_t peak_mem_bytes;   /* 0 = not measured */
    /* Semantic divergence (configurations whose attention schedule depends on the step: a
     * rotating KV cache). The numerical class above is then taken against the reference
     * computed with THIS configuration's schedule; these fields compare that reference with
     * the reference of the same cache computed in one chunk, on the same teacher-forced path:
     * a difference here is a change in what is computed, not rounding. */
    bool sem_checked;          /* false: the schedule does not depend on the step (no fields) */
    bool sem_same_schedule;    /* the two references are the same computation (step = full) */
    int64_t sem_first;         /* first generated index whose argmax differs; -1 = none */
    double sem_max_abs;        /* max |logit difference| over the teacher-forced rows */
    double sem_min_margin;     /* smallest top-1 minus top-2 margin of the one-chunk reference */
    uint32_t routing_flips;    /* MoE: expert sets differing from the reference's (all) */
    uint32_t routing_real;     /* of which not within the router-margin envelope (TIE) */
    float routing_tie_band;    /* that envelope: TIE = reference margin <= it */
    bool routing_checked;      /* MoE model: the two fields above are measured */
    hx_kv_first kv_first;      /* judged dumps with K/V only (checked false elsewhere) */
    hx_hidden_first hidden_first; /* judged dumps with hidden states only (likewise); a
                                  diagnosis of where the error enters: it does not change cls */
    size_t n_rows;
    hx_tensor_row *rows;       /* [n_rows] */
} hx_config_report;

/* KL(softmax(R) || softmax(x)) over a dump's logits rows, summarized as llama-perplexity's
 * --kl-divergence does: mean, max, and percentiles of the sorted values with linear
 * interpolation between closest ranks (value at fraction f: v[i] + (f*(n-1) - i) * (v[i+1] -
 * v[i]), i = floor(f*(n-1))); same_top1 = rows whose argmax equals R's / rows. */
typedef struct hx_kl_stats {
    uint32_t n;
    double mean, max, p999, p99, p90, median;
    double same_top1;
} hx_kl_stats;

/* What a dump of top-k rows (a server's log-probabilities) leaves undecided, over its rows
 * (judge/compare_topk.h measures it). k == 0: full rows, nothing of this applies. */
typedef struct hx_topk_summary {
    uint32_t k;                /* most ids returned per row */
    uint32_t k_min;            /* fewest ids returned in a row */
    uint32_t n_vocab;
    uint32_t n_rows;
    uint32_t n_ref_top1_missing; /* rows whose reference argmax is not among the returned ids */
    uint32_t n_ref_topk_missing; /* rows missing one of the reference's top-k ids */
    uint32_t n_noise_at_k;     /* rows within E at the returned ids (NOISE or EXACT there) */
    double mass_min;           /* smallest returned probability mass of a row */
    double kl_lower_max;       /* largest lower bound on KL(reference || server) of a row */
} hx_topk_summary;

/* One imported dump judged under one or more precision profiles (`kvdrift judge`). Its
 * configurations are report.configs[first_config .. first_config + n_profiles), named
 * "<dump>@<profile>", in profile order. */
typedef struct hx_dump_report {
    char name[256];            /* the folder as given */
    char engine[128], settings[256];
    char rows[16];             /* "logits" or "logprobs" */
    char dtype[16];            /* the rows' element type */
    uint32_t n_pos;
    size_t first_config, n_profiles;
    hx_kl_stats kl;
    char explained_by[8];      /* the profile with the smallest logits envelope under which
                                  the dump passes; "" = none (the dump fails) */
    bool has_generated;        /* tokens_generated compared */
    uint32_t n_hidden;         /* hidden states the dump holds (hidden/: the embedding and
                                  layer outputs); 0 = none */
    int64_t first_divergent;   /* first generated index where the dump's greedy tokens leave
                                  the reference's argmax; -1 = none */
    int64_t compared_to;       /* generated indices compared (the dump's own path) */
    hx_topk_summary topk;      /* top-k rows (topk.k > 0): what they leave undecided */
    /* At the departure (first_divergent >= 0; else -1, -1, NaN, false): */
    int32_t departed_chose;    /* the dump's id */
    int32_t departed_ref_top;  /* the reference's argmax on the same path */
    double departed_margin;    /* R[departed_ref_top] - R[departed_chose] in that row */
    bool departed_beyond;      /* the row lies past the ids every judged dump shares: found
                                  with the reference run on the dump's own continuation, and
                                  judged by no envelope (the configuration's class is its
                                  judged rows') */
} hx_dump_report;

/* One line on d's greedy continuation: "same as the reference over N compared", or "leaves the
 * reference at generated index G (position P): id X where the reference's argmax is Y, its
 * margin M[, past the shared ids: judged by no envelope]"; "" when nothing was compared. */
void hx_dump_departure_text(char *buf, size_t cap, const hx_dump_report *d,
                            uint32_t n_prompt);

/* One line on h: "hidden: first outside the envelope at layer L (or: the embedding),
 * position P (max |dump - R| X > E Y; N of M rows outside)", "hidden: every row within the
 * envelope (M rows of S states)" or "hidden: not judged under this profile (its envelope's
 * members record no hidden states)"; "" when h was not checked. */
void hx_hidden_first_text(char *buf, size_t cap, const hx_hidden_first *h);
/* "err/E by state: embedding R, L0 R, L1 R, ..." (each state's max |dump - R| / E, forward
 * order); "" when h was not checked. Fits HX_HIDDEN_STATES_TEXT_MAX for any layer count a
 * model file may state (longer lines end in "..."). */
#define HX_HIDDEN_STATES_TEXT_MAX 4096
void hx_hidden_states_text(char *buf, size_t cap, const hx_hidden_first *h);
/* Frees what c owns (rows, hidden_first.states) and zeroes those fields. */
void hx_config_report_free_parts(hx_config_report *c);

/* One line on k: "K/V: first outside the envelope at layer L, position P (its K row: max
 * |dump - R| X > E Y; N of M rows outside)" or "K/V: every row within the envelope (M rows)";
 * "" when k was not checked. */
void hx_kv_first_text(char *buf, size_t cap, const hx_kv_first *k);

/* Two dumps compared with each other over the logits positions both hold. */
typedef struct hx_dump_pair {
    uint32_t a, b;             /* indices into hx_report.dumps */
    uint32_t n_shared;         /* positions both hold */
    double max_abs;            /* max |a - b| over those rows */
    int64_t first_apart;       /* first position where |a - b| exceeds the first profile's
                                  logits envelope E there, or the argmaxes differ; -1 none */
    int64_t first_argmax;      /* first position whose argmaxes differ; -1 none */
    double kl_mean_a, kl_mean_b; /* each vs R over the shared rows */
    char closer[8];            /* "a", "b" or "tie": smaller mean KL to the reference */
} hx_dump_pair;

/* The speculative-decoding check (`sweep --spec`): one row per configuration x K > 0
 * (harness/run/speculative_check.h decides each; speculative_verdict.h states the rules). */
typedef struct hx_spec_report_row {
    char config[HX_CONFIG_STR_MAX]; /* the speculative configuration (spec=K, draft=D) */
    hx_class cls;              /* EXACT, NOISE, TIE_FLIP, SEMANTIC or SEQ_MISMATCH */
    int64_t first_tok;         /* first step whose token differs from plain decoding's; -1 */
    int64_t first_hist;        /* first step whose processor history differs; -1 */
    double max_abs;            /* max |verify row - single-step row| before first_tok */
    double err, gap;           /* at first_tok (NaN when no token difference was judged) */
    uint32_t n_rounds, n_drafted, n_accepted;
    int window_cls;            /* the exact-window counterpart's class; -1 = not run */
    char reason[400];
} hx_spec_report_row;

typedef struct hx_spec_report {
    bool run;                  /* false: no --spec, no fields */
    char draft[HX_DRAFT_MAX];
    float repeat_penalty, frequency_penalty, presence_penalty;
    uint32_t repeat_last_n;
    double e, e_gap;           /* near-tie bounds used */
    size_t n_rows;
    hx_spec_report_row *rows;  /* [n_rows] */
} hx_spec_report;

/* The block sampler's amplification check (`sweep --sampler block`): per configuration the
 * block sampler's and greedy decoding's completions against the same backend's one-chunk
 * run, beside the configuration's prefill class and err/E. */
typedef struct hx_block_report_row {
    char config[HX_CONFIG_STR_MAX];
    char skipped[96];          /* "" when it ran, else why not */
    hx_class prefill_cls;      /* the sweep's class of the configuration */
    double prefill_ratio;      /* its worst err/E */
    bool is_baseline;          /* it is its own one-chunk run (nothing compared) */
    bool tokens_differ;        /* other completion than the one-chunk run */
    bool order_differs;        /* same tokens, committed at other iterations */
    int64_t first_block, first_iter, first_pos; /* first differing commit; -1 none */
    int64_t greedy_first;      /* first differing greedy index; -1 none */
    uint32_t n_iters;
    double blk_gap;            /* smallest top-1 minus top-2 logit of a block decision */
    double commit_gap;         /* smallest probability margin of a commit decision */
    double greedy_gap;         /* smallest top-1 minus top-2 logit of a greedy step */
    char completion[160];      /* the block sampler's completion as text (or ids) */
} hx_block_report_row;

typedef struct hx_block_report {
    bool run;
    uint32_t block, n_blocks, max_iters;
    char criterion[16];        /* "confidence" (>= threshold), "entropy" (<= threshold) or
                                  "low-confidence" (LLaDA's schedule: no threshold) */
    char rule[96];             /* the commit rule in words, e.g. "confidence >= 0.9" */
    double threshold;
    int32_t mask_id;
    size_t n_compared;         /* rows that ran and are not their own baseline */
    size_t n_block_differ, n_greedy_differ, n_prefill_fail;
    double worst_ratio;        /* over the rows that ran */
    double min_blk_gap, min_greedy_gap;
    char verdict[400];         /* the one-line conclusion */
    size_t n_rows;
    hx_block_report_row *rows; /* [n_rows] */
} hx_block_report;

/* A split-risk forecast for one precision profile (judge/split_risk.h states the error model):
 * the probability that an engine whose rounding errors are like the profile's ensemble
 * members' leaves the reference's greedy path within n_steps generated tokens. */
#define HX_SPLIT_LEVEL 0.90 /* the confidence of a forecast's interval */
typedef struct hx_split_forecast {
    char profile[16];          /* "f32", "bf16", ... */
    uint32_t n_steps;          /* N: generated steps forecast (the reference path's length) */
    uint32_t n_members;        /* ensemble members the spreads come from */
    bool valid;                /* false: some step has no spread (a member was not finite) */
    double risk;               /* P(first split at some step < n_steps) */
    double lo, hi;             /* HX_SPLIT_LEVEL interval of risk from the member count */
    int64_t likely_step;       /* generated index with the largest probability of being the
                                  first split; -1 when risk is 0 */
    double likely_p;           /* that probability */
    double likely_margin;      /* the reference's exact top-2 margin there */
    double likely_sd;          /* the members' spread of the deciding difference there */
    double pair, pair_lo, pair_hi; /* two such engines' completions differ within n_steps:
                                  steps combined as risk is, with 2 p_i (1 - p_i) (one splits,
                                  the other not) for p_i; with its interval */
    int64_t min_step;          /* generated index of the smallest margin on the path; -1 none */
    double min_margin;         /* that margin (NaN when n_steps == 0) */
} hx_split_forecast;

/* `kvdrift probe`: one served request configuration (run/probe.h) against the baseline
 * (concurrency 1, prefix cold, first repeat), bit for bit, and its timing. */
typedef struct hx_probe_report_row {
    char config[64];           /* "c=8,prefix=warm,rep=0" (its judged configuration's name) */
    uint32_t concurrency, repeat;
    char prefix[24];           /* "cold", "warm", "shared:P" */
    bool is_baseline;
    bool bits_same;            /* every row's ids and log-probability bits equal the baseline's
                                  and the same tokens were generated */
    uint32_t n_rows_differ;    /* rows whose ids or bits differ from the baseline's row at their
                                  position, or that the baseline lacks (compare_topk.h) */
    int64_t first_row_differ;  /* position of the first such row; -1 none */
    double max_abs_diff;       /* largest |difference| of a log-probability both rows hold */
    int64_t first_token_differ; /* first generated index where the text differs; -1 none */
    double latency_s;          /* the probe request's wall time */
    double batch_s;            /* wall time until every request of its batch completed */
    uint32_t batch_tokens;     /* tokens generated by every request of its batch */
    hx_class cls;              /* its judged class (under the first profile) */
} hx_probe_report_row;

typedef struct hx_probe_report {
    bool run;                  /* false: no probe, no fields */
    char url[256];
    char server_models[256], server_props[384], server_version[128];
    char reply_model[128];     /* the "model" of the baseline's reply */
    char transport[160];       /* "token ids, echo (prompt log-probabilities)", ... */
    uint32_t k;                /* log-probabilities asked per position */
    size_t n_rows;
    hx_probe_report_row *rows; /* [n_rows] baseline first */
} hx_probe_report;

#define HX_COMMAND_LINE_MAX 1024
#define HX_COVERAGE_MAX 16 /* engine thresholds listed as not exercised, at most */

/* The phases of a sweep, in order, as timed in hx_report.phase_s. */
typedef enum hx_phase {
    HX_PHASE_PATH = 0,  /* teacher path */
    HX_PHASE_REFERENCE, /* MPFR reference (or its cache load) */
    HX_PHASE_ENSEMBLE,  /* noise-envelope ensemble (or its cache load) */
    HX_PHASE_CONFIGS,   /* engine runs of the configurations and baselines */
    HX_PHASE_COMPARE,   /* comparisons and classification */
    HX_PHASE_TOTAL,     /* the whole sweep */
    HX_N_PHASES
} hx_phase;
/* "path", "reference", "ensemble", "configs", "compare", "total". */
const char *hx_phase_name(hx_phase p);

typedef struct hx_report {
    char case_name[128];
    char model[512];
    char model_hash[33];
    char tokens_hash[17];      /* hx_tokens_hash of the prompt ("" when unknown) */
    char fingerprint_id[17];
    char fingerprint[480];     /* hx_fingerprint.short_text */
    char created_utc[32];      /* "2026-11-22T02:20:00Z" */
    uint32_t n_prompt, n_gen, precision;
    /* Prompt positions whose logits were classified: n_prompt (every one) or 1 (the last only;
     * prompt_rows_why says why), 0 when unknown (a judged dump). */
    uint32_t prompt_rows;
    char prompt_rows_why[160];
    /* The reference's smallest top-1 minus top-2 margin over every classified logits row and
     * its position (NaN / 0 when unknown). */
    double min_margin;
    uint32_t min_margin_pos;
    double envelope_safety;
    uint32_t envelope_members;
    /* Split-risk forecasts, one per profile with an envelope, in profile order (sweep, check:
     * along the reference's greedy path; judge: along the first dump's tokens as far as they
     * follow the reference's argmax). */
    uint32_t n_split;
    hx_split_forecast split[LM_PROFILES_MAX]; /* [n_split] */
    bool strict_bits;
    char skipped[256];         /* non-empty: the case did not run, and why (e.g. its model file
                                  is absent); configs then lists the unrun configurations */
    size_t n_configs;
    hx_config_report *configs; /* [n_configs] */
    size_t n_dumps;            /* judge only: > 0 makes the exit code per dump (a dump fails
                                  when no judged profile explains it) */
    hx_dump_report *dumps;     /* [n_dumps] */
    size_t n_pairs;
    hx_dump_pair *pairs;       /* [n_pairs] */
    /* Provenance: what produced the report and how long each phase took. */
    char command_line[HX_COMMAND_LINE_MAX]; /* "kvdrift sweep ..." ("" when no command set it) */
    int32_t *prompt_ids;       /* [n_prompt] the prompt's token ids (owned; NULL: unknown) */
    double phase_s[HX_N_PHASES]; /* wall seconds per phase (hx_phase_name), 0 = not run */
    uint64_t peak_rss_bytes;   /* the process's peak resident memory when the report was
                                  written (lm_peak_rss_bytes); 0 = not measured */
    hx_spec_report spec;       /* sweep --spec (rows owned) */
    hx_block_report block;     /* sweep --sampler block (rows owned) */
    /* Coverage (judge/coverage.h): the axis values the configurations cover, and the engine
     * thresholds none of them reaches ("" / 0 when not measured). */
    char covered[512];
    uint32_t n_unexercised;
    char unexercised[HX_COVERAGE_MAX][256];
    hx_probe_report probe;     /* kvdrift probe (rows owned) */
} hx_report;

int hx_report_create(hx_report **out, const char *case_name, lm_err *err);
/* The command line "kvdrift ARGV[0] ARGV[1] ..." (argv as a subcommand gets it, before
 * getopt reorders it; arguments with spaces or quotes single-quoted) into buf[n], cut at n. */
void hx_command_line(char *buf, size_t n, int argc, char **argv);
void hx_report_free(hx_report *r);
/* Appends a zeroed configuration (first_divergent -1, cls EXACT, worst_ratio 0, sig 17) and
 * returns it in *out (valid until the next add). */
int hx_report_add_config(hx_report *r, hx_config_report **out, const char *config, lm_err *err);
/* Appends a row and folds it into the configuration: cls (worst), reason (when it became the
 * worst), vs_ref, e_logits_max, worst_ratio, sig_digits, and the logits aggregate. */
int hx_config_report_add_row(hx_config_report *c, const hx_tensor_row *row, lm_err *err);
/* Records the greedy sequence's first divergence and folds its class into cls. */
void hx_config_report_set_divergence(hx_config_report *c, int64_t first, hx_class cls_at);

/* Whether a configuration fails CI: its class fails, its golden is stale, or strict and the
 * golden is not a match. */
bool hx_config_report_fails(const hx_config_report *c, bool strict);
/* Worst class over configurations (EXACT when none). */
hx_class hx_report_worst(const hx_report *r);
/* 0 when no configuration fails and no speculative-check row is SEQ_MISMATCH, 1 otherwise;
 * with dumps (judge, an adapter's sweep): 1 when a dump is explained by none of its profiles,
 * a configuration is ERROR, or (an adapter's case in check) its golden is stale, or not a
 * match under strict. */
int hx_report_exit_code(const hx_report *r, bool strict);

/* The sweep's after-table sections (report_sections.c): JSON members "spec" and
 * "block_sampler" added to o and their Markdown sections; nothing for a section not run. */
int hx_report_sections_json(void *o /* json_t * */, const hx_report *r);
void hx_report_sections_md(FILE *f, const hx_report *r);

/* The cells of block-sampler row w that its terminal table (md false, hx_block_print) and
 * its Markdown table (md true, report.md) derive alike: block "(itself)", "DIFFERS" (bold in
 * Markdown), "order" or "same"; first: the first differing commit's block, iteration and
 * position, "-" when none; greedy: "same" or the first differing generated index, for the
 * baseline "-" (terminal) or "(itself)" (Markdown). */
typedef struct hx_block_cells {
    const char *block;
    char first[72], greedy[40];
} hx_block_cells;
void hx_block_row_cells(hx_block_cells *c, const hx_block_report_row *w, bool md);

/* The split-risk forecasts (report_split.c): one line "split risk within N tokens: f32 0.02%
 * [0.00%, 0.10%], bf16 31% [22%, 40%] (bf16: most likely at step 5, margin 0.069)" into
 * buf[n] ("" when n_split is 0); the JSON member "split_risk" added to o; a Markdown line. */
void hx_split_line(char *buf, size_t n, const hx_report *r);
int hx_report_split_json(void *o /* json_t * */, const hx_report *r);
void hx_report_split_md(FILE *f, const hx_report *r);
/* A probability as a percentage with the digits it needs: "31%", "2.4%", "0.02%", "<0.01%". */
void hx_split_pct(char *buf, size_t n, double p);

/* The judge's sections (report_dumps.c): JSON members "dumps" and "pairs" added to o, and the
 * Markdown section. Nothing when n_dumps == 0. */
int hx_report_judge_json(void *o /* json_t * */, const hx_report *r);
void hx_report_judge_md(FILE *f, const hx_report *r);

/* The probe's sections (report_probe.c): JSON member "probe" added to o, the Markdown section,
 * and per concurrency level the sentence "batch-invariant on this prompt at concurrency N"
 * (every request at N answered with the baseline's bits) into buf[n] ("" when none). Nothing
 * when the probe did not run. */
int hx_report_probe_json(void *o /* json_t * */, const hx_report *r);
void hx_report_probe_md(FILE *f, const hx_report *r);
void hx_probe_invariance_line(char *buf, size_t n, const hx_probe_report *p);
/* The cells every probe table shows for row w: first, the first differing row's position
 * ("-" when none); text, "same" or "differs @N" (the first generated index that differs);
 * tok_s, its batch's tokens per second (0 when the batch took no time). */
typedef struct hx_probe_cells {
    char first[24], text[32];
    double tok_s;
} hx_probe_cells;
void hx_probe_row_cells(hx_probe_cells *c, const hx_probe_report_row *w);

/* (report_dumps.c) One paragraph (no newline) into buf[n] saying what sum's k decides and what a larger k would:
 * "k = 5 of 512 ids per row: decided are ...; undecided: ...". "" when sum->k == 0. */
void hx_topk_note(char *buf, size_t n, const hx_topk_summary *sum);

/* report.json: schema in harness/report/REPORT-SCHEMA.md. Atomic write. */
int hx_report_write_json(const hx_report *r, const char *path, lm_err *err);
/* Several case reports in one JSON document {"schema":..., "reports": [...]} (check --json). */
int hx_report_write_json_many(const hx_report *const *rs, size_t n, const char *path, lm_err *err);
/* report.md: summary, the table, one explanation line per non-EXACT configuration, the golden
 * status of each checked configuration. */
int hx_report_write_md(const hx_report *r, const char *path, lm_err *err);
/* Several cases in one document (check --md): a summary line, then each case. */
int hx_report_write_md_many(const hx_report *const *rs, size_t n, const char *path, lm_err *err);
/* The same Markdown in memory (*out malloc'd, *len bytes); LM_OK or LM_E_NOMEM. */
int hx_report_md_text(char **out, size_t *len, const hx_report *const *rs, size_t n, bool strict,
                      lm_err *err);

/* report.html: self-contained (inline CSS and SVG, no script, nothing fetched): per case a
 * summary table, err/E heatmaps (configurations x layers for K and V, x positions for logits),
 * error vs envelope along positions, the reference's top-2 margins with argmax flips marked,
 * speed and memory vs prefill step. Well-formed XML. Atomic write. */
int hx_report_write_html(const hx_report *r, const char *path, lm_err *err);
int hx_report_write_html_many(const hx_report *const *rs, size_t n, const char *path,
                              lm_err *err);

/* GitHub Actions: one "::error file=F,line=L,title=T::message" workflow command per failing
 * configuration and one "::warning" per skipped case, on f. srcs[i] locates report i's case
 * file. */
typedef struct hx_annot_src {
    const char *file;                   /* the case file */
    uint32_t line_name, line_model, line_input, line_steps; /* 0 = unknown */
} hx_annot_src;
void hx_report_print_github(FILE *f, const hx_report *const *rs, const hx_annot_src *srcs,
                            size_t n, bool strict);
/* JUnit XML: one <testsuite> per report, one <testcase> per configuration; failures carry the
 * class and numbers. */
int hx_report_write_junit(const hx_report *const *rs, size_t n, bool strict, const char *path,
                          lm_err *err);
/* A format's document for several reports, as hx_report_<fmt>_text make them: *out malloc'd,
 * *len bytes; strict: check's policy (JUnit's failures). */
typedef int (*hx_report_text_fn)(char **out, size_t *len, const hx_report *const *rs, size_t n,
                                 bool strict, lm_err *err);
int hx_report_json_text(char **out, size_t *len, const hx_report *const *rs, size_t n,
                        bool strict, lm_err *err);
int hx_report_html_text(char **out, size_t *len, const hx_report *const *rs, size_t n,
                        bool strict, lm_err *err);
int hx_report_junit_text(char **out, size_t *len, const hx_report *const *rs, size_t n,
                         bool strict, lm_err *err);
/* text's document written to path (atomic write, fs.h). */
int hx_report_write_text(const char *path, hx_report_text_fn text, const hx_report *const *rs,
                         size_t n, bool strict, lm_err *err);

/* The report file formats (writers.c), in writing order (report.json last: a folder holding
 * it is complete). A new format is its report_<fmt>.c and one row there. */
typedef struct hx_report_writer {
    const char *name;  /* option name: --<name> FILE (check), also the table key */
    const char *title; /* for "wrote" lines: "JSON" */
    const char *file;  /* its file name in an output folder (-o DIR): "report.json" */
    /* One report (kvdrift sweep); NULL when the format only describes several (JUnit). */
    int (*write_one)(const hx_report *r, const char *path, lm_err *err);
    /* Several case reports in one document (kvdrift check). */
    hx_report_text_fn text_many;
} hx_report_writer;
#define HX_REPORT_MAX_WRITERS 8
size_t hx_report_writer_count(void);
/* NULL when i >= hx_report_writer_count(). */
const hx_report_writer *hx_report_writer_at(size_t i);
/* NULL when no writer has that name. */
const hx_report_writer *hx_report_writer_find(const char *name);
/* Every writer that takes one report and is named in only[] (NULL-terminated; NULL: every
 * one) into dir/<its file>, in the table's order; the last one's older file is removed first,
 * so a killed run never leaves it beside newer files, once every target has passed
 * lm_wfile_check (a read-only one: LM_E_INPUT, the folder left as it was). The files, last
 * first, as "a, b and c" into wrote[cap]. */
/* Whether every file hx_report_write_dir(dir, only) would write can be (lm_wfile_check: a
 * read-only one is LM_E_INPUT naming it); LM_OK when dir does not exist yet. Run before the
 * work that produces the report, so that a refused target costs nothing. */
int hx_report_check_dir(const char *dir, const char *const *only, lm_err *err);
int hx_report_write_dir(char *wrote, size_t cap, const char *dir, const hx_report *r,
                        const char *const *only, lm_err *err);

/* Table output formats (--format): aligned text (colour when f is a terminal and NO_COLOR is
 * unset), CSV (RFC 4180 quoting), TSV, JSON lines (one object per row, keys = column names),
 * Markdown. */
typedef enum hx_table_fmt {
    HX_FMT_TABLE = 0,
    HX_FMT_CSV,
    HX_FMT_TSV,
    HX_FMT_JSONL,
    HX_FMT_MD
} hx_table_fmt;
/* Parses "table", "csv", "tsv", "jsonl", "md"; false otherwise. */
bool hx_table_fmt_parse(hx_table_fmt *out, const char *s);
#define HX_TABLE_FORMATS "table, csv, tsv, jsonl or md"

/* A table of n_rows x n_cols text cells (cell(ctx, i, j) returns row i's column j; numbers
 * are right-aligned in the text form from column first_num on); class_col >= 0 names the
 * column coloured by class on a terminal. */
typedef const char *(*hx_cell_fn)(void *ctx, size_t row, int col);
void hx_table_print(FILE *f, hx_table_fmt fmt, const char *const *heads, int n_cols,
                    size_t n_rows, hx_cell_fn cell, void *ctx, int first_num, int class_col);

/* The terminal table of a report: by default narrow (config, class, err/E, ULP@max, top1,
 * div@, decode tok/s: fits 100 columns), all HX_REPORT_NCOLS columns with verbose; in fmt.
 * The text form adds a header line and a summary line. */
void hx_report_print_table_fmt(FILE *f, const hx_report *r, hx_table_fmt fmt, bool verbose);
/* The narrow text table. */
void hx_report_print_table(FILE *f, const hx_report *r);
/* The MoE routing section (nothing when rr->measured is false): the TIE band and how it was
 * measured, then per configuration (r->configs[i] <-> rr's i) flips, TIE, real, and the first
 * flipped position of each layer that flips. */
struct hx_routing_result;
void hx_report_print_routing(FILE *f, const hx_report *r, const struct hx_routing_result *rr);

/* max_abs in float32 ULPs of max_abs_ref (the spacing of floats at the tensor's largest
 * magnitude, 2^(floor(log2 max_abs_ref) - 23)); 0 when max_abs is 0, max_abs / 2^-149 when the
 * reference is all zeros, NaN when max_abs is NaN. */
double hx_ulp_rel(double max_abs, double max_abs_ref);

/* Why a failing configuration fails, one line naming the real cause: its class and numbers;
 * "golden stale: ..." (blessed for other input); "strict bits: golden mismatch: ..." or
 * "strict bits: golden absent: ...". *type gets a short tag: the class name, "STALE_GOLDEN",
 * "GOLDEN_MISMATCH" or "GOLDEN_ABSENT". "" when it does not fail. */
void hx_config_report_failure(char *buf, size_t n, const char **type, const hx_config_report *c,
                              bool strict);

/* One-line summary of a configuration's numbers (used by JUnit and Markdown):
 * "DRIFT: max_abs 3.1e-05 (E 1.2e-05), max_ulp 12, nmse 1.0e-12, kl_max 2.0e-09, top1 32/33, ..." */
void hx_config_report_summary(char *buf, size_t n, const hx_config_report *c);

/* The table's columns, shared by the terminal table and report.md: config, class, first
 * divergent generated index, max abs, ULP@max (hx_ulp_rel; the raw ULP distance is in
 * report.json), NMSE, KL mean, KL max, top-1 agreement,
 * smallest reference margin, largest logits envelope, worst err/E, significant digits,
 * prefill tok/s, decode tok/s, peak MiB, semantic ("same", "shifted" = logits differ but every
 * argmax agrees, "diverges@j"; "-" when the schedule does not depend on the step). "-" where
 * not measured. */
#define HX_REPORT_NCOLS 17
#define HX_REPORT_CELL 120 /* >= HX_CONFIG_STR_MAX */
extern const char *const hx_report_col_names[HX_REPORT_NCOLS];
void hx_report_cells(char cells[HX_REPORT_NCOLS][HX_REPORT_CELL], const hx_config_report *c);

#endif
