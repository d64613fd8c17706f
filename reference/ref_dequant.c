/* ref_dequant.c — the reference's own dequantization of every tensor type kvdrift loads,
 * element by element straight from the bit layout, independent of the engine's dequant.c.
 *
 * Each element e of a block is located by index arithmetic (which byte, which bits) and its
 * value is evaluated in double: f16 and bf16 fields are decoded from their sign, exponent and
 * mantissa fields as (integer mantissa) x 2^e, the power of two built from its bits (pow2i:
 * every e used is a normal double exponent, so the product is exact); every operation ggml's definition performs in float32 is done
 * in double on float32 operands and then rounded to float32 (float_of). A double product or
 * sum of two float32 values rounded once more to float32 equals the float32 operation (double
 * has 53 >= 2 * 24 + 2 bits, so the double rounding is innocuous), hence the values are those
 * the format defines, bit for bit.
 *
 * Layouts (block elements / bytes; offsets in bytes; e = element index within the block):
 *   Q4_0 32/18   d@0;            q = nibble (e / 16) of byte 2 + e % 16;       (q - 8) d
 *   Q4_1 32/20   d@0 m@2;        q = nibble (e / 16) of byte 4 + e % 16;       q d + m
 *   Q5_0 32/22   d@0 qh@2 (u32); q = that nibble of byte 6 + e % 16, bit 4 = qh bit e; (q - 16) d
 *   Q5_1 32/24   d@0 m@2 qh@4;   q as Q5_0 from byte 8 + e % 16;              q d + m
 *   Q8_0 32/34   d@0;            q = int8 at 2 + e;                            q d
 *   Q2_K 256/84  scales@0 qs@16 d@80 dmin@82; s = scales[e / 16];
 *                q = 2 bits at 2 ((e % 128) / 32) of qs[32 (e / 128) + e % 32];
 *                (d (s & 15)) q - dmin (s >> 4)
 *   Q3_K 256/110 hmask@0 qs@32 scales@96 d@108; q as Q2_K from qs@32, minus 4 unless bit e / 32
 *                of hmask[e % 32] is set; six-bit scale e / 16 (offset 32): (d (sc - 32)) q
 *   Q4_K 256/144 d@0 dmin@2 scales@4 qs@16; sub-block b = e / 32 with six-bit scale and min;
 *                q = nibble b % 2 of qs[32 (e / 64) + e % 32]; (d sc) q - dmin m
 *   Q5_K 256/176 as Q4_K with qh@16 and qs@48; bit 4 of q = bit b of qh[e % 32]
 *   Q6_K 256/210 ql@0 qh@128 scales@192 (int8) d@208; n = e / 128, k = (e % 128) / 32,
 *                l = e % 32: q = nibble k / 2 of ql[64 n + 32 (k % 2) + l] | two bits 2k of
 *                qh[32 n + l] << 4; scale scales[8 n + 2 k + l / 16]; (d sc) (q - 32)
 *   Q8_K 256/292 d@0 (f32) qs@4 (int8); d q
 *   IQ4_NL 32/18 d@0; code = nibble as Q4_0; d kvalues[code]
 *   IQ4_XS 256/136 d@0 scales_h@2 (u16) scales_l@4 qs@8; b = e / 32: ls = nibble b % 2 of
 *                scales_l[b / 2] | two bits 2b of scales_h << 4; code = nibble (e % 32) / 16
 *                of qs[16 b + e % 16]; (d (ls - 32)) kvalues[code]
 *   MXFP4 32/17  E8M0 byte x@0; code = nibble as Q4_0 from byte 1 + e % 16; the e2m1 value
 *                doubled (0, 1, 2, 3, 4, 6, 8, 12, negated for codes 8..15) times 2^(x - 128)
 *                (the OCP MX scale 2^(x - 127) halved to match the doubled values; x = 255,
 *                NaN in the MX spec, is taken as the formula gives, as ggml does) */
#include "kvd_ref.h"

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

static float float_of(double x)
{
    return (float)x;
}

