/* test_dump.c — loading a dump folder: a valid one reads back exactly; every kind of mismatch
 * (manifest, shapes vs the model, ids vs the vocabulary, NaN, K/V layout, model_sha256) is
 * LM_E_INPUT with one line naming the thing. Uses stories260K (skipped when absent); SHA-256
 * itself is checked against FIPS 180-4's example vectors. */
#include "model/dump.h"
#include "sha256.h"
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Writes a float32 .npy of the given shape (ndim 2 or 3) with values v[i] = i * 0.25 - 3. */
static void write_npy(const char *path, uint32_t ndim, const uint64_t *shape, float poison)
{
    char dict[128], shp[64];
    if (ndim == 2)
        snprintf(shp, sizeof shp, "(%llu, %llu)", (unsigned long long)shape[0],
                 (unsigned long long)shape[1]);
    else
        snprintf(shp, sizeof shp, "(%llu, %llu, %llu)", (unsigned long long)shape[0],
                 (unsigned long long)shape[1], (unsigned long long)shape[2]);
    int dl = snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': %s, }",
                      shp);
    size_t hl = (size_t)dl + 1;
    while ((10 + hl) % 64)
        ++hl;
    FILE *f = fopen(path, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)hl, 0};
    fwrite(pre, 1, 10, f);
    fwrite(dict, 1, (size_t)dl, f);
    for (size_t i = (size_t)dl; i + 1 < hl; ++i)
        fputc(' ', f);
    fputc('\n', f);
    uint64_t n = shape[0] * shape[1] * (ndim == 3 ? shape[2] : 1);
    for (uint64_t i = 0; i < n; ++i) {
        float v = i == 5 && poison != 0.0f ? poison : (float)i * 0.25f - 3.0f;
        fwrite(&v, 4, 1, f);
    }
    fclose(f);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs(text, f);
    fclose(f);
}

static char dir[512];

/* A fresh dump folder: manifest json, logits [rows][vocab]. */
static void fresh(const char *tag, const char *json, uint64_t rows, uint64_t vocab)
{
    snprintf(dir, sizeof dir, "%s/dump-%s", tu_tmpdir(), tag);
    mkdir(dir, 0755);
    char p[600];
    snprintf(p, sizeof p, "%s/dump.json", dir);
    write_text(p, json);
    snprintf(p, sizeof p, "%s/logits.npy", dir);
    uint64_t shape[2] = {rows, vocab};
    write_npy(p, 2, shape, 0.0f);
}

static const char *ok_json =
    "{\"tokens\": [1, 403, 407], \"n_prompt\": 3, \"logits_positions\": [1, 2], "
    "\"engine\": \"test\", \"settings\": \"s\", \"other\": [1]}";

static int load(hx_dump **d, const lm_model *m, const char *path, const char *want)
{
    lm_err err = {0};
    int rc = hx_dump_load(d, dir, m, path, &err);
    if (want == NULL && rc != LM_OK)
        fprintf(stderr, "%s: unexpected error: %s\n", dir, err.msg);
    if (want != NULL) {
        CU_ASSERT_EQUAL(rc, LM_E_INPUT);
        if (strstr(err.msg, want) == NULL)
            fprintf(stderr, "message '%s' lacks '%s'\n", err.msg, want);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, want));
        CU_ASSERT_PTR_NULL(strchr(err.msg, '\n'));
    }
    return rc;
}

