/* test_cli_judge.c — `kvdrift judge` as a user meets it, on llama.cpp's stories260K dumps
 * (tests/data/dumps): a file of logits saved as logprobs.npy is refused with one line instead
 * of being judged as a huge error, real log-softmax rows load, the summary table names each
 * dump folder whole, a profile's envelope reports its progress, a model with a NaN weight is
 * an input error, and llama.cpp on F16 weights is explained by the f16act profile. */
#include "cli/commands.h"
#include "model/dump.h"
#include "fixtures.h"
#include "fs.h"
#include "kvd_defects.h"
#include "kvd_gguf.h"
#include "kvd_ref.h"
#include "model/capture.h"
#include "model/config.h"
#include "model/report.h"
#include "plan/synth.h"
#include "run/forced.h"
#include "test_util.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define DUMPS "tests/data/dumps/"
#define GREEDY DUMPS "llama.cpp-greedy-f32kv"

/* Copies GREEDY's dump.json into tu_tmpdir()/name and, under the name rows_as, its
 * logits.npy; returns the folder (static buffer). */
static const char *copy_dump(const char *name, const char *rows_as)
{
    static char dir[1024];
    char src[1100], dst[1100], *buf = NULL;
    size_t n = 0;
    lm_err err = {0};
    snprintf(dir, sizeof dir, "%s/%s", tu_tmpdir(), name);
    CU_ASSERT_FATAL(mkdir(dir, 0755) == 0);
    const char *files[2][2] = {{"dump.json", "dump.json"}, {"logits.npy", rows_as}};
    for (int i = 0; i < 2; ++i) {
        snprintf(src, sizeof src, GREEDY "/%s", files[i][0]);
        snprintf(dst, sizeof dst, "%s/%s", dir, files[i][1]);
        CU_ASSERT_EQUAL_FATAL(lm_read_file(&buf, &n, src, 1u << 24, &err), LM_OK);
        FILE *f = fopen(dst, "wb");
        CU_ASSERT_FATAL(f != NULL && fwrite(buf, 1, n, f) == n);
        CU_ASSERT_FATAL(fclose(f) == 0);
        free(buf);
    }
    return dir;
}

/* The files of one test, under tu_tmpdir() and named after its tag: the model (judge-TAG.gguf,
 * synth:tiny seed 0 written there, unless a model file is given), a dump folder
 * (judge-TAG-dump), the reference/envelope cache (judge-TAG-cache) and the report folder
 * (judge-TAG-out). */
typedef struct judge_paths {
    char model[1024], dump[1024], cache[1024], out[1024];
} judge_paths;

static void judge_paths_init(judge_paths *p, const char *tag, const char *model_file)
{
    const char *t = tu_tmpdir();
    snprintf(p->dump, sizeof p->dump, "%s/judge-%s-dump", t, tag);
    snprintf(p->cache, sizeof p->cache, "%s/judge-%s-cache", t, tag);
    snprintf(p->out, sizeof p->out, "%s/judge-%s-out", t, tag);
    if (model_file != NULL) {
        snprintf(p->model, sizeof p->model, "%s", model_file);
        return;
    }
    snprintf(p->model, sizeof p->model, "%s/judge-%s.gguf", t, tag);
    lm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(hx_synth_write(p->model, "tiny", 0, LM_TYPE_F32, &err), LM_OK);
}

/* llama.cpp's logits saved as logprobs.npy: refused (LM_E_INPUT, naming the file and row 0);
 * the same rows as log-softmax (computed in double, written as float64) load. */