static unsigned u8(const uint8_t *b, unsigned i)
{
    return b[i];
}

static unsigned u16le(const uint8_t *b, unsigned i)
{
    return b[i] + 256u * b[i + 1];
}

/* 2^e for -1022 <= e <= 1023, from its bits: a multiplication instead of a library call, for
 * a check that decodes every element of the file. */
static double pow2i(int e)
{
    const uint64_t b = (uint64_t)(e + 1023) << 52;
    double d;
    memcpy(&d, &b, sizeof d);
    return d;
}

/* f16: 1 sign bit, 5 exponent bits (bias 15), 10 mantissa bits. */
static double half_value(unsigned h)
{
    unsigned ex = (h >> 10) & 31u, man = h & 1023u;
    double s = (h & 0x8000u) ? -1.0 : 1.0;
    if (ex == 31)
        return man ? (double)NAN : s * (double)INFINITY;
    if (ex == 0)
        return s * ((double)man * pow2i(-24));
    return s * ((double)(man + 1024u) * pow2i((int)ex - 25));
}

/* Every f16 value decoded once by half_value (the blocks of a file repeat few scales). */
static double half_tab[65536];
static pthread_once_t half_once = PTHREAD_ONCE_INIT;

static void half_tab_init(void)
{
    for (unsigned h = 0; h < 65536; ++h)
        half_tab[h] = half_value(h);
}

static double half_at(const uint8_t *b, unsigned i)
{
    return half_tab[u16le(b, i)];
}

/* bf16: 1 sign bit, 8 exponent bits (bias 127), 7 mantissa bits. */
static double bhalf_at(const uint8_t *b, unsigned i)
{
    unsigned h = u16le(b, i);
    unsigned ex = (h >> 7) & 255u, man = h & 127u;
    double s = (h & 0x8000u) ? -1.0 : 1.0;
    if (ex == 255)
        return man ? (double)NAN : s * (double)INFINITY;
    if (ex == 0)
        return s * ((double)man * pow2i(-133));
    return s * ((double)(man + 128u) * pow2i((int)ex - 134));
}

static int nibble(const uint8_t *b, unsigned byte, unsigned which)
{
    return (int)((u8(b, byte) >> (4 * which)) & 15u);
}

static const int iq4_codebook[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                     1, 13, 25, 38, 53, 69, 89, 113};

static float e_f32(const uint8_t *b, unsigned e)
{
    float f;
    memcpy(&f, b + 4 * e, 4);
    return f;
}

static float e_f16(const uint8_t *b, unsigned e)
{
    return float_of(half_at(b, 2 * e));
}

static float e_bf16(const uint8_t *b, unsigned e)
{
    return float_of(bhalf_at(b, 2 * e));
}

static float e_q4_0(const uint8_t *b, unsigned e)
{
    return float_of((nibble(b, 2 + e % 16, e / 16) - 8) * (double)float_of(half_at(b, 0)));
}

static float e_q4_1(const uint8_t *b, unsigned e)
{
    double d = float_of(half_at(b, 0)), m = float_of(half_at(b, 2));
    return float_of((double)float_of(nibble(b, 4 + e % 16, e / 16) * d) + m);
}

static int q5_code(const uint8_t *b, unsigned qh_at, unsigned qs_at, unsigned e)
{
    unsigned bit = (u8(b, qh_at + e / 8) >> (e % 8)) & 1u;
    return nibble(b, qs_at + e % 16, e / 16) + (int)(16 * bit);
}

static float e_q5_0(const uint8_t *b, unsigned e)
{
    return float_of((q5_code(b, 2, 6, e) - 16) * (double)float_of(half_at(b, 0)));
}

static float e_q5_1(const uint8_t *b, unsigned e)
{
    double d = float_of(half_at(b, 0)), m = float_of(half_at(b, 2));
    return float_of((double)float_of(q5_code(b, 4, 8, e) * d) + m);
}

