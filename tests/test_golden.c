/* test_golden.c — golden files (sorted keys, atomic writes, validation) and the platform
 * fingerprint. */
#include "fs.h"
#include "model/capture.h"
#include "judge/golden.h"
#include "judge/golden_key.h"
#include "kvd_engine.h"
#include "plan/synth.h"
#include "test_util.h"

#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void test_golden_fingerprint(void)
{
    hx_fingerprint a, b;
    hx_fingerprint_detect(&a);
    hx_fingerprint_detect(&b);
    CU_ASSERT_STRING_EQUAL(a.text, b.text); /* deterministic within a process */
    CU_ASSERT_STRING_EQUAL(a.id, b.id);
    CU_ASSERT_EQUAL(strlen(a.id), 16);
    CU_ASSERT_EQUAL(strspn(a.id, "0123456789abcdef"), 16);
    for (size_t i = 0; i < lm_backend_count(); ++i) { /* each backend's describe part */
        const lm_backend_info *bi = lm_backend_at(i);
        char part[320];
        if (bi->describe == NULL)
            continue;
        bi->describe(part, sizeof part, false);
        CU_ASSERT_PTR_NOT_NULL(strstr(a.text, part));
        bi->describe(part, sizeof part, true);
        CU_ASSERT_PTR_NOT_NULL(strstr(a.short_text, part));
    }
    CU_ASSERT_PTR_NOT_NULL(strstr(a.text, "-ffp-contract=off")); /* KVD_BUILD_FLAGS */
    CU_ASSERT_PTR_NOT_NULL(strstr(a.libm, "expf="));
    CU_ASSERT_PTR_NOT_NULL(strstr(a.libc, "glibc "));
    CU_ASSERT_PTR_NOT_NULL(strstr(a.short_text, a.id));
    CU_ASSERT_PTR_NULL(strchr(a.text, '\n'));
    fprintf(stderr, "\n  platform: %s\n", a.short_text);
    /* Each part separates goldens. */
    snprintf(b.backends, sizeof b.backends, "blas_core=Sandybridge");
    hx_fingerprint_finish(&b);
    CU_ASSERT_STRING_NOT_EQUAL(a.id, b.id);
    b = a;
    snprintf(b.libm, sizeof b.libm, "expf=sse2 probe=00000000");
    hx_fingerprint_finish(&b);
    CU_ASSERT_STRING_NOT_EQUAL(a.id, b.id);
}

static hx_fingerprint fake_fp(const char *core)
{
    hx_fingerprint fp = {0};
    snprintf(fp.arch, sizeof fp.arch, "x86_64");
    snprintf(fp.backends, sizeof fp.backends, "blas_core=%s", core);
    hx_fingerprint_finish(&fp);
    return fp;
}

static const hx_golden_input test_input = {"000102030405060708090a0b0c0d0e0f",
                                           "0011223344556677", "9.9.9", NULL};

static size_t count_files(const char *dir)
{
    size_t n = 0;
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));)
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