static void test_cli_judge_logprobs_must_be_normalized(void)
{
    const char *path = NULL;
    lm_model *m = tu_load_model_at("stories260K.gguf", &path);
    if (m == NULL)
        return;
    lm_err err = {0};
    hx_dump *d = NULL;
    const char *wrong = copy_dump("judge-logits-as-logprobs", "logprobs.npy");
    CU_ASSERT_EQUAL(hx_dump_load(&d, wrong, m, path, &err), LM_E_INPUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "logprobs.npy: row 0 is not log-probabilities"));
    CU_ASSERT_PTR_NULL(d);
    hx_dump_free(d);

    CU_ASSERT_EQUAL_FATAL(hx_dump_load(&d, GREEDY, m, path, &err), LM_OK);
    const uint64_t rows = d->n_pos, nv = d->n_vocab;
    double *lp = malloc(rows * nv * sizeof *lp);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lp);
    for (uint64_t r = 0; r < rows; ++r) {
        const float *x = d->rows + r * nv;
        double mx = (double)x[0], sum = 0.0;
        for (uint64_t i = 1; i < nv; ++i)
            mx = (double)x[i] > mx ? (double)x[i] : mx;
        for (uint64_t i = 0; i < nv; ++i)
            sum += exp((double)x[i] - mx);
        for (uint64_t i = 0; i < nv; ++i)
            lp[r * nv + i] = (double)x[i] - mx - log(sum);
    }
    hx_dump_free(d);
    d = NULL;
    char dir[1024], file[1100];
    snprintf(dir, sizeof dir, "%s", copy_dump("judge-logprobs", "logits.npy"));
    snprintf(file, sizeof file, "%s/logits.npy", dir);
    CU_ASSERT_FATAL(remove(file) == 0);
    snprintf(file, sizeof file, "%s/logprobs.npy", dir);
    const uint64_t shape[2] = {rows, nv};
    CU_ASSERT_EQUAL_FATAL(ref_npy_write(file, lp, 2, shape, &err), LM_OK);
    free(lp);
    int rc = hx_dump_load(&d, dir, m, path, &err);
    if (rc != LM_OK)
        fprintf(stderr, "\n  %s\n", err.msg);
    CU_ASSERT_EQUAL(rc, LM_OK);
    CU_ASSERT(d != NULL && d->logprobs);
    hx_dump_free(d);
    lm_model_free(m);
}

/* The summary's dump table prints each folder as given, however long (a cut name cannot tell
 * dumps of one parent folder apart). The command is test_judge.c's passing one (the same
 * cache folder, so the reference and envelope are computed once for both suites). */
static void test_cli_judge_names_dumps_whole(void)
{
    const char *path = tu_model_path("stories260K.gguf");
    if (path == NULL)
        return;
    char text[1 << 14];
    judge_paths p;
    judge_paths_init(&p, "names", path);
    snprintf(p.cache, sizeof p.cache, "%s/judge-cache", tu_tmpdir()); /* test_judge.c's */
    const char *dir = copy_dump("llama.cpp-greedy-f32kv-a-folder-name-past-forty-columns",
                                "logits.npy");
    static const char toks[] = "1,403,407,261,378,432,383,286,261,376,298,315,421,395,317,426,"
                               "338,401,396,267,337,410,408,419,292,411,322,265,282,295,433,"
                               "335,311,374,419,426";
    char *argv[] = {"judge", p.model, "--tokens", (char *)toks, "--dump", (char *)dir,
                    "--profile", "f32", "--cache", p.cache, "-o", p.out, "-q", NULL};
    CU_ASSERT_EQUAL(tf_run_cmd(cmd_judge, 13, argv, text, sizeof text), 0);
    char want[1200];
    snprintf(want, sizeof want, "\n%s ", dir); /* the KL table's row starts with the name */
    if (strstr(text, want) == NULL)
        fprintf(stderr, "\n  no row named %s in:\n%s", dir, text);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, want));
}

/* A judge-able dump of model (synth:tiny) on tokens 1,72,101 in dir: the reference's own logits
 * at the last position (kvdrift ref --npy, float64), K/V files removed, and a manifest. */
static void tiny_dump(const char *model, const char *dir, const char *cache)
{
    char file[1100], text[1 << 14];
    char *ref[] = {"ref", (char *)model, "--tokens", "1,72,101", "--npy", (char *)dir, "--cache",
                   (char *)cache, "-q", NULL};
    CU_ASSERT_EQUAL_FATAL(tf_run_cmd(cmd_ref, 9, ref, text, sizeof text), 0);
    for (int l = 0; l < 4; ++l)
        for (int kv = 0; kv < 2; ++kv) {
            snprintf(file, sizeof file, "%s/layer%02d_%c.npy", dir, l, "kv"[kv]);
            CU_ASSERT_FATAL(remove(file) == 0);
        }
    static const char manifest[] = "{\"tokens\": [1, 72, 101], \"n_prompt\": 3, "
                                   "\"logits_positions\": [2]}";
    snprintf(file, sizeof file, "%s/dump.json", dir);
    FILE *f = fopen(file, "w");
    CU_ASSERT_FATAL(f != NULL && fputs(manifest, f) >= 0 && fclose(f) == 0);
}