static float e_q8_0(const uint8_t *b, unsigned e)
{
    return float_of((int8_t)u8(b, 2 + e) * (double)float_of(half_at(b, 0)));
}

/* The 2-bit field of element e in a Q2_K / Q3_K quant array starting at byte qs. */
static int k_2bit(const uint8_t *b, unsigned qs, unsigned e)
{
    return (int)((u8(b, qs + 32 * (e / 128) + e % 32) >> (2 * ((e % 128) / 32))) & 3u);
}

static float e_q2_k(const uint8_t *b, unsigned e)
{
    unsigned s = u8(b, e / 16);
    double dl = float_of(half_at(b, 80) * (s & 15u));
    double ml = float_of(half_at(b, 82) * (s >> 4));
    return float_of((double)float_of(dl * k_2bit(b, 16, e)) - ml);
}

/* Six-bit scale i (0..15) of Q3_K: four low bits in the nibbles of bytes 96..103 (scales 0..7
 * low nibbles, 8..15 high nibbles), two high bits in bytes 104..107. */
static int q3_scale(const uint8_t *b, unsigned i)
{
    int lo = nibble(b, 96 + i % 8, i / 8);
    int hi = (int)((u8(b, 104 + i % 4) >> (2 * (i / 4))) & 3u);
    return lo + 16 * hi;
}

static float e_q3_k(const uint8_t *b, unsigned e)
{
    double dl = float_of(half_at(b, 108) * (q3_scale(b, e / 16) - 32));
    int hbit = (int)((u8(b, e % 32) >> (e / 32)) & 1u);
    return float_of(dl * (k_2bit(b, 32, e) - (hbit ? 0 : 4)));
}

/* Scale (want_min 0) or min (1) j (0..7) of a Q4_K / Q5_K block: scale j < 4 is the low six
 * bits of byte 4 + j, min j < 4 of byte 8 + j; for j >= 4 the low four bits are a nibble of
 * byte 12 + j - 4 (low for the scale, high for the min) and the top two bits are the top bits
 * of the byte that holds scale (min) j - 4. */
static int k4_field(const uint8_t *b, unsigned j, unsigned want_min)
{
    const unsigned s = 4; /* scales offset */
    if (j < 4)
        return (int)(u8(b, s + 4 * want_min + j) & 63u);
    int lo = nibble(b, s + 8 + (j - 4), want_min);
    int hi = (int)(u8(b, s + 4 * want_min + (j - 4)) >> 6);
    return lo + 16 * hi;
}

static float k4_value(const uint8_t *b, unsigned e, int q)
{
    unsigned sb = e / 32;
    double d1 = float_of(half_at(b, 0) * k4_field(b, sb, 0));
    double m1 = float_of(half_at(b, 2) * k4_field(b, sb, 1));
    return float_of((double)float_of(d1 * q) - m1);
}

static float e_q4_k(const uint8_t *b, unsigned e)
{
    return k4_value(b, e, nibble(b, 16 + 32 * (e / 64) + e % 32, (e / 32) % 2));
}

static float e_q5_k(const uint8_t *b, unsigned e)
{
    int q = nibble(b, 48 + 32 * (e / 64) + e % 32, (e / 32) % 2);
    q += (int)(16 * ((u8(b, 16 + e % 32) >> (e / 32)) & 1u));
    return k4_value(b, e, q);
}

static float e_q6_k(const uint8_t *b, unsigned e)
{
    unsigned n = e / 128, k = (e % 128) / 32, l = e % 32;
    int q = nibble(b, 64 * n + 32 * (k % 2) + l, k / 2);
    q += (int)(16 * ((u8(b, 128 + 32 * n + l) >> (2 * k)) & 3u));
    int sc = (int8_t)u8(b, 192 + 8 * n + 2 * k + l / 16);
    double dsc = float_of(half_at(b, 208) * sc);
    return float_of(dsc * (q - 32));
}

static float e_q8_k(const uint8_t *b, unsigned e)
{
    return float_of((double)e_f32(b, 0) * (int8_t)u8(b, 4 + e));
}

