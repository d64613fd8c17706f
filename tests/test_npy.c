/* test_npy.c — the strict .npy reader: every header field validated (magic, version, header
 * length, padding, dict keys, dtype, order, shape, data size), then the element conversions
 * of the four types exact (float16 and bfloat16 widen exactly; float64 rounds to nearest). */
#include "npy.h"
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* A version-1.0 file: preamble, dict text padded with spaces to a multiple of `align` bytes
 * with the final newline, then nbytes of data (0x3f bytes). Returns the length. */
static size_t make(uint8_t *buf, const char *dict, size_t nbytes, unsigned major, size_t align)
{
    size_t pre = major == 1 ? 10 : 12, hl = strlen(dict) + 1;
    while ((pre + hl) % align)
        ++hl;
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (uint8_t)major;
    buf[7] = 0;
    buf[8] = (uint8_t)hl;
    buf[9] = (uint8_t)(hl >> 8);
    if (major > 1)
        buf[10] = buf[11] = 0;
    memset(buf + pre, ' ', hl);
    memcpy(buf + pre, dict, strlen(dict));
    buf[pre + hl - 1] = '\n';
    memset(buf + pre + hl, 0x3f, nbytes);
    return pre + hl + nbytes;
}

static int parse(hx_npy *a, const uint8_t *buf, size_t n, const char *want_in_msg)
{
    lm_err err = {0};
    int rc = hx_npy_parse(a, buf, n, "t.npy", &err);
    if (want_in_msg != NULL) {
        CU_ASSERT_EQUAL(rc, LM_E_INPUT);
        if (strstr(err.msg, want_in_msg) == NULL)
            fprintf(stderr, "message '%s' lacks '%s'\n", err.msg, want_in_msg);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, want_in_msg));
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "t.npy"));
    }
    return rc;
}

static void test_npy_valid_headers(void)
{
    uint8_t b[512];
    hx_npy a;
    size_t n = make(b, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }", 48, 1, 64);
    CU_ASSERT_EQUAL(parse(&a, b, n, NULL), LM_OK);
    CU_ASSERT_EQUAL(a.dtype, HX_NPY_F32);
    CU_ASSERT_EQUAL(a.ndim, 2u);
    CU_ASSERT_EQUAL(a.shape[0], 3u);
    CU_ASSERT_EQUAL(a.shape[1], 4u);
    CU_ASSERT_EQUAL(a.n_elems, 12u);
    /* key order free, double quotes, no trailing comma, 16-byte padding, 1-d, version 2 and 3 */
    n = make(b, "{\"shape\": (5,), \"fortran_order\": False, \"descr\": \"<f2\"}", 10, 1, 16);
    CU_ASSERT_EQUAL(parse(&a, b, n, NULL), LM_OK);
    CU_ASSERT_EQUAL(a.dtype, HX_NPY_F16);
    CU_ASSERT_EQUAL(a.ndim, 1u);
    n = make(b, "{'descr': '<u2', 'fortran_order': False, 'shape': (1, 2, 3, 1), }", 12, 2, 64);
    CU_ASSERT_EQUAL(parse(&a, b, n, NULL), LM_OK);
    CU_ASSERT_EQUAL(a.dtype, HX_NPY_BF16);
    CU_ASSERT_EQUAL(a.ndim, 4u);
    n = make(b, "{'descr': '<f8', 'fortran_order': False, 'shape': (0, 7), }", 0, 3, 64);
    CU_ASSERT_EQUAL(parse(&a, b, n, NULL), LM_OK);
    CU_ASSERT_EQUAL(a.n_elems, 0u);
}

static void test_npy_bad_headers(void)
{
    uint8_t b[512];
    hx_npy a;
    const char *ok = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
    size_t n = make(b, ok, 8, 1, 64);
    CU_ASSERT_EQUAL(parse(&a, b, 0, "bad magic"), LM_E_INPUT);
    CU_ASSERT_EQUAL(parse(&a, b, 9, "bad magic"), LM_E_INPUT);
    b[1] = 'n';
    CU_ASSERT_EQUAL(parse(&a, b, n, "bad magic"), LM_E_INPUT);
    n = make(b, ok, 8, 1, 64);
    b[6] = 4;
    CU_ASSERT_EQUAL(parse(&a, b, n, "version 4.0"), LM_E_INPUT);
    b[6] = 1;
    b[7] = 1;
    CU_ASSERT_EQUAL(parse(&a, b, n, "version 1.1"), LM_E_INPUT);
    b[7] = 0;
    b[9] = 0x7f; /* header length beyond the file */
    CU_ASSERT_EQUAL(parse(&a, b, n, "exceeds the file"), LM_E_INPUT);
    n = make(b, ok, 8, 1, 64);
    CU_ASSERT_EQUAL(parse(&a, b, n - 1, "data is 7 bytes"), LM_E_INPUT);   /* short data */
    n = make(b, ok, 9, 1, 64);
    CU_ASSERT_EQUAL(parse(&a, b, n, "data is 9 bytes"), LM_E_INPUT);       /* trailing byte */
    n = make(b, ok, 8, 1, 8);
    if ((10 + strlen(ok) + 1) % 16 != 0) /* 8-byte aligned only */
        CU_ASSERT_EQUAL(parse(&a, b, n, "multiple of 16"), LM_E_INPUT);
    n = make(b, ok, 8, 1, 64);
    b[n - 8 - 1] = ' '; /* the header's last byte (8 data bytes follow) */
    CU_ASSERT_EQUAL(parse(&a, b, n, "newline"), LM_E_INPUT);
    static const struct {
        const char *dict, *msg;
    } cases[] = {
        {"{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", "dtype '>f4'"},
        {"{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }", "dtype '<i4'"},
        {"{'descr': '|u1', 'fortran_order': False, 'shape': (2,), }", "dtype '|u1'"},
        {"{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", "Fortran order"},
        {"{'descr': '<f4', 'fortran_order': 0, 'shape': (2,), }", "fortran_order is not False"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2), }", "shape"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (), }", "shape"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (02,), }", "shape"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }", "shape"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,2), }", "shape"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776,), }", "shape"},
        {"{'descr': '<f4', 'fortran_order': False, }", "lacks 'shape'"},
        {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", "twice"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", "unknown key 'x'"},
        {"['descr', '<f4']", "not a dict"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} x", "after the dict"},
        {"{'descr': '<f4' 'fortran_order': False, 'shape': (2,)}", "expected ','"},
        {"{'descr': '<\\f4', 'fortran_order': False, 'shape': (2,)}", "descr is not a string"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        n = make(b, cases[i].dict, 8, 1, 64);
        CU_ASSERT_EQUAL(parse(&a, b, n, cases[i].msg), LM_E_INPUT);
    }
}

