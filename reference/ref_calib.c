/* ref_calib.c — the operands and the clock of the reference's cost calibrations (the seconds
 * per multiply-add behind the cost line printed before a reference pass or an envelope). */
#include "ref_calib.h"

#include "kvd_util.h"

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

double ref_calib_time(bool (*round)(void *user), void *user, double macs)
{
    if (macs <= 0.0 || !round(user))
        return 0.0;
    double n = 0.0, dt = 0.0;
    const double t0 = lm_now_s();
    do {
        if (!round(user))
            return 0.0;
        n += macs;
        dt = lm_now_s() - t0;
    } while (dt < 0.02);
    return dt / n;
}
