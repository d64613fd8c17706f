/* fixtures.c — shared test fixtures (see fixtures.h). */
#include "fixtures.h"

#include "kvd_ref.h"

#include "model/capture.h"
#include "run/dumps_run.h"
#include "plan/synth.h"

#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

float *tf_fill(float *x, size_t n, float scale, float offset, uint64_t *st)
{
    for (size_t i = 0; i < n; ++i)
        x[i] = offset + scale * tu_rand_f32(st);
    return x;
}

float *tf_rand_vec(size_t n, float scale, uint64_t *st)
{
    float *x = malloc((n ? n : 1) * sizeof *x);
    CU_ASSERT_FATAL(x != NULL);
    return tf_fill(x, n, scale, 0.0f, st);
}

/* The next n floats of the arena, filled. */
static float *take(float **cur, size_t n, float scale, float offset, uint64_t *st)
{
    float *p = tf_fill(*cur, n, scale, offset, st);
    *cur += n;
    return p;
}

void tf_model_build(tf_model *t, const lm_hparams *hp, bool with_bias, const tf_scales *sc,
                    uint64_t seed)
{
    memset(t, 0, sizeof *t);
    t->m.hp = *hp;
    const size_t e = hp->n_embd, qd = (size_t)hp->n_head * hp->head_dim,
                 kd = (size_t)hp->n_head_kv * hp->head_dim, ff = hp->n_ff, V = hp->n_vocab;
    const size_t per_layer = e + qd * e + 2 * kd * e + e * qd + (with_bias ? qd + 2 * kd + e : 0) +
                             e + 3 * ff * e;
    const size_t total = V * e * (hp->tied_output ? 1 : 2) + e + per_layer * hp->n_layer;
    t->arena = malloc(total * sizeof *t->arena);
    t->layers = calloc(hp->n_layer ? hp->n_layer : 1, sizeof *t->layers);
    CU_ASSERT_FATAL(t->arena != NULL && t->layers != NULL);
    float *cur = t->arena;
    uint64_t st = seed;
    t->m.tok_embd = lm_wt_f32(take(&cur, V * e, sc->embd, 0.0f, &st));
    t->m.output_norm = take(&cur, e, sc->norm, 1.0f, &st);
    t->m.output = hp->tied_output ? t->m.tok_embd
                                   : lm_wt_f32(take(&cur, V * e, sc->embd, 0.0f, &st));
    for (uint32_t l = 0; l < hp->n_layer; ++l) {
        lm_layer *L = &t->layers[l];
        L->attn_norm = take(&cur, e, sc->norm, 1.0f, &st);
        L->wq = lm_wt_f32(take(&cur, qd * e, sc->wq, 0.0f, &st));
        L->wk = lm_wt_f32(take(&cur, kd * e, sc->wk, 0.0f, &st));
        L->wv = lm_wt_f32(take(&cur, kd * e, sc->wv, 0.0f, &st));
        L->wo = lm_wt_f32(take(&cur, e * qd, sc->wo, 0.0f, &st));
        if (with_bias) {
            L->bq = take(&cur, qd, sc->bias, 0.0f, &st);
            L->bk = take(&cur, kd, sc->bias, 0.0f, &st);
            L->bv = take(&cur, kd, sc->bias, 0.0f, &st);
            L->bo = take(&cur, e, sc->bias, 0.0f, &st);
        }
        L->ffn_norm = take(&cur, e, sc->norm, 1.0f, &st);
        L->w_gate = lm_wt_f32(take(&cur, ff * e, sc->w_gate_up, 0.0f, &st));
        L->w_up = lm_wt_f32(take(&cur, ff * e, sc->w_gate_up, 0.0f, &st));
        L->w_down = lm_wt_f32(take(&cur, e * ff, sc->w_down, 0.0f, &st));
    }
    t->m.layers = t->layers;
    for (int i = 0; i < 16; ++i)
        t->m.content_hash[i] = (uint8_t)(seed >> (8 * (i % 8))) ^ (uint8_t)i;
    t->m.path = NULL;
    t->rlayers = calloc(hp->n_layer ? hp->n_layer : 1, sizeof *t->rlayers);
    CU_ASSERT_FATAL(t->rlayers != NULL);
    tf_ref_sync(t);
}

