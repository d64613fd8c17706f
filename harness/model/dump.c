/* dump.c — loading and validating an imported dump folder (the contract is in dump.h). */
#include "model/dump.h"

#include "fs.h"
#include "npy.h"
#include "sha256.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define PATH_CAP 4200
#define HX_DUMP_MAX_MANIFEST ((size_t)256 << 20) /* 256 MiB: tokens of any real context */
#define HX_DUMP_MAX_FILE ((size_t)16 << 30)      /* 16 GiB per array file */

void hx_dump_free(hx_dump *d)
{
    if (d == NULL)
        return;
    free(d->dir);
    free(d->engine);
    free(d->settings);
    free(d->tokens);
    free(d->positions);
    free(d->rows);
    free(d->generated);
    free(d->topk_ids);
    for (uint32_t l = 0; d->k != NULL && l < d->n_layer; ++l) {
        free(d->k[l]);
        free(d->v[l]);
    }
    free(d->k);
    free(d->v);
    for (uint32_t i = 0; d->hidden != NULL && i < d->n_hidden_slots; ++i)
        free(d->hidden[i]);
    free(d->hidden);
    free(d);
}

static bool is_file(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* An array of integers in [lo, hi) into a malloc'd int32 array. */
static int int_array(int32_t **out, uint32_t *n, json_t *a, const char *key, int64_t lo,
                     int64_t hi, const char *dir, lm_err *err)
{
    if (!json_is_array(a) || json_array_size(a) == 0 || json_array_size(a) > (1u << 24))
        return LM_FAIL(err, LM_E_INPUT, "%s/dump.json: '%s' must be a non-empty array of "
                       "integers", dir, key);
    size_t len = json_array_size(a);
    int32_t *v = malloc(len * sizeof *v);
    if (v == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "%s: out of memory", dir);
    for (size_t i = 0; i < len; ++i) {
        json_t *x = json_array_get(a, i);
        json_int_t iv = json_is_integer(x) ? json_integer_value(x) : lo - 1;
        if (iv < lo || iv >= hi) {
            free(v);
            if (!json_is_integer(x))
                return LM_FAIL(err, LM_E_INPUT, "%s/dump.json: %s[%zu] is not an integer", dir,
                               key, i);
            return LM_FAIL(err, LM_E_INPUT, "%s/dump.json: %s[%zu] = %lld is outside [%lld, %lld)",
                           dir, key, i, (long long)iv, (long long)lo, (long long)hi);
        }
        v[i] = (int32_t)iv;
    }
    *out = v;
    *n = (uint32_t)len;
    return LM_OK;
}

static int opt_string(char **out, json_t *root, const char *key, const char *dir, lm_err *err)
{
    json_t *s = json_object_get(root, key);
    if (s != NULL && !json_is_string(s))
        return LM_FAIL(err, LM_E_INPUT, "%s/dump.json: '%s' must be a string", dir, key);
    *out = strdup(s ? json_string_value(s) : "");
    return *out ? LM_OK : LM_FAIL(err, LM_E_NOMEM, "%s: out of memory", dir);
}

static int check_sha256(json_t *root, const char *model_path, const char *dir, lm_err *err)
{
    json_t *s = json_object_get(root, "model_sha256");
    if (s == NULL)
        return LM_OK;
    const char *hex = json_is_string(s) ? json_string_value(s) : "";
    bool ok = strlen(hex) == 64;
    for (size_t i = 0; ok && i < 64; ++i)
        ok = (hex[i] >= '0' && hex[i] <= '9') || (hex[i] >= 'a' && hex[i] <= 'f') ||
             (hex[i] >= 'A' && hex[i] <= 'F');
    if (!ok)
        return LM_FAIL(err, LM_E_INPUT, "%s/dump.json: model_sha256 must be 64 hex digits", dir);
    char got[65];
    int rc = hx_sha256_file_hex(got, model_path, err);
    if (rc != LM_OK)
        return rc;
    if (strcasecmp(got, hex) != 0)
        return LM_FAIL(err, LM_E_INPUT, "%s/dump.json: model_sha256 %.12s... is not the model's "
                       "(%.12s...): the dump was made with another model file", dir, hex, got);
    return LM_OK;
}

static int manifest(hx_dump *d, const lm_model *m, const char *model_path, lm_err *err)
{
    char path[PATH_CAP];
    snprintf(path, sizeof path, "%s/dump.json", d->dir);
    if (!is_file(path))
        return LM_FAIL(err, LM_E_INPUT, "%s: no dump.json (not a dump folder)", d->dir);
    char *text = NULL;
    size_t len = 0;
    int rc = lm_read_file(&text, &len, path, HX_DUMP_MAX_MANIFEST, err);
    if (rc != LM_OK)
        return rc;
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    free(text);
    if (root == NULL)
        return LM_FAIL(err, LM_E_INPUT, "%s: line %d: %s", path, je.line, je.text);
    json_t *np = json_object_get(root, "n_prompt");
    int32_t *pos = NULL;
    uint32_t n_pos = 0;
    if (!json_is_object(root)) {
        rc = LM_FAIL(err, LM_E_INPUT, "%s: not a JSON object", path);
    } else if ((rc = int_array(&d->tokens, &d->n_tokens, json_object_get(root, "tokens"),
                               "tokens", 0, m->hp.n_vocab, d->dir, err)) != LM_OK) {
    } else if (!json_is_integer(np) || json_integer_value(np) < 1 ||
               json_integer_value(np) > (json_int_t)d->n_tokens) {
        rc = LM_FAIL(err, LM_E_INPUT, "%s: n_prompt must be an integer in 1..%u (len(tokens))",
                     path, (unsigned)d->n_tokens);
    } else if ((rc = int_array(&pos, &n_pos, json_object_get(root, "logits_positions"),
                               "logits_positions", 0, d->n_tokens, d->dir, err)) != LM_OK) {
    } else if ((rc = opt_string(&d->engine, root, "engine", d->dir, err)) != LM_OK ||
               (rc = opt_string(&d->settings, root, "settings", d->dir, err)) != LM_OK ||
               (rc = check_sha256(root, model_path, d->dir, err)) != LM_OK) {
    } else {
        d->n_prompt = (uint32_t)json_integer_value(np);
        d->n_pos = n_pos;
        d->positions = (uint32_t *)pos; /* non-negative, checked above */
        pos = NULL;
        for (uint32_t i = 1; i < n_pos && rc == LM_OK; ++i)
            if (d->positions[i] <= d->positions[i - 1])
                rc = LM_FAIL(err, LM_E_INPUT, "%s: logits_positions must increase strictly "
                             "(%u after %u)", path, d->positions[i], d->positions[i - 1]);
        json_t *g = json_object_get(root, "tokens_generated");
        if (rc == LM_OK && g != NULL) {
            rc = int_array(&d->generated, &d->n_generated, g, "tokens_generated", 0,
                           m->hp.n_vocab, d->dir, err);
            d->has_generated = rc == LM_OK;
        }
    }
    free(pos);
    json_decref(root);
    return rc;
}

/* Reads one array file, checks its shape (ndim dims, want[]) and converts it to float32 into a
 * malloc'd *out, refusing NaN and Inf. */
static int load_array(float **out, char *dtype /* [16] or NULL */, const char *path,
                      const char *dir, uint32_t ndim, const uint64_t *want,
                      const char *const *dim_names, lm_err *err)
{
    char *buf = NULL;
    size_t n = 0;
    int rc = lm_read_file(&buf, &n, path, HX_DUMP_MAX_FILE, err);
    if (rc != LM_OK)
        return rc;
    hx_npy a;
    if ((rc = hx_npy_parse(&a, buf, n, path, err)) != LM_OK)
        goto done;
    if (a.ndim != ndim) {
        rc = LM_FAIL(err, LM_E_INPUT, "%s: %u dimensions, expected %u", path, (unsigned)a.ndim,
                     (unsigned)ndim);
        goto done;
    }
    for (uint32_t i = 0; i < ndim; ++i)
        if (a.shape[i] != want[i]) {
            rc = LM_FAIL(err, LM_E_INPUT, "%s: dimension %u is %llu, but %s is %llu", path,
                         (unsigned)i, (unsigned long long)a.shape[i], dim_names[i],
                         (unsigned long long)want[i]);
            goto done;
        }
    float *f = malloc((a.n_elems ? a.n_elems : 1) * sizeof *f);
    if (f == NULL) {
        rc = LM_FAIL(err, LM_E_NOMEM, "%s: out of memory", dir);
        goto done;
    }
    for (uint64_t i = 0; i < a.n_elems; ++i) {
        f[i] = hx_npy_get_f32(&a, i);
        if (!isfinite(f[i])) {
            uint64_t row = ndim > 1 ? i / (a.n_elems / a.shape[0]) : 0;
            rc = LM_FAIL(err, LM_E_INPUT, "%s: element %llu (row %llu) is %s%s", path,
                         (unsigned long long)i, (unsigned long long)row,
                         isnan(f[i]) ? "NaN" : "Inf",
                         a.dtype == HX_NPY_F64 && !isnan(f[i]) ? " in float32" : "");
            free(f);
            goto done;
        }
    }
    if (dtype != NULL)
        snprintf(dtype, 16, "%s", hx_npy_dtype_name(a.dtype));
    *out = f;
done:
    free(buf);
    return rc;
}

/* Largest |log(sum_i exp(row_i))| a row of log-probabilities may have: its probabilities sum
 * to 1 within about 10%. Rounding every element to bfloat16 (8 significant bits, relative error
 * 2^-9) moves a log-probability x by at most 2^-9 |x|, which changes the sum by far less; raw
 * logits sum (as probabilities) to exp of their logsumexp, which is almost never this near 1. */
#define LOGPROB_SUM_TOL 0.1

/* logprobs.npy must hold log-softmax rows: each row's logsumexp (a max-shifted sum in double,
 * in index order) within LOGPROB_SUM_TOL of 0. A row beyond it is LM_E_INPUT naming the row: a
 * file of logits saved as logprobs.npy would otherwise be judged against the reference's
 * log-softmax as a huge error. */
static int logprob_rows_normalized(const hx_dump *d, const char *path, lm_err *err)
{
    for (uint32_t r = 0; r < d->n_pos; ++r) {
        const float *x = d->rows + (size_t)r * d->n_vocab;
        float mx = x[0];
        for (uint32_t i = 1; i < d->n_vocab; ++i)
            mx = x[i] > mx ? x[i] : mx;
        double sum = 0.0;
        for (uint32_t i = 0; i < d->n_vocab; ++i)
            sum += exp((double)x[i] - (double)mx);
        const double lse = (double)mx + log(sum);
        if (fabs(lse) > LOGPROB_SUM_TOL)
            return LM_FAIL(err, LM_E_INPUT, "%s: row %u is not log-probabilities: its "
                           "probabilities sum to exp(%.4g), not 1 (logits belong in "
                           "logits.npy)", path, (unsigned)r, lse);
    }
    return LM_OK;
}

static int rows(hx_dump *d, const lm_model *m, lm_err *err)
{
    char lg[PATH_CAP], lp[PATH_CAP];
    snprintf(lg, sizeof lg, "%s/logits.npy", d->dir);
    snprintf(lp, sizeof lp, "%s/logprobs.npy", d->dir);
    bool has_lg = is_file(lg), has_lp = is_file(lp);
    if (has_lg == has_lp)
        return LM_FAIL(err, LM_E_INPUT, "%s: %s", d->dir,
                       has_lg ? "both logits.npy and logprobs.npy (give one)"
                              : "neither logits.npy nor logprobs.npy");
    d->logprobs = has_lp;
    d->n_vocab = m->hp.n_vocab;
    const uint64_t want[2] = {d->n_pos, d->n_vocab};
    static const char *const names[2] = {"len(logits_positions)", "the model's vocabulary"};
    int rc = load_array(&d->rows, d->row_dtype, has_lp ? lp : lg, d->dir, 2, want, names, err);
    return rc == LM_OK && has_lp ? logprob_rows_normalized(d, lp, err) : rc;
}

/* The dump's folder sub (its path into path): *dh NULL when it does not exist. */
static int open_subdir(DIR **dh, char path[PATH_CAP], const hx_dump *d, const char *sub,
                       lm_err *err)
{
    snprintf(path, PATH_CAP, "%s/%s", d->dir, sub);
    *dh = opendir(path);
    if (*dh == NULL && errno != ENOENT)
        return LM_FAIL(err, LM_E_INPUT, "%s: cannot open: %s", path, strerror(errno));
    return LM_OK;
}

/* kv/: every layer's K and V or nothing; no other file. */
static int kv(hx_dump *d, const lm_model *m, lm_err *err)
{
    char kdir[PATH_CAP];
    DIR *dh;
    int orc = open_subdir(&dh, kdir, d, "kv", err);
    if (dh == NULL)
        return orc;
    const lm_hparams *hp = &m->hp;
    int rc = LM_OK;
    for (struct dirent *e; (e = readdir(dh)) != NULL && rc == LM_OK;) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        unsigned l;
        char kind, tail[8];
        int got = sscanf(e->d_name, "layer%2u_%c%7s", &l, &kind, tail);
        if (got != 3 || strcmp(tail, ".npy") != 0 || (kind != 'k' && kind != 'v') ||
            strlen(e->d_name) != 13)
            rc = LM_FAIL(err, LM_E_INPUT, "%s: unexpected file '%s' (expected layerNN_k.npy "
                         "and layerNN_v.npy)", kdir, e->d_name);
        else if (l >= hp->n_layer)
            rc = LM_FAIL(err, LM_E_INPUT, "%s: '%s' names layer %u, the model has %u", kdir,
                         e->d_name, l, (unsigned)hp->n_layer);
    }
    closedir(dh);
    if (rc != LM_OK)
        return rc;
    d->n_layer = hp->n_layer;
    d->k = calloc(hp->n_layer, sizeof *d->k);
    d->v = calloc(hp->n_layer, sizeof *d->v);
    if (d->k == NULL || d->v == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "%s: out of memory", d->dir);
    const uint64_t want[3] = {d->n_prompt, hp->n_head_kv, hp->head_dim};
    static const char *const names[3] = {"n_prompt", "the model's KV heads",
                                         "the model's head size"};
    for (uint32_t l = 0; l < hp->n_layer && rc == LM_OK; ++l)
        for (int t = 0; t < 2 && rc == LM_OK; ++t) {
            char path[PATH_CAP + 32];
            snprintf(path, sizeof path, "%s/layer%02u_%c.npy", kdir, (unsigned)l, t ? 'v' : 'k');
            if (!is_file(path))
                rc = LM_FAIL(err, LM_E_INPUT, "%s: missing (kv/ must hold every layer's K and "
                             "V)", path);
            else
                rc = load_array(t ? &d->v[l] : &d->k[l], NULL, path, d->dir, 3, want, names, err);
        }
    return rc;
}

