/* profile.c — the precision profiles' table and round-to-nearest at a virtual precision. */
#include "kvd_profile.h"

#include "backend.h"

#include <math.h>
#include <string.h>

#define F16 LM_ROUND_SPEC_F16
#define BF16 LM_ROUND_SPEC_BF16
#define TF32 {LM_ROUND_FLOAT, 11, -126, 127}
#define PER_WEIGHT {LM_ROUND_VEC_DOT, 0, 0, 0}

static const lm_profile profiles[] = {
    {"f32", "float32 everywhere (no extra rounding)", {{0}}},
    {"f16kv", "K and V rounded to binary16 when cached", {[LM_SITE_KV] = F16}},
    {"bf16", "weights, activations and KV cache in bfloat16, float32 accumulation",
     {[LM_SITE_WEIGHT] = BF16, [LM_SITE_NORM] = BF16, [LM_SITE_ROPE] = BF16,
      [LM_SITE_SOFTMAX] = BF16, [LM_SITE_SWIGLU] = BF16, [LM_SITE_RESIDUAL] = BF16,
      [LM_SITE_OUT_NORM] = BF16, [LM_SITE_V] = BF16, [LM_SITE_ATTN_OUT] = BF16,
      [LM_SITE_KV] = BF16, [LM_SITE_POST_NORM] = BF16, [LM_SITE_HEAD_NORM] = BF16,
      [LM_SITE_MOE_GATES] = BF16, [LM_SITE_MOE_SUM] = BF16}},
    {"tf32", "matrix-product inputs rounded to TF32 (10-bit mantissa)",
     {[LM_SITE_WEIGHT] = TF32, [LM_SITE_NORM] = TF32, [LM_SITE_ROPE] = TF32,
      [LM_SITE_V] = TF32, [LM_SITE_SOFTMAX] = TF32, [LM_SITE_ATTN_OUT] = TF32,
      [LM_SITE_SWIGLU] = TF32, [LM_SITE_OUT_NORM] = TF32}},
    {"q8act", "weight products' inputs converted as llama.cpp's CPU backend does per weight "
              "type (Q8_0, Q8_K, F16, BF16; F32: none)",
     {[LM_SITE_NORM] = PER_WEIGHT, [LM_SITE_ATTN_OUT] = PER_WEIGHT,
      [LM_SITE_SWIGLU] = PER_WEIGHT, [LM_SITE_OUT_NORM] = PER_WEIGHT}},
    {"f16act", "activations rounded to binary16 before weight matrix products",
     {[LM_SITE_NORM] = F16, [LM_SITE_ATTN_OUT] = F16, [LM_SITE_SWIGLU] = F16,
      [LM_SITE_OUT_NORM] = F16}},
};
#define N_PROFILES (sizeof profiles / sizeof profiles[0])
_Static_assert(N_PROFILES <= LM_PROFILES_MAX, "LM_PROFILES_MAX bounds the profiles");

static const lm_round_spec none = {LM_ROUND_NONE, 0, 0, 0};

const lm_profile *lm_profile_find(const char *s)
{
    if (s == NULL || *s == '\0')
        return &profiles[0];
    for (size_t i = 0; i < N_PROFILES; ++i)
        if (strcmp(s, profiles[i].name) == 0)
            return &profiles[i];
    return NULL;
}

const lm_profile *lm_profile_at(uint32_t i)
{
    return i < N_PROFILES ? &profiles[i] : NULL;
}

uint32_t lm_profile_count(void)
{
    return (uint32_t)N_PROFILES;
}

uint32_t lm_profile_index(const lm_profile *p)
{
    return (uint32_t)(p - profiles);
}

const char *lm_profile_expected(void)
{
    return "f32, f16kv, bf16, tf32, q8act or f16act";
}

const lm_round_spec *lm_profile_site(const lm_profile *p, uint32_t site)
{
    site &= 0xffu;
    if (p == NULL || site >= LM_N_SITES)
        return &none;
    return &p->site[site];
}

