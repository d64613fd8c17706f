/* test_ref_capture.c — capture files, .npy files and the disk cache (ref_capture.c,
 * ref_cache.c): broken files first (empty, truncated, flipped byte, bad magic), then round
 * trips, then the cache's hit / corrupt-entry / mismatch behaviour. */
#include "cli/commands.h"
#include "kvd_ref.h"
#include "test_ref_model.h"
#include "test_util.h"

#include <stdio.h>
#include <sys/stat.h>

static void make_capture(ref_capture *c, trm *t, lm_err *err)
{
    lm_hparams hp = trm_hparams(LM_ROPE_NORM);
    trm_build(t, &hp, false, 21);
    static const int32_t tok[5] = {1, 2, 3, 4, 5};
    ref_request rq = {.tokens = tok, .n_tokens = 5, .n_prompt = 3, .n_threads = 1};
    CU_ASSERT_FATAL(ref_compute(c, &t->r, &rq, err) == LM_OK);
}

static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    CU_ASSERT_FATAL(f != NULL);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*n + 1);
    CU_ASSERT_FATAL(fread(b, 1, *n, f) == *n);
    fclose(f);
    return b;
}

static bool captures_equal(const ref_capture *a, const ref_capture *b)
{
    uint64_t kv = (uint64_t)a->n_layer * a->n_prompt * a->n_kv_head * a->head_dim;
    return a->version == b->version && a->prec == b->prec &&
           memcmp(a->model_hash, b->model_hash, 16) == 0 && a->n_tokens == b->n_tokens &&
           a->n_prompt == b->n_prompt && a->n_layer == b->n_layer &&
           a->n_kv_head == b->n_kv_head && a->head_dim == b->head_dim &&
           a->n_vocab == b->n_vocab && a->n_pos == b->n_pos &&
           memcmp(a->tokens, b->tokens, a->n_tokens * 4) == 0 &&
           memcmp(a->pos, b->pos, a->n_pos * 4) == 0 && memcmp(a->k, b->k, kv * 8) == 0 &&
           memcmp(a->v, b->v, kv * 8) == 0 && a->n_embd == b->n_embd &&
           memcmp(a->hidden, b->hidden, (a->n_layer + 1ull) * a->n_prompt * a->n_embd * 8) == 0 &&
           memcmp(a->logits, b->logits, (size_t)a->n_pos * a->n_vocab * 8) == 0;
}

static void test_ref_capture_broken_files(void)
{
    ref_capture c, r;
    trm t;
    lm_err err = {0};
    make_capture(&c, &t, &err);
    char path[1024];
    snprintf(path, sizeof path, "%s/good.kvdref", tu_tmpdir());
    CU_ASSERT_FATAL(ref_capture_write(&c, path, &err) == LM_OK);
    size_t n;
    unsigned char *b = slurp(path, &n);
    /* missing file */
    CU_ASSERT_EQUAL(ref_capture_read(&r, "/nonexistent/x.kvdref", &err), LM_E_IO);
    /* empty file */
    lm_err_clear(&err);
    CU_ASSERT_EQUAL(ref_capture_read(&r, tu_write_file("empty.kvdref", b, 0), &err), LM_E_INPUT);
    CU_ASSERT(strstr(err.msg, "magic") != NULL);
    /* bad magic */
    b[0] ^= 1;
    lm_err_clear(&err);
    CU_ASSERT_EQUAL(ref_capture_read(&r, tu_write_file("magic.kvdref", b, n), &err), LM_E_INPUT);
    CU_ASSERT(strstr(err.msg, "magic") != NULL);
    b[0] ^= 1;
    /* truncated: in the header, and by one byte */
    lm_err_clear(&err);
    CU_ASSERT_EQUAL(ref_capture_read(&r, tu_write_file("t1.kvdref", b, 40), &err), LM_E_INPUT);
    CU_ASSERT(strstr(err.msg, "truncated") != NULL);
    lm_err_clear(&err);
    CU_ASSERT_EQUAL(ref_capture_read(&r, tu_write_file("t2.kvdref", b, n - 1), &err), LM_E_INPUT);
    CU_ASSERT(strstr(err.msg, "truncated") != NULL);
    /* one flipped bit in a tensor and in the stored hash: hash mismatch */
    b[n / 2] ^= 0x10;
    lm_err_clear(&err);
    CU_ASSERT_EQUAL(ref_capture_read(&r, tu_write_file("flip.kvdref", b, n), &err), LM_E_INPUT);
    CU_ASSERT(strstr(err.msg, "hash") != NULL);
    b[n / 2] ^= 0x10;
    b[n - 1] ^= 0x01;
    CU_ASSERT_EQUAL(ref_capture_read(&r, tu_write_file("flip2.kvdref", b, n), &err), LM_E_INPUT);
    b[n - 1] ^= 0x01;
    /* a header count that implies another size: refused before any allocation of that size */
    b[52] = 0xff; b[53] = 0xff; b[54] = 0xff; b[55] = 0x7f; /* n_vocab */
    lm_err_clear(&err);
    CU_ASSERT_EQUAL(ref_capture_read(&r, tu_write_file("huge.kvdref", b, n), &err), LM_E_INPUT);
    free(b);
    /* n_pos = 0 (FORMAT.md: zero counts are refused), even with a correct size and hash */
    uint32_t n_pos = c.n_pos;
    c.n_pos = 0;
    snprintf(path, sizeof path, "%s/npos0.kvdref", tu_tmpdir());
    CU_ASSERT_FATAL(ref_capture_write(&c, path, &err) == LM_OK);
    lm_err_clear(&err);
    CU_ASSERT_EQUAL(ref_capture_read(&r, path, &err), LM_E_INPUT);
    CU_ASSERT(strstr(err.msg, "inconsistent") != NULL);
    c.n_pos = n_pos;
    ref_capture_free(&c);
    ref_capture_free(&c); /* idempotent */
    trm_free(&t);
}

