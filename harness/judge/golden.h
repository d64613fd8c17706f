/* golden.h — golden hash files: JSON (jansson, keys sorted), written atomically.
 *
 * Layout (format "kvdrift-golden", version 2):
 *   {
 *     "format": "kvdrift-golden", "version": 2,
 *     "platforms": { KEY_ID: KEY_TEXT, ... },
 *     "cases": { CASE: { CONFIG: { KEY_ID: {
 *         "xxh3_128": "32 hex digits",
 *         "position": P,                       (absolute position of the summarized logits row)
 *         "top5": [ {"id": I, "logit": L}, ... ],  (best first; L printed with 9 significant
 *                                                  digits, enough to read the float32 back)
 *         "model_xxh3_128": "32 hex digits",   (the model file the entry was blessed on)
 *         "tokens_xxh3_64": "16 hex digits",   (its prompt token ids: hx_tokens_hash)
 *         "kvdrift_version": "0.1.0",          (KVD_VERSION of the blessing binary)
 *         "engine_version": "..."              (only for another engine's configuration: the
 *                                              engine_version its adapter reported)
 *     } } } },
 *     "metadata": { CASE: {                    (optional; the last bless that wrote the case)
 *         "kvdrift_version": "0.1.0", "kvdrift_commit": "git describe of the build",
 *         "command_line": "kvdrift bless ...", "blessed_utc": "2026-11-24T04:00:00Z",
 *         "prompt_ids": [ids...], "phase_s": { PHASE: wall seconds, ... }
 *     } }
 *   }
 * CONFIG is the canonical config string (hx_config_format), KEY_ID the configuration's golden
 * key (golden_key.h: only what can change that configuration's bits; "platforms" maps each id
 * to its text, and texts no entry uses are dropped on save). Keys are sorted on output
 * (JSON_SORT_KEYS) so files diff cleanly.
 *
 * An entry is pinned to its input: an entry whose model hash, token-id hash, version or (for
 * another engine, behind an adapter) engine version differs from the run's was blessed for
 * something else and is "stale" (hx_golden_input_differs), which
 * fails check ("re-bless") instead of silently comparing other bits. Version-1 files (no input
 * fields) are still read; each of their entries is stale.
 *
 * "metadata" is provenance for people: which build and command blessed a case, on which token
 * ids, and how long each phase took. Nothing compares it (hx_golden_find reads "cases" only), so
 * timings that vary from run to run never fail a check; a file without it (written before it
 * existed) loads and compares the same. */
#ifndef HX_GOLDEN_H
#define HX_GOLDEN_H

#include "judge/fingerprint.h"
#include "fs.h"
#include "kvd_common.h"
#include "model/metrics.h"

#include <stdbool.h>
#include <stdint.h>

#define HX_GOLDEN_VERSION 2
/* A golden file larger than this is refused unread (about 50,000 entries; a real one holds a
 * few hundred), and bless never writes one. */
#define HX_GOLDEN_MAX_BYTES (16u << 20)

typedef struct hx_golden_entry {
    char hash_hex[33];         /* XXH3-128 of the canonical capture */
    uint32_t position;         /* absolute position of the summarized row (last prompt position) */
    uint32_t n_top;            /* <= HX_TOPK */
    int32_t top_ids[HX_TOPK];  /* best first */
    float top_logits[HX_TOPK];
    char model_hash[33];       /* XXH3-128 of the model file; "" in a version-1 file */
    char tokens_hash[17];      /* hx_tokens_hash of the prompt; "" in a version-1 file */
    char version[32];          /* kvdrift version that blessed it; "" in a version-1 file */
    char engine_version[256];  /* the adapter's engine_version; "" for kvdrift's own engine */
} hx_golden_entry;

/* What a golden entry is pinned to: the run's input (check compares, bless records). */
typedef struct hx_golden_input {
    char model_hash[33];  /* XXH3-128 of the model file, hex */
    char tokens_hash[17]; /* hx_tokens_hash */
    const char *version;  /* KVD_VERSION */
    const char *engine_version; /* another engine's (model/adapter.h); NULL for kvdrift's */
} hx_golden_input;