/* A profile's envelope comes from SR runs of the reference's own model under that profile
 * (not the engine's naive-sr members, which took minutes per member on a 100M-parameter
 * model), and says so when it starts and when it is done, with its time. The dump is the
 * reference's own logits of synth:tiny, so it costs well under a second. */
static void test_cli_judge_envelope_progress(void)
{
    char text[1 << 14];
    judge_paths p;
    judge_paths_init(&p, "tiny", NULL);
    tiny_dump(p.model, p.dump, p.cache);
    char *judge[] = {"judge", p.model, "--tokens", "1,72,101", "--dump", p.dump, "--profile",
                     "f16kv", "--cache", p.cache, "-o", p.out, NULL};
    CU_ASSERT_EQUAL(tf_run_cmd(cmd_judge, 12, judge, text, sizeof text), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "judge: envelope of profile f16kv: 8 SR runs of the "
                                        "reference's float32 model..."));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "judge: envelope of profile f16kv measured from 8 SR "
                                        "runs of the reference's float32 model ("));
    CU_ASSERT_PTR_NULL(strstr(text, "naive-sr run"));
}

/* A model file with a NaN weight (output_norm.weight[0] of synth:tiny): the MPFR reference's
 * logits are NaN, so nothing can be judged against them; sweep and judge stop with one line
 * naming the file (exit 2, no report folder) instead of feeding a NaN argmax to the path, and
 * ref writes no capture of NaN. */
static void test_cli_judge_nan_weight_is_input_error(void)
{
    char text[1 << 14];
    judge_paths p;
    judge_paths_init(&p, "nan", NULL);
    char *model = p.model, *dir = p.dump, *cache = p.cache, *out = p.out;
    tiny_dump(model, dir, cache); /* the dump of the clean model: finite, well formed */
    lm_err err = {0};
    lm_gguf *g = NULL;
    CU_ASSERT_EQUAL_FATAL(lm_gguf_open(&g, model, &err), LM_OK);
    const lm_gguf_tensor *t = lm_gguf_tensor_find(g, "output_norm.weight");
    CU_ASSERT_FATAL(t != NULL && t->type == LM_TYPE_F32);
    const long off = (long)((const char *)t->data - (const char *)lm_gguf_bytes(g));
    lm_gguf_close(g);
    const float nan = (float)NAN;
    FILE *f = fopen(model, "r+b");
    CU_ASSERT_FATAL(f != NULL && fseek(f, off, SEEK_SET) == 0);
    CU_ASSERT_FATAL(fwrite(&nan, sizeof nan, 1, f) == 1 && fclose(f) == 0);
    char *sweep[] = {"sweep", model, "--tokens", "1,72,101", "--steps", "full", "--backends",
                     "naive", "-n", "2", "-q", "--cache", cache, "-o", out, NULL};
    CU_ASSERT_EQUAL(tf_run_cmd(cmd_sweep, 15, sweep, text, sizeof text), 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "judge-nan.gguf: the MPFR reference's logits at "
                                        "position 0 are NaN"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "holds a NaN or Inf weight"));
    char *judge[] = {"judge", model, "--tokens", "1,72,101", "--dump", dir, "--profile", "f32",
                     "--cache", cache, "-o", out, "-q", NULL};
    CU_ASSERT_EQUAL(tf_run_cmd(cmd_judge, 13, judge, text, sizeof text), 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "holds a NaN or Inf weight"));
    char *ref[] = {"ref", model, "--tokens", "1,72,101", "--cache", cache, "-o", out, "-q", NULL};
    CU_ASSERT_EQUAL(tf_run_cmd(cmd_ref, 9, ref, text, sizeof text), 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "holds a NaN or Inf weight"));
    struct stat st;
    CU_ASSERT_NOT_EQUAL(stat(out, &st), 0);
}