static void test_golden_roundtrip_sorted_atomic(void)
{
    lm_err err = {0};
    char dir[1024], path[1100];
    snprintf(dir, sizeof dir, "%s/golden", tu_tmpdir());
    CU_ASSERT_FATAL(mkdir(dir, 0755) == 0);
    snprintf(path, sizeof path, "%s/case.json", dir);
    hx_golden *g;
    CU_ASSERT_EQUAL_FATAL(hx_golden_load(&g, path, true, &err), LM_OK); /* absent: empty */
    CU_ASSERT_EQUAL(hx_golden_count(g), 0);
    float logits[7] = {0.1f, 3.25f, -2.0f, 1e-7f, 3.25f, 0.3333333432674407958984375f, -1.0f};
    uint8_t h[16];
    for (int i = 0; i < 16; ++i)
        h[i] = (uint8_t)(i * 17);
    hx_golden_entry e;
    hx_golden_entry_fill(&e, h, logits, 7, 11, &test_input);
    CU_ASSERT_EQUAL(e.n_top, 5);
    CU_ASSERT_EQUAL(e.top_ids[0], 1);
    CU_ASSERT_EQUAL(e.top_ids[1], 4); /* tie: lower id first */
    CU_ASSERT_EQUAL(e.top_ids[2], 5);
    hx_fingerprint f1 = fake_fp("Zen"), f2 = fake_fp("Alpha");
    /* Insert in unsorted order. */
    CU_ASSERT_EQUAL(hx_golden_set(g, "zeta", "naive:step=full", f1.id, f1.text, &e, &err), LM_OK);
    CU_ASSERT_EQUAL(hx_golden_set(g, "alpha", "naive:step=1", f1.id, f1.text, &e, &err), LM_OK);
    CU_ASSERT_EQUAL(hx_golden_set(g, "alpha", "blas:step=1", f2.id, f2.text, &e, &err), LM_OK);
    CU_ASSERT_EQUAL(hx_golden_set(g, "alpha", "blas:step=1", f1.id, f1.text, &e, &err), LM_OK);
    CU_ASSERT_EQUAL(hx_golden_count(g), 4);
    CU_ASSERT_EQUAL_FATAL(hx_golden_save(g, path, &err), LM_OK);
    CU_ASSERT_EQUAL(count_files(dir), 1); /* no temp file left behind */
    hx_golden_free(g);

    char *text;
    size_t n;
    CU_ASSERT_EQUAL_FATAL(lm_read_file(&text, &n, path, SIZE_MAX, &err), LM_OK);
    /* Sorted keys: top level, cases, configs. */
    const char *ka = strstr(text, "\"cases\""), *kf = strstr(text, "\"format\""),
               *kp = strstr(text, "\"platforms\""), *kv = strstr(text, "\"version\"");
    CU_ASSERT(ka && kf && kp && kv && ka < kf && kf < kp && kp < kv);
    const char *ca = strstr(text, "\"alpha\""), *cz = strstr(text, "\"zeta\"");
    CU_ASSERT(ca && cz && ca < cz);
    const char *b1 = strstr(text, "\"blas:step=1\""), *n1 = strstr(text, "\"naive:step=1\"");
    CU_ASSERT(b1 && n1 && b1 < n1);
    CU_ASSERT_EQUAL(text[n - 1], '\n');
    free(text);

    CU_ASSERT_EQUAL_FATAL(hx_golden_load(&g, path, false, &err), LM_OK);
    hx_golden_entry back;
    bool found;
    CU_ASSERT_EQUAL(hx_golden_find(g, "alpha", "blas:step=1", f2.id, &back, &found, &err), LM_OK);
    CU_ASSERT(found);
    CU_ASSERT_STRING_EQUAL(back.hash_hex, e.hash_hex);
    CU_ASSERT_EQUAL(back.position, 11);
    CU_ASSERT_EQUAL(back.n_top, 5);
    /* Logits come back as the same float32 (9 significant digits round-trip float32). */
    CU_ASSERT_EQUAL(memcmp(back.top_ids, e.top_ids, sizeof e.top_ids), 0);
    CU_ASSERT_EQUAL(memcmp(back.top_logits, e.top_logits, sizeof e.top_logits), 0);
    /* The input it is pinned to comes back too. */
    CU_ASSERT_STRING_EQUAL(back.model_hash, test_input.model_hash);
    CU_ASSERT_STRING_EQUAL(back.tokens_hash, test_input.tokens_hash);
    CU_ASSERT_STRING_EQUAL(back.version, test_input.version);
    CU_ASSERT_FALSE(hx_golden_input_differs(&back, &test_input, NULL, 0));
    CU_ASSERT_EQUAL(hx_golden_find(g, "alpha", "blas:step=2", f2.id, &back, &found, &err), LM_OK);
    CU_ASSERT_FALSE(found);
    CU_ASSERT_EQUAL(hx_golden_find(g, "zeta", "naive:step=full", f2.id, &back, &found, &err), LM_OK);
    CU_ASSERT_FALSE(found); /* other platform */
    /* Replace an entry. */
    h[0] ^= 1;
    hx_golden_entry_fill(&e, h, logits, 7, 11, &test_input);
    CU_ASSERT_EQUAL(hx_golden_set(g, "zeta", "naive:step=full", f1.id, f1.text, &e, &err), LM_OK);
    CU_ASSERT_EQUAL(hx_golden_count(g), 4);
    CU_ASSERT_EQUAL(hx_golden_find(g, "zeta", "naive:step=full", f1.id, &back, &found, &err), LM_OK);
    CU_ASSERT_STRING_EQUAL(back.hash_hex, e.hash_hex);
    /* A save into a folder that does not exist fails and writes nothing. */
    char nowhere[1200];
    snprintf(nowhere, sizeof nowhere, "%s/missing/case.json", dir);
    CU_ASSERT_EQUAL(hx_golden_save(g, nowhere, &err), LM_E_IO);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, nowhere));
    lm_err_clear(&err);
    /* A non-finite summary logit cannot be written as JSON: refused, not written. */
    logits[1] = INFINITY;
    hx_golden_entry_fill(&e, h, logits, 7, 11, &test_input);
    CU_ASSERT_EQUAL(hx_golden_set(g, "zeta", "naive:step=2", f1.id, f1.text, &e, &err), LM_E_INPUT);
    hx_golden_free(g);
}