static void test_ref_capture_roundtrip(void)
{
    ref_capture c, r;
    trm t;
    lm_err err = {0};
    make_capture(&c, &t, &err);
    CU_ASSERT_EQUAL(c.n_pos, 3);
    CU_ASSERT_EQUAL(c.pos[0], 2);
    CU_ASSERT_EQUAL(c.prec, REF_DEFAULT_PREC);
    char path[1024];
    snprintf(path, sizeof path, "%s/rt.kvdref", tu_tmpdir());
    CU_ASSERT_FATAL(ref_capture_write(&c, path, &err) == LM_OK);
    CU_ASSERT_FATAL(ref_capture_read(&r, path, &err) == LM_OK);
    CU_ASSERT(captures_equal(&c, &r)); /* bitwise, float64 included */
    CU_ASSERT_EQUAL(ref_capture_find_pos(&r, 3), 1);
    CU_ASSERT_EQUAL(ref_capture_find_pos(&r, 0), -1);
    /* the tensors start 8-byte aligned and the file ends with the 16-byte hash */
    size_t n;
    unsigned char *b = slurp(path, &n);
    uint64_t head = (72 + 4 * 5 + 4 * 3 + 7) / 8 * 8;
    uint64_t kv = (uint64_t)c.n_layer * c.n_prompt * c.n_kv_head * c.head_dim;
    uint64_t hid = (c.n_layer + 1ull) * c.n_prompt * c.n_embd;
    CU_ASSERT_EQUAL(n, head + 8 * (2 * kv + hid + (uint64_t)c.n_pos * c.n_vocab) + 16);
    double k0;
    memcpy(&k0, b + head, 8); /* little-endian host */
    CU_ASSERT(memcmp(&k0, &c.k[0], 8) == 0);
    free(b);
    ref_capture_free(&r);
    ref_capture_free(&c);
    trm_free(&t);
}

