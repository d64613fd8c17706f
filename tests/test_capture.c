/* test_capture.c — canonical serialization and its XXH3-128, against bytes built by hand. */
#include "model/capture.h"
#include "kvd_util.h"
#include "test_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

static void le32(unsigned char **p, uint32_t v)
{
    for (int i = 0; i < 4; ++i)
        *(*p)++ = (unsigned char)(v >> (8 * i));
}

static hx_capture *make(void)
{
    hx_capture_shape s = {.n_layer = 2, .n_kv_head = 2, .head_dim = 3, .n_vocab = 5,
                          .n_prompt = 2, .n_tokens = 4, .n_pos = 2};
    hx_capture *c;
    lm_err err = {0};
    CU_ASSERT_FATAL(hx_capture_create(&c, &s, &err) == LM_OK);
    uint64_t st = tu_seed();
    for (uint32_t i = 0; i < s.n_tokens; ++i)
        c->tokens[i] = (int32_t)(i * 1000 + 7);
    size_t kv = hx_capture_kv_elems(&s);
    CU_ASSERT_EQUAL(kv, 12);
    for (uint32_t l = 0; l < s.n_layer; ++l)
        for (size_t i = 0; i < kv; ++i) {
            c->k[l][i] = tu_rand_f32(&st);
            c->v[l][i] = tu_rand_f32(&st);
        }
    c->positions[0] = 1;
    c->positions[1] = 2;
    for (size_t i = 0; i < (size_t)s.n_pos * s.n_vocab; ++i)
        c->logits[i] = tu_rand_f32(&st) * 10.0f;
    return c;
}

/* The documented layout, written out field by field. */
static size_t by_hand(unsigned char *buf, const hx_capture *c)
{
    unsigned char *p = buf;
    const hx_capture_shape *s = &c->shape;
    uint32_t head[8] = {1, s->n_layer, s->n_kv_head, s->head_dim, s->n_vocab, s->n_prompt,
                        s->n_tokens, s->n_pos};
    for (int i = 0; i < 8; ++i)
        le32(&p, head[i]);
    for (uint32_t i = 0; i < s->n_tokens; ++i)
        le32(&p, (uint32_t)c->tokens[i]);
    size_t kv = hx_capture_kv_elems(s);
    uint32_t u;
    for (uint32_t l = 0; l < s->n_layer; ++l) {
        for (size_t i = 0; i < kv; ++i) {
            memcpy(&u, &c->k[l][i], 4);
            le32(&p, u);
        }
        for (size_t i = 0; i < kv; ++i) {
            memcpy(&u, &c->v[l][i], 4);
            le32(&p, u);
        }
    }
    for (uint32_t i = 0; i < s->n_pos; ++i)
        le32(&p, c->positions[i]);
    for (size_t i = 0; i < (size_t)s->n_pos * s->n_vocab; ++i) {
        memcpy(&u, &c->logits[i], 4);
        le32(&p, u);
    }
    return (size_t)(p - buf);
}

static void test_capture_hash_matches_layout(void)
{
    hx_capture *c = make();
    unsigned char buf[1024];
    size_t n = by_hand(buf, c);
    CU_ASSERT_EQUAL(n, 4 * (8 + 4 + 2 * 2 * 12 + 2 + 10));
    XXH128_canonical_t can;
    XXH128_canonicalFromHash(&can, XXH3_128bits(buf, n));
    uint8_t h[16];
    lm_err err = {0};
    CU_ASSERT_EQUAL(hx_capture_hash(h, c, &err), LM_OK);
    CU_ASSERT_EQUAL(memcmp(h, can.digest, 16), 0);
    /* The stream form is the same bytes. */
    char path[1024];
    snprintf(path, sizeof path, "%s/cap.bin", tu_tmpdir());
    FILE *f = fopen(path, "wb");
    CU_ASSERT_FATAL(f != NULL);
    CU_ASSERT_EQUAL(hx_capture_write(c, f, &err), LM_OK);
    fclose(f);
    f = fopen(path, "rb");
    unsigned char back[1024];
    size_t nb = fread(back, 1, sizeof back, f);
    fclose(f);
    CU_ASSERT_EQUAL(nb, n);
    CU_ASSERT_EQUAL(memcmp(back, buf, n), 0);
    /* hex round trip */
    char hex[33];
    lm_hex_encode(hex, h, 16);
    CU_ASSERT_EQUAL(strlen(hex), 32);
    uint8_t h2[16];
    CU_ASSERT_EQUAL(hx_hash_from_hex(h2, hex, &err), LM_OK);
    CU_ASSERT_EQUAL(memcmp(h, h2, 16), 0);
    CU_ASSERT_EQUAL(hx_hash_from_hex(h2, "xyz", &err), LM_E_INPUT);
    lm_err_clear(&err);
    hex[5] = 'g';
    CU_ASSERT_EQUAL(hx_hash_from_hex(h2, hex, &err), LM_E_INPUT);
    CU_ASSERT_EQUAL(hx_capture_row(c, 2), 1);
    CU_ASSERT_EQUAL(hx_capture_row(c, 0), -1);
    hx_capture_free(c);
}