/* Slot of a file in hidden/: 0 for embed.npy, l + 1 for layerNN.npy (NN = l as two or more
 * digits, as "%02u" writes it); -1 for any other name. */
static int64_t hidden_slot(const char *name)
{
    if (strcmp(name, "embed.npy") == 0)
        return 0;
    unsigned l;
    int used = 0;
    if (sscanf(name, "layer%u%n", &l, &used) != 1 || strcmp(name + used, ".npy") != 0)
        return -1;
    char canon[32];
    snprintf(canon, sizeof canon, "layer%02u.npy", l);
    return strcmp(canon, name) == 0 ? (int64_t)l + 1 : -1;
}

/* hidden/: embed.npy and any layerNN.npy of the model's layers; no other file. */
static int hidden(hx_dump *d, const lm_model *m, lm_err *err)
{
    char hdir[PATH_CAP];
    DIR *dh;
    int orc = open_subdir(&dh, hdir, d, "hidden", err);
    if (dh == NULL)
        return orc;
    const lm_hparams *hp = &m->hp;
    d->n_hidden_slots = hp->n_layer + 1;
    d->n_embd = hp->n_embd;
    d->hidden = calloc(d->n_hidden_slots, sizeof *d->hidden);
    int rc = d->hidden ? LM_OK : LM_FAIL(err, LM_E_NOMEM, "%s: out of memory", d->dir);
    const uint64_t want[2] = {d->n_prompt, hp->n_embd};
    static const char *const names[2] = {"n_prompt", "the model's embedding size"};
    for (struct dirent *e; rc == LM_OK && (e = readdir(dh)) != NULL;) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        const int64_t slot = hidden_slot(e->d_name);
        if (slot < 0) {
            rc = LM_FAIL(err, LM_E_INPUT, "%s: unexpected file '%s' (expected embed.npy and "
                         "layerNN.npy)", hdir, e->d_name);
        } else if (slot > hp->n_layer) {
            rc = LM_FAIL(err, LM_E_INPUT, "%s: '%s' names layer %lld, the model has %u", hdir,
                         e->d_name, (long long)slot - 1, (unsigned)hp->n_layer);
        } else {
            char path[PATH_CAP + 300];
            snprintf(path, sizeof path, "%s/%s", hdir, e->d_name);
            rc = load_array(&d->hidden[slot], NULL, path, d->dir, 2, want, names, err);
            d->n_hidden += rc == LM_OK;
        }
    }
    closedir(dh);
    return rc;
}