void tf_ref_sync(tf_model *t)
{
    const lm_hparams *hp = &t->m.hp;
    ref_hparams *rh = &t->r.hp;
    memset(rh, 0, sizeof *rh);
    snprintf(rh->arch, sizeof rh->arch, "%s", hp->arch);
    rh->n_vocab = hp->n_vocab;
    rh->n_embd = hp->n_embd;
    rh->n_layer = hp->n_layer;
    rh->n_head = hp->n_head;
    rh->n_head_kv = hp->n_head_kv;
    rh->head_dim = hp->head_dim;
    rh->n_ff = hp->n_ff;
    rh->n_rot = hp->n_rot;
    rh->n_ctx_train = hp->n_ctx_train;
    rh->rms_eps = hp->rms_eps;
    rh->rope_theta = hp->rope_theta;
    rh->rope_type = (ref_rope_type)hp->rope_type;
    rh->norm_place = (ref_norm_place)hp->norm_place;
    rh->act = (ref_ffn_act)hp->act;
    rh->qk_norm = hp->qk_norm;
    rh->tied_output = hp->tied_output;
    rh->embd_scale = hp->embd_scale;
    rh->rope_theta_swa = hp->rope_theta_swa;
    rh->rope_yarn_factor = hp->rope_yarn_factor;
    rh->n_ctx_orig_yarn = hp->n_ctx_orig_yarn;
    rh->n_swa = hp->n_swa;
    rh->n_expert = hp->n_expert;
    rh->n_expert_used = hp->n_expert_used;
    rh->n_ff_exp = hp->n_ff_exp;
    rh->moe_gating = hp->moe_gating;
    t->r.tok_embd = t->m.tok_embd.f;
    t->r.output_norm = t->m.output_norm;
    t->r.output = t->m.output.f;
    t->r.rope_freqs = t->m.rope_freqs;
    for (uint32_t l = 0; l < hp->n_layer; ++l) {
        const lm_layer *L = &t->m.layers[l];
        t->rlayers[l] = (ref_layer){
            .attn_norm = L->attn_norm, .wq = L->wq.f, .wk = L->wk.f, .wv = L->wv.f, .wo = L->wo.f,
            .bq = L->bq, .bk = L->bk, .bv = L->bv, .bo = L->bo, .ffn_norm = L->ffn_norm,
            .w_gate = L->w_gate.f, .w_up = L->w_up.f, .w_down = L->w_down.f, .window = L->window,
            .sinks = L->sinks, .ffn_gate_inp = L->ffn_gate_inp.f,
            .ffn_gate_exps = L->ffn_gate_exps.f, .ffn_up_exps = L->ffn_up_exps.f,
            .ffn_down_exps = L->ffn_down_exps.f, .ffn_gate_inp_b = L->ffn_gate_inp_b,
            .ffn_gate_exps_b = L->ffn_gate_exps_b, .ffn_up_exps_b = L->ffn_up_exps_b,
            .ffn_down_exps_b = L->ffn_down_exps_b, .attn_q_norm = L->attn_q_norm,
            .attn_k_norm = L->attn_k_norm, .attn_post_norm = L->attn_post_norm,
            .ffn_post_norm = L->ffn_post_norm};
    }
    t->r.layers = t->rlayers;
    memcpy(t->r.content_hash, t->m.content_hash, sizeof t->r.content_hash);
    t->r.path = NULL;
}

ref_model *tf_ref_open(const lm_model *m)
{
    ref_model *r = NULL;
    lm_err err = {0};
    if (m->path == NULL || ref_model_open(&r, m->path, &err) != LM_OK) {
        fprintf(stderr, "\n  reference view of %s: %s\n", m->path ? m->path : "(no file)",
                err.msg);
        CU_FAIL_FATAL("reference view");
    }
    return r;
}

int tf_ref_compute(ref_capture *out, const lm_model *m, const ref_request *rq, lm_err *err)
{
    ref_model *r = tf_ref_open(m);
    const int rc = ref_compute(out, r, rq, err);
    ref_model_free(r);
    return rc;
}

void tf_model_free(tf_model *t)
{
    lm_model_ext_release(&t->m);
    ref_model_release(&t->r);
    free(t->arena);
    free(t->layers);
    free(t->rlayers);
    memset(t, 0, sizeof *t);
}

