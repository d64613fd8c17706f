/* config.h — one engine configuration (a CONFIG string such as `blas:step=2048` or
 * `naive:step=1:threads=2`) parsed into a struct and formatted back canonically. */
#ifndef HX_CONFIG_H
#define HX_CONFIG_H

#include "kvd_common.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Attention variant axis (`attn=`). DEFAULT means "whatever the engine does by default" and is
 * omitted from the canonical string, so adding the axis later does not rename old configs. */
typedef enum hx_attn { HX_ATTN_DEFAULT = 0, HX_ATTN_DENSE = 1, HX_ATTN_STREAM = 2 } hx_attn;

#define HX_CONFIG_STR_MAX 256 /* longest canonical string + NUL (a draft path included) */
/* Generated tokens per configuration (n_gen, -n), the same limit for case files and options. */
#define HX_MAX_N_GEN 100000u
#define HX_DRAFT_MAX 128     /* longest draft= value + NUL */
/* `threads=all`: every online core, at least 2 so that a thread split happens even on one
 * core (hx_threads_all); the same name on every machine, so goldens keep their key. */
#define HX_THREADS_ALL UINT32_MAX
#define HX_PREFIX_STEP_FULL UINT32_MAX /* `prefix=P/full` */

typedef struct hx_config {
    char backend[16]; /* a registered backend's name (lm_backend_find), without a seed */
    uint32_t step;    /* prefill chunk size in tokens; 0 = the whole prompt in one chunk ("full") */
    uint32_t threads; /* 0 = not specified (the engine's default); HX_THREADS_ALL = all */
    hx_attn attn;
    uint32_t rot_max;  /* rotating KV cache (`rot=MAX/KEEP`): max_size; 0 = the plain cache */
    uint32_t rot_keep; /* positions always kept (< rot_max); 0 when rot_max is 0 */
    bool rot_window;   /* `rot=MAX/KEEP/window`: the exact-window policy (lm_ctx_params
                          rot_window: chunk-invariant); false: MLX's policy */
    char profile[8];   /* precision profile (kvd_profile.h, `profile=`): "" = f32 */
    uint32_t spec;     /* speculative decoding (`spec=K`): K drafted tokens per round; 0 = plain */
    char draft[HX_DRAFT_MAX]; /* `draft=`: "self:L" (the model's first L layers) or a model
                                 (path or synth:PRESET); "" = none */
    uint32_t turn;    /* `turn=D`: the prompt fed as two turns (hx_turn_split): its first part
                         in chunks of step, D single-token forward calls, then the rest as a
                         second multi-token chunk in chunks of step; 0 = one prefill */
    uint32_t prefix;  /* `prefix=P[/S]`: the first P prompt tokens are a prefix-cache hit, computed
                         by an earlier request (in chunks of prefix_step) whose K/V rows this
                         one adopts (lm_ctx_adopt_prefix), the rest of the prompt then fed in
                         chunks of step; 0 = none. At most the prompt's length - 1: the last
                         prompt token is always computed (its logits are the first output) */
    uint32_t prefix_step; /* the earlier request's chunk size: 0 = step's, HX_PREFIX_STEP_FULL =
                             the prefix in one call */
    uint32_t batch;   /* `batch=B[/decode]`: every forward call of this sequence holds rows of
                         B - 1 co-resident sequences too (seeded prompts, lm_forward_batch);
                         0 or 1 = alone */
    bool batch_decode; /* `/decode`: the co-resident sequences decode (one row each per call)
                          while this one prefills; else they prefill alongside, then decode */
    uint32_t tp;      /* `tp=N[/tree|/fixed]`: tensor-parallel shards of the weight products
                         (lm_ctx_params.tp); 0 or 1 = one device */
    int tp_reduce;    /* lm_tp_reduce: ring (default), `/tree` (pairwise over the shards) or
                         `/fixed` (a tree fixed by k alone, also on one device: tp=1/fixed) */
    uint64_t sr_seed; /* LM_BE_SEEDED backends only (the noise ensemble's members, never parsed
                         or formatted): their seed; 0 elsewhere */
} hx_config;

/* The two-turn schedule of config key turn=D (multi-turn chat, continued prefill): a prompt
 * of n tokens is fed as n1 tokens (turn 1), d single tokens (decode steps), then n2 tokens
 * (turn 2, a multi-token chunk after the decode steps), n1 + d + n2 = n. d = min(D, n - 3);
 * n2 = max(2, (n - d) / 2); n1 = n - d - n2 >= 1. D == 0 or n < 4: no second turn (n1 = n,
 * d = n2 = 0). Teacher-forced: every token is the prompt's, so the reference and the envelope
 * of the one-chunk prompt judge it as they are (with a rotating cache, the reference follows
 * this schedule: ref_request.rot_turn_*). Its speeds are one run's, not the median of repeats
 * (runner.h). */