/* Dumps against each other, as printed: "identical logits" for equal ones, and words instead
 * of the report's -1 ("nowhere") for positions that do not exist. C is A with logit 0 of its
 * one row (position 2) raised by 0.5, far beyond synth:tiny's float32 envelope there (about
 * 1e-5) and below the top-2 margin the row's argmax keeps (the argmax is not token 0). */
static void test_cli_judge_pairs_in_words(void)
{
    char a[1024], b[1024], c[1024], file[1100], text[1 << 14];
    judge_paths p;
    judge_paths_init(&p, "pair", NULL);
    char *model = p.model, *cache = p.cache, *out = p.out;
    char *dirs[3] = {a, b, c};
    for (int i = 0; i < 3; ++i) {
        snprintf(dirs[i], 1024, "%s/judge-pair-%c", tu_tmpdir(), "abc"[i]);
        tiny_dump(model, dirs[i], cache);
    }
    snprintf(file, sizeof file, "%s/logits.npy", c); /* float64 [1][512]: the data ends it */
    FILE *f = fopen(file, "r+b");
    double x;
    CU_ASSERT_FATAL(f != NULL && fseek(f, -512L * 8, SEEK_END) == 0 && fread(&x, 8, 1, f) == 1);
    x += 0.5;
    CU_ASSERT_FATAL(fseek(f, -512L * 8, SEEK_END) == 0 && fwrite(&x, 8, 1, f) == 1);
    CU_ASSERT_FATAL(fclose(f) == 0);
    char *judge[] = {"judge", model, "--tokens", "1,72,101", "--dump", a, "--dump", b, "--dump", c,
                     "--profile", "f32", "--cache", cache, "-o", out, "-q", NULL};
    CU_ASSERT_EQUAL(tf_run_cmd(cmd_judge, 17, judge, text, sizeof text), 1);
    char want[3200];
    snprintf(want, sizeof want, "%s vs %s: identical logits over 1 rows\n", a, b);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, want));
    snprintf(want, sizeof want, "%s vs %s: max |diff| 0.5 over 1 rows, beyond the envelope from "
             "position 2, the same argmax everywhere; closer to the reference: %s\n", a, c, a);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, want));
    if (strstr(text, want) == NULL)
        fprintf(stderr, "\n  wanted: %s  in:\n%s", want, text);
    CU_ASSERT_PTR_NULL(strstr(text, " -1"));
}

/* The class column of the table row that starts with row (text's first such row), "" when
 * there is none. */
static const char *class_of(const char *text, const char *row)
{
    static char cls[16];
    cls[0] = '\0';
    const char *r = strstr(text, row);
    if (r != NULL) {
        r += strlen(row);
        r += strspn(r, " ");
        snprintf(cls, sizeof cls, "%.*s", (int)strcspn(r, " "), r);
    }
    return cls;
}

/* llama.cpp on a model with F16 weights (llama-2-tiny-random): ggml's product converts its
 * float32 activations to F16, so the dump is beyond the float32 envelope (DRIFT under f32) and
 * within the f16act profile's (NOISE), which explains it: exit 0. */
static void test_cli_judge_f16_weights_explained_by_f16act(void)
{
    const char *path = tu_model_path("llama-2-tiny-random.gguf");
    if (path == NULL)
        return;
    char text[1 << 14];
    judge_paths p;
    judge_paths_init(&p, "f16w", path);
    char *argv[] = {"judge", p.model, "--tokens",
                    "1,9038,2501,263,931,29892,727,471,263,2217,7826", "--dump",
                    DUMPS "llama.cpp-f16weights-f32kv", "--profile", "f32,f16act", "--cache",
                    p.cache, "-o", p.out, "-q", NULL};
    CU_ASSERT_EQUAL(tf_run_cmd(cmd_judge, 13, argv, text, sizeof text), 0);
    CU_ASSERT_STRING_EQUAL(class_of(text, "llama.cpp-f16weights-f32kv@f32 "), "DRIFT");
    CU_ASSERT_STRING_EQUAL(class_of(text, "llama.cpp-f16weights-f32kv@f16act "), "NOISE");
    const char *f32 = strstr(text, "@f32 "), *f16 = strstr(text, "@f16act ");
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "100.00%  f16act\n"));
    if (f32 == NULL || f16 == NULL || strstr(text, "100.00%  f16act\n") == NULL)
        fprintf(stderr, "\n%s", text);
}

