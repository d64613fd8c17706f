/* test_gguf.c — the GGUF reader on hand-made broken files, and the writer round trip. */
#include "fs.h"
#include "kvd_dequant.h"
#include "kvd_gguf.h"
#include "sha256.h"
#include "test_util.h"

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <sys/resource.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A tiny byte builder for hand-made GGUF images (little-endian, as the format is). */
typedef struct bb {
    uint8_t b[8192];
    size_t n;
} bb;

static void put(bb *x, const void *p, size_t n)
{
    CU_ASSERT_FATAL(x->n + n <= sizeof x->b);
    memcpy(x->b + x->n, p, n);
    x->n += n;
}

static void u32(bb *x, uint32_t v)
{
    uint8_t t[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    put(x, t, 4);
}

static void u64(bb *x, uint64_t v)
{
    u32(x, (uint32_t)v);
    u32(x, (uint32_t)(v >> 32));
}

static void str(bb *x, const char *s)
{
    u64(x, strlen(s));
    put(x, s, strlen(s));
}

static void header(bb *x, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
    x->n = 0;
    put(x, "GGUF", 4);
    u32(x, version);
    u64(x, n_tensors);
    u64(x, n_kv);
}

static void kv_u32(bb *x, const char *key, uint32_t v)
{
    str(x, key);
    u32(x, LM_GGUF_U32);
    u32(x, v);
}

static void tinfo(bb *x, const char *name, uint64_t ne0, uint32_t type, uint64_t offset)
{
    str(x, name);
    u32(x, 1);
    u64(x, ne0);
    u32(x, type);
    u64(x, offset);
}

static void pad(bb *x, size_t align)
{
    while (x->n % align)
        put(x, "", 1);
}

static void zeros(bb *x, size_t n)
{
    while (n--)
        put(x, "", 1);
}

/* Opens x as a file and expects status `code` with a message naming the file and `needle`. */
static void expect_fail(const bb *x, const char *file, int code, const char *needle)
{
    const char *path = tu_write_file(file, x->b, x->n);
    lm_err err = {0};
    lm_gguf *g = (lm_gguf *)&err; /* must be reset to NULL on failure */
    int rc = lm_gguf_open(&g, path, &err);
    CU_ASSERT_EQUAL(rc, code);
    CU_ASSERT_EQUAL(err.code, code);
    CU_ASSERT_PTR_NULL(g);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, path));
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, needle));
    CU_ASSERT_PTR_NULL(strchr(err.msg, '\n'));
    if (rc != code || strstr(err.msg, needle) == NULL)
        fprintf(stderr, "\n  %s: got %d '%s', wanted %d with '%s'\n", file, rc, err.msg, code,
                needle);
    if (rc == LM_OK)
        lm_gguf_close(g);
}

static void test_gguf_empty_magic_version(void)
{
    bb x = {0};
    expect_fail(&x, "empty.gguf", LM_E_INPUT, "empty file");
    put(&x, "GGU", 3);
    expect_fail(&x, "short.gguf", LM_E_INPUT, "bad magic");
    x.n = 0;
    put(&x, "GGML", 4);
    u32(&x, 3);
    expect_fail(&x, "magic.gguf", LM_E_INPUT, "bad magic");
    x.n = 0;
    put(&x, "GGUF", 4);
    put(&x, "\x03\x00", 2);
    expect_fail(&x, "trunc_version.gguf", LM_E_INPUT, "truncated");
    header(&x, 3, 0, 0);
    x.n -= 3; /* n_kv cut short */
    expect_fail(&x, "trunc_header.gguf", LM_E_INPUT, "truncated");
    header(&x, 1, 0, 0);
    expect_fail(&x, "v1.gguf", LM_E_UNSUPPORTED, "version 1");
    header(&x, 4, 0, 0);
    expect_fail(&x, "v4.gguf", LM_E_UNSUPPORTED, "version 4");
    header(&x, 0x03000000u, 0, 0);
    expect_fail(&x, "bigendian.gguf", LM_E_UNSUPPORTED, "big-endian");
    /* The smallest valid files: v2 and v3 with nothing in them. */
    for (uint32_t v = 2; v <= 3; ++v) {
        header(&x, v, 0, 0);
        const char *path = tu_write_file("minimal.gguf", x.b, x.n);
        lm_err err = {0};
        lm_gguf *g = NULL;
        CU_ASSERT_EQUAL_FATAL(lm_gguf_open(&g, path, &err), LM_OK);
        CU_ASSERT_EQUAL(lm_gguf_version(g), v);
        CU_ASSERT_EQUAL(lm_gguf_n_kv(g), 0);
        CU_ASSERT_EQUAL(lm_gguf_n_tensors(g), 0);
        lm_gguf_close(g);
    }
    lm_err err = {0};
    lm_gguf *g = NULL;
    char missing[1024];
    snprintf(missing, sizeof missing, "%s/does-not-exist.gguf", tu_tmpdir());
    CU_ASSERT_EQUAL(lm_gguf_open(&g, missing, &err), LM_E_IO);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, missing));
    lm_err_clear(&err);
    CU_ASSERT_EQUAL(lm_gguf_open(&g, tu_tmpdir(), &err), LM_E_INPUT); /* a folder */
}