static void bad_file(const char *json, const char *needle)
{
    const char *p = tu_write_file("bad-golden.json", json, strlen(json));
    hx_golden *g = (hx_golden *)1;
    lm_err err = {0};
    CU_ASSERT_EQUAL(hx_golden_load(&g, p, true, &err), LM_E_INPUT);
    CU_ASSERT_PTR_NULL(g);
    if (strstr(err.msg, needle) == NULL)
        fprintf(stderr, "\n  message lacks '%s': %s\n", needle, err.msg);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, needle));
}

static void test_golden_malformed_files(void)
{
    bad_file("", "bad-golden.json:");
    bad_file("{\"format\": ", "bad-golden.json:1:");
    bad_file("[]", "not a kvdrift golden file");
    bad_file("{\"format\":\"other\",\"version\":1,\"platforms\":{},\"cases\":{}}",
             "not a kvdrift golden file");
    bad_file("{\"format\":\"kvdrift-golden\",\"version\":3,\"platforms\":{},\"cases\":{}}",
             "version");
    /* Input fields: all three or none. */
    bad_file("{\"format\":\"kvdrift-golden\",\"version\":2,\"platforms\":{},\"cases\":"
             "{\"c\":{\"k\":{\"fp\":{\"xxh3_128\":\"000102030405060708090a0b0c0d0e0f\","
             "\"position\":1,\"top5\":[],\"model_xxh3_128\":\"000102030405060708090a0b0c0d0e0f\"}}}}}",
             "tokens_xxh3_64");
    bad_file("{\"format\":\"kvdrift-golden\",\"version\":2,\"platforms\":{},\"cases\":"
             "{\"c\":{\"k\":{\"fp\":{\"xxh3_128\":\"000102030405060708090a0b0c0d0e0f\","
             "\"position\":1,\"top5\":[],\"model_xxh3_128\":\"0001\",\"tokens_xxh3_64\":"
             "\"0011223344556677\",\"kvdrift_version\":\"1\"}}}}}",
             "model_xxh3_128");
    bad_file("{\"format\":\"kvdrift-golden\",\"version\":1,\"platforms\":{},\"cases\":[]}",
             "must be objects");
    bad_file("{\"format\":\"kvdrift-golden\",\"version\":1,\"platforms\":{\"a\":1},\"cases\":{}}",
             "platforms.a");
    bad_file("{\"format\":\"kvdrift-golden\",\"version\":1,\"platforms\":{},\"cases\":"
             "{\"c\":{\"blas:step=1\":{\"fp\":{\"xxh3_128\":\"00\",\"position\":0,\"top5\":[]}}}}}",
             "cases.c.blas:step=1.fp: xxh3_128");
    bad_file("{\"format\":\"kvdrift-golden\",\"version\":1,\"platforms\":{},\"cases\":"
             "{\"c\":{\"k\":{\"fp\":{\"xxh3_128\":\"000102030405060708090a0b0c0d0e0f\","
             "\"position\":-1,\"top5\":[]}}}}}",
             "position");
    bad_file("{\"format\":\"kvdrift-golden\",\"version\":1,\"platforms\":{},\"cases\":"
             "{\"c\":{\"k\":{\"fp\":{\"xxh3_128\":\"000102030405060708090a0b0c0d0e0f\","
             "\"position\":1,\"top5\":[{\"id\":\"x\",\"logit\":1}]}}}}}",
             "top5 item");
    bad_file("{\"format\":\"kvdrift-golden\",\"format\":\"kvdrift-golden\"}", "duplicate");
    bad_file("{\"format\":\"kvdrift-golden\",\"version\":2,\"platforms\":{},\"cases\":{},"
             "\"metadata\":[]}", "'metadata' must be an object");
    hx_golden *g;
    lm_err err = {0};
    char absent[1024];
    snprintf(absent, sizeof absent, "%s/none.json", tu_tmpdir());
    CU_ASSERT_EQUAL(hx_golden_load(&g, absent, false, &err), LM_E_IO);
    /* over the size cap: refused before it is parsed, naming the limit */
    size_t big_n = (size_t)HX_GOLDEN_MAX_BYTES + 1;
    char *big = malloc(big_n);
    CU_ASSERT_FATAL(big != NULL);
    memset(big, ' ', big_n);
    big[0] = '{';
    big[big_n - 1] = '}';
    const char *bp = tu_write_file("big-golden.json", big, big_n);
    free(big);
    lm_err_clear(&err);
    CU_ASSERT_EQUAL(hx_golden_load(&g, bp, false, &err), LM_E_INPUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "limit"));
    /* a FIFO: refused at once, never waited on */
    char fifo[1100];
    snprintf(fifo, sizeof fifo, "%s/golden.fifo", tu_tmpdir());
    CU_ASSERT_FATAL(mkfifo(fifo, 0600) == 0);
    lm_err_clear(&err);
    CU_ASSERT_EQUAL(hx_golden_load(&g, fifo, true, &err), LM_E_INPUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "not a regular file"));
}

