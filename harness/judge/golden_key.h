/* golden_key.h — the key a configuration's golden is stored under: only what can change THAT
 * configuration's bits, so a golden holds on every machine where the bits do.
 *
 * Key text, "key=value" parts joined by "; ":
 *   arch      uname machine (the compiler's code generation target)
 *   compiler  __VERSION__ and the numerics build flags (KVD_BUILD_FLAGS)
 *   libc      its version
 *   rope      XXH3 of the float32 RoPE table values the engine computes with the C library's
 *             double pow/cos/sin (the only libm functions its forward pass calls; expf is
 *             its own), over fixed thetas, dimensions and positions: equal on two machines
 *             exactly when those library results round to the same floats there
 *   backend   the backend's name, then whatever its describe hook reports (lm_backend_info:
 *             blas adds the OpenBLAS build and the core it picked; naive has no hook: nothing
 *             about the CPU, its ISA or the BLAS core enters its key)
 * The thread count and the step are in the configuration string the key is used with.
 * The id is the first 16 hex digits of XXH3-128(text). */
#ifndef HX_GOLDEN_KEY_H
#define HX_GOLDEN_KEY_H

#include "fingerprint.h"

typedef struct hx_golden_key {
    char text[768];
    char id[17];
} hx_golden_key;

/* The key of a configuration of backend `backend` whose describe text is `describe` (NULL or
 * "" for a backend without a hook); fp gives arch, compiler, flags and libc. */
void hx_golden_key_make(hx_golden_key *k, const hx_fingerprint *fp, const char *backend,
                        const char *describe);
/* The same with the backend's own describe hook on this machine (lm_backend_find). */
void hx_golden_key_of(hx_golden_key *k, const hx_fingerprint *fp, const char *backend);

/* The rope probe of this machine, 8 hex digits (computed once). */
const char *hx_golden_rope_probe(void);

#endif