/* Where the dump's K/V and hidden states leave the envelope, as a user reads it: a dump of
 * kvdrift's engine on synth:tiny (8 prompt tokens) in chunks of 3 with the RoPE defect
 * (LM_DEFECT_ROPE_POS_AFTER_CHUNK) from the second chunk, holding hidden/layerNN.npy (the
 * engine's residual after each layer) too. The summary names layer 0's K row at position 3
 * and layer 0's output at position 3 under f32; report.json's profiles.f32.kv_first_outside,
 * hidden_first_outside and hidden_states say the same, and report.md lists both. Exit 1 (the
 * dump is explained by no profile). */
static void test_cli_judge_kv_first_outside(void)
{
    char text[1 << 14], file[1200];
    judge_paths p;
    judge_paths_init(&p, "kvloc", NULL);
    lm_err err = {0};
    lm_model *m = NULL;
    CU_ASSERT_EQUAL_FATAL(lm_model_load(&m, p.model, &err), LM_OK);
    static const int32_t ids[8] = {1, 72, 101, 7, 300, 45, 12, 499};
    const uint32_t last = 7;
    hx_config c;
    CU_ASSERT_EQUAL_FATAL(hx_config_parse(&c, "naive:step=3", &err), LM_OK);
    hx_forced_request rq = {.tokens = ids, .n_tokens = 8, .n_kv = 8, .pos = &last, .n_pos = 1,
                            .hidden = true};
    hx_capture *x = NULL;
    lm_test_set_defect(LM_DEFECT_ROPE_POS_AFTER_CHUNK);
    const int rc = hx_run_forced(&x, m, &c, &rq, &err);
    lm_test_set_defect(LM_DEFECT_NONE);
    CU_ASSERT_EQUAL_FATAL(rc, LM_OK);
    tf_write_dump(p.dump, x);
    hx_capture_free(x);
    lm_model_free(m);
    char *judge[] = {"judge", p.model, "--tokens", "1,72,101,7,300,45,12,499",
                     "--dump", p.dump,
                     "--profile", "f32", "--cache", p.cache, "-o", p.out, "-q", NULL};
    CU_ASSERT_EQUAL(tf_run_cmd(cmd_judge, 13, judge, text, sizeof text), 1);
    const char *want = "  K/V: first outside the envelope at layer 0, position 3 (its K row: "
                       "max |dump - R| ";
    const char *got = strstr(text, want);
    CU_ASSERT_PTR_NOT_NULL(got);
    CU_ASSERT(got != NULL && strstr(got, "rows outside) under f32\n") != NULL);
    const char *hid = strstr(text, "  hidden: first outside the envelope at layer 0, position 3 "
                                   "(max |dump - R| ");
    CU_ASSERT_PTR_NOT_NULL(hid);
    CU_ASSERT(hid != NULL && strstr(hid, "rows outside) under f32\n") != NULL);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "    err/E by state: L0 "));
    if (got == NULL || hid == NULL)
        fprintf(stderr, "\n%s", text);
    snprintf(file, sizeof file, "%s/report.json", p.out);
    json_error_t je;
    json_t *j = json_load_file(file, 0, &je);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    json_t *d = json_array_get(json_object_get(j, "dumps"), 0);
    json_t *k = json_object_get(json_object_get(json_object_get(d, "profiles"), "f32"),
                                "kv_first_outside");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(k, "layer")), 0);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(k, "position")), 3);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(k, "tensor")), "K");
    CU_ASSERT(json_real_value(json_object_get(k, "err")) > json_real_value(json_object_get(k, "e")));
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(k, "rows")), 4 * 8 * 2);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(d, "hidden_states")), 4);
    json_t *h = json_object_get(json_object_get(json_object_get(d, "profiles"), "f32"),
                                "hidden_first_outside");
    CU_ASSERT(json_is_true(json_object_get(h, "judged")));
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(h, "layer")), 0);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(h, "position")), 3);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(h, "rows")), 4 * 8);
    CU_ASSERT_EQUAL(json_array_size(json_object_get(h, "states")), 4);
    json_decref(j);
    char *md = NULL;
    size_t n = 0;
    snprintf(file, sizeof file, "%s/report.md", p.out);
    CU_ASSERT_EQUAL_FATAL(lm_read_file(&md, &n, file, 1u << 24, &err), LM_OK);
    char line[1400];
    snprintf(line, sizeof line, "- `%s@f32`: K/V: first outside the envelope at layer 0, "
             "position 3 (its K row: ", p.dump);
    CU_ASSERT_PTR_NOT_NULL(strstr(md, line));
    snprintf(line, sizeof line, "- `%s@f32`: hidden: first outside the envelope at layer 0, "
             "position 3 (max |dump - R| ", p.dump);
    CU_ASSERT_PTR_NOT_NULL(strstr(md, line));
    free(md);
}