static void test_npy_conversions_exact(void)
{
    uint8_t b[512];
    hx_npy a;
    /* float16: 1.0, -2.0, smallest subnormal 2^-24, 65504, +Inf, 0.333 (0x3555) */
    static const uint16_t h[6] = {0x3c00, 0xc000, 0x0001, 0x7bff, 0x7c00, 0x3555};
    size_t n = make(b, "{'descr': '<f2', 'fortran_order': False, 'shape': (6,), }", 0, 1, 64);
    for (int i = 0; i < 6; ++i) {
        b[n + 2 * i] = (uint8_t)h[i];
        b[n + 2 * i + 1] = (uint8_t)(h[i] >> 8);
    }
    CU_ASSERT_EQUAL_FATAL(parse(&a, b, n + 12, NULL), LM_OK);
    CU_ASSERT_EQUAL(hx_npy_get_f32(&a, 0), 1.0f);
    CU_ASSERT_EQUAL(hx_npy_get_f32(&a, 1), -2.0f);
    CU_ASSERT_EQUAL(hx_npy_get_f32(&a, 2), ldexpf(1.0f, -24));
    CU_ASSERT_EQUAL(hx_npy_get_f32(&a, 3), 65504.0f);
    CU_ASSERT(isinf(hx_npy_get_f32(&a, 4)));
    CU_ASSERT_EQUAL(hx_npy_get_f32(&a, 5), 0x1.554p-2f); /* 0x3555 = 1.0101010101b x 2^-2 */
    /* bfloat16 bits: the upper half of a float32 */
    n = make(b, "{'descr': '<u2', 'fortran_order': False, 'shape': (2,), }", 0, 1, 64);
    b[n] = 0x80; b[n + 1] = 0x3f;     /* 0x3f80 = 1.0 */
    b[n + 2] = 0x49; b[n + 3] = 0xc0; /* 0xc049 = -3.140625 */
    CU_ASSERT_EQUAL_FATAL(parse(&a, b, n + 4, NULL), LM_OK);
    CU_ASSERT_EQUAL(hx_npy_get_f32(&a, 0), 1.0f);
    CU_ASSERT_EQUAL(hx_npy_get_f32(&a, 1), -3.140625f);
    /* float64: rounded to nearest float32 */
    n = make(b, "{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }", 0, 1, 64);
    double d = 0.1;
    memcpy(b + n, &d, 8); /* little-endian host (x86-64, aarch64) */
    CU_ASSERT_EQUAL_FATAL(parse(&a, b, n + 8, NULL), LM_OK);
    CU_ASSERT_EQUAL(hx_npy_get_f32(&a, 0), 0.1f);
}

/* Files NumPy itself wrote (np.save; also the fuzz corpus): accepted, values exact. */
static void test_npy_numpy_written_files(void)
{
    static const struct {
        const char *file;
        hx_npy_dtype t;
        uint32_t ndim;
        uint64_t n;
        float last;
    } f[] = {
        {"f32_2x3.npy", HX_NPY_F32, 2, 6, 5.0f},
        {"f16_4.npy", HX_NPY_F16, 1, 4, 65504.0f},
        {"f64_1x1x2.npy", HX_NPY_F64, 3, 2, -0.2f},
        {"u2_2x2.npy", HX_NPY_BF16, 2, 4, 0x1p-149f * 65536.0f},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; ++i) {
        char path[256];
        snprintf(path, sizeof path, "tests/fuzz/corpus_npy/%s", f[i].file);
        FILE *fp = fopen(path, "rb");
        CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
        uint8_t b[512];
        size_t n = fread(b, 1, sizeof b, fp);
        fclose(fp);
        hx_npy a;
        CU_ASSERT_EQUAL_FATAL(parse(&a, b, n, NULL), LM_OK);
        CU_ASSERT_EQUAL(a.dtype, f[i].t);
        CU_ASSERT_EQUAL(a.ndim, f[i].ndim);
        CU_ASSERT_EQUAL(a.n_elems, f[i].n);
        CU_ASSERT_EQUAL(hx_npy_get_f32(&a, a.n_elems - 1), f[i].last);
    }
}

void test_npy_register(void)
{
    CU_pSuite s = CU_add_suite("npy", NULL, NULL);
    CU_add_test(s, "test_npy_valid_headers", test_npy_valid_headers);
    CU_add_test(s, "test_npy_bad_headers", test_npy_bad_headers);
    CU_add_test(s, "test_npy_conversions_exact", test_npy_conversions_exact);
    CU_add_test(s, "test_npy_numpy_written_files", test_npy_numpy_written_files);
}