static void test_gguf_huge_counts(void)
{
    bb x = {0};
    header(&x, 3, UINT64_C(1) << 62, 0);
    expect_fail(&x, "huge_tensors.gguf", LM_E_INPUT, "tensor count");
    header(&x, 3, 0, UINT64_MAX);
    expect_fail(&x, "huge_kv.gguf", LM_E_INPUT, "metadata count");
    /* A huge array of u32 and a huge array of strings: refused before any allocation. */
    header(&x, 3, 0, 1);
    str(&x, "a");
    u32(&x, LM_GGUF_ARR);
    u32(&x, LM_GGUF_U32);
    u64(&x, UINT64_C(1) << 62);
    expect_fail(&x, "huge_arr.gguf", LM_E_INPUT, "past the end");
    header(&x, 3, 0, 1);
    str(&x, "a");
    u32(&x, LM_GGUF_ARR);
    u32(&x, LM_GGUF_STR);
    u64(&x, UINT64_MAX);
    expect_fail(&x, "huge_strarr.gguf", LM_E_INPUT, "cannot fit");
    /* Element count that overflows when multiplied by the element size. */
    header(&x, 3, 0, 1);
    str(&x, "a");
    u32(&x, LM_GGUF_ARR);
    u32(&x, LM_GGUF_U64);
    u64(&x, UINT64_C(1) << 61);
    expect_fail(&x, "overflow_arr.gguf", LM_E_INPUT, "past the end");
}

static void test_gguf_strings_past_eof(void)
{
    bb x = {0};
    header(&x, 3, 0, 1);
    u64(&x, 1000); /* key length */
    put(&x, "abc", 3);
    zeros(&x, 20); /* enough bytes for the count bound, not for the key */
    expect_fail(&x, "key_eof.gguf", LM_E_INPUT, "truncated");
    header(&x, 3, 0, 1);
    str(&x, "general.name");
    u32(&x, LM_GGUF_STR);
    u64(&x, UINT64_MAX - 2);
    put(&x, "abc", 3);
    expect_fail(&x, "str_eof.gguf", LM_E_INPUT, "past the end");
    header(&x, 3, 0, 1);
    str(&x, "tokens");
    u32(&x, LM_GGUF_ARR);
    u32(&x, LM_GGUF_STR);
    u64(&x, 2);
    str(&x, "ok");
    u64(&x, 50);
    put(&x, "short", 5);
    expect_fail(&x, "arrstr_eof.gguf", LM_E_INPUT, "past the end");
    header(&x, 3, 1, 0);
    u64(&x, 5000);
    put(&x, "w", 1);
    zeros(&x, 40);
    expect_fail(&x, "tname_eof.gguf", LM_E_INPUT, "truncated");
}

static void test_gguf_bad_metadata(void)
{
    bb x = {0};
    header(&x, 3, 0, 1);
    str(&x, "k");
    u32(&x, 13);
    u32(&x, 0);
    expect_fail(&x, "vtype.gguf", LM_E_INPUT, "unknown value type 13");
    header(&x, 3, 0, 2);
    kv_u32(&x, "same", 1);
    kv_u32(&x, "same", 2);
    expect_fail(&x, "dupkey.gguf", LM_E_INPUT, "duplicate metadata key 'same'");
    header(&x, 3, 0, 1);
    str(&x, "nest");
    u32(&x, LM_GGUF_ARR);
    u32(&x, LM_GGUF_ARR);
    u64(&x, 0);
    expect_fail(&x, "nested.gguf", LM_E_UNSUPPORTED, "nested");
    header(&x, 3, 0, 1);
    str(&x, "b");
    u32(&x, LM_GGUF_BOOL);
    put(&x, "\x02", 1);
    expect_fail(&x, "bool.gguf", LM_E_INPUT, "neither 0 nor 1");
}