#define HX_TURN_DEFAULT 4u /* the default sweep's decode steps between the two turns */
#define HX_TURN_MAX 4096u
void hx_turn_split(uint32_t n, uint32_t turn, uint32_t *n1, uint32_t *d, uint32_t *n2);

/* Appends, right after each configuration that has a multi-token chunk (step != 1), plain
 * decoding (spec 0) and a schedule that depends on chunks (not rot_window), the same
 * configuration with turn=D (D == 0: nothing added). *v is
 * replaced (the old array freed). LM_E_NOMEM only. */
int hx_config_add_turns(hx_config **v, size_t *n, uint32_t turn, lm_err *err);

/* Grammar: BACKEND[:KEY=VALUE]... with keys step (integer >= 1 or "full"), threads (integer
 * 1..LM_MAX_THREADS, the engine's limit, or "all": HX_THREADS_ALL), attn (dense|stream), turn
 * (decode steps 0..HX_TURN_MAX of the two-turn schedule, 0 = none), rot (MAX/KEEP: a rotating
 * KV cache with max_size MAX >= 2 and keep KEEP < MAX, both decimal, MLX's policy;
 * MAX/KEEP/window: the same cache with the exact-window policy; "none" = the plain cache;
 * '/' because ':' separates fields); profile (a precision
 * profile name, lm_profile_find; "f32" is stored as ""); spec (K >= 0 drafted tokens; 0 = plain decoding),
 * prefix (P or P/S: P >= 1 prompt tokens reused from an earlier request chunked by S, an
 * integer >= 1 or full, default step's; "none" or 0 = no reuse; not with a rotating cache),
 * batch (B or B/decode, B in 1..LM_BATCH_MAX: co-resident sequences in every forward call),
 * tp (N, N/tree or N/fixed, N in 1..LM_TP_SHARDS_MAX, a power of two with tree or fixed, N >= 2
 * with tree: tensor-parallel shards),
 * draft (self:L, a GGUF path or synth:PRESET[:seed=N]: the rest of the string, so it comes
 * last, ':' included);
 * each key at most once, in any order. A missing step means full.
 * Unknown backend, unknown key, duplicate key or malformed value: LM_E_INPUT naming the
 * string and the reason. */
int hx_config_parse(hx_config *out, const char *s, lm_err *err);

/* Canonical form: backend, then step=N|full always, then threads=T when nonzero, then attn=A
 * when not default, then rot=MAX/KEEP[/window] when rotating, then turn=D when D > 0, then
 * prefix=P[/S] when P > 0, then batch=B[/decode] when B > 1, then tp=N[/tree|/fixed] when N > 1 or fixed, then
 * profile=P when not f32, then spec=K
 * when K > 0, then draft=D when given.
 * parse(format(c)) == c for every valid c. Returns the length written
 * (truncated like snprintf when n is too small). */
int hx_config_format(char *buf, size_t n, const hx_config *c);

/* The configuration's baseline: same backend, threads, attn and rot, one chunk (step = full,
 * turn 0, no reused prefix), alone (no co-resident sequences), on one device (tp 1). */
hx_config hx_config_baseline(const hx_config *c);
/* Whether c's bits cannot depend on its chunks: its backend is chunk invariant
 * (LM_BE_CHUNK_INVARIANT), it decodes without speculation, and its cache is not MLX's rotating
 * one (whose rows attend to other positions per chunk by definition). */
bool hx_config_chunk_invariant(const hx_config *c);
bool hx_config_equal(const hx_config *a, const hx_config *b);

/* A rotating-cache value s[0..len): "none" (*max = *keep = 0) or MAX/KEEP or MAX:KEEP (the
 * sweep's --rot list and case files accept ':'; a CONFIG string needs '/'), with MAX >= 2 and
 * KEEP < MAX (the engine's limits, kvcache_rotating.h), optionally followed by the same
 * separator and "window" (*window = true: the exact-window policy). False when malformed. */
bool hx_rot_parse(const char *s, size_t len, uint32_t *max, uint32_t *keep, bool *window);

/* A reused-prefix value s[0..len): "none" or "0" (*p = *step = 0), P, or P followed by sep and
 * S (an integer >= 1 or "full": HX_PREFIX_STEP_FULL); P >= 1. sep is '/' in a CONFIG string and
 * also ':' in the sweep's --prefix list and case files. False when malformed. */
bool hx_prefix_parse(const char *s, size_t len, bool colon_ok, uint32_t *p, uint32_t *step);

