/* test_ref_calib.c — the reference's cost calibrations (ref_calib.c): the operands' sequence
 * pinned to its first values, the fills exact and equal in float32 and float64, the clock
 * leaving out its first (cold) call, both calibrations (exact dot product, SR kernel)
 * giving a positive, finite figure through it, and the pass's token-independent cost. */
#include "kvd_ref.h"
#include "ref_calib.h"
#include "ref_dotx.h"
#include "ref_sr.h"
#include "kvd_util.h"
#include "plan/synth.h"
#include "test_util.h"

#include <math.h>
#include <time.h>

/* The first values from REF_CALIB_SEED (computed apart with Python integers mod 2^64), and
 * their top 24 bits less 2^23. */
static void test_ref_calib_sequence_and_fills(void)
{
    static const uint64_t want[3] = {0x2ceaee21bf46bc00ull, 0xaa80754d1a1a8d4full,
                                     0xb3c4904a6d278932ull};
    static const int32_t k[3] = {-5444882, 2785397, 3392656};
    uint64_t z = REF_CALIB_SEED;
    for (int i = 0; i < 3; ++i)
        CU_ASSERT_EQUAL(ref_calib_next(&z), want[i]);
    float f[3];
    double d[3];
    z = REF_CALIB_SEED;
    ref_calib_fill_f32(f, 3, 0x1p-23f, &z);
    CU_ASSERT_EQUAL(z, want[2]);
    z = REF_CALIB_SEED;
    ref_calib_fill_f64(d, 3, 0x1p-30, &z);
    /* exact: |k| < 2^23 and a power-of-two scale, so == with no tolerance */
    for (int i = 0; i < 3; ++i) {
        CU_ASSERT_EQUAL(f[i], (float)k[i] * 0x1p-23f);
        CU_ASSERT_EQUAL(d[i], ldexp((double)k[i], -30));
    }
    /* every value in [-2^23, 2^23) over a long run */
    enum { N = 100000 };
    static float v[N];
    z = REF_CALIB_SEED;
    ref_calib_fill_f32(v, N, 1.0f, &z);
    bool in = true;
    for (int i = 0; i < N; ++i)
        in = in && v[i] >= -0x1p23f && v[i] < 0x1p23f && v[i] == floorf(v[i]);
    CU_ASSERT(in);
}

typedef struct rounds {
    int calls, fail_at; /* fail_at: the call that returns false (-1: none) */
    long cold_ms;       /* the first call's sleep */
    double fastest_s;   /* fast_and_slow: the shortest of its timed calls, seen from inside */
} rounds;

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* The first call sleeps cold_ms (a cold round), every later one 1 ms. */
static bool cold_then_warm(void *p)
{
    rounds *r = p;
    sleep_ms(r->calls == 0 ? r->cold_ms : 1);
    return r->calls++ != r->fail_at;
}

/* Warm calls of 5 ms and 1 ms in turn (a round that another process interrupts); each call
 * after the first (the ones ref_calib_time times) measures itself into fastest_s. */
static bool fast_and_slow(void *p)
{
    rounds *r = p;
    const double t0 = lm_now_s();
    sleep_ms(r->calls == 0 ? r->cold_ms : (r->calls % 2 ? 5 : 1));
    const double d = lm_now_s() - t0;
    if (r->calls > 0 && (r->fastest_s == 0.0 || d < r->fastest_s))
        r->fastest_s = d;
    return r->calls++ != r->fail_at;
}

/* The figure is the fastest call's: each timed interval holds a whole call, so s is at least
 * the shortest call seen from inside, and s exceeds it only by the clock reads and the loop
 * around that call (microseconds; 1 ms of room). The calls' mean, about 3 ms on an idle
 * machine, is out of that range; on a loaded one, where every sleep overruns alike, the bounds
 * still hold, since they follow the calls as they ran. */
static void test_ref_calib_time_fastest_call(void)
{
    rounds r = {0, -1, 0, 0.0};
    const double s = ref_calib_time(fast_and_slow, &r, 1.0);
    printf(" %.4f s per call over %d calls (fastest seen inside %.4f s);", s, r.calls,
           r.fastest_s);
    CU_ASSERT(r.calls >= 3);
    CU_ASSERT(s >= r.fastest_s && s < r.fastest_s + 1e-3);
    CU_ASSERT(r.fastest_s >= 1e-3); /* nanosleep's guarantee */
}

/* One multiply-add a call, so the figure s times the calls timed is the time they took. Were
 * the 500 ms first call timed, s * calls >= 0.5 s; left out, s * calls <= 2 * the warm calls'
 * time (calls >= 2), about 20 ms, and under 0.5 s unless a 1 ms sleep stalls past 230 ms.
 * Each warm call sleeps at least 1 ms (nanosleep's guarantee), so s >= 1e-3. */
static void test_ref_calib_time_skips_cold_round(void)
{
    rounds r = {0, -1, 500, 0.0};
    const double s = ref_calib_time(cold_then_warm, &r, 1.0);
    printf(" %.4f s per call over %d calls;", s, r.calls);
    CU_ASSERT(s >= 1e-3 && s * r.calls < 0.5);
    CU_ASSERT(r.calls >= 2);
    r = (rounds){0, 0, 0, 0.0};
    CU_ASSERT_EQUAL(ref_calib_time(cold_then_warm, &r, 1.0), 0.0);
    CU_ASSERT_EQUAL(r.calls, 1);
    r = (rounds){0, 2, 0, 0.0};
    CU_ASSERT_EQUAL(ref_calib_time(cold_then_warm, &r, 1.0), 0.0);
    CU_ASSERT_EQUAL(r.calls, 3);
    r = (rounds){0, -1, 0, 0.0};
    CU_ASSERT_EQUAL(ref_calib_time(cold_then_warm, &r, 0.0), 0.0);
}