static void test_gguf_bad_alignment(void)
{
    bb x = {0};
    const uint32_t bad[] = {0, 3, 48, 0x80000001u};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
        header(&x, 3, 0, 1);
        kv_u32(&x, "general.alignment", bad[i]);
        expect_fail(&x, "align.gguf", LM_E_INPUT, "power of two");
    }
    header(&x, 3, 0, 1);
    str(&x, "general.alignment");
    u32(&x, LM_GGUF_STR);
    str(&x, "32");
    expect_fail(&x, "align_type.gguf", LM_E_INPUT, "expected an integer");
    /* Alignment 64 honoured: a tensor at offset 32 is misaligned, at 64 it is fine. */
    header(&x, 3, 2, 1);
    kv_u32(&x, "general.alignment", 64);
    tinfo(&x, "a", 8, LM_TYPE_F32, 0);
    tinfo(&x, "b", 8, LM_TYPE_F32, 32);
    pad(&x, 64);
    zeros(&x, 128);
    expect_fail(&x, "misaligned.gguf", LM_E_INPUT, "not a multiple of the alignment 64");
    header(&x, 3, 2, 1);
    kv_u32(&x, "general.alignment", 64);
    tinfo(&x, "a", 8, LM_TYPE_F32, 0);
    tinfo(&x, "b", 8, LM_TYPE_F32, 64);
    pad(&x, 64);
    size_t data = x.n;
    zeros(&x, 96);
    const char *path = tu_write_file("aligned64.gguf", x.b, x.n);
    lm_err err = {0};
    lm_gguf *g = NULL;
    CU_ASSERT_EQUAL_FATAL(lm_gguf_open(&g, path, &err), LM_OK);
    const lm_gguf_tensor *b = lm_gguf_tensor_find(g, "b");
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    CU_ASSERT_EQUAL((const uint8_t *)b->data - (const uint8_t *)lm_gguf_bytes(g), data + 64);
    CU_ASSERT_EQUAL(b->nbytes, 32);
    CU_ASSERT_PTR_NULL(lm_gguf_tensor_find(g, "c"));
    lm_gguf_close(g);
}

static void test_gguf_bad_tensors(void)
{
    bb x = {0};
    header(&x, 3, 1, 0);
    tinfo(&x, "w", 32, 99, 0);
    pad(&x, 32);
    zeros(&x, 64);
    expect_fail(&x, "type99.gguf", LM_E_INPUT, "unknown type 99");
    /* A ggml type kvdrift does not dequantize (IQ2_XXS, 256 elements in 66 bytes): the file
     * opens (its extent is known) and only the dequantization refuses it. */
    header(&x, 3, 1, 0);
    tinfo(&x, "w", 256, LM_TYPE_IQ2_XXS, 0);
    pad(&x, 32);
    zeros(&x, 66);
    {
        const char *path = tu_write_file("iq2xxs.gguf", x.b, x.n);
        lm_err err = {0};
        lm_gguf *g = NULL;
        CU_ASSERT_EQUAL_FATAL(lm_gguf_open(&g, path, &err), LM_OK);
        float out[256];
        CU_ASSERT_EQUAL(lm_gguf_tensor_to_f32(out, lm_gguf_tensor_at(g, 0), &err),
                        LM_E_UNSUPPORTED);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "IQ2_XXS"));
        lm_gguf_close(g);
    }
    header(&x, 3, 2, 0);
    tinfo(&x, "a", 16, LM_TYPE_F32, 0);  /* bytes [0, 64) */
    tinfo(&x, "b", 16, LM_TYPE_F32, 32); /* bytes [32, 96): overlaps a */
    pad(&x, 32);
    zeros(&x, 96);
    expect_fail(&x, "overlap.gguf", LM_E_INPUT, "overlap");
    header(&x, 3, 1, 0);
    tinfo(&x, "a", 16, LM_TYPE_F32, 0);
    pad(&x, 32);
    zeros(&x, 63); /* one byte short */
    expect_fail(&x, "extent.gguf", LM_E_INPUT, "extends past the end");
    header(&x, 3, 1, 0);
    tinfo(&x, "a", 16, LM_TYPE_F32, UINT64_MAX - 31); /* offset + size overflows */
    pad(&x, 32);
    zeros(&x, 64);
    expect_fail(&x, "extent_ovf.gguf", LM_E_INPUT, "extends past the end");
    header(&x, 3, 2, 0);
    tinfo(&x, "a", 8, LM_TYPE_F32, 0);
    tinfo(&x, "a", 8, LM_TYPE_F32, 32);
    pad(&x, 32);
    zeros(&x, 64);
    expect_fail(&x, "dupname.gguf", LM_E_INPUT, "duplicate tensor name 'a'");
    header(&x, 3, 1, 0);
    str(&x, "a");
    u32(&x, 5);
    zeros(&x, 40);
    expect_fail(&x, "ndims.gguf", LM_E_INPUT, "5 dimensions");
    header(&x, 3, 1, 0);
    tinfo(&x, "q", 48, LM_TYPE_Q8_0, 0); /* 48 is not a multiple of 32 */
    pad(&x, 32);
    zeros(&x, 68);
    expect_fail(&x, "block.gguf", LM_E_INPUT, "block size 32");
    /* Element count overflow across dimensions. */
    header(&x, 3, 1, 0);
    str(&x, "big");
    u32(&x, 2);
    u64(&x, UINT64_C(1) << 40);
    u64(&x, UINT64_C(1) << 40);
    u32(&x, LM_TYPE_F32);
    u64(&x, 0);
    pad(&x, 32);
    expect_fail(&x, "nelem.gguf", LM_E_INPUT, "overflows");
    header(&x, 3, 1, 0);
    tinfo(&x, "zero", 0, LM_TYPE_F32, 0);
    pad(&x, 32);
    expect_fail(&x, "zerodim.gguf", LM_E_INPUT, "invalid dimension");
    /* Data section start past the end of the file (infos end mid-alignment). */
    header(&x, 3, 1, 0);
    tinfo(&x, "a", 1, LM_TYPE_F32, 0);
    expect_fail(&x, "nodata.gguf", LM_E_INPUT, "truncated");
}