/* A batch value s[0..len): B (1..LM_BATCH_MAX; 1 = alone, stored as 0) optionally followed by
 * sep and "decode" (sep '/' in a CONFIG string, also ':' in lists). False when malformed. */
bool hx_batch_parse(const char *s, size_t len, bool colon_ok, uint32_t *b, bool *decode);

/* A tensor-parallel value s[0..len): N (1..LM_TP_SHARDS_MAX; 1 stored as 0) optionally followed
 * by sep and "tree" (N >= 2 a power of two) or "fixed" (N a power of two) into *reduce
 * (lm_tp_reduce); sep as hx_batch_parse's. False when malformed. */
bool hx_tp_parse(const char *s, size_t len, bool colon_ok, uint32_t *n, int *reduce);

/* Multiplies the configurations *v[*n] by a rotating-cache axis: list = comma list of "none"
 * and MAX:KEEP[:window] (or MAX/KEEP[/window]) values, no duplicates; the rot value varies slowest (the whole
 * list once per value, in list order). *v is replaced (the old array freed). LM_E_INPUT
 * naming `what` (the option or key), the list and the bad or repeated item; then *v and *n are
 * unchanged. With *n == 0 it only validates the list. */
int hx_config_cross_rot(hx_config **v, size_t *n, const char *what, const char *list,
                        lm_err *err);

/* Multiplies the configurations *v[*n] by a precision-profile axis: list = comma list of
 * profile names (kvd_profile.h), no duplicates; the profile varies slowest. Errors as
 * hx_config_cross_rot's. */
int hx_config_cross_profile(hx_config **v, size_t *n, const char *what, const char *list,
                            lm_err *err);

/* A profile name s[0..len) (lm_profile_find) into out: "" for f32, else the name. False when
 * unknown. */
bool hx_profile_parse(char out[8], const char *s, size_t len);

/* The thread count `all` stands for here: online cores, at least 2, at most LM_MAX_THREADS. */
uint32_t hx_threads_all(void);
/* lm_ctx_params.n_threads for c: its threads, `all` resolved by hx_threads_all. */
int hx_config_n_threads(const hx_config *c);

/* The name lm_ctx_params.backend takes for c, written into buf[n] (LM_BACKEND_NAME_MAX bytes
 * suffice) and returned: c->backend, or NAME:seed=<c->sr_seed> for a LM_BE_SEEDED backend (the
 * one place the seed joins the name: hx_config.backend is too short to hold it). */
const char *hx_config_backend_name(char *buf, size_t n, const hx_config *c);


/* --- lists: the one grammar for case files (`steps = 1,2,full`), the sweep's options
 * (`--steps 1,2,full`) and token ids: comma-separated, spaces around items trimmed, no empty
 * item; `what` names the key or option in messages. --- */

/* One item of a list: decodes s[0..len) (spaces trimmed, never empty) into *elem, which is
 * zeroed beforehand; LM_E_INPUT naming what, the list and the item when it is not one. */
typedef int (*hx_item_decode)(void *elem, const char *s, size_t len, const char *what,
                              const char *list, lm_err *err);
/* The one comma-list parser: every item of list decoded into *out [*n] elements of `size` bytes
 * (malloc'd; NULL and 0 on failure). An empty item is an error; so is an element equal
 * (bytewise) to an earlier one, unless dups_ok. */
int hx_list_parse(void **out, uint32_t *n, size_t size, bool dups_ok, hx_item_decode decode,
                  const char *what, const char *list, lm_err *err);

/* A list of precision profiles (judge's and probe's --profile) into names [*n], at most max of
 * them, none twice: each lm_profile_find's own name (a static string). LM_E_INPUT naming what,
 * the list and the item. */
int hx_profile_names_parse(const char **names, uint32_t *n, uint32_t max, const char *what,
                           const char *list, lm_err *err);

/* Comma list of token ids (each 0..INT32_MAX, repeats allowed); *out malloc'd. */
int hx_parse_tokens(int32_t **out, uint32_t *n, const char *list, lm_err *err);
/* Token ids checked against a vocabulary of n_vocab entries: LM_E_INPUT "WHAT: token id ID
 * (item K) is not below the vocabulary size V" for the first one that is not, K counted from 1
 * (the user's own list, option or case key, names itself in what). */
int hx_check_token_ids(const int32_t *ids /* [n] */, uint32_t n, uint32_t n_vocab,
                       const char *what, lm_err *err);