/* Both calibrations run their kernel through the clock: a positive, finite figure below
 * 1 ms per multiply-add (a 127-bit exact product costs well under a microsecond). */
static void test_ref_calib_both_calibrations(void)
{
    uint64_t hist[REF_DX_SPAN_BINS] = {0};
    hist[24] = 1;
    const double dx = ref_dx_calibrate(127, 256, hist), sr = ref_sr_calibrate_s_per_mac(256);
    printf(" exact %.3g s/mac, SR %.3g s/mac;", dx, sr);
    CU_ASSERT(isfinite(dx) && dx > 0.0 && dx < 1e-3);
    CU_ASSERT(isfinite(sr) && sr > 0.0 && sr < 1e-3);
}

/* The token-independent part of a pass (the split of every weight row, timed on layer 0's
 * wq): positive and finite for a model read from a file, below 1 ms per weight element (a few
 * ns each); a model that lists no weights has nothing to split: 0. */
static void test_ref_calib_fixed_cost(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/calib-tiny.gguf", tu_tmpdir());
    lm_err err = {0};
    CU_ASSERT_FATAL(hx_synth_write(path, "tiny", 3, LM_TYPE_F32, &err) == LM_OK);
    ref_model *m = NULL;
    CU_ASSERT_FATAL(ref_model_open(&m, path, &err) == LM_OK);
    double elems = 0.0;
    for (uint32_t i = 0; i < m->n_weights; ++i)
        elems += (double)m->weights[i].n_elem;
    const double fixed = ref_fixed_cost_s(m, 2);
    printf(" fixed %.3g s;", fixed);
    CU_ASSERT(isfinite(fixed) && fixed > 0.0 && fixed < 1e-3 * elems);
    ref_weight *keep = m->weights;
    m->weights = NULL;
    CU_ASSERT_EQUAL(ref_fixed_cost_s(m, 2), 0.0);
    m->weights = keep;
    ref_model_free(m);
    remove(path);
}

/* Rows of every span 1..127 span exactly that (the calibration's rows stand for the model's
 * rows by their spans). */
static void test_ref_calib_fill_span(void)
{
    enum { N = 300 };
    float w[N];
    uint64_t z = REF_CALIB_SEED;
    int bad = 0;
    for (uint32_t sp = 1; sp < REF_DX_SPAN_BINS; ++sp) {
        ref_calib_fill_span(w, N, sp, &z);
        bad += ref_dx_row_span(w, N) != sp;
        ref_calib_fill_span(w, 2, sp, &z);
        bad += ref_dx_row_span(w, 2) != sp;
    }
    CU_ASSERT_EQUAL(bad, 0);
}

/* The calibration runs at the widths ref_dx_widths picks for the rows' histogram and its
 * vectors' spans, not at a fixed 20 bits: rows of 13 bits against order-1 activations of
 * 127 bits (spans ~130..150) take a >= 27 (ref_dx_pick_bits' test: a = 28 at span 140), with
 * J = 1 (b >= 13); rows of 45 bits as picked too; the figure is positive and finite. */
static void test_ref_calib_dx_widths(void)
{
    static const uint32_t spans[2] = {13, 45};
    for (int k = 0; k < 2; ++k) {
        uint64_t hist[REF_DX_SPAN_BINS] = {0};
        hist[spans[k]] = 1000;
        const double s = ref_dx_calibrate(127, 256, hist);
        CU_ASSERT(isfinite(s) && s > 0.0 && s < 1e-3);
        uint32_t a, b;
        ref_dx_widths(hist, ref_dx_test_calib_vspan, 4, 127, 256, &a, &b);
        printf(" rows of %u bits: a %u b %u;", spans[k], ref_dx_test_calib_bits[0],
               ref_dx_test_calib_bits[1]);
        CU_ASSERT_EQUAL(ref_dx_test_calib_bits[0], a);
        CU_ASSERT_EQUAL(ref_dx_test_calib_bits[1], b);
        CU_ASSERT(ref_dx_test_calib_vspan[0] >= 127);
        if (k == 0)
            CU_ASSERT(a >= 27 && b >= 13);
    }
}

void test_ref_calib_register(void)
{
    CU_pSuite s = CU_add_suite("ref_calib", NULL, NULL);
    CU_add_test(s, "test_ref_calib_sequence_and_fills", test_ref_calib_sequence_and_fills);
    CU_add_test(s, "test_ref_calib_time_skips_cold_round", test_ref_calib_time_skips_cold_round);
    CU_add_test(s, "test_ref_calib_time_fastest_call", test_ref_calib_time_fastest_call);
    CU_add_test(s, "test_ref_calib_both_calibrations", test_ref_calib_both_calibrations);
    CU_add_test(s, "test_ref_calib_fill_span", test_ref_calib_fill_span);
    CU_add_test(s, "test_ref_calib_fixed_cost", test_ref_calib_fixed_cost);
    CU_add_test(s, "test_ref_calib_dx_widths", test_ref_calib_dx_widths);
}