/* Every metadata type through the writer and back through the reader, plus tensors. */
static void test_gguf_writer_round_trip(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/rt.gguf", tu_tmpdir());
    lm_err err = {0};
    lm_gguf_writer *w = NULL;
    CU_ASSERT_EQUAL_FATAL(lm_gguf_writer_create(&w, &err), LM_OK);
    CU_ASSERT_EQUAL(lm_gguf_w_u32(w, "u32", 4000000000u, &err), LM_OK);
    CU_ASSERT_EQUAL(lm_gguf_w_i32(w, "i32", -7, &err), LM_OK);
    CU_ASSERT_EQUAL(lm_gguf_w_f32(w, "f32", -0.375f, &err), LM_OK);
    CU_ASSERT_EQUAL(lm_gguf_w_bool(w, "bool", true, &err), LM_OK);
    CU_ASSERT_EQUAL(lm_gguf_w_str(w, "str", "h\xc3\xa9llo", &err), LM_OK);
    CU_ASSERT_EQUAL(lm_gguf_w_u32(w, "u32", 1, &err), LM_E_INPUT); /* duplicate key */
    lm_err_clear(&err);
    const uint8_t a_u8[] = {0, 255};
    const int8_t a_i8[] = {-128, 127};
    const uint16_t a_u16[] = {0, 65535};
    const int16_t a_i16[] = {-32768, 32767};
    const uint32_t a_u32[] = {0, UINT32_MAX};
    const int32_t a_i32[] = {INT32_MIN, INT32_MAX};
    const float a_f32[] = {1.5f, -0.0f};
    const uint8_t a_bool[] = {1, 0};
    const char *a_str[] = {"", "two", "\xe2\x96\x81x"};
    const uint64_t a_u64[] = {0, UINT64_MAX};
    const int64_t a_i64[] = {INT64_MIN, INT64_MAX};
    const double a_f64[] = {0.1, -1e300};
    struct { const char *k; lm_gguf_vtype t; const void *d; uint64_t n; size_t es; } arrs[] = {
        {"a.u8", LM_GGUF_U8, a_u8, 2, 1}, {"a.i8", LM_GGUF_I8, a_i8, 2, 1},
        {"a.u16", LM_GGUF_U16, a_u16, 2, 2}, {"a.i16", LM_GGUF_I16, a_i16, 2, 2},
        {"a.u32", LM_GGUF_U32, a_u32, 2, 4}, {"a.i32", LM_GGUF_I32, a_i32, 2, 4},
        {"a.f32", LM_GGUF_F32, a_f32, 2, 4}, {"a.bool", LM_GGUF_BOOL, a_bool, 2, 1},
        {"a.str", LM_GGUF_STR, a_str, 3, 0}, {"a.u64", LM_GGUF_U64, a_u64, 2, 8},
        {"a.i64", LM_GGUF_I64, a_i64, 2, 8}, {"a.f64", LM_GGUF_F64, a_f64, 2, 8},
        {"a.empty", LM_GGUF_U32, a_u32, 0, 4},
    };
    for (size_t i = 0; i < sizeof arrs / sizeof arrs[0]; ++i)
        CU_ASSERT_EQUAL(lm_gguf_w_arr(w, arrs[i].k, arrs[i].t, arrs[i].d, arrs[i].n, &err), LM_OK);
    /* Tensors: F32, F16, BF16 from floats, and raw Q8_0 bytes. */
    float vals[64];
    uint64_t st = tu_seed();
    for (int i = 0; i < 64; ++i)
        vals[i] = tu_rand_f32(&st) * 100.0f;
    uint64_t ne2[2] = {8, 8}, ne1[1] = {32};
    CU_ASSERT_EQUAL(lm_gguf_w_tensor_f32(w, "t.f32", LM_TYPE_F32, 2, ne2, vals, &err), LM_OK);
    CU_ASSERT_EQUAL(lm_gguf_w_tensor_f32(w, "t.f16", LM_TYPE_F16, 2, ne2, vals, &err), LM_OK);
    CU_ASSERT_EQUAL(lm_gguf_w_tensor_f32(w, "t.bf16", LM_TYPE_BF16, 1, ne1, vals, &err), LM_OK);
    uint8_t q8[34];
    for (int i = 0; i < 34; ++i)
        q8[i] = (uint8_t)(i * 7 + 1);
    CU_ASSERT_EQUAL(lm_gguf_w_tensor_raw(w, "t.q8", LM_TYPE_Q8_0, 1, ne1, q8, 34, &err), LM_OK);
    CU_ASSERT_EQUAL(lm_gguf_w_tensor_raw(w, "t.bad", LM_TYPE_Q8_0, 1, ne1, q8, 33, &err),
                    LM_E_INPUT);
    lm_err_clear(&err);
    CU_ASSERT_EQUAL(lm_gguf_w_tensor_f32(w, "t.f32", LM_TYPE_F32, 1, ne1, vals, &err), LM_E_INPUT);
    lm_err_clear(&err);
    CU_ASSERT_EQUAL_FATAL(lm_gguf_writer_save(w, path, &err), LM_OK);
    lm_gguf_writer_free(w);

    /* No temporary file is left next to the target. */
    DIR *d = opendir(tu_tmpdir());
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        CU_ASSERT_PTR_NULL(strstr(e->d_name, ".tmp."));
    closedir(d);

    lm_gguf *g = NULL;
    CU_ASSERT_EQUAL_FATAL(lm_gguf_open(&g, path, &err), LM_OK);
    CU_ASSERT_EQUAL(lm_gguf_version(g), 3);
    CU_ASSERT_EQUAL(lm_gguf_n_kv(g), 5 + sizeof arrs / sizeof arrs[0]);
    CU_ASSERT_STRING_EQUAL(lm_gguf_key(g, 0), "u32");
    CU_ASSERT_EQUAL(lm_gguf_kv_type(g, 2), LM_GGUF_F32);
    uint32_t u;
    int32_t i32;
    float f;
    bool b;
    const char *s;
    CU_ASSERT_EQUAL(lm_gguf_get_u32(g, "u32", 0, &u, &err), LM_OK);
    CU_ASSERT_EQUAL(u, 4000000000u);
    CU_ASSERT_EQUAL(lm_gguf_get_i32(g, "i32", 0, &i32, &err), LM_OK);
    CU_ASSERT_EQUAL(i32, -7);
    CU_ASSERT_EQUAL(lm_gguf_get_f32(g, "f32", 0.0f, &f, &err), LM_OK);
    CU_ASSERT_EQUAL(f, -0.375f); /* exact: a dyadic value stored as f32 */
    CU_ASSERT_EQUAL(lm_gguf_get_bool(g, "bool", false, &b, &err), LM_OK);
    CU_ASSERT_TRUE(b);
    CU_ASSERT_EQUAL(lm_gguf_get_str(g, "str", NULL, &s, &err), LM_OK);
    CU_ASSERT_STRING_EQUAL(s, "h\xc3\xa9llo");
    /* Defaults when absent; conversions between integer types; type and range errors. */
    CU_ASSERT_EQUAL(lm_gguf_get_u32(g, "absent", 17, &u, &err), LM_OK);
    CU_ASSERT_EQUAL(u, 17);
    CU_ASSERT_EQUAL(lm_gguf_get_str(g, "absent", "dflt", &s, &err), LM_OK);
    CU_ASSERT_STRING_EQUAL(s, "dflt");
    CU_ASSERT_EQUAL(lm_gguf_get_i32(g, "bool", 0, &i32, &err), LM_OK);
    CU_ASSERT_EQUAL(i32, 1);
    CU_ASSERT_EQUAL(lm_gguf_get_i32(g, "u32", 0, &i32, &err), LM_E_INPUT); /* 4e9 > INT32_MAX */
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "'u32'"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, path));
    lm_err_clear(&err);
    CU_ASSERT_EQUAL(lm_gguf_get_u32(g, "i32", 0, &u, &err), LM_E_INPUT); /* negative */
    lm_err_clear(&err);
    CU_ASSERT_EQUAL(lm_gguf_get_f32(g, "str", 0.0f, &f, &err), LM_E_INPUT);
    lm_err_clear(&err);
    CU_ASSERT_EQUAL(lm_gguf_get_u32(g, "f32", 0, &u, &err), LM_E_INPUT);
    lm_err_clear(&err);
    CU_ASSERT_EQUAL(lm_gguf_get_str(g, "u32", NULL, &s, &err), LM_E_INPUT);
    lm_err_clear(&err);
    CU_ASSERT_EQUAL(lm_gguf_get_bool(g, "u32", false, &b, &err), LM_E_INPUT);
    lm_err_clear(&err);
    for (size_t i = 0; i < sizeof arrs / sizeof arrs[0]; ++i) {
        const lm_gguf_arr *a = NULL;
        CU_ASSERT_EQUAL_FATAL(lm_gguf_get_arr(g, arrs[i].k, (int)arrs[i].t, &a, &err), LM_OK);
        CU_ASSERT_PTR_NOT_NULL_FATAL(a);
        CU_ASSERT_EQUAL(a->type, arrs[i].t);
        CU_ASSERT_EQUAL(a->n, arrs[i].n);
        if (arrs[i].t == LM_GGUF_STR) {
            const lm_gguf_str *ss = a->data;
            for (uint64_t j = 0; j < a->n; ++j) {
                CU_ASSERT_EQUAL(ss[j].len, strlen(a_str[j]));
                CU_ASSERT_STRING_EQUAL(ss[j].ptr, a_str[j]);
            }
        } else {
            CU_ASSERT_EQUAL(memcmp(a->data, arrs[i].d, (size_t)arrs[i].n * arrs[i].es), 0);
        }
    }
    const lm_gguf_arr *a = NULL;
    CU_ASSERT_EQUAL(lm_gguf_get_arr(g, "a.u8", LM_GGUF_I32, &a, &err), LM_E_INPUT);
    lm_err_clear(&err);
    CU_ASSERT_EQUAL(lm_gguf_get_arr(g, "a.u8", -1, &a, &err), LM_OK);
    CU_ASSERT_EQUAL(lm_gguf_get_arr(g, "absent", -1, &a, &err), LM_OK);
    CU_ASSERT_PTR_NULL(a);

    CU_ASSERT_EQUAL(lm_gguf_n_tensors(g), 4);
    float out[64];
    const lm_gguf_tensor *t = lm_gguf_tensor_find(g, "t.f32");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_EQUAL(t->n_dims, 2);
    CU_ASSERT_EQUAL(t->ne[1], 8);
    CU_ASSERT_EQUAL(t->ne[2], 1);
    CU_ASSERT_EQUAL(((const uint8_t *)t->data - (const uint8_t *)lm_gguf_bytes(g)) % 32, 0);
    CU_ASSERT_EQUAL(lm_gguf_tensor_to_f32(out, t, &err), LM_OK);
    CU_ASSERT_EQUAL(memcmp(out, vals, sizeof vals), 0); /* F32 round trip is bit-exact */
    t = lm_gguf_tensor_find(g, "t.f16");
    CU_ASSERT_EQUAL(lm_gguf_tensor_to_f32(out, t, &err), LM_OK);
    for (int i = 0; i < 64; ++i) /* exact: the reader must return the writer's rounding */
        CU_ASSERT_EQUAL(out[i], lm_f16_to_f32(lm_f32_to_f16(vals[i])));
    t = lm_gguf_tensor_find(g, "t.bf16");
    CU_ASSERT_EQUAL(lm_gguf_tensor_to_f32(out, t, &err), LM_OK);
    for (int i = 0; i < 32; ++i)
        CU_ASSERT_EQUAL(out[i], lm_bf16_to_f32(lm_f32_to_bf16(vals[i])));
    t = lm_gguf_tensor_find(g, "t.q8");
    CU_ASSERT_EQUAL(t->type, LM_TYPE_Q8_0);
    CU_ASSERT_EQUAL(t->nbytes, 34);
    CU_ASSERT_EQUAL(memcmp(t->data, q8, 34), 0);
    CU_ASSERT_EQUAL(((const uint8_t *)t->data - (const uint8_t *)lm_gguf_bytes(g)) % 32, 0);
    lm_gguf_close(g);
}