/* A golden is pinned to its input: each of model, token ids and version, changed alone, makes
 * the entry differ (and names what changed); a version-1 entry (no input recorded) always
 * differs; bless's pruning removes exactly the differing entries. */
static void test_golden_input_pinning(void)
{
    float logits[3] = {1.0f, 2.0f, 3.0f};
    uint8_t h[16] = {1};
    hx_golden_entry e;
    hx_golden_entry_fill(&e, h, logits, 3, 0, &test_input);
    char why[256];
    CU_ASSERT_FALSE(hx_golden_input_differs(&e, &test_input, why, sizeof why));
    hx_golden_input in = test_input;
    in.model_hash[31] = 'e';
    CU_ASSERT(hx_golden_input_differs(&e, &in, why, sizeof why));
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "model changed"));
    in = test_input;
    in.tokens_hash[0] = 'f';
    CU_ASSERT(hx_golden_input_differs(&e, &in, why, sizeof why));
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "token ids changed"));
    in = test_input;
    in.version = "9.9.10";
    CU_ASSERT(hx_golden_input_differs(&e, &in, why, sizeof why));
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "kvdrift 9.9.9"));
    /* Another engine's entry is pinned to its engine_version too: another version, or
     * kvdrift's own engine (none), differs; it is written and read back beside the rest. */
    hx_golden_input ein = test_input;
    ein.engine_version = "llama-cpp-python 0.3.36";
    hx_golden_entry ee;
    hx_golden_entry_fill(&ee, h, logits, 3, 0, &ein);
    CU_ASSERT_FALSE(hx_golden_input_differs(&ee, &ein, why, sizeof why));
    CU_ASSERT(hx_golden_input_differs(&ee, &test_input, why, sizeof why));
    CU_ASSERT(hx_golden_input_differs(&e, &ein, why, sizeof why));
    in = ein;
    in.engine_version = "llama-cpp-python 0.3.37";
    CU_ASSERT(hx_golden_input_differs(&ee, &in, why, sizeof why));
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "engine version changed (blessed on 'llama-cpp-python "
                                       "0.3.36', now 'llama-cpp-python 0.3.37')"));
    {
        hx_golden *ge = NULL;
        lm_err ee_err = {0};
        hx_golden_entry back;
        bool found = false;
        char gp[1024];
        snprintf(gp, sizeof gp, "%s/golden-engine.json", tu_tmpdir());
        CU_ASSERT_EQUAL_FATAL(hx_golden_create(&ge, &ee_err), LM_OK);
        CU_ASSERT_EQUAL(hx_golden_set(ge, "c", "llamacpp", "k", "adapter=llamacpp", &ee,
                                      &ee_err), LM_OK);
        CU_ASSERT_EQUAL(hx_golden_save(ge, gp, &ee_err), LM_OK);
        hx_golden_free(ge);
        CU_ASSERT_EQUAL_FATAL(hx_golden_load(&ge, gp, false, &ee_err), LM_OK);
        CU_ASSERT_EQUAL(hx_golden_find(ge, "c", "llamacpp", "k", &back, &found, &ee_err), LM_OK);
        CU_ASSERT(found);
        CU_ASSERT_STRING_EQUAL(back.engine_version, "llama-cpp-python 0.3.36");
        CU_ASSERT(hx_golden_find_stale(ge, "c", "llamacpp", &in, why, sizeof why));
        CU_ASSERT_FALSE(hx_golden_find_stale(ge, "c", "llamacpp", &ein, why, sizeof why));
        hx_golden_free(ge);
    }
    /* Token hash: order and value matter, and it is not the hash of nothing. */
    int32_t a[3] = {1, 2, 3}, b[3] = {1, 3, 2};
    char ha[17], hb[17], h0[17];
    hx_tokens_hash(ha, a, 3);
    hx_tokens_hash(hb, b, 3);
    hx_tokens_hash(h0, a, 2);
    CU_ASSERT_STRING_NOT_EQUAL(ha, hb);
    CU_ASSERT_STRING_NOT_EQUAL(ha, h0);
    CU_ASSERT_EQUAL(strspn(ha, "0123456789abcdef"), 16);

    /* A version-1 file is read; its entries are stale; pruning removes them only. */
    static const char v1[] = "{\"format\":\"kvdrift-golden\",\"version\":1,\"platforms\":{},"
                             "\"cases\":{\"c\":{\"k\":{\"fp\":{\"xxh3_128\":"
                             "\"000102030405060708090a0b0c0d0e0f\",\"position\":1,\"top5\":[]}}}}}";
    const char *p = tu_write_file("golden-v1.json", v1, strlen(v1));
    hx_golden *g = NULL;
    lm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(hx_golden_load(&g, p, false, &err), LM_OK);
    hx_golden_entry back;
    bool found = false;
    CU_ASSERT_EQUAL(hx_golden_find(g, "c", "k", "fp", &back, &found, &err), LM_OK);
    CU_ASSERT(found);
    CU_ASSERT(hx_golden_input_differs(&back, &test_input, why, sizeof why));
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "golden format 1"));
    hx_fingerprint f1 = fake_fp("Zen");
    CU_ASSERT_EQUAL(hx_golden_set(g, "c", "k", f1.id, f1.text, &e, &err), LM_OK);
    CU_ASSERT_EQUAL(hx_golden_count(g), 2);
    CU_ASSERT_EQUAL(hx_golden_prune_stale(g, "c", "k", &test_input), 1);
    CU_ASSERT_EQUAL(hx_golden_count(g), 1);
    CU_ASSERT_EQUAL(hx_golden_find(g, "c", "k", f1.id, &back, &found, &err), LM_OK);
    CU_ASSERT(found);
    hx_golden_free(g);
}