static void test_dump_valid_reads_back(void)
{
    const char *path = NULL;
    lm_model *m = tu_load_model_at("stories260K.gguf", &path);
    if (m == NULL)
        return;
    lm_err err = {0};
    fresh("ok", ok_json, 2, 512);
    hx_dump *d = NULL;
    CU_ASSERT_EQUAL_FATAL(load(&d, m, path, NULL), LM_OK);
    CU_ASSERT_EQUAL(d->n_tokens, 3u);
    CU_ASSERT_EQUAL(d->n_prompt, 3u);
    CU_ASSERT_EQUAL(d->n_pos, 2u);
    CU_ASSERT_EQUAL(d->positions[1], 2u);
    CU_ASSERT_FALSE(d->logprobs);
    CU_ASSERT_STRING_EQUAL(d->engine, "test");
    CU_ASSERT_STRING_EQUAL(d->row_dtype, "float32");
    CU_ASSERT_EQUAL(d->rows[600], 600 * 0.25f - 3.0f); /* exact: float32 stored as is */
    CU_ASSERT_PTR_NULL(d->k);
    CU_ASSERT_FALSE(d->has_generated);
    hx_dump_free(d);
    /* K/V for every layer; the right model_sha256 */
    char p[700], hex[65], js[512];
    CU_ASSERT_EQUAL_FATAL(hx_sha256_file_hex(hex, path, &err), LM_OK);
    snprintf(js, sizeof js, "{\"tokens\": [1, 403, 407], \"n_prompt\": 2, \"logits_positions\": "
             "[0, 1, 2], \"tokens_generated\": [407], \"model_sha256\": \"%s\"}", hex);
    fresh("kv", js, 3, 512);
    snprintf(p, sizeof p, "%s/kv", dir);
    mkdir(p, 0755);
    uint64_t kvs[3] = {2, m->hp.n_head_kv, m->hp.head_dim};
    for (uint32_t l = 0; l < m->hp.n_layer; ++l)
        for (int t = 0; t < 2; ++t) {
            snprintf(p, sizeof p, "%s/kv/layer%02u_%c.npy", dir, (unsigned)l, t ? 'v' : 'k');
            write_npy(p, 3, kvs, 0.0f);
        }
    CU_ASSERT_EQUAL_FATAL(load(&d, m, path, NULL), LM_OK);
    CU_ASSERT_PTR_NOT_NULL(d->k);
    CU_ASSERT_EQUAL(d->n_layer, m->hp.n_layer);
    CU_ASSERT_EQUAL(d->v[1][7], 7 * 0.25f - 3.0f);
    CU_ASSERT(d->has_generated);
    CU_ASSERT_EQUAL(d->generated[0], 407);
    hx_dump_free(d);
    /* kv/ problems */
    snprintf(p, sizeof p, "%s/kv/layer01_v.npy", dir);
    unlink(p);
    CU_ASSERT_EQUAL(load(&d, m, path, "layer01_v.npy: missing"), LM_E_INPUT);
    uint64_t bad[3] = {3, m->hp.n_head_kv, m->hp.head_dim};
    write_npy(p, 3, bad, 0.0f);
    CU_ASSERT_EQUAL(load(&d, m, path, "dimension 0 is 3, but n_prompt is 2"), LM_E_INPUT);
    write_npy(p, 3, kvs, 0.0f);
    snprintf(p, sizeof p, "%s/kv/layer%02u_k.npy", dir, (unsigned)m->hp.n_layer);
    write_npy(p, 3, kvs, 0.0f);
    CU_ASSERT_EQUAL(load(&d, m, path, "names layer"), LM_E_INPUT);
    unlink(p);
    snprintf(p, sizeof p, "%s/kv/notes.txt", dir);
    write_text(p, "x");
    CU_ASSERT_EQUAL(load(&d, m, path, "unexpected file 'notes.txt'"), LM_E_INPUT);
    unlink(p);
    snprintf(p, sizeof p, "%s/kv/layer00_k.npy", dir);
    write_npy(p, 3, kvs, NAN);
    CU_ASSERT_EQUAL(load(&d, m, path, "is NaN"), LM_E_INPUT);
    lm_model_free(m);
}

