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

typedef struct hx_config {
    char backend[16]; /* a registered backend's name (lm_backend_find), without a seed */
    uint32_t step;    /* prefill chunk size in tokens; 0 = the whole prompt in one chunk ("full") */
    uint32_t threads; /* 0 = not specified (the engine's default) */
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
 * 1..LM_MAX_THREADS, the engine's limit), attn (dense|stream), turn (decode steps 0..HX_TURN_MAX
 * of the two-turn schedule, 0 = none), rot (MAX/KEEP: a rotating KV
 * cache with max_size MAX >= 2 and keep KEEP < MAX, both decimal, MLX's policy; MAX/KEEP/window:
 * the same cache with the exact-window policy; "none" = the plain cache;
 * '/' because ':' separates fields); profile (a precision
 * profile name, lm_profile_find; "f32" is stored as ""); spec (K >= 0 drafted tokens; 0 = plain decoding),
 * draft (self:L, a GGUF path or synth:PRESET[:seed=N]: the rest of the string, so it comes
 * last, ':' included);
 * each key at most once, in any order. A missing step means full.
 * Unknown backend, unknown key, duplicate key or malformed value: LM_E_INPUT naming the
 * string and the reason. */
int hx_config_parse(hx_config *out, const char *s, lm_err *err);

/* Canonical form: backend, then step=N|full always, then threads=T when nonzero, then attn=A
 * when not default, then rot=MAX/KEEP[/window] when rotating, then turn=D when D > 0, then
 * profile=P when not f32, then spec=K
 * when K > 0, then draft=D when given.
 * parse(format(c)) == c for every valid c. Returns the length written
 * (truncated like snprintf when n is too small). */
int hx_config_format(char *buf, size_t n, const hx_config *c);

/* The configuration's baseline: same backend, threads, attn and rot, one chunk (step = full,
 * turn 0). */
hx_config hx_config_baseline(const hx_config *c);
bool hx_config_equal(const hx_config *a, const hx_config *b);

/* A rotating-cache value s[0..len): "none" (*max = *keep = 0) or MAX/KEEP or MAX:KEEP (the
 * sweep's --rot list and case files accept ':'; a CONFIG string needs '/'), with MAX >= 2 and
 * KEEP < MAX (the engine's limits, kvcache_rotating.h), optionally followed by the same
 * separator and "window" (*window = true: the exact-window policy). False when malformed. */
bool hx_rot_parse(const char *s, size_t len, uint32_t *max, uint32_t *keep, bool *window);

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

/* The name lm_ctx_params.backend takes for c, written into buf[n] (LM_BACKEND_NAME_MAX bytes
 * suffice) and returned: c->backend, or NAME:seed=<c->sr_seed> for a LM_BE_SEEDED backend (the
 * one place the seed joins the name: hx_config.backend is too short to hold it). */
const char *hx_config_backend_name(char *buf, size_t n, const hx_config *c);

/* --- axis lists: the one grammar for case files (`steps = 1,2,full`) and the sweep's options
 * (`--steps 1,2,full`): comma-separated, spaces around items trimmed, no empty item, no item
 * listed twice; limits from the module that owns them. `what` names the key or option in
 * messages (LM_E_INPUT naming the list and the bad item). *out is malloc'd (free()). --- */

/* Calls item(ctx, s, len) for each item of list (spaces trimmed); an empty item is an error.
 * Returns LM_OK or the first failing item()'s code. */
int hx_list_each(const char *what, const char *list,
                 int (*item)(void *ctx, const char *s, size_t len, lm_err *err), void *ctx,
                 lm_err *err);
/* Prefill steps: integers >= 1, or "full" (0). */
int hx_axis_steps(uint32_t **out, uint32_t *n, const char *what, const char *list, lm_err *err);
/* Thread counts 1..LM_MAX_THREADS (the engine's limit). */
int hx_axis_threads(uint32_t **out, uint32_t *n, const char *what, const char *list,
                    lm_err *err);
/* Backends a user may choose (lm_backend_known: the engine's registry). */
int hx_axis_backends(char (**out)[16], uint32_t *n, const char *what, const char *list,
                     lm_err *err);
/* Attention variants: default, dense, stream. */
int hx_axis_attn(hx_attn **out, uint32_t *n, const char *what, const char *list, lm_err *err);

/* The configurations of axes backends x threads x attn x steps (steps vary fastest), the one
 * cross product (hx_case_configs uses it too). n_threads / n_attn may be 0 (one default value).
 * *out malloc'd. LM_E_INPUT for an empty axis or an unknown backend. */
int hx_sweep_cross(hx_config **out, size_t *n, const char (*backends)[16], uint32_t n_backends,
                   const uint32_t *steps, uint32_t n_steps, const uint32_t *threads,
                   uint32_t n_threads, const hx_attn *attn, uint32_t n_attn, lm_err *err);

/* "dense", "stream" or "default". */
const char *hx_attn_name(hx_attn a);
/* The backends a configuration may name: lm_backend_known (kvd_engine.h, the registry). */

#endif
