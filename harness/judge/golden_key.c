/* golden_key.c — per-configuration golden keys (golden_key.h). */
#include "golden_key.h"

#include "kvd_engine.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <xxhash.h>

static char rope_hex[9];
static pthread_once_t rope_once = PTHREAD_ONCE_INIT;

/* The engine's RoPE table formula (forward.c fill_rope_table): float(cos(pos * theta^(-2i/n)))
 * and the same for sin, for the thetas and rotary sizes of common models, positions 0..8191. */
static void rope_probe(void)
{
    static const double thetas[] = {10000.0, 500000.0, 1000000.0};
    static const unsigned rots[] = {64, 128};
    enum { N_POS = 8192 };
    static float row[2 * N_POS];
    XXH3_state_t *st = XXH3_createState();
    if (st == NULL || XXH3_64bits_reset(st) != XXH_OK) {
        snprintf(rope_hex, sizeof rope_hex, "unknown");
        XXH3_freeState(st);
        return;
    }
    for (size_t t = 0; t < sizeof thetas / sizeof thetas[0]; ++t)
        for (size_t r = 0; r < sizeof rots / sizeof rots[0]; ++r)
            for (unsigned i = 0; i < rots[r] / 2; ++i) {
                volatile double theta = thetas[t]; /* volatile: no constant folding */
                const double freq = pow(theta, -2.0 * (double)i / (double)rots[r]);
                for (unsigned pos = 0; pos < N_POS; ++pos) {
                    const double ang = (double)pos * freq;
                    row[2 * pos] = (float)cos(ang);
                    row[2 * pos + 1] = (float)sin(ang);
                }
                XXH3_64bits_update(st, row, sizeof row);
            }
    snprintf(rope_hex, sizeof rope_hex, "%08x", (unsigned)XXH3_64bits_digest(st));
    XXH3_freeState(st);
}

const char *hx_golden_rope_probe(void)
{
    pthread_once(&rope_once, rope_probe);
    return rope_hex;
}

void hx_golden_key_make(hx_golden_key *k, const hx_fingerprint *fp, const char *backend,
                        const char *describe)
{
    bool has = describe && *describe;
    snprintf(k->text, sizeof k->text,
             "arch=%s; compiler=%s; flags=%s; libc=%s; rope=%s; backend=%s%s%s", fp->arch,
             fp->compiler, fp->flags, fp->libc, hx_golden_rope_probe(), backend, has ? "; " : "",
             has ? describe : "");
    hx_text_id16(k->id, k->text);
}

void hx_golden_key_of(hx_golden_key *k, const hx_fingerprint *fp, const char *backend)
{
    const lm_backend_info *b = lm_backend_find(backend, strlen(backend));
    char desc[512] = "";
    if (b && b->describe)
        b->describe(desc, sizeof desc, false);
    hx_golden_key_make(k, fp, backend, desc);
}