/* ---------- the float64 forward pass ---------- */

static void d_rmsnorm(double *y, const double *x, const float *w, size_t n, double eps)
{
    double ss = 0;
    for (size_t i = 0; i < n; ++i)
        ss += x[i] * x[i];
    const double r = 1.0 / sqrt(ss / (double)n + eps);
    for (size_t i = 0; i < n; ++i)
        y[i] = x[i] * r * (double)w[i];
}

/* y[out] = W[out][in] . x[in] (+ b) */
static void d_matvec(double *y, const float *w, const float *b, const double *x, size_t out,
                     size_t in)
{
    for (size_t o = 0; o < out; ++o) {
        double s = b ? (double)b[o] : 0.0;
        for (size_t i = 0; i < in; ++i)
            s += (double)w[o * in + i] * x[i];
        y[o] = s;
    }
}

static void d_rope(double *v, size_t n_heads, const lm_hparams *hp, size_t pos)
{
    const size_t half = hp->n_rot / 2;
    for (size_t h = 0; h < n_heads; ++h)
        for (size_t i = 0; i < half; ++i) {
            double *x = v + h * hp->head_dim;
            const double ang =
                (double)pos * pow((double)hp->rope_theta, -2.0 * (double)i / hp->n_rot);
            const size_t a = hp->rope_type == LM_ROPE_NEOX ? i : 2 * i;
            const size_t b = hp->rope_type == LM_ROPE_NEOX ? i + half : 2 * i + 1;
            const double xa = x[a], xb = x[b];
            x[a] = xa * cos(ang) - xb * sin(ang);
            x[b] = xa * sin(ang) + xb * cos(ang);
        }
}

double *tf_forward_f64(const lm_model *m, const int32_t *tok, size_t n, double *k_last,
                       double *x_last)
{
    const lm_hparams *hp = &m->hp;
    const size_t d = hp->n_embd, hd = hp->head_dim, q_dim = hp->n_head * hd,
                 kv_dim = hp->n_head_kv * hd;
    double *x = calloc(n * d, sizeof *x), *xn = calloc(d, sizeof *xn);
    double *q = calloc(n * q_dim, sizeof *q), *att = calloc(q_dim, sizeof *att);
    double *o = calloc(d, sizeof *o);
    double *k = calloc((size_t)hp->n_layer * n * kv_dim, sizeof *k);
    double *v = calloc((size_t)hp->n_layer * n * kv_dim, sizeof *v);
    double *g = calloc(hp->n_ff, sizeof *g), *u = calloc(hp->n_ff, sizeof *u);
    double *p = calloc(n, sizeof *p);
    double *lg = calloc(n * hp->n_vocab, sizeof *lg);
    CU_ASSERT_FATAL(x && xn && q && att && o && k && v && g && u && p && lg);
    for (size_t t = 0; t < n; ++t)
        for (size_t i = 0; i < d; ++i)
            x[t * d + i] = (double)m->tok_embd.f[(size_t)tok[t] * d + i];
    for (size_t il = 0; il < hp->n_layer; ++il) {
        const lm_layer *L = &m->layers[il];
        double *kl = k + il * n * kv_dim, *vl = v + il * n * kv_dim;
        for (size_t t = 0; t < n; ++t) {
            d_rmsnorm(xn, x + t * d, L->attn_norm, d, (double)hp->rms_eps);
            d_matvec(q + t * q_dim, L->wq.f, L->bq, xn, q_dim, d);
            d_matvec(kl + t * kv_dim, L->wk.f, L->bk, xn, kv_dim, d);
            d_matvec(vl + t * kv_dim, L->wv.f, L->bv, xn, kv_dim, d);
            d_rope(q + t * q_dim, hp->n_head, hp, t);
            d_rope(kl + t * kv_dim, hp->n_head_kv, hp, t);
        }
        for (size_t t = 0; t < n; ++t) {
            for (size_t h = 0; h < hp->n_head; ++h) {
                const size_t kvh = h * hp->n_head_kv / hp->n_head;
                double mx = -(double)INFINITY, sum = 0;
                for (size_t j = 0; j <= t; ++j) {
                    double s = 0;
                    for (size_t e = 0; e < hd; ++e)
                        s += q[t * q_dim + h * hd + e] * kl[j * kv_dim + kvh * hd + e];
                    p[j] = s / sqrt((double)hd);
                    mx = fmax(mx, p[j]);
                }
                for (size_t j = 0; j <= t; ++j)
                    sum += (p[j] = exp(p[j] - mx));
                for (size_t e = 0; e < hd; ++e) {
                    double s = 0;
                    for (size_t j = 0; j <= t; ++j)
                        s += p[j] / sum * vl[j * kv_dim + kvh * hd + e];
                    att[h * hd + e] = s;
                }
            }
            d_matvec(o, L->wo.f, L->bo, att, d, q_dim);
            for (size_t i = 0; i < d; ++i)
                x[t * d + i] += o[i];
        }
        for (size_t t = 0; t < n; ++t) {
            d_rmsnorm(xn, x + t * d, L->ffn_norm, d, (double)hp->rms_eps);
            d_matvec(g, L->w_gate.f, NULL, xn, hp->n_ff, d);
            d_matvec(u, L->w_up.f, NULL, xn, hp->n_ff, d);
            for (size_t i = 0; i < hp->n_ff; ++i)
                g[i] = g[i] / (1.0 + exp(-g[i])) * u[i];
            d_matvec(o, L->w_down.f, NULL, g, d, hp->n_ff);
            for (size_t i = 0; i < d; ++i)
                x[t * d + i] += o[i];
        }
    }
    for (size_t t = 0; t < n; ++t) {
        d_rmsnorm(xn, x + t * d, m->output_norm, d, (double)hp->rms_eps);
        d_matvec(lg + t * hp->n_vocab, m->output.f, NULL, xn, hp->n_vocab, d);
    }
    if (k_last != NULL && hp->n_layer > 0)
        memcpy(k_last, k + (hp->n_layer - 1) * n * kv_dim, n * kv_dim * sizeof *k_last);
    if (x_last != NULL)
        memcpy(x_last, x, n * d * sizeof *x_last);
    free(x), free(xn), free(q), free(att), free(o), free(k), free(v), free(g), free(u), free(p);
    return lg;
}