/* A configuration's key holds only what can change its bits: the CPU model, its ISA, the
 * other backends' parts, the C library and the platform's float libm probe never enter it;
 * the backend's own describe text, the compiler, the build flags and the model's RoPE probe
 * do. */
static void test_golden_key_parts(void)
{
    const char *rope = "0123456789abcdef";
    hx_fingerprint a;
    hx_fingerprint_detect(&a);
    hx_fingerprint b = a;
    snprintf(b.cpu, sizeof b.cpu, "Another CPU");
    snprintf(b.isa, sizeof b.isa, "sse2");
    snprintf(b.backends, sizeof b.backends, "blas=x; blas_core=Sandybridge");
    snprintf(b.libm, sizeof b.libm, "expf=sse2 probe=00000000");
    hx_fingerprint_finish(&b);
    CU_ASSERT_STRING_NOT_EQUAL(a.id, b.id); /* the platforms differ ... */
    hx_golden_key ka, kb;
    hx_golden_key_make(&ka, &a, "naive", NULL, rope);
    hx_golden_key_make(&kb, &b, "naive", "", rope);
    CU_ASSERT_STRING_EQUAL(ka.id, kb.id); /* ... naive's key does not */
    CU_ASSERT_PTR_NULL(strstr(ka.text, "cpu="));
    CU_ASSERT_PTR_NULL(strstr(ka.text, "blas"));
    CU_ASSERT_PTR_NOT_NULL(strstr(ka.text, "rope=0123456789abcdef"));
    hx_golden_key_make(&kb, &a, "naive", NULL, "fedcba9876543210");
    CU_ASSERT_STRING_NOT_EQUAL(ka.id, kb.id); /* other libm results, another key */
    hx_golden_key_make(&ka, &a, "blas", "blas=OpenBLAS 0.3.21; blas_core=SkylakeX", rope);
    hx_golden_key_make(&kb, &b, "blas", "blas=OpenBLAS 0.3.21; blas_core=SkylakeX", rope);
    CU_ASSERT_STRING_EQUAL(ka.id, kb.id); /* blas: same core, same key */
    hx_golden_key_make(&kb, &a, "blas", "blas=OpenBLAS 0.3.21; blas_core=Haswell", rope);
    CU_ASSERT_STRING_NOT_EQUAL(ka.id, kb.id); /* another core, another key */
    hx_golden_key_make(&kb, &a, "naive", NULL, rope);
    CU_ASSERT_STRING_NOT_EQUAL(ka.id, kb.id); /* backends never share a key */
    b = a;
    snprintf(b.compiler, sizeof b.compiler, "gcc 99");
    hx_golden_key_make(&ka, &a, "naive", NULL, rope);
    hx_golden_key_make(&kb, &b, "naive", NULL, rope);
    CU_ASSERT_STRING_NOT_EQUAL(ka.id, kb.id); /* another compiler, another key */
    /* The registry's hooks: naive reports nothing, blas its core (OPENBLAS_CORETYPE). */
    hx_golden_key_of(&ka, &a, "naive", rope);
    hx_golden_key_make(&kb, &a, "naive", NULL, rope);
    CU_ASSERT_STRING_EQUAL(ka.id, kb.id);
    hx_golden_key_of(&ka, &a, "blas", rope);
    CU_ASSERT_PTR_NOT_NULL(strstr(ka.text, "blas_core="));
}