/* A save that fails half-way (file size limit hit) leaves the old target untouched and no
 * temporary file behind. */
static void test_gguf_writer_failure_is_atomic(void)
{
    const char *old = "old contents";
    const char *path = tu_write_file("target.gguf", old, strlen(old));
    lm_err err = {0};
    lm_gguf_writer *w = NULL;
    CU_ASSERT_EQUAL_FATAL(lm_gguf_writer_create(&w, &err), LM_OK);
    static float big[16384];
    uint64_t ne[1] = {16384};
    CU_ASSERT_EQUAL(lm_gguf_w_tensor_f32(w, "big", LM_TYPE_F32, 1, ne, big, &err), LM_OK);
    struct rlimit saved, small;
    CU_ASSERT_EQUAL_FATAL(getrlimit(RLIMIT_FSIZE, &saved), 0);
    small = saved;
    small.rlim_cur = 4096; /* the 64 KiB tensor cannot be written */
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    CU_ASSERT_EQUAL_FATAL(setrlimit(RLIMIT_FSIZE, &small), 0);
    int rc = lm_gguf_writer_save(w, path, &err);
    setrlimit(RLIMIT_FSIZE, &saved);
    signal(SIGXFSZ, prev);
    lm_gguf_writer_free(w);
    CU_ASSERT_EQUAL(rc, LM_E_IO);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, path));
    char buf[64] = {0};
    FILE *f = fopen(path, "rb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    CU_ASSERT_EQUAL(n, strlen(old));
    CU_ASSERT_STRING_EQUAL(buf, old);
    DIR *d = opendir(tu_tmpdir());
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        CU_ASSERT_PTR_NULL(strstr(e->d_name, ".tmp."));
    closedir(d);
}

