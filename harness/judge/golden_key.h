/* golden_key.h — the key a configuration's golden is stored under: only what can change THAT
 * configuration's bits, so a golden holds on every machine where the bits do.
 *
 * Key text, "key=value" parts joined by "; ":
 *   arch      uname machine (the compiler's code generation target)
 *   compiler  __VERSION__ and the numerics build flags (KVD_BUILD_FLAGS)
 *   rope      the libm probe: XXH3-64 of the float32 RoPE tables the engine computes for the
 *             case's model at the positions its runs read (lm_rope_table: double pow, cos,
 *             sin, rounded to float). Those calls are the only C-library maths a forward pass
 *             depends on (expf is the engine's own lm_expf, sqrtf and fmaf are correctly
 *             rounded, greedy decoding calls no exp), so the probe equals on two machines
 *             exactly when libm contributes the same bits there, whatever the C library's
 *             name or version; the version itself is not in the key
 *   backend   the backend's name, then whatever its describe hook reports (lm_backend_info:
 *             blas adds the OpenBLAS build and the core it picked; naive and det report
 *             nothing: nothing about the CPU, its ISA or the BLAS core enters their keys)
 * The thread count and the step are in the configuration string the key is used with.
 * Another engine's configuration (behind an adapter, model/adapter.h) has a key of its own:
 *   arch      as above
 *   adapter   the adapter's name and its engine
 *   build     its engine_build ("" when it reports none)
 *   positions the positions its runs read (prompt and continuation)
 * Its engine_version is not in the key: its entries are pinned to it (golden.h), so another
 * version reads as stale, never as absent or as a mismatch; kvdrift's compiler, flags and libm
 * do not enter it (they compute none of its bits).
 * The id is the first 16 hex digits of XXH3-128(text). */
#ifndef HX_GOLDEN_KEY_H
#define HX_GOLDEN_KEY_H

#include "judge/fingerprint.h"
#include "kvd_model.h"
#include "model/adapter.h"

typedef struct hx_golden_key {
    char text[768];
    char id[17];
} hx_golden_key;

/* The libm probe of model m over positions 0..n_pos-1 (n_pos >= 1): 16 hex digits of the
 * XXH3-64 of lm_rope_table's cos and sin tables for hp.rope_theta and, when the model has a
 * different sliding-layer theta, for hp.rope_theta_swa. */
int hx_golden_rope_probe(char out[17], const lm_model *m, uint32_t n_pos, lm_err *err);

/* The key of a configuration of backend `backend` whose describe text is `describe` (NULL or
 * "" for a backend without a hook); fp gives arch, compiler and flags; rope is the probe of
 * the case's model (hx_golden_rope_probe). */
void hx_golden_key_make(hx_golden_key *k, const hx_fingerprint *fp, const char *backend,
                        const char *describe, const char *rope);
/* The same with the backend's own describe hook on this machine (lm_backend_find). */
void hx_golden_key_of(hx_golden_key *k, const hx_fingerprint *fp, const char *backend,
                      const char *rope);

/* The key of adapter d's configurations whose runs read positions 0..n_pos-1. */
void hx_golden_key_adapter(hx_golden_key *k, const hx_fingerprint *fp, const hx_adapter_desc *d,
                           uint32_t n_pos);

#endif