/* Adds delta to every value of row pos of the float64 .npy at path ([n][n_embd], as
 * tf_write_dump writes it: the data after a 64-byte-aligned header of at most 128 bytes). */
static void perturb_npy_row(const char *path, uint32_t pos, uint32_t n_embd, double delta)
{
    FILE *f = fopen(path, "r+b");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    unsigned char head[10];
    CU_ASSERT_FATAL(fread(head, 1, 10, f) == 10);
    const long data = 10 + (long)(head[8] | head[9] << 8);
    double *row = malloc(n_embd * sizeof *row);
    CU_ASSERT_PTR_NOT_NULL_FATAL(row);
    const long at = data + (long)pos * n_embd * 8;
    CU_ASSERT_FATAL(fseek(f, at, SEEK_SET) == 0 && fread(row, 8, n_embd, f) == n_embd);
    for (uint32_t i = 0; i < n_embd; ++i)
        row[i] += delta;
    CU_ASSERT_FATAL(fseek(f, at, SEEK_SET) == 0 && fwrite(row, 8, n_embd, f) == n_embd);
    CU_ASSERT_FATAL(fclose(f) == 0);
    free(row);
}

/* Hidden states of kvdrift's own engine (naive, one chunk, the engine's residual after every
 * layer) on synth:tiny: every row within the f32 envelope (exit 0, "every row within"); the
 * same dump with layer 2's output at position 5 moved by 1e-3 (about 1e-3 of that state's
 * values, against an E of float32 rounding, ~1e-6): the judge names layer 2, position 5 as
 * the first hidden state outside, and only that row; the logits (the file's, unchanged)
 * still pass, since hidden states diagnose and do not judge. Then hidden files the judge
 * refuses with one line: a wrong width, a layer the model lacks, a stray name, a NaN. */
