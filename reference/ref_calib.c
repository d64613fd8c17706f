/* ref_calib.c — the operands and the clock of the reference's cost calibrations (the seconds
 * per multiply-add behind the cost line printed before a reference pass or an envelope). */
#include "ref_calib.h"

#include "kvd_util.h"

#include <math.h>

uint64_t ref_calib_next(uint64_t *z)
{
    *z = *z * 6364136223846793005ull + 1442695040888963407ull;
    return *z;
}

/* The top 24 bits of the next LCG value, as an integer in [-2^23, 2^23). */
static int32_t next_int24(uint64_t *z)
{
    return (int32_t)(ref_calib_next(z) >> 40) - (1 << 23);
}

void ref_calib_fill_f32(float *dst, uint64_t n, float scale, uint64_t *z)
{
    for (uint64_t i = 0; i < n; ++i)
        dst[i] = (float)next_int24(z) * scale;
}

void ref_calib_fill_f64(double *dst, uint64_t n, double scale, uint64_t *z)
{
    for (uint64_t i = 0; i < n; ++i)
        dst[i] = (double)next_int24(z) * scale;
}

void ref_calib_fill_span(float *dst, uint64_t n, uint32_t span, uint64_t *z)
{
    const uint32_t m = span < 24 ? span : 24, shifts = span - m; /* shifts 0 .. span - m */
    for (uint64_t i = 0; i < n; ++i) {
        const uint64_t r = ref_calib_next(z);
        const uint32_t k = (uint32_t)(r >> 40) & ((1u << m) - 1u);
        const int sh = (int)((r >> 8) % (shifts + 1u));
        dst[i] = ldexpf((float)k, sh - 24) * (((r >> 39) & 1u) ? -1.0f : 1.0f);
    }
    dst[0] = ldexpf((float)((1u << (m - 1)) | 1u), (int)shifts - 24); /* top: span - 24 */
    dst[1] = 0x1p-24f;                                                 /* lowest bit: -24 */
}

double ref_calib_time(bool (*round)(void *user), void *user, double macs)
{
    if (macs <= 0.0 || !round(user))
        return 0.0;
    const double t0 = lm_now_s();
    double best = -1.0, t = t0, now;
    do {
        if (!round(user))
            return 0.0;
        now = lm_now_s();
        best = best < 0.0 || now - t < best ? now - t : best;
        t = now;
    } while (now - t0 < 0.02);
    return best / macs;
}