/* XXH3-64 of the token ids as int32 little-endian bytes, 16 hex digits. */
void hx_tokens_hash(char out[17], const int32_t *ids /* [n] */, uint32_t n);

/* Whether e was blessed for input other than in; why (when non-NULL) gets a one-line reason
 * naming what changed, e.g. "model changed (blessed 1a2b..., now 3c4d...)". */
bool hx_golden_input_differs(const hx_golden_entry *e, const hx_golden_input *in, char *why,
                             size_t cap);

typedef struct hx_golden hx_golden;

/* Empty golden set (for a file that does not exist yet). */
int hx_golden_create(hx_golden **out, lm_err *err);
/* Loads and validates a golden file; every entry is checked now, so a malformed file is an
 * error (LM_E_INPUT naming the path and the JSON location) before anything is compared.
 * missing_ok: an absent file gives an empty set instead of LM_E_IO. A path that is not a
 * regular file, or a file over HX_GOLDEN_MAX_BYTES, is LM_E_INPUT. */
int hx_golden_load(hx_golden **out, const char *path, bool missing_ok, lm_err *err);
void hx_golden_free(hx_golden *g);

/* *found false (and LM_OK) when there is no entry for this case/config/platform. */
int hx_golden_find(const hx_golden *g, const char *case_name, const char *config,
                   const char *fp_id, hx_golden_entry *out, bool *found, lm_err *err);
/* Adds or replaces the entry under key_id and records the key's text (golden_key.h). */
int hx_golden_set(hx_golden *g, const char *case_name, const char *config, const char *key_id,
                  const char *key_text, const hx_golden_entry *e, lm_err *err);
/* Removes the entries of case/config (under every key) blessed for input other than in: bless
 * calls it, since such entries can never match again. Returns how many were removed. */
size_t hx_golden_prune_stale(hx_golden *g, const char *case_name, const char *config,
                             const hx_golden_input *in);
/* Whether case/config holds an entry, under any key, blessed for input other than in (why,
 * when non-NULL, gets hx_golden_input_differs's reason for the first such entry). The key of a
 * configuration depends on its input too (the rope probe reads the prompt's positions), so a
 * changed prompt can leave no entry under the new key while the old ones stay: check reads
 * that as stale, not absent. bless prunes such entries (hx_golden_prune_stale), so after a
 * bless none is left. */
bool hx_golden_find_stale(const hx_golden *g, const char *case_name, const char *config,
                          const hx_golden_input *in, char *why, size_t cap);
/* Number of entries (case x config x platform). */
size_t hx_golden_count(const hx_golden *g);

/* Writes the whole set: sorted keys, 2-space indent, trailing newline; atomic. LM_E_INPUT when
 * the text would exceed HX_GOLDEN_MAX_BYTES. */
int hx_golden_save(const hx_golden *g, const char *path, lm_err *err);
/* hx_golden_save up to the rename: the text is in a temp file beside path, and *out is the
 * pending write for lm_wfile_commit/lm_wfile_commit_all (fs.h). */
int hx_golden_stage(lm_wfile **out, const hx_golden *g, const char *path, lm_err *err);

/* The provenance of one bless of a case (the "metadata" block). */
typedef struct hx_golden_meta {
    const char *command_line;        /* the bless command as typed */
    const char *blessed_utc;         /* "2026-11-24T04:00:00Z" */
    const int32_t *prompt_ids;       /* [n_prompt] */
    uint32_t n_prompt;
    const char *const *phase_names;  /* [n_phases] */
    const double *phase_s;           /* [n_phases] wall seconds */
    size_t n_phases;
} hx_golden_meta;

/* Replaces case_name's metadata block with m, the kvdrift version and the build's git commit
 * (kvd_version.h). Never read back by comparison. LM_E_NOMEM only. */
int hx_golden_set_meta(hx_golden *g, const char *case_name, const hx_golden_meta *m,
                       lm_err *err);

/* Fills an entry: hash, the top-5 of logits [n_vocab] at absolute position, and the input it
 * is pinned to. */
void hx_golden_entry_fill(hx_golden_entry *e, const uint8_t hash[16],
                          const float *logits /* [n_vocab] */, uint32_t n_vocab,
                          uint32_t position, const hx_golden_input *in);

#endif