static void test_capture_every_bit_counts(void)
{
    hx_capture *c = make();
    uint8_t h0[16], h[16];
    lm_err err = {0};
    CU_ASSERT_EQUAL(hx_capture_hash(h0, c, &err), LM_OK);
    /* One ulp in the last V element of the last layer. */
    float *last = &c->v[1][11];
    float keep = *last;
    *last = nextafterf(keep, 2.0f);
    hx_capture_hash(h, c, &err);
    CU_ASSERT_NOT_EQUAL(memcmp(h, h0, 16), 0);
    *last = keep;
    /* -0 vs +0 in a logit. */
    c->logits[3] = 0.0f;
    hx_capture_hash(h0, c, &err);
    c->logits[3] = -0.0f;
    hx_capture_hash(h, c, &err);
    CU_ASSERT_NOT_EQUAL(memcmp(h, h0, 16), 0);
    c->logits[3] = 0.0f;
    /* A generated token. */
    c->tokens[3] ^= 1;
    hx_capture_hash(h, c, &err);
    CU_ASSERT_NOT_EQUAL(memcmp(h, h0, 16), 0);
    c->tokens[3] ^= 1;
    /* K and V swapped: different bytes order, different hash. */
    float *t = c->k[0];
    c->k[0] = c->v[0];
    c->v[0] = t;
    hx_capture_hash(h, c, &err);
    CU_ASSERT_NOT_EQUAL(memcmp(h, h0, 16), 0);
    c->v[0] = c->k[0];
    c->k[0] = t;
    hx_capture_hash(h, c, &err);
    CU_ASSERT_EQUAL(memcmp(h, h0, 16), 0);
    /* The shape is hashed: 2 heads x 3 dims vs 3 heads x 2 dims, same floats. */
    c->shape.n_kv_head = 3;
    c->shape.head_dim = 2;
    hx_capture_hash(h, c, &err);
    CU_ASSERT_NOT_EQUAL(memcmp(h, h0, 16), 0);
    c->shape.n_kv_head = 2;
    c->shape.head_dim = 3;
    hx_capture_free(c);
}

static void test_capture_empty_and_errors(void)
{
    hx_capture_shape s = {0};
    hx_capture *c;
    lm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(hx_capture_create(&c, &s, &err), LM_OK);
    uint8_t h[16];
    CU_ASSERT_EQUAL(hx_capture_hash(h, c, &err), LM_OK);
    unsigned char head[32] = {1};
    XXH128_canonical_t can;
    XXH128_canonicalFromHash(&can, XXH3_128bits(head, 32));
    CU_ASSERT_EQUAL(memcmp(h, can.digest, 16), 0); /* the header alone */
    hx_capture_free(c);
    hx_capture_free(NULL);
    s.n_prompt = 3;
    s.n_tokens = 2;
    CU_ASSERT_EQUAL(hx_capture_create(&c, &s, &err), LM_E_INPUT);
    CU_ASSERT_PTR_NULL(c);
    lm_err_clear(&err);
    hx_capture_shape huge = {.n_layer = 1, .n_kv_head = 0xffffffffu, .head_dim = 0xffffffffu,
                             .n_prompt = 0xffffffffu, .n_tokens = 0xffffffffu};
    CU_ASSERT_EQUAL(hx_capture_create(&c, &huge, &err), LM_E_NOMEM);
}

void test_capture_register(void)
{
    CU_pSuite s = CU_add_suite("capture", NULL, NULL);
    CU_add_test(s, "test_capture_hash_matches_layout", test_capture_hash_matches_layout);
    CU_add_test(s, "test_capture_every_bit_counts", test_capture_every_bit_counts);
    CU_add_test(s, "test_capture_empty_and_errors", test_capture_empty_and_errors);
}