lm_model *tf_synth_load(const char *preset, uint64_t seed)
{
    char path[512];
    snprintf(path, sizeof path, "%s/synth-%s-%llu.gguf", tu_tmpdir(), preset,
             (unsigned long long)seed);
    lm_err err = {0};
    lm_model *m = NULL;
    if (hx_synth_write(path, preset, seed, LM_TYPE_F32, &err) != LM_OK ||
        lm_model_load(&m, path, &err) != LM_OK) {
        fprintf(stderr, "\n  synth %s: %s\n", preset, err.msg);
        CU_FAIL_FATAL("synthetic model");
    }
    return m;
}

int tf_run_cmd(int (*cmd)(int, char **), int argc, char **argv, char *out, size_t cap)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/cmd-capture.out", tu_tmpdir());
    fflush(stdout);
    fflush(stderr);
    int so = dup(1), se = dup(2), fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    close(fd);
    int rc = cmd(argc, argv);
    fflush(stdout);
    fflush(stderr);
    dup2(so, 1);
    dup2(se, 2);
    close(so);
    close(se);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(out, 1, cap - 1, f) : 0;
    out[n] = '\0';
    if (f)
        fclose(f);
    return rc;
}

hx_report *tf_judge(const hx_judge_params *p)
{
    hx_report *r = NULL;
    lm_err err = {0};
    const int rc = hx_judge_run_all(&r, p, &err);
    if (rc != LM_OK)
        fprintf(stderr, "judge: %s\n", err.msg);
    CU_ASSERT_EQUAL_FATAL(rc, LM_OK);
    return r;
}