static void test_ref_capture_npy(void)
{
    ref_capture c;
    trm t;
    lm_err err = {0};
    make_capture(&c, &t, &err);
    char dir[1024], p[1100];
    snprintf(dir, sizeof dir, "%s/npy", tu_tmpdir());
    CU_ASSERT_FATAL(ref_capture_write_npy(&c, dir, &err) == LM_OK);
    snprintf(p, sizeof p, "%s/logits.npy", dir);
    size_t n;
    unsigned char *b = slurp(p, &n);
    CU_ASSERT(memcmp(b, "\x93NUMPY\x01\x00", 8) == 0);
    size_t hl = b[8] | (size_t)b[9] << 8;
    CU_ASSERT_EQUAL((10 + hl) % 64, 0);
    CU_ASSERT_EQUAL(b[10 + hl - 1], '\n');
    char hdr[256] = {0};
    memcpy(hdr, b + 10, hl < 255 ? hl : 255);
    char want[64];
    snprintf(want, sizeof want, "'shape': (3, %u)", c.n_vocab);
    CU_ASSERT(strstr(hdr, "'descr': '<f8'") != NULL);
    CU_ASSERT(strstr(hdr, "'fortran_order': False") != NULL);
    CU_ASSERT(strstr(hdr, want) != NULL);
    CU_ASSERT_EQUAL(n, 10 + hl + (size_t)3 * c.n_vocab * 8);
    CU_ASSERT(memcmp(b + 10 + hl, c.logits, (size_t)3 * c.n_vocab * 8) == 0);
    free(b);
    snprintf(p, sizeof p, "%s/layer01_v.npy", dir);
    b = slurp(p, &n);
    hl = b[8] | (size_t)b[9] << 8;
    memset(hdr, 0, sizeof hdr);
    memcpy(hdr, b + 10, hl < 255 ? hl : 255);
    snprintf(want, sizeof want, "'shape': (3, %u, %u)", c.n_kv_head, c.head_dim);
    CU_ASSERT(strstr(hdr, want) != NULL);
    CU_ASSERT(memcmp(b + 10 + hl, ref_capture_v(&c, 1), (size_t)3 * c.n_kv_head * c.head_dim * 8) == 0);
    free(b);
    /* one dimension is written "(n,)" as NumPy does */
    uint64_t shape1[1] = {2};
    const double d2[2] = {1.5, -2.0};
    snprintf(p, sizeof p, "%s/one.npy", dir);
    CU_ASSERT(ref_npy_write(p, d2, 1, shape1, &err) == LM_OK);
    b = slurp(p, &n);
    CU_ASSERT(memmem(b, n, "'shape': (2,)", 13) != NULL);
    free(b);
    ref_capture_free(&c);
    trm_free(&t);
}

static void entry_path(char *out, size_t cap, const char *dir, const ref_model *m,
                       const ref_request *rq)
{
    char key[33];
    ref_cache_key(key, m, rq);
    snprintf(out, cap, "%s/%s.kvdref", dir, key);
}

