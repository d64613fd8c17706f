/* case.h — declarative test cases: INI files in cases/ parsed with inih.
 *
 *   ; cases/stories-steps.case
 *   name = stories-steps
 *   model = ${KVDRIFT_MODELS}/stories260K.gguf     ; or synth:PRESET[:seed=N]
 *   prompt = Once upon a time                     ; or: tokens = 1,403,9038, or
 *                                                 ;     prompt_file = chat.txt
 *   special = false                               ; control-token text becomes tokens
 *   steps = 1,2,3,full                            ; default 1,2,3,5,8,16,32,64,full
 *   backends = naive,blas                         ; default naive,blas
 *   threads = 1,2                                 ; default 1,all (all: online cores, >= 2)
 *   attn = default                                ; default default,stream (default = dense)
 *   rot = none,8:2                                ; rotating KV cache axis, default none
 *   profile = f32,f16kv                           ; precision-profile axis, default f32
 *   turn = 4                                      ; two-turn sibling of each configuration
 *                                                 ; (D decode steps; 0 = none), default 4
 *   n_gen = 32                                    ; default 32
 *   precision = 127                               ; MPFR bits, default 127
 *   strict_bits = false                           ; default false
 *   invariant_bits = true                         ; default false (hx_case.invariant_bits)
 *
 * Another engine's case (behind an adapter, docs/ADAPTERS.md) names it and its knobs' axes:
 *
 *   engine = llamacpp                             ; a shipped adapter's name, or a path (with a
 *                                                 ; '/'; relative to the case file's folder)
 *   [knobs]                                       ; KNOB = V1,V2,...: each an axis of the sweep
 *   n_ubatch = 1,7,512                            ; (sweep --engine's --axis KNOB=V1,V2)
 *   type_k = f32,f16
 *
 * Knob names are [a-z0-9_]{1,31}; whether the adapter declares the knob and its values is
 * checked against its --describe before anything runs (hx_caserun_create). With engine, the
 * keys of kvdrift's own engine (the axis keys, turn, invariant_bits) are errors, and [knobs]
 * without engine is one.
 *
 * The axis keys (steps ... profile) take the lists of the sweep's options (--steps ...), parsed
 * by the same parser with the same limits (config.h hx_axes); n_gen, precision and turn take
 * the numbers of -n, --prec and --turn (hx_setting_parse), with the same messages.
 * Keys may sit before any section or in a [case] section; [knobs] holds an engine's knob axes;
 * other sections are errors. Every key
 * at most once. name, model and exactly one of prompt/tokens are required. Whole-line comments
 * start with ';' or '#'; there are no inline comments (a ';' inside a prompt is text). A value
 * wrapped in double quotes loses the quotes (to keep leading/trailing spaces of a prompt).
 * `${KVDRIFT_MODELS}` and `${KVDRIFT_CACHE}` expand as hx_model_spec_parse says; any other
 * `${...}` is an error. A relative model path written in the file is relative to the case
 * file's folder (hx_case_load); a path from ${KVDRIFT_MODELS} is used as the variable gives it.
 * Errors: LM_E_INPUT with "FILE:LINE: reason" (or "FILE: reason" for a missing key); a path that
 * is not a regular file (FIFO, device) or holds more than HX_CASE_MAX_BYTES is refused unread. */
#ifndef HX_CASE_H
#define HX_CASE_H

#include "model/adapter.h"
#include "model/config.h"
#include "kvd_common.h"
#include "kvd_ref.h"
#include "plan/model_spec.h"

#include <stdbool.h>
#include <stdint.h>

#define HX_CASE_DEFAULT_N_GEN 32u
#define HX_CASE_DEFAULT_PRECISION 127u
/* A case file is a few lines of text: a larger file is refused before it is read. */
#define HX_CASE_MAX_BYTES (1u << 20)

typedef struct hx_case {
    char *file;           /* where it was read from (for messages) */
    char *name;
    char *model_text;     /* the model value as written */
    hx_model_spec model;
    char *prompt;         /* NULL when tokens are given */
    int32_t *tokens;      /* [n_tokens]; NULL when prompt is given */
    uint32_t n_tokens;
    hx_axes axes;         /* the axis keys as written (malloc'd copies, each checked by
                             hx_axis_check when read); NULL = the sweep's default */
    uint32_t turn;        /* schedule axis: each configuration's two-turn sibling with this
                             many decode steps (config.h hx_config_add_turns); 0 = none */
    uint32_t n_gen;
    uint32_t precision;
    bool strict_bits;
    /* invariant_bits = true: every configuration of a chunk-invariant backend
     * (LM_BE_CHUNK_INVARIANT), MLX's rotating cache excepted, must be bitwise equal to its
     * one-chunk baseline (class EXACT): NOISE or TIE_FLIP fails. Unlike strict_bits it does not
     * depend on goldens, so it holds on every platform. */
    bool invariant_bits;
    bool special;         /* special = true: control-token text in the prompt ("<|im_start|>")
                             becomes those tokens (lm_tokenize_ex parse_special) */
    char *engine;         /* engine = ADAPTER as written (a relative path anchored at the case
                             file's folder by hx_case_load); NULL: kvdrift's own engine */
    char *knobs[HX_ADAPTER_MAX_KNOBS]; /* [n_knobs] "KNOB=V1,V2,..." of [knobs], in file order */
    uint32_t n_knobs;
    /* 1-based lines of keys in the file (0 = absent), for annotations pointing at them. */
    uint32_t line_name, line_model, line_input /* prompt, tokens or prompt_file */, line_steps;
} hx_case;

/* Reads and validates a case file. */
int hx_case_load(hx_case **out, const char *path, lm_err *err);
/* The same from text; file names the source in messages. */
int hx_case_parse_string(hx_case **out, const char *text, const char *file, lm_err *err);
void hx_case_free(hx_case *c);

/* Every configuration of the case: hx_axes_configs of its axes (profile x rot x backends x
 * threads x attn x steps, steps fastest), in the order written, each followed by its two-turn
 * sibling (hx_config_add_turns). *out is malloc'd. */
int hx_case_configs(hx_config **out, size_t *n, const hx_case *c, lm_err *err);

#endif