static void test_dump_mismatches_exit_2(void)
{
    const char *path = NULL;
    lm_model *m = tu_load_model_at("stories260K.gguf", &path);
    if (m == NULL)
        return;
    hx_dump *d = NULL;
    static const struct {
        const char *json, *msg;
    } cases[] = {
        {"{\"tokens\": [1, 512, 407], \"n_prompt\": 3, \"logits_positions\": [1, 2]}",
         "tokens[1] = 512 is outside [0, 512)"},
        {"{\"tokens\": [1, -1, 407], \"n_prompt\": 3, \"logits_positions\": [1, 2]}",
         "tokens[1] = -1"},
        {"{\"tokens\": [], \"n_prompt\": 3, \"logits_positions\": [1, 2]}", "'tokens' must be"},
        {"{\"tokens\": [1, 2.5, 407], \"n_prompt\": 3, \"logits_positions\": [1, 2]}",
         "tokens[1] is not an integer"},
        {"{\"tokens\": [1, 403, 407], \"n_prompt\": 0, \"logits_positions\": [1, 2]}",
         "n_prompt must be"},
        {"{\"tokens\": [1, 403, 407], \"n_prompt\": 4, \"logits_positions\": [1, 2]}",
         "n_prompt must be"},
        {"{\"tokens\": [1, 403, 407], \"n_prompt\": 3, \"logits_positions\": [2, 1]}",
         "increase strictly"},
        {"{\"tokens\": [1, 403, 407], \"n_prompt\": 3, \"logits_positions\": [2, 3]}",
         "logits_positions[1] = 3 is outside [0, 3)"},
        {"{\"tokens\": [1, 403, 407], \"n_prompt\": 3}", "'logits_positions' must be"},
        {"{\"tokens\": [1, 403, 407], \"n_prompt\": 3, \"logits_positions\": [0, 1, 2]}",
         "dimension 0 is 2, but len(logits_positions) is 3"},
        {"{\"tokens\": [1, 403, 407], \"n_prompt\": 3, \"logits_positions\": [1, 2], "
         "\"tokens_generated\": [600]}", "tokens_generated[0] = 600"},
        {"{\"tokens\": [1, 403, 407], \"n_prompt\": 3, \"logits_positions\": [1, 2], "
         "\"model_sha256\": \"00\"}", "64 hex digits"},
        {"{\"tokens\": [1, 403, 407], \"n_prompt\": 3, \"logits_positions\": [1, 2], "
         "\"model_sha256\": \"0000000000000000000000000000000000000000000000000000000000000000\"}",
         "not the model's"},
        {"{\"tokens\": [1], \"tokens\": [1], \"n_prompt\": 1, \"logits_positions\": [0]}",
         "duplicate"},
        {"{\"tokens\": [1, 403, 407], \"n_prompt\": 3, \"logits_positions\": [1, 2], "
         "\"engine\": 3}", "'engine' must be a string"},
        {"[1, 2]", "not a JSON object"},
        {"{\"tokens\": [1, 403", "dump.json: line"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        char tag[16];
        snprintf(tag, sizeof tag, "bad%zu", i);
        fresh(tag, cases[i].json, 2, 512);
        CU_ASSERT_EQUAL(load(&d, m, path, cases[i].msg), LM_E_INPUT);
    }
    fresh("vocab", ok_json, 2, 511);
    CU_ASSERT_EQUAL(load(&d, m, path, "dimension 1 is 511, but the model's vocabulary is 512"),
                    LM_E_INPUT);
    fresh("both", ok_json, 2, 512);
    char p[700];
    snprintf(p, sizeof p, "%s/logprobs.npy", dir);
    uint64_t shape[2] = {2, 512};
    write_npy(p, 2, shape, 0.0f);
    /* log-probabilities: rows of log(1/512) (a uniform distribution), over write_npy's data */
    FILE *lpf = fopen(p, "r+b");
    CU_ASSERT_FATAL(lpf != NULL && fseek(lpf, -(long)(2 * 512 * sizeof(float)), SEEK_END) == 0);
    const float uni = (float)-log(512.0);
    for (int i = 0; i < 2 * 512; ++i)
        CU_ASSERT_FATAL(fwrite(&uni, sizeof uni, 1, lpf) == 1);
    CU_ASSERT_FATAL(fclose(lpf) == 0);
    CU_ASSERT_EQUAL(load(&d, m, path, "both logits.npy and logprobs.npy"), LM_E_INPUT);
    snprintf(p, sizeof p, "%s/logits.npy", dir);
    unlink(p);
    CU_ASSERT_EQUAL_FATAL(load(&d, m, path, NULL), LM_OK); /* logprobs alone */
    CU_ASSERT(d->logprobs);
    hx_dump_free(d);
    snprintf(p, sizeof p, "%s/logprobs.npy", dir);
    unlink(p);
    CU_ASSERT_EQUAL(load(&d, m, path, "neither logits.npy nor logprobs.npy"), LM_E_INPUT);
    fresh("inf", ok_json, 2, 512);
    snprintf(p, sizeof p, "%s/logits.npy", dir);
    write_npy(p, 2, shape, INFINITY);
    CU_ASSERT_EQUAL(load(&d, m, path, "element 5 (row 0) is Inf"), LM_E_INPUT);
    snprintf(dir, sizeof dir, "%s/no-such-dump", tu_tmpdir());
    CU_ASSERT_EQUAL(load(&d, m, path, "not a folder"), LM_E_INPUT);
    snprintf(dir, sizeof dir, "%s", tu_tmpdir());
    CU_ASSERT_EQUAL(load(&d, m, path, "no dump.json"), LM_E_INPUT);
    lm_model_free(m);
}

static void test_dump_sha256_vectors(void)
{
    static const struct {
        const char *msg, *hex;
    } v[] = {
        {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
    };
    for (size_t i = 0; i < 3; ++i) {
        hx_sha256 s;
        uint8_t d[32];
        char hex[65];
        hx_sha256_init(&s);
        /* fed one byte at a time for the long one: block boundaries inside update */
        if (i == 2)
            for (size_t j = 0; j < strlen(v[i].msg); ++j)
                hx_sha256_update(&s, v[i].msg + j, 1);
        else
            hx_sha256_update(&s, v[i].msg, strlen(v[i].msg));
        hx_sha256_final(&s, d);
        for (int j = 0; j < 32; ++j)
            snprintf(hex + 2 * j, 3, "%02x", d[j]);
        CU_ASSERT_STRING_EQUAL(hex, v[i].hex);
    }
    const char *p = tu_write_file("sha.txt", "abc", 3);
    char hex[65];
    lm_err err = {0};
    CU_ASSERT_EQUAL(hx_sha256_file_hex(hex, p, &err), LM_OK);
    CU_ASSERT_STRING_EQUAL(hex, v[0].hex);
}

void test_dump_register(void)
{
    CU_pSuite s = CU_add_suite("dump", NULL, NULL);
    CU_add_test(s, "test_dump_valid_reads_back", test_dump_valid_reads_back);
    CU_add_test(s, "test_dump_mismatches_exit_2", test_dump_mismatches_exit_2);
    CU_add_test(s, "test_dump_sha256_vectors", test_dump_sha256_vectors);
}
