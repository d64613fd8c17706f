/* probe.h — `kvdrift probe` as a library call: one prompt sent to an OpenAI-compatible server's
 * /v1/completions at temperature 0 with top-k log-probabilities, over the serving axes
 * concurrency x prefix x repeat, each reply turned into a top-k dump (probe_dump.h) and judged
 * with the judge (dumps_run.h, compare_topk.h) against the reference, each against the
 * baseline (concurrency 1, prefix cold, repeat 0) bit for bit.
 *
 * What one call does, in order:
 *  (a) GET /v1/models, /props, /version (what the server says it is; a server that does not
 *      answer /v1/models at all is "not reachable": LM_E_INPUT).
 *  (b) The request form: the probe sent alone as token ids with echo (prompt
 *      log-probabilities: echo, and llama-server's n_probs, are asked), then as text with echo,
 *      then ids and text without echo; the first that a server answers 200 with
 *      log-probabilities is kept for every request. An HTTP error tries the next form (servers
 *      answer a refused form with 4xx or 5xx), and so does an echo that scores fewer prompt
 *      tokens than the prompt has (BOS aside: its rows cannot be placed); no reply, or a 200
 *      reply without log-probabilities, is LM_E_INPUT, and so is every form refused.
 *  (c) Per prefix mode (cold: after one unrelated request, the probe sent with llama-server's
 *      cache_prompt false so that no slot's cached prefix is reused; warm: after the probe
 *      itself, cache_prompt true, so its prompt is in the server's prefix cache; shared:P:
 *      after one unrelated request, cache_prompt false, the fillers starting with the prompt's
 *      first P ids), concurrency N and repeat r: the probe
 *      and N - 1 filler requests (seeded lengths and ids, the same max_tokens) started at
 *      once (http_client.h), so that a batching server runs them in the same batches. A probe
 *      or filler that fails is LM_E_INPUT naming it; every request of the batch has ended
 *      (completed or cancelled) before hx_probe_run returns.
 *  (d) Every probe reply as a dump; with echo (or vLLM's prompt_logprobs), its prompt tokens
 *      against kvdrift's ids (a mismatch: LM_E_INPUT with that one line, never a verdict).
 *  (e) The judge under each profile (one dump per request configuration, named
 *      "c=N,prefix=M,rep=r", its configurations "<name>@<profile>"), each against the
 *      baseline's dump; a request configuration fails when no profile explains it.
 *  (f) "Not the same model": the baseline's first scored row chooses another token than the
 *      reference and its err/E exceeds HX_PROBE_OTHER_MODEL_RATIO under every profile:
 *      LM_E_INPUT.
 * SIGINT or SIGTERM while (a) to (d) run: the requests in flight are cancelled (their
 * connections closed, so a server drops them) and no more are sent; the dispositions found on
 * entry are restored and the signal raised again (by default kvdrift then ends by that signal,
 * as it does interrupted anywhere else, with no report written: reports are written after
 * hx_probe_run returns); where the caller's handler returns, LM_E_INPUT "interrupted by
 * SIGINT" and no report. During (e) the caller's dispositions apply.
 * The report holds the judge's sections and the probe's (report.h hx_probe_report). */
#ifndef HX_PROBE_H
#define HX_PROBE_H

#include "kvd_model.h"
#include "model/report.h"
#include "run/dumps_run.h"

#include <stdbool.h>
#include <stdint.h>

#define HX_PROBE_MAX_AXIS 8u        /* values per axis */
#define HX_PROBE_MAX_CONCURRENCY 64u
#define HX_PROBE_OTHER_MODEL_RATIO 1e3

typedef enum hx_prefix_kind { HX_PREFIX_COLD, HX_PREFIX_WARM, HX_PREFIX_SHARED } hx_prefix_kind;
typedef struct hx_probe_prefix {
    hx_prefix_kind kind;
    uint32_t shared; /* shared:P: P >= 1 */
} hx_probe_prefix;

/* "cold,warm,shared:4" into out [*n] (at most HX_PROBE_MAX_AXIS, no repeats). */
int hx_probe_parse_prefixes(hx_probe_prefix *out, uint32_t *n, const char *list, lm_err *err);
/* "1,2,8,32" into out [*n] (each 1..HX_PROBE_MAX_CONCURRENCY, at most HX_PROBE_MAX_AXIS). */
int hx_probe_parse_concurrency(uint32_t *out, uint32_t *n, const char *list, lm_err *err);

typedef struct hx_probe_params {
    const char *url;            /* the server's base URL ("http://127.0.0.1:8080"; a trailing
                                   "/" or "/v1" is dropped) */
    bool allow_remote;          /* false: a URL whose host is not loopback is LM_E_INPUT */
    const char *prompt_text;    /* the prompt's text (sent when ids are refused); NULL: the
                                   ids detokenized */
    uint32_t n_gen;             /* max_tokens, >= 1 */
    uint32_t k;                 /* log-probabilities per position, 1..HX_TOPK_ROW_MAX - 1 */
    uint32_t concurrency[HX_PROBE_MAX_AXIS];
    uint32_t n_concurrency;     /* >= 1; 1 is added first when absent (the baseline's) */
    hx_probe_prefix prefixes[HX_PROBE_MAX_AXIS];
    uint32_t n_prefixes;        /* >= 1; cold is added first when absent */
    uint32_t repeat;            /* >= 1 */
    double timeout_s;           /* per request */
    double overall_s;           /* every request together */
    uint64_t seed;              /* fillers' lengths and ids */
    /* model, model_label, prompt, n_prompt, profiles, precision, ensemble, sr_seed, cache_dir,
     * ref_threads, jobs, quiet, log as the judge takes them; dumps, names, dump_profile and
     * baseline are the probe's own */
    hx_judge_params judge;
} hx_probe_params;

int hx_probe_run(hx_report **out, const hx_probe_params *p, lm_err *err);

#endif