/* Every strict prefix of a valid file is refused cleanly, never read past its end. */
static void test_gguf_every_truncation(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/full.gguf", tu_tmpdir());
    lm_err err = {0};
    lm_gguf_writer *w = NULL;
    CU_ASSERT_EQUAL_FATAL(lm_gguf_writer_create(&w, &err), LM_OK);
    const char *toks[] = {"a", "bc"};
    const float v[32] = {1.0f};
    uint64_t ne[1] = {32};
    lm_gguf_w_str(w, "general.architecture", "llama", &err);
    lm_gguf_w_arr(w, "tokens", LM_GGUF_STR, toks, 2, &err);
    lm_gguf_w_tensor_f32(w, "x", LM_TYPE_F16, 1, ne, v, &err);
    CU_ASSERT_EQUAL_FATAL(lm_gguf_writer_save(w, path, &err), LM_OK);
    lm_gguf_writer_free(w);
    FILE *f = fopen(path, "rb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    static uint8_t buf[4096];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    CU_ASSERT_FATAL(n > 64 && n < sizeof buf);
    int failures = 0;
    for (size_t k = 0; k < n; ++k) {
        const char *p = tu_write_file("prefix.gguf", buf, k);
        lm_gguf *g = NULL;
        lm_err_clear(&err);
        int rc = lm_gguf_open(&g, p, &err);
        if (rc != LM_E_INPUT || strstr(err.msg, p) == NULL) {
            if (failures++ == 0)
                fprintf(stderr, "\n  prefix %zu of %zu: rc %d '%s'\n", k, n, rc, err.msg);
        }
        lm_gguf_close(g);
    }
    CU_ASSERT_EQUAL(failures, 0);
}


/* The streaming path gives the in-memory writer's bytes: declared tensors fed in pieces of
 * odd sizes, in-memory ones between them written as the stream reaches them; the digest and
 * size commit reports are the file's; a short tensor or bytes past the last one fail with
 * nothing written. */
static void test_gguf_stream_matches_memory(void)
{
    char a[1024], b[1024], c[1024];
    snprintf(a, sizeof a, "%s/mem.gguf", tu_tmpdir());
    snprintf(b, sizeof b, "%s/stream.gguf", tu_tmpdir());
    snprintf(c, sizeof c, "%s/stream-short.gguf", tu_tmpdir());
    lm_err err = {0};
    float vals[40];
    uint8_t q8[68], bf[10];
    uint64_t st = tu_seed();
    for (int i = 0; i < 40; ++i)
        vals[i] = tu_rand_f32(&st);
    for (int i = 0; i < 68; ++i)
        q8[i] = (uint8_t)tu_rand_u64(&st);
    lm_gguf_f32_encode(bf, vals, 5, LM_TYPE_BF16);
    uint64_t ne_f[1] = {3}, ne_q[2] = {32, 2}, ne_h[1] = {40}, ne_b[1] = {5};
    lm_gguf_writer *w[3] = {NULL, NULL, NULL};
    for (int k = 0; k < 3; ++k) {
        CU_ASSERT_EQUAL_FATAL(lm_gguf_writer_create(&w[k], &err), LM_OK);
        CU_ASSERT_EQUAL(lm_gguf_w_str(w[k], "general.name", "stream", &err), LM_OK);
        CU_ASSERT_EQUAL(lm_gguf_w_tensor_f32(w[k], "f", LM_TYPE_F32, 1, ne_f, vals, &err), LM_OK);
        int rc = k == 0 ? lm_gguf_w_tensor_raw(w[k], "q", LM_TYPE_Q8_0, 2, ne_q, q8, 68, &err)
                        : lm_gguf_w_tensor_decl(w[k], "q", LM_TYPE_Q8_0, 2, ne_q, &err);
        CU_ASSERT_EQUAL(rc, LM_OK);
        CU_ASSERT_EQUAL(lm_gguf_w_tensor_f32(w[k], "h", LM_TYPE_F16, 1, ne_h, vals, &err), LM_OK);
        rc = k == 0 ? lm_gguf_w_tensor_raw(w[k], "b", LM_TYPE_BF16, 1, ne_b, bf, 10, &err)
                    : lm_gguf_w_tensor_decl(w[k], "b", LM_TYPE_BF16, 1, ne_b, &err);
        CU_ASSERT_EQUAL(rc, LM_OK);
    }
    CU_ASSERT_EQUAL(lm_gguf_w_tensor_decl(w[1], "q", LM_TYPE_F32, 1, ne_f, &err), LM_E_INPUT);
    lm_err_clear(&err);
    uint64_t predicted;
    CU_ASSERT_EQUAL_FATAL(lm_gguf_writer_size(w[0], &predicted, &err), LM_OK);
    CU_ASSERT_EQUAL_FATAL(lm_gguf_writer_save(w[0], a, &err), LM_OK);
    /* a declared tensor's bytes never came: save refuses, nothing written */
    CU_ASSERT_EQUAL(lm_gguf_writer_save(w[2], c, &err), LM_E_INPUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "tensor 'q' has 0 of its 68 bytes"));
    CU_ASSERT_EQUAL(access(c, F_OK), -1);
    lm_err_clear(&err);

    lm_gguf_stream *s = NULL;
    CU_ASSERT_EQUAL_FATAL(lm_gguf_stream_open(&s, w[1], b, &err), LM_OK);
    CU_ASSERT_STRING_EQUAL(lm_gguf_stream_tensor(s), "q");
    const size_t piece[] = {1, 7, 60};
    size_t off = 0;
    for (int i = 0; i < 3; ++i, off += piece[i - 1])
        CU_ASSERT_EQUAL(lm_gguf_stream_write(s, q8 + off, piece[i], &err), LM_OK);
    CU_ASSERT_STRING_EQUAL(lm_gguf_stream_tensor(s), "b"); /* "h" written on the way */
    CU_ASSERT_EQUAL(lm_gguf_stream_write(s, bf, 3, &err), LM_OK);
    CU_ASSERT_EQUAL(lm_gguf_stream_write(s, bf + 3, 7, &err), LM_OK);
    CU_ASSERT_PTR_NULL(lm_gguf_stream_tensor(s));
    CU_ASSERT_EQUAL(lm_gguf_stream_write(s, bf, 1, &err), LM_E_INPUT); /* past the end */
    lm_err_clear(&err);
    uint8_t digest[32];
    uint64_t size = 0;
    CU_ASSERT_EQUAL_FATAL(lm_gguf_stream_commit(s, digest, &size, &err), LM_OK);
    char *ma, *mb;
    size_t na, nb;
    CU_ASSERT_EQUAL_FATAL(lm_read_file(&ma, &na, a, SIZE_MAX, &err), LM_OK);
    CU_ASSERT_EQUAL_FATAL(lm_read_file(&mb, &nb, b, SIZE_MAX, &err), LM_OK);
    CU_ASSERT(na == nb && memcmp(ma, mb, na) == 0);
    CU_ASSERT_EQUAL(size, nb);
    CU_ASSERT_EQUAL(predicted, na);
    char hex[65], want[65];
    for (int i = 0; i < 32; ++i)
        snprintf(hex + 2 * i, 3, "%02x", digest[i]);
    CU_ASSERT_EQUAL_FATAL(hx_sha256_file_hex(want, b, &err), LM_OK);
    CU_ASSERT_STRING_EQUAL(hex, want);
    free(ma);
    free(mb);

    /* a stream committed short: nothing at the target */
    CU_ASSERT_EQUAL_FATAL(lm_gguf_stream_open(&s, w[2], c, &err), LM_OK);
    CU_ASSERT_EQUAL(lm_gguf_stream_write(s, q8, 68, &err), LM_OK);
    CU_ASSERT_EQUAL(lm_gguf_stream_commit(s, NULL, NULL, &err), LM_E_INPUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "tensor 'b' has 0 of its 10 bytes"));
    CU_ASSERT_EQUAL(access(c, F_OK), -1);
    for (int k = 0; k < 3; ++k)
        lm_gguf_writer_free(w[k]);
}

void test_gguf_register(void)
{
    CU_pSuite s = CU_add_suite("gguf", NULL, NULL);
    CU_add_test(s, "test_gguf_empty_magic_version", test_gguf_empty_magic_version);
    CU_add_test(s, "test_gguf_huge_counts", test_gguf_huge_counts);
    CU_add_test(s, "test_gguf_strings_past_eof", test_gguf_strings_past_eof);
    CU_add_test(s, "test_gguf_bad_metadata", test_gguf_bad_metadata);
    CU_add_test(s, "test_gguf_bad_alignment", test_gguf_bad_alignment);
    CU_add_test(s, "test_gguf_bad_tensors", test_gguf_bad_tensors);
    CU_add_test(s, "test_gguf_writer_round_trip", test_gguf_writer_round_trip);
    CU_add_test(s, "test_gguf_writer_failure_is_atomic", test_gguf_writer_failure_is_atomic);
    CU_add_test(s, "test_gguf_stream_matches_memory", test_gguf_stream_matches_memory);
    CU_add_test(s, "test_gguf_every_truncation", test_gguf_every_truncation);
}