static float e_iq4_nl(const uint8_t *b, unsigned e)
{
    return float_of((double)float_of(half_at(b, 0)) * iq4_codebook[nibble(b, 2 + e % 16, e / 16)]);
}

static float e_iq4_xs(const uint8_t *b, unsigned e)
{
    unsigned blk = e / 32;
    int ls = nibble(b, 4 + blk / 2, blk % 2) + (int)(16 * ((u16le(b, 2) >> (2 * blk)) & 3u));
    double dl = float_of(half_at(b, 0) * (ls - 32));
    int code = nibble(b, 8 + 16 * blk + e % 16, (e % 32) / 16);
    return float_of(dl * iq4_codebook[code]);
}

static float e_mxfp4(const uint8_t *b, unsigned e)
{
    static const int e2m1x2[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
    return float_of(e2m1x2[nibble(b, 1 + e % 16, e / 16)] * pow2i((int)u8(b, 0) - 128));
}

typedef struct ref_qtype {
    uint32_t ggml_type; /* ggml's type number */
    const char *name;
    unsigned elems, bytes;
    float (*elem)(const uint8_t *block, unsigned e);
} ref_qtype;

static const ref_qtype qtypes[] = {
    {0, "F32", 1, 4, e_f32},          {1, "F16", 1, 2, e_f16},
    {2, "Q4_0", 32, 18, e_q4_0},      {3, "Q4_1", 32, 20, e_q4_1},
    {6, "Q5_0", 32, 22, e_q5_0},      {7, "Q5_1", 32, 24, e_q5_1},
    {8, "Q8_0", 32, 34, e_q8_0},      {10, "Q2_K", 256, 84, e_q2_k},
    {11, "Q3_K", 256, 110, e_q3_k},   {12, "Q4_K", 256, 144, e_q4_k},
    {13, "Q5_K", 256, 176, e_q5_k},   {14, "Q6_K", 256, 210, e_q6_k},
    {15, "Q8_K", 256, 292, e_q8_k},   {20, "IQ4_NL", 32, 18, e_iq4_nl},
    {23, "IQ4_XS", 256, 136, e_iq4_xs}, {30, "BF16", 1, 2, e_bf16},
    {39, "MXFP4", 32, 17, e_mxfp4},
};

static const ref_qtype *qtype_of(uint32_t type)
{
    for (size_t i = 0; i < sizeof qtypes / sizeof qtypes[0]; ++i)
        if (qtypes[i].ggml_type == type)
            return &qtypes[i];
    return NULL;
}

int ref_dequant(float *out, uint32_t type, const void *data, uint64_t nbytes, uint64_t n_elem,
                lm_err *err)
{
    return ref_dequant_range(out, type, data, nbytes, n_elem, 0, n_elem, err);
}

int ref_dequant_range(float *out, uint32_t type, const void *data, uint64_t nbytes,
                      uint64_t n_elem, uint64_t first, uint64_t count, lm_err *err)
{
    const ref_qtype *qt = qtype_of(type);
    if (qt == NULL)
        return LM_FAIL(err, LM_E_UNSUPPORTED, "reference: tensor type %" PRIu32 " is not "
                       "implemented", type);
    if (n_elem % qt->elems != 0 || n_elem / qt->elems * qt->bytes != nbytes)
        return LM_FAIL(err, LM_E_INPUT, "reference: %" PRIu64 " %s elements do not fill %" PRIu64
                       " bytes", n_elem, qt->name, nbytes);
    if (first > n_elem || count > n_elem - first)
        return LM_FAIL(err, LM_E_INPUT, "reference: elements [%" PRIu64 ", %" PRIu64 ") of a "
                       "%" PRIu64 "-element tensor", first, first + count, n_elem);
    pthread_once(&half_once, half_tab_init);
    const uint8_t *p = data;
    for (uint64_t i = first; i < first + count; ++i)
        out[i - first] = qt->elem(p + i / qt->elems * qt->bytes, (unsigned)(i % qt->elems));
    return LM_OK;
}