int hx_dump_load(hx_dump **out, const char *dir, const lm_model *m, const char *model_path,
                 lm_err *err)
{
    *out = NULL;
    hx_dump *d = calloc(1, sizeof *d);
    if (d == NULL || (d->dir = strdup(dir)) == NULL) {
        free(d);
        return LM_FAIL(err, LM_E_NOMEM, "%s: out of memory", dir);
    }
    struct stat sb;
    int rc = *dir == '\0'                ? LM_FAIL(err, LM_E_INPUT, "empty dump folder name")
             : stat(dir, &sb) != 0       ? LM_FAIL(err, LM_E_INPUT, "%s: not a folder: %s", dir,
                                                   strerror(errno))
             : !S_ISDIR(sb.st_mode)      ? LM_FAIL(err, LM_E_INPUT, "%s: not a folder", dir)
                                         : LM_OK;
    if (rc == LM_OK && (rc = manifest(d, m, model_path, err)) == LM_OK &&
        (rc = rows(d, m, err)) == LM_OK && (rc = kv(d, m, err)) == LM_OK)
        rc = hidden(d, m, err);
    if (rc != LM_OK) {
        hx_dump_free(d);
        return rc;
    }
    *out = d;
    return LM_OK;
}

void hx_dump_truncate(hx_dump *d, uint32_t n_tokens)
{
    if (n_tokens < d->n_prompt || n_tokens >= d->n_tokens)
        return;
    d->n_tokens = n_tokens;
    while (d->n_pos > 0 && d->positions[d->n_pos - 1] >= n_tokens)
        --d->n_pos;
}