/* The C library's name and version change no bit of naive or det (their only libm use is
 * RoPE's pow/cos/sin, which the rope probe covers): a machine with another glibc and the same
 * probe shares their goldens. Fails as soon as any platform-only part (libc, the platform's
 * libm variant and probe, CPU, ISA, other backends' words) enters the key of a backend that
 * reports nothing. */
static void test_golden_key_no_libc(void)
{
    const char *rope = "0123456789abcdef";
    hx_fingerprint a;
    hx_fingerprint_detect(&a);
    static const char *const bare[] = {"naive", "det"};
    for (size_t i = 0; i < sizeof bare / sizeof bare[0]; ++i) {
        hx_golden_key ka, kb;
        hx_golden_key_of(&ka, &a, bare[i], rope);
        CU_ASSERT_PTR_NULL(strstr(ka.text, "libc"));
        CU_ASSERT_PTR_NULL(strstr(ka.text, a.libc)); /* "glibc 2.36": no version either */
        CU_ASSERT_PTR_NULL(strstr(ka.text, "libm"));
        for (int part = 0; part < 6; ++part) {
            hx_fingerprint b = a;
            char *f = part == 0   ? b.libc
                      : part == 1 ? b.libm
                      : part == 2 ? b.cpu
                      : part == 3 ? b.isa
                      : part == 4 ? b.backends
                                  : b.backends_brief;
            snprintf(f, 32, "%s", "changed-elsewhere 9.99");
            hx_fingerprint_finish(&b);
            CU_ASSERT_STRING_NOT_EQUAL(a.short_text, b.short_text); /* another platform */
            hx_golden_key_of(&kb, &b, bare[i], rope);
            CU_ASSERT_STRING_EQUAL(ka.text, kb.text);
            CU_ASSERT_STRING_EQUAL(ka.id, kb.id);
        }
    }
}