static void test_ref_capture_cache(void)
{
    trm t;
    lm_hparams hp = trm_hparams(LM_ROPE_NEOX);
    trm_build(&t, &hp, true, 31);
    const int32_t tok[4] = {7, 8, 9, 10};
    tu_log log = {0};
    ref_request rq = {.tokens = tok, .n_tokens = 4, .n_prompt = 4, .n_threads = 1,
                      .log = tu_log_keep, .log_user = &log};
    char dir[1024], path[1200];
    snprintf(dir, sizeof dir, "%s/cache/sub", tu_tmpdir()); /* created on demand, nested */
    ref_capture a, b;
    bool hit = true;
    lm_err err = {0};
    CU_ASSERT_FATAL(ref_cached(&a, &t.r, &rq, dir, &hit, &err) == LM_OK);
    CU_ASSERT(!hit);
    CU_ASSERT_FATAL(ref_cached(&b, &t.r, &rq, dir, &hit, &err) == LM_OK);
    CU_ASSERT(hit);
    CU_ASSERT(captures_equal(&a, &b));
    CU_ASSERT_EQUAL(log.n, 0); /* a miss stored, then a hit: nothing to warn about */
    ref_capture_free(&b);
    /* the key depends on precision, tokens, positions and the model */
    char k1[33], k2[33];
    ref_cache_key(k1, &t.r, &rq);
    ref_request r2 = rq;
    r2.prec = 128;
    ref_cache_key(k2, &t.r, &r2);
    CU_ASSERT(strcmp(k1, k2) != 0);
    r2 = rq;
    r2.n_prompt = 3;
    ref_cache_key(k2, &t.r, &r2);
    CU_ASSERT(strcmp(k1, k2) != 0);
    uint32_t dpos[1] = {3}; /* the default positions spelled out share the entry */
    r2 = rq;
    r2.pos = dpos;
    r2.n_pos = 1;
    ref_cache_key(k2, &t.r, &r2);
    CU_ASSERT_STRING_EQUAL(k1, k2);
    t.r.content_hash[0] ^= 1;
    ref_cache_key(k2, &t.r, &rq);
    CU_ASSERT(strcmp(k1, k2) != 0);
    t.r.content_hash[0] ^= 1;

    /* corrupt entry (one flipped bit): detected, recomputed, rewritten */
    entry_path(path, sizeof path, dir, &t.r, &rq);
    size_t n;
    unsigned char *raw = slurp(path, &n);
    raw[n / 2] ^= 4;
    FILE *f = fopen(path, "wb");
    fwrite(raw, 1, n, f);
    fclose(f);
    CU_ASSERT_FATAL(ref_cached(&b, &t.r, &rq, dir, &hit, &err) == LM_OK);
    CU_ASSERT(!hit);
    CU_ASSERT_EQUAL(log.n, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(log.last, "reference cache entry is corrupt ("));
    CU_ASSERT_PTR_NOT_NULL(strstr(log.last, "); recomputed"));
    CU_ASSERT(captures_equal(&a, &b));
    ref_capture_free(&b);
    CU_ASSERT_FATAL(ref_cached(&b, &t.r, &rq, dir, &hit, &err) == LM_OK);
    CU_ASSERT(hit); /* repaired */
    ref_capture_free(&b);
    /* truncated entry */
    f = fopen(path, "wb");
    fwrite(raw, 1, n / 3, f);
    fclose(f);
    CU_ASSERT_FATAL(ref_cached(&b, &t.r, &rq, dir, &hit, &err) == LM_OK);
    CU_ASSERT(!hit);
    CU_ASSERT_EQUAL(log.n, 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(log.last, "reference cache entry is corrupt ("));
    CU_ASSERT(captures_equal(&a, &b));
    ref_capture_free(&b);
    /* a valid capture of another request under this key: not trusted either */
    ref_capture other;
    ref_request r3 = rq;
    r3.n_prompt = 2;
    CU_ASSERT_FATAL(ref_compute(&other, &t.r, &r3, &err) == LM_OK);
    CU_ASSERT_FATAL(ref_capture_write(&other, path, &err) == LM_OK);
    CU_ASSERT_FATAL(ref_cached(&b, &t.r, &rq, dir, &hit, &err) == LM_OK);
    CU_ASSERT(!hit);
    CU_ASSERT_EQUAL(log.n, 3);
    CU_ASSERT_PTR_NOT_NULL(strstr(log.last, " holds another request; recomputed"));
    CU_ASSERT(captures_equal(&a, &b));
    ref_capture_free(&b);
    ref_capture_free(&other);
    /* an unusable cache folder (a regular file in the way) still gives the right answer */
    char blocked[1024];
    snprintf(blocked, sizeof blocked, "%s/blocked", tu_tmpdir());
    FILE *bf = fopen(blocked, "w");
    fclose(bf);
    snprintf(path, sizeof path, "%s/sub", blocked);
    CU_ASSERT_FATAL(ref_cached(&b, &t.r, &rq, path, &hit, &err) == LM_OK);
    CU_ASSERT(!hit);
    CU_ASSERT_EQUAL(log.n, 4);
    CU_ASSERT_PTR_NOT_NULL(strstr(log.last, "reference cache unusable ("));
    CU_ASSERT_PTR_NOT_NULL(strstr(log.last, "); computing without it"));
    CU_ASSERT(captures_equal(&a, &b));
    ref_capture_free(&b);
    rq.log = NULL; /* no callback: the library says nothing */
    CU_ASSERT_FATAL(ref_cached(&b, &t.r, &rq, path, &hit, &err) == LM_OK);
    CU_ASSERT_EQUAL(log.n, 4);
    CU_ASSERT(captures_equal(&a, &b));
    ref_capture_free(&b);
    /* no temp files left behind */
    char cmd[1300];
    snprintf(cmd, sizeof cmd, "ls %s | grep -q tmp", dir);
    CU_ASSERT(system(cmd) != 0);
    free(raw);
    ref_capture_free(&a);
    trm_free(&t);
}

static int run_ref(int n, const char **args)
{
    char *argv[16];
    for (int i = 0; i < n; ++i)
        argv[i] = (char *)args[i];
    argv[n] = NULL;
    fflush(stdout);
    return cmd_ref(n, argv);
}