/* The numbers of a run that case files (key) and options (option) share, each with the limits
 * of the module that owns it: n_gen / -n 0..HX_MAX_N_GEN; precision / --prec
 * REF_MIN_PREC..REF_MAX_PREC (the reference, kvd_ref.h); turn / --turn 0..HX_TURN_MAX. */
typedef enum hx_setting { HX_SET_N_GEN, HX_SET_PRECISION, HX_SET_TURN, HX_SET_COUNT } hx_setting;
/* s as setting `which`: a decimal integer within its limits into *out; else LM_E_INPUT
 * "WHAT 'S': expected an integer in LO..HI" (what: the key or option). */
int hx_setting_parse(uint32_t *out, hx_setting which, const char *what, const char *s,
                     lm_err *err);

/* The default axes of `kvdrift sweep` and of case files: every code path the engine has for
 * these backends (each thread count that changes a split, every attention implementation);
 * the rotating cache comes from the case or option (rot). */
#define HX_AXES_DEFAULT_STEPS "1,2,3,5,8,16,32,64,full"
#define HX_AXES_DEFAULT_BACKENDS "naive,blas"
#define HX_AXES_DEFAULT_THREADS "1,all"
#define HX_AXES_DEFAULT_ATTN "default,stream"

/* The configurations of axes backends x threads x attn x steps (steps vary fastest), the one
 * cross product (hx_case_configs uses it too). n_threads / n_attn may be 0 (one default value).
 * A LM_BE_ONE_THREAD backend gets no `all` configurations when threads has another value.
 * *out malloc'd. LM_E_INPUT for an empty axis or an unknown backend. */
int hx_sweep_cross(hx_config **out, size_t *n, const char (*backends)[16], uint32_t n_backends,
                   const uint32_t *steps, uint32_t n_steps, const uint32_t *threads,
                   uint32_t n_threads, const hx_attn *attn, uint32_t n_attn, lm_err *err);

/* Every axis of a sweep as written (comma lists in the grammar above; NULL = the axis's
 * default: HX_AXES_DEFAULT_* for steps, backends, threads and attn; the plain cache for rot;
 * f32 for profile). The one description of "what to run" that `kvdrift sweep` (its options)
 * and case files (their keys, hx_case.axes) fill; each axis is parsed by the one parser of
 * hx_axis_check with the limits of the module that owns it: steps 1..UINT32_MAX or full;
 * threads 1..LM_MAX_THREADS (the engine) or all; backends the engine's registry
 * (lm_backend_known); attn default, dense, stream; rot none or MAX:KEEP[:window] with the
 * rotating cache's limits (hx_rot_parse); profile the precision profiles (lm_profile_find);
 * prefix none or P[:S] (hx_prefix_parse), batch B[:decode] (hx_batch_parse), tp N[:tree]
 * (hx_tp_parse); all three off by default: the default sweep does not grow. */
typedef struct hx_axes {
    const char *steps, *backends, *threads, *attn, *rot, *profile, *prefix, *batch, *tp;
} hx_axes;

/* The axes of hx_axes (HX_AXIS_PROFILE varies slowest in hx_axes_configs, HX_AXIS_STEPS
 * fastest). */
typedef enum hx_axis {
    HX_AXIS_PROFILE,
    HX_AXIS_ROT,
    HX_AXIS_PREFIX,
    HX_AXIS_BATCH,
    HX_AXIS_TP,
    HX_AXIS_BACKENDS,
    HX_AXIS_THREADS,
    HX_AXIS_ATTN,
    HX_AXIS_STEPS,
    HX_AXIS_COUNT
} hx_axis;

/* The axis whose case-file key is key ("steps", "backends", "threads", "attn", "rot",
 * "profile", "prefix", "batch", "tp"); -1 when key names no axis. */
int hx_axis_find(const char *key);
/* The field of a that holds the list of an axis. */
const char **hx_axes_list(hx_axes *a, hx_axis axis);
/* Checks list as a value of axis (the parser and limits hx_axes_configs uses); LM_E_INPUT
 * naming what (the key or option), the list and the bad item. */
int hx_axis_check(hx_axis axis, const char *what, const char *list, lm_err *err);

/* The configurations of a: profile x rot x tp x batch x prefix x backends x threads x attn x
 * steps (steps fastest, profile slowest), as hx_sweep_cross, hx_config_cross_rot and hx_config_cross_profile
 * make them; a reused prefix with a rotating cache is left out (hx_config_parse refuses it).
 * *out malloc'd; LM_E_INPUT naming the option (--steps ... --prefix) and the bad item, or when
 * nothing is left. */
int hx_axes_configs(hx_config **out, size_t *n, const hx_axes *a, lm_err *err);

/* "dense", "stream" or "default". */
const char *hx_attn_name(hx_attn a);

#endif