/* The rope probe is the engine's own RoPE tables for the model: deterministic, and it moves
 * with every input of those tables (theta, the sliding layers' theta, frequency factors, the
 * positions covered). */
static void test_golden_rope_probe(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/golden-rope.gguf", tu_tmpdir());
    lm_err err = {0};
    lm_model *m = NULL;
    CU_ASSERT_EQUAL_FATAL(hx_synth_write(path, "tiny", 3, LM_TYPE_F32, &err), LM_OK);
    CU_ASSERT_EQUAL_FATAL(lm_model_load(&m, path, &err), LM_OK);
    char p0[17], p1[17], q[17];
    CU_ASSERT_EQUAL_FATAL(hx_golden_rope_probe(p0, m, 24, &err), LM_OK);
    CU_ASSERT_EQUAL(hx_golden_rope_probe(p1, m, 24, &err), LM_OK);
    CU_ASSERT_STRING_EQUAL(p0, p1);
    CU_ASSERT_EQUAL(strlen(p0), 16);
    CU_ASSERT_EQUAL(strspn(p0, "0123456789abcdef"), 16);
    CU_ASSERT_EQUAL(hx_golden_rope_probe(q, m, 25, &err), LM_OK);
    CU_ASSERT_STRING_NOT_EQUAL(q, p0);
    const float theta = m->hp.rope_theta;
    m->hp.rope_theta = theta * 2.0f;
    CU_ASSERT_EQUAL(hx_golden_rope_probe(q, m, 24, &err), LM_OK);
    CU_ASSERT_STRING_NOT_EQUAL(q, p0);
    m->hp.rope_theta = theta;
    m->hp.rope_theta_swa = theta * 100.0f;
    CU_ASSERT_EQUAL(hx_golden_rope_probe(q, m, 24, &err), LM_OK);
    CU_ASSERT_STRING_NOT_EQUAL(q, p0);
    m->hp.rope_theta_swa = theta; /* equal to theta: one table, as the engine computes */
    CU_ASSERT_EQUAL(hx_golden_rope_probe(q, m, 24, &err), LM_OK);
    CU_ASSERT_STRING_EQUAL(q, p0);
    m->hp.rope_theta_swa = 0.0f;
    const uint32_t half = m->hp.n_rot / 2;
    float *fac = malloc(half * sizeof *fac);
    CU_ASSERT_PTR_NOT_NULL_FATAL(fac);
    for (uint32_t i = 0; i < half; ++i)
        fac[i] = i < half / 2 ? 1.0f : 4.0f;
    m->rope_freqs = fac; /* test-only: as if the file carried rope_freqs.weight */
    CU_ASSERT_EQUAL(hx_golden_rope_probe(q, m, 24, &err), LM_OK);
    CU_ASSERT_STRING_NOT_EQUAL(q, p0);
    m->rope_freqs = NULL;
    free(fac);
    CU_ASSERT_EQUAL(hx_golden_rope_probe(q, m, 0, &err), LM_E_INTERNAL);
    lm_model_free(m);
}

void test_golden_register(void)
{
    CU_pSuite s = CU_add_suite("golden", NULL, NULL);
    CU_add_test(s, "test_golden_fingerprint", test_golden_fingerprint);
    CU_add_test(s, "test_golden_roundtrip_sorted_atomic", test_golden_roundtrip_sorted_atomic);
    CU_add_test(s, "test_golden_malformed_files", test_golden_malformed_files);
    CU_add_test(s, "test_golden_input_pinning", test_golden_input_pinning);
    CU_add_test(s, "test_golden_key_parts", test_golden_key_parts);
    CU_add_test(s, "test_golden_key_no_libc", test_golden_key_no_libc);
    CU_add_test(s, "test_golden_rope_probe", test_golden_rope_probe);
}