bool lm_profile_rounds_on(const lm_profile *p, const lm_model *m)
{
    bool per_weight = false;
    for (uint32_t s = 0; p != NULL && s < LM_N_SITES; ++s) {
        const lm_round_kind k = p->site[s].kind;
        if (k == LM_ROUND_VEC_DOT)
            per_weight = true;
        else if (k != LM_ROUND_NONE)
            return true;
    }
    if (!per_weight)
        return false;
    if (lm_vec_dot_spec(m->output.type)->kind != LM_ROUND_NONE)
        return true;
    for (uint32_t il = 0; il < m->hp.n_layer; ++il) {
        const lm_wt *w[LM_LAYER_PRODUCTS];
        lm_layer_product_weights(&m->layers[il], w);
        for (int i = 0; i < LM_LAYER_PRODUCTS; ++i)
            if (lm_wt_present(w[i]) && lm_vec_dot_spec(w[i]->type)->kind != LM_ROUND_NONE)
                return true;
    }
    return false;
}

bool lm_profile_rounds(const lm_profile *p)
{
    for (uint32_t s = 0; p != NULL && s < LM_N_SITES; ++s)
        if (p->site[s].kind != LM_ROUND_NONE)
            return true;
    return false;
}

/* The spacing of the spec's numbers around x (x finite, nonzero): 2^(max(E, emin) - bits + 1)
 * with E the exponent of |x| (2^E <= |x| < 2^(E+1)). */
static double quantum(float x, const lm_round_spec *s)
{
    int e;
    (void)frexp((double)x, &e); /* |x| = m * 2^e, m in [0.5, 1): E = e - 1 */
    int E = e - 1 < s->emin ? s->emin : e - 1;
    return ldexp(1.0, E - (int)s->bits + 1);
}

/* Largest finite value of the spec: (2 - 2^(1 - bits)) * 2^emax. */
static double max_finite(const lm_round_spec *s)
{
    return (2.0 - ldexp(1.0, 1 - (int)s->bits)) * ldexp(1.0, s->emax);
}

static float clamp_inf(double r, const lm_round_spec *s)
{
    if (fabs(r) > max_finite(s))
        return r > 0 ? INFINITY : -INFINITY;
    return (float)r; /* exact: r has <= bits <= 24 significant bits within float's range */
}

float lm_round_float_rn(float x, const lm_round_spec *s)
{
    if (x == 0.0f || !isfinite(x))
        return x;
    double q = quantum(x, s);
    /* x / q is exact (power-of-two scale); nearbyint rounds ties to even in the default
     * rounding mode; the product is exact again. */
    return clamp_inf(nearbyint((double)x / q) * q, s);
}

double lm_round_float_bracket(float x, const lm_round_spec *s, float *lo, float *hi)
{
    *lo = *hi = x;
    if (x == 0.0f || !isfinite(x))
        return 0.0;
    double q = quantum(x, s);
    double t = (double)x / q; /* exact */
    double f = floor(t);
    if (f == t) { /* on the format's grid: x itself, or Inf beyond its largest finite */
        *lo = *hi = clamp_inf(x, s);
        return 0.0;
    }
    /* a neighbour may sit in the next binade (2^(E+1)): still a multiple of q, so exact */
    *lo = clamp_inf(f * q, s);
    *hi = clamp_inf((f + 1.0) * q, s);
    return t - f; /* exact: t and f are within 1 of each other at the same scale */
}

void lm_round_rows_rn(float *x, uint32_t n, uint32_t elems, size_t stride, const lm_round_spec *s)
{
    const bool q8 = s->kind == LM_ROUND_Q8_0 || s->kind == LM_ROUND_Q8_K;
    if (s->kind != LM_ROUND_FLOAT && !q8)
        return;
    const uint32_t block = lm_q8_block_size(s->kind);
    int8_t q[256];
    for (uint32_t t = 0; t < n; ++t) {
        float *r = x + (size_t)t * stride; /* [elems] */
        if (!q8) {
            for (uint32_t j = 0; j < elems; ++j)
                r[j] = lm_round_float_rn(r[j], s);
            continue;
        }
        for (uint32_t b = 0; b < elems; b += block) {
            const uint32_t nb = elems - b < block ? elems - b : block;
            float d;
            lm_q8_quantize(q, &d, s->kind, r + b, nb);
            for (uint32_t j = 0; j < nb; ++j)
                r[b + j] = (float)q[j] * d;
        }
    }
}