lm_model *tf_preset_model(size_t i, const char *tag, uint64_t seed, const char **name,
                          char path[1024])
{
    if ((*name = hx_synth_preset_name(i)) == NULL)
        return NULL;
    hx_synth_params sp;
    lm_err err = {0};
    CU_ASSERT_FATAL(hx_synth_preset(&sp, *name, &err) == LM_OK);
    if (sp.n_embd > 256) {
        sp.n_layer = 2;
        sp.n_vocab = sp.n_vocab < 1024 ? sp.n_vocab : 1024;
    }
    if (hx_synth_preset_large(*name, NULL)) { /* its architecture at a test's size */
        sp.n_embd = 256, sp.n_head = 4, sp.n_head_kv = 2, sp.n_ff = 512, sp.n_swa = 8;
        sp.n_layer = 6; /* a global layer among windowed ones (gemma3, period 6) */
        if (sp.n_expert > 0)
            sp.n_expert = 8, sp.n_expert_used = 2, sp.n_ff_exp = 64;
    }
    snprintf(path, 1024, "%s/%s-%s.gguf", tu_tmpdir(), tag, *name);
    CU_ASSERT_FATAL(hx_synth_write_params(path, &sp, seed, LM_TYPE_F32, &err) == LM_OK);
    lm_model *m = NULL;
    CU_ASSERT_FATAL(lm_model_load(&m, path, &err) == LM_OK);
    return m;
}

/* Widens n float32 values of x to double and writes them as one .npy of the given shape. */
static void npy_f32(const char *path, const float *x, size_t n, uint32_t ndim,
                    const uint64_t *shape)
{
    double *d = malloc((n ? n : 1) * sizeof *d);
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    for (size_t i = 0; i < n; ++i)
        d[i] = (double)x[i];
    lm_err err = {0};
    const int rc = ref_npy_write(path, d, ndim, shape, &err);
    free(d);
    if (rc != LM_OK)
        fprintf(stderr, "\n  %s\n", err.msg);
    CU_ASSERT_EQUAL_FATAL(rc, LM_OK);
}

void tf_write_dump(const char *dir, const hx_capture *c)
{
    const hx_capture_shape *s = &c->shape;
    char path[1200];
    snprintf(path, sizeof path, "%s/kv", dir);
    CU_ASSERT_FATAL(mkdir(dir, 0755) == 0 && (c->k == NULL || mkdir(path, 0755) == 0));
    snprintf(path, sizeof path, "%s/dump.json", dir);
    FILE *f = fopen(path, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs("{\"tokens\": [", f);
    for (uint32_t i = 0; i < s->n_tokens; ++i)
        fprintf(f, "%s%d", i ? ", " : "", (int)c->tokens[i]);
    fprintf(f, "], \"n_prompt\": %u, \"logits_positions\": [", (unsigned)s->n_prompt);
    for (uint32_t i = 0; i < s->n_pos; ++i)
        fprintf(f, "%s%u", i ? ", " : "", (unsigned)c->positions[i]);
    fputs("], \"engine\": \"kvdrift\"}\n", f);
    CU_ASSERT_FATAL(fclose(f) == 0);
    snprintf(path, sizeof path, "%s/logits.npy", dir);
    const uint64_t lshape[2] = {s->n_pos, s->n_vocab};
    npy_f32(path, c->logits, (size_t)s->n_pos * s->n_vocab, 2, lshape);
    const uint64_t kshape[3] = {s->n_prompt, s->n_kv_head, s->head_dim};
    for (uint32_t l = 0; c->k != NULL && l < s->n_layer; ++l)
        for (int t = 0; t < 2; ++t) {
            snprintf(path, sizeof path, "%s/kv/layer%02u_%c.npy", dir, (unsigned)l, "kv"[t]);
            npy_f32(path, t ? c->v[l] : c->k[l], hx_capture_kv_elems(s), 3, kshape);
        }
    snprintf(path, sizeof path, "%s/hidden", dir);
    CU_ASSERT_FATAL(c->hidden == NULL || mkdir(path, 0755) == 0);
    const uint64_t hshape[2] = {s->n_prompt, c->n_embd};
    for (uint32_t i = 0; c->hidden != NULL && i <= s->n_layer; ++i) {
        if (c->hidden[i] == NULL)
            continue;
        if (i == 0)
            snprintf(path, sizeof path, "%s/hidden/embed.npy", dir);
        else
            snprintf(path, sizeof path, "%s/hidden/layer%02u.npy", dir, (unsigned)i - 1);
        npy_f32(path, c->hidden[i], (size_t)s->n_prompt * c->n_embd, 2, hshape);
    }
}