/* The CLI: bad input of every kind is a one-line error and exit code 2. */
static void test_ref_capture_cli_bad_input(void)
{
    ref_capture c;
    trm t;
    lm_err err = {0};
    make_capture(&c, &t, &err);
    char good[1024], bad[1024];
    snprintf(good, sizeof good, "%s/cli.kvdref", tu_tmpdir());
    CU_ASSERT_FATAL(ref_capture_write(&c, good, &err) == LM_OK);
    size_t n;
    unsigned char *b = slurp(good, &n);
    b[n - 20] ^= 1;
    snprintf(bad, sizeof bad, "%s", tu_write_file("cli-bad.kvdref", b, n));
    free(b);
    CU_ASSERT_EQUAL(run_ref(3, (const char *[]){"ref", "--check", good}), 0);
    CU_ASSERT_EQUAL(run_ref(3, (const char *[]){"ref", "--check", bad}), 2);
    CU_ASSERT_EQUAL(run_ref(3, (const char *[]){"ref", "--check", "/nonexistent.kvdref"}), 2);
    CU_ASSERT_EQUAL(run_ref(2, (const char *[]){"ref", "--bogus"}), 2);
    CU_ASSERT_EQUAL(run_ref(3, (const char *[]){"ref", "/nonexistent.gguf", "--tokens=1"}), 2);
    ref_capture_free(&c);
    trm_free(&t);
    const char *mp = tu_model_path("stories260K.gguf");
    if (mp == NULL)
        return;
    char model[1024], out[1100], npy[1100], cache[1100];
    snprintf(model, sizeof model, "%s", mp);
    snprintf(out, sizeof out, "%s/cli-out.kvdref", tu_tmpdir());
    snprintf(npy, sizeof npy, "%s/cli-npy", tu_tmpdir());
    snprintf(cache, sizeof cache, "%s/cli-cache", tu_tmpdir());
    /* out of range (n_vocab 512), negative, malformed, precision out of range, no prompt; each
     * names -o out, which must not be written (the stat below could not fail without -o) */
    CU_ASSERT_EQUAL(run_ref(6, (const char *[]){"ref", model, "--tokens", "1,512", "-o", out}), 2);
    CU_ASSERT_EQUAL(run_ref(6, (const char *[]){"ref", model, "--tokens", "1,-3", "-o", out}), 2);
    CU_ASSERT_EQUAL(run_ref(6, (const char *[]){"ref", model, "--tokens", "1,,2", "-o", out}), 2);
    CU_ASSERT_EQUAL(run_ref(8, (const char *[]){"ref", model, "--tokens", "1", "--gen-tokens", "600",
                                                "-o", out}), 2);
    CU_ASSERT_EQUAL(run_ref(8, (const char *[]){"ref", model, "--tokens", "1", "--prec", "9", "-o",
                                                out}), 2);
    CU_ASSERT_EQUAL(run_ref(4, (const char *[]){"ref", model, "-o", out}), 2);
    struct stat sb;
    CU_ASSERT(stat(out, &sb) != 0); /* nothing written by the failures */
    /* and the good path: capture + npy + cache, then --check of what it wrote */
    CU_ASSERT_EQUAL(run_ref(12, (const char *[]){"ref", model, "--tokens", "1,403,407",
                                                 "--gen-tokens", "261", "-o", out, "--npy", npy,
                                                 "--cache", cache}), 0);
    ref_capture r;
    CU_ASSERT_FATAL(ref_capture_read(&r, out, &err) == LM_OK);
    CU_ASSERT_EQUAL(r.n_tokens, 4);
    CU_ASSERT_EQUAL(r.n_prompt, 3);
    CU_ASSERT_EQUAL(r.n_pos, 2);
    ref_capture_free(&r);
    CU_ASSERT_EQUAL(run_ref(3, (const char *[]){"ref", "--check", out}), 0);
}

void test_ref_capture_register(void)
{
    CU_pSuite s = CU_add_suite("ref_capture", NULL, NULL);
    CU_add_test(s, "test_ref_capture_broken_files", test_ref_capture_broken_files);
    CU_add_test(s, "test_ref_capture_roundtrip", test_ref_capture_roundtrip);
    CU_add_test(s, "test_ref_capture_npy", test_ref_capture_npy);
    CU_add_test(s, "test_ref_capture_cache", test_ref_capture_cache);
    CU_add_test(s, "test_ref_capture_cli_bad_input", test_ref_capture_cli_bad_input);
}
