/* ref_vprec.c — stochastic rounding of float32 rows to a virtual precision (rules in
 * ref_vprec.h). */
#include "ref_vprec.h"

#include <math.h>
#include <string.h>

bool ref_sr_profile_rounds(const ref_sr_profile *p)
{
    for (unsigned s = 0; p != NULL && s < REF_VP_N_SITES; ++s)
        if (p->site[s].kind != REF_VP_NONE)
            return true;
    return false;
}

static inline uint32_t f2u(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static inline float u2f(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* A FLOAT format as the rounding loop reads it. */
typedef struct fmt {
    int32_t drop;   /* 24 - bits: pattern bits below the format's significand in its normal range */
    int32_t emin_b; /* emin + 127: the smallest biased float32 exponent the format keeps as normal */
    float tiny;     /* the format's smallest subnormal, 2^(emin - bits + 1) */
    float maxf;     /* the format's largest finite, (2 - 2^(1 - bits)) 2^emax */
} fmt;

static fmt fmt_of(const ref_vp *vp)
{
    return (fmt){.drop = 24 - vp->bits, .emin_b = vp->emin + 127,
                 .tiny = ldexpf(1.0f, vp->emin - vp->bits + 1),
                 .maxf = (float)((2.0 - ldexp(1.0, 1 - vp->bits)) * ldexp(1.0, vp->emax))};
}

/* SR of x to the format with the word r (ref_vprec.h). */
static inline float sr_float(float x, uint32_t r, const fmt *f)
{
    const uint32_t u = f2u(x), a = u & 0x7fffffffu, e = a >> 23;
    if (e == 0xffu)
        return x; /* NaN, Inf */
    const int32_t eb = e ? (int32_t)e : 1; /* float32 subnormals share exponent -126 */
    const int32_t s = f->drop + (f->emin_b > eb ? f->emin_b - eb : 0);
    if (s > 23) { /* |x| below the format's smallest subnormal (zeros stay zeros) */
        const float ax = u2f(a);
        const float y = (double)r * 0x1p-32 < (double)(ax / f->tiny) ? f->tiny : 0.0f;
        return (u >> 31) ? -y : y;
    }
    const uint32_t m = (1u << s) - 1u;
    const float y = u2f(((a + (r & m)) & ~m) | (u & 0x80000000u));
    return fabsf(y) > f->maxf ? ((u >> 31) ? -INFINITY : INFINITY) : y;
}

/* The binary16 nearest v (ties to even), as the Q8_0 scale is stored; beyond 65504 after
 * rounding: Inf. */
static float rn_f16(float v)
{
    if (v == 0.0f || !isfinite(v))
        return v;
    int e;
    (void)frexp((double)v, &e); /* |v| = m 2^e, m in [0.5, 1): exponent e - 1 */
    const double q = ldexp(1.0, (e - 1 < -14 ? -14 : e - 1) - 10); /* the spacing at v */
    const double r = nearbyint((double)v / q) * q;                 /* exact scalings */
    return fabs(r) > 65504.0 ? (v < 0 ? -INFINITY : INFINITY) : (float)r;
}

/* The block's scale d and the inverse its codes are taken with (ref_vprec.h). */
static void q8_scale(const float *x /* [n] */, uint64_t n, ref_vp_kind kind, float *d,
                     float *inv)
{
    float amax = 0.0f, max = 0.0f;
    for (uint64_t i = 0; i < n; ++i) /* left to right: the first of largest magnitude */
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            max = x[i];
        }
    if (kind == REF_VP_Q8_0) {
        *inv = amax != 0.0f ? 127.0f / amax : 0.0f;
        *d = rn_f16(amax / 127.0f);
    } else if (amax == 0.0f) {
        *d = *inv = 0.0f;
    } else {
        *inv = -127.0f / max;
        *d = 1.0f / *inv;
    }
}

static void sr_q8(float *x, uint64_t n, ref_vp_kind kind, uint32_t key)
{
    const uint64_t block = kind == REF_VP_Q8_K ? 256u : 32u;
    for (uint64_t b = 0; b < n; b += block) {
        const uint64_t nb = n - b < block ? n - b : block;
        float d, inv;
        q8_scale(x + b, nb, kind, &d, &inv);
        for (uint64_t i = b; i < b + nb; ++i) {
            const float t = x[i] * inv, fl = floorf(t);
            float c = (double)ref_coin(key, i) * 0x1p-32 < (double)(t - fl) ? fl + 1.0f : fl;
            c = isnan(c) ? -128.0f : c > 127.0f ? 127.0f : c < -128.0f ? -128.0f : c;
            x[i] = c * d;
        }
    }
}

void ref_vp_round(float *x, uint64_t n, const ref_vp *vp, uint32_t key)
{
    if (vp->kind == REF_VP_Q8_0 || vp->kind == REF_VP_Q8_K) {
        sr_q8(x, n, vp->kind, key);
        return;
    }
    if (vp->kind != REF_VP_FLOAT)
        return;
    const fmt f = fmt_of(vp);
    for (uint64_t i = 0; i < n; ++i)
        x[i] = sr_float(x[i], ref_coin(key, i), &f);
}