static void test_cli_judge_hidden_first_outside(void)
{
    char text[1 << 14], file[1400];
    judge_paths p;
    judge_paths_init(&p, "hidloc", NULL);
    lm_err err = {0};
    lm_model *m = NULL;
    CU_ASSERT_EQUAL_FATAL(lm_model_load(&m, p.model, &err), LM_OK);
    const uint32_t n_embd = m->hp.n_embd;
    static const int32_t ids[8] = {1, 72, 101, 7, 300, 45, 12, 499};
    const uint32_t last = 7;
    hx_config c;
    CU_ASSERT_EQUAL_FATAL(hx_config_parse(&c, "naive", &err), LM_OK);
    hx_forced_request rq = {.tokens = ids, .n_tokens = 8, .n_kv = 8, .pos = &last, .n_pos = 1,
                            .hidden = true};
    hx_capture *x = NULL;
    CU_ASSERT_EQUAL_FATAL(hx_run_forced(&x, m, &c, &rq, &err), LM_OK);
    tf_write_dump(p.dump, x);
    hx_capture_free(x);
    char *judge[] = {"judge", p.model, "--tokens", "1,72,101,7,300,45,12,499",
                     "--dump", p.dump,
                     "--profile", "f32", "--cache", p.cache, "-o", p.out, "-q", NULL};
    CU_ASSERT_EQUAL(tf_run_cmd(cmd_judge, 13, judge, text, sizeof text), 0);
    const char *within = "  hidden: every row within the envelope (32 rows of 4 states) under f32\n";
    CU_ASSERT_PTR_NOT_NULL(strstr(text, within));
    if (strstr(text, within) == NULL)
        fprintf(stderr, "\n%s", text);
    snprintf(file, sizeof file, "%s/hidden/layer02.npy", p.dump);
    perturb_npy_row(file, 5, n_embd, 1e-3);
    CU_ASSERT_EQUAL(tf_run_cmd(cmd_judge, 13, judge, text, sizeof text), 0);
    const char *want = "  hidden: first outside the envelope at layer 2, position 5 (max |dump - "
                       "R| 0.001";
    const char *got = strstr(text, want);
    CU_ASSERT_PTR_NOT_NULL(got);
    CU_ASSERT(got != NULL && strstr(got, "; 1 of 32 rows outside) under f32\n") != NULL);
    if (got == NULL)
        fprintf(stderr, "\n%s", text);
    /* refused with one line each, naming the file */
    hx_dump *d = NULL;
    char bad[1400];
    snprintf(bad, sizeof bad, "%s/hidden/layer09.npy", p.dump);
    CU_ASSERT_FATAL(rename(file, bad) == 0);
    CU_ASSERT_EQUAL(hx_dump_load(&d, p.dump, m, p.model, &err), LM_E_INPUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "'layer09.npy' names layer 9, the model has 4"));
    snprintf(file, sizeof file, "%s/hidden/layer2.npy", p.dump);
    CU_ASSERT_FATAL(rename(bad, file) == 0);
    lm_err_clear(&err);
    CU_ASSERT_EQUAL(hx_dump_load(&d, p.dump, m, p.model, &err), LM_E_INPUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "unexpected file 'layer2.npy'"));
    snprintf(bad, sizeof bad, "%s/hidden/layer02.npy", p.dump);
    const double wide[2][3] = {{0}}; /* [n_prompt 2][3]: neither dimension fits */
    const uint64_t shape[2] = {2, 3};
    CU_ASSERT_EQUAL_FATAL(ref_npy_write(bad, &wide[0][0], 2, shape, &err), LM_OK);
    CU_ASSERT_FATAL(remove(file) == 0);
    lm_err_clear(&err);
    CU_ASSERT_EQUAL(hx_dump_load(&d, p.dump, m, p.model, &err), LM_E_INPUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "layer02.npy: dimension 0 is 2, but n_prompt is 8"));
    CU_ASSERT_PTR_NULL(strchr(err.msg, '\n'));
    double *nan_row = calloc((size_t)8 * n_embd, sizeof *nan_row);
    CU_ASSERT_PTR_NOT_NULL_FATAL(nan_row);
    nan_row[3 * n_embd + 1] = NAN;
    const uint64_t full[2] = {8, n_embd};
    CU_ASSERT_EQUAL_FATAL(ref_npy_write(bad, nan_row, 2, full, &err), LM_OK);
    free(nan_row);
    lm_err_clear(&err);
    CU_ASSERT_EQUAL(hx_dump_load(&d, p.dump, m, p.model, &err), LM_E_INPUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "layer02.npy: element"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "(row 3) is NaN"));
    CU_ASSERT_PTR_NULL(d);
    /* through the command: one line on stderr, exit 2, no report */
    CU_ASSERT_EQUAL(tf_run_cmd(cmd_judge, 13, judge, text, sizeof text), 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "layer02.npy: element"));
    lm_model_free(m);
}

void test_cli_judge_register(void)
{
    CU_pSuite s = CU_add_suite("cli_judge", NULL, NULL);
    CU_add_test(s, "test_cli_judge_hidden_first_outside", test_cli_judge_hidden_first_outside);
    CU_add_test(s, "test_cli_judge_logprobs_must_be_normalized",
                test_cli_judge_logprobs_must_be_normalized);
    CU_add_test(s, "test_cli_judge_names_dumps_whole", test_cli_judge_names_dumps_whole);
    CU_add_test(s, "test_cli_judge_envelope_progress", test_cli_judge_envelope_progress);
    CU_add_test(s, "test_cli_judge_pairs_in_words", test_cli_judge_pairs_in_words);
    CU_add_test(s, "test_cli_judge_f16_weights_explained_by_f16act",
                test_cli_judge_f16_weights_explained_by_f16act);
    CU_add_test(s, "test_cli_judge_kv_first_outside", test_cli_judge_kv_first_outside);
    CU_add_test(s, "test_cli_judge_nan_weight_is_input_error",
                test_cli_judge_nan_weight_is_input_error);
}
