/* test_case.c — case files: a full valid case, defaults, and every malformed input with its
 * file and line in the message. */
#include "fs.h"
#include "plan/case.h"
#include "test_util.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static hx_case *ok(const char *text)
{
    hx_case *c = NULL;
    lm_err err = {0};
    int rc = hx_case_parse_string(&c, text, "t.case", &err);
    if (rc != LM_OK)
        fprintf(stderr, "\n  unexpected error: %s\n", err.msg);
    CU_ASSERT_EQUAL_FATAL(rc, LM_OK);
    return c;
}

/* Parses text expecting LM_E_INPUT and a message containing needle. */
static void bad(const char *text, const char *needle)
{
    hx_case *c = (hx_case *)1;
    lm_err err = {0};
    CU_ASSERT_EQUAL(hx_case_parse_string(&c, text, "t.case", &err), LM_E_INPUT);
    CU_ASSERT_PTR_NULL(c);
    if (strstr(err.msg, needle) == NULL)
        fprintf(stderr, "\n  message lacks '%s': %s\n", needle, err.msg);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, needle));
}

/* These tests set and clear KVDRIFT_MODELS; the caller's value (which later suites need to find
 * the real models) is put back afterwards. */
static char *saved_models;

static void save_models_env(void)
{
    const char *v = getenv("KVDRIFT_MODELS");
    free(saved_models);
    saved_models = v ? strdup(v) : NULL;
}

static void restore_models_env(void)
{
    if (saved_models)
        setenv("KVDRIFT_MODELS", saved_models, 1);
    else
        unsetenv("KVDRIFT_MODELS");
    free(saved_models);
    saved_models = NULL;
}

static void test_case_full_and_configs(void)
{
    save_models_env();
    setenv("KVDRIFT_MODELS", "/models", 1);
    hx_case *c = ok("; a comment\n"
                    "# another\n"
                    "[case]\n"
                    "name = stories-steps\n"
                    "model = ${KVDRIFT_MODELS}/stories260K.gguf\n"
                    "prompt = Once upon a time; there was\n"
                    "steps = 1, 2,full\n"
                    "backends = blas,naive\n"
                    "threads = 1,2\n"
                    "attn = default,dense\n"
                    "n_gen = 0\n"
                    "precision = 256\n"
                    "strict_bits = true\n"
                    "invariant_bits = true\n"
                    "turn = 0\n");
    CU_ASSERT_STRING_EQUAL(c->name, "stories-steps");
    CU_ASSERT_EQUAL(c->turn, 0); /* no two-turn siblings below */
    CU_ASSERT_STRING_EQUAL(c->model.path, "/models/stories260K.gguf");
    CU_ASSERT_FALSE(c->model.synth);
    CU_ASSERT_STRING_EQUAL(c->prompt, "Once upon a time; there was"); /* ';' is text */
    CU_ASSERT_PTR_NULL(c->tokens);
    /* the axes as written, for the sweep's parser (hx_axes_configs) */
    CU_ASSERT_STRING_EQUAL(c->axes.steps, "1, 2,full");
    CU_ASSERT_STRING_EQUAL(c->axes.backends, "blas,naive");
    CU_ASSERT_STRING_EQUAL(c->axes.threads, "1,2");
    CU_ASSERT_STRING_EQUAL(c->axes.attn, "default,dense");
    CU_ASSERT_PTR_NULL(c->axes.rot);
    CU_ASSERT_PTR_NULL(c->axes.profile);
    CU_ASSERT_EQUAL(c->n_gen, 0);
    CU_ASSERT_EQUAL(c->precision, 256);
    CU_ASSERT(c->strict_bits);
    CU_ASSERT(c->invariant_bits);
    hx_config *cfg;
    size_t n;
    lm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(hx_case_configs(&cfg, &n, c, &err), LM_OK);
    CU_ASSERT_EQUAL(n, 2 * 2 * 2 * 3);
    char s[HX_CONFIG_STR_MAX];
    hx_config_format(s, sizeof s, &cfg[0]);
    CU_ASSERT_STRING_EQUAL(s, "blas:step=1:threads=1");
    hx_config_format(s, sizeof s, &cfg[2]);
    CU_ASSERT_STRING_EQUAL(s, "blas:step=full:threads=1");
    hx_config_format(s, sizeof s, &cfg[3]);
    CU_ASSERT_STRING_EQUAL(s, "blas:step=1:threads=1:attn=dense");
    hx_config_format(s, sizeof s, &cfg[n - 1]);
    CU_ASSERT_STRING_EQUAL(s, "naive:step=full:threads=2:attn=dense");
    free(cfg);
    hx_case_free(c);
    restore_models_env();
}

static void test_case_defaults_tokens_synth(void)
{
    hx_case *c = ok("name=s1\nmodel=synth:tiny-llama:seed=42\ntokens=1, 2 ,3\n");
    CU_ASSERT(c->model.synth);
    CU_ASSERT_STRING_EQUAL(c->model.preset, "tiny-llama");
    CU_ASSERT(c->model.has_seed);
    CU_ASSERT_EQUAL(c->model.seed, 42);
    CU_ASSERT_EQUAL(c->n_tokens, 3);
    CU_ASSERT_EQUAL(c->tokens[1], 2);
    CU_ASSERT_PTR_NULL(c->prompt);
    for (int a = 0; a < HX_AXIS_COUNT; ++a) /* every axis at the sweep's default */
        CU_ASSERT_PTR_NULL(*hx_axes_list(&c->axes, (hx_axis)a));
    /* so the case runs the configurations of `kvdrift sweep` without axis options, each with
     * its two-turn sibling */
    hx_config *cv = NULL, *sv = NULL;
    size_t n_case = 0, n_sweep = 0;
    lm_err err = {0};
    const hx_axes none = {0};
    CU_ASSERT_EQUAL_FATAL(hx_case_configs(&cv, &n_case, c, &err), LM_OK);
    CU_ASSERT_EQUAL_FATAL(hx_axes_configs(&sv, &n_sweep, &none, &err), LM_OK);
    CU_ASSERT_EQUAL_FATAL(hx_config_add_turns(&sv, &n_sweep, HX_TURN_DEFAULT, &err), LM_OK);
    CU_ASSERT_EQUAL_FATAL(n_case, n_sweep);
    for (size_t i = 0; i < n_case; ++i)
        CU_ASSERT(hx_config_equal(&cv[i], &sv[i]));
    char s0[HX_CONFIG_STR_MAX];
    hx_config_format(s0, sizeof s0, &cv[0]);
    CU_ASSERT_STRING_EQUAL(s0, "naive:step=1:threads=1");
    free(cv);
    free(sv);
    CU_ASSERT_EQUAL(c->n_gen, HX_CASE_DEFAULT_N_GEN);
    CU_ASSERT_EQUAL(c->turn, HX_TURN_DEFAULT); /* the schedule axis is on by default */
    CU_ASSERT_EQUAL(c->precision, HX_CASE_DEFAULT_PRECISION);
    CU_ASSERT_FALSE(c->strict_bits);
    CU_ASSERT_FALSE(c->invariant_bits);
    hx_case_free(c);
    c = ok("name=s2\nmodel=synth:x\nprompt=\"  padded  \"\n");
    CU_ASSERT_FALSE(c->model.has_seed);
    CU_ASSERT_STRING_EQUAL(c->prompt, "  padded  ");
    hx_case_free(c);
    save_models_env();
    unsetenv("KVDRIFT_MODELS");
    c = ok("name=s3\nmodel=${KVDRIFT_MODELS}/a.gguf\nprompt=x\n");
    char want[600];
    lm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(lm_models_dir(want, sizeof want - 8, &e), LM_OK);
    strcat(want, "/a.gguf");
    CU_ASSERT_STRING_EQUAL(c->model.path, want);
    hx_case_free(c);
    restore_models_env();
    /* A prompt far longer than inih's default 200-character line. */
    char *text = malloc(5000);
    CU_ASSERT_FATAL(text != NULL);
    int n = sprintf(text, "name=long\nmodel=m.gguf\nprompt=");
    memset(text + n, 'a', 4000);
    strcpy(text + n + 4000, "\n");
    c = ok(text);
    CU_ASSERT_EQUAL(strlen(c->prompt), 4000);
    hx_case_free(c);
    free(text);
}

static void test_case_errors_name_file_and_line(void)
{
    const char *head = "name=x\nmodel=m.gguf\nprompt=p\n"; /* lines 1-3 */
    char buf[512];
#define BAD_AT4(line4, needle)                               \
    do {                                                     \
        snprintf(buf, sizeof buf, "%s%s\n", head, line4);    \
        bad(buf, "t.case:4: ");                              \
        bad(buf, needle);                                    \
    } while (0)
    BAD_AT4("colour = blue", "unknown key 'colour'");
    BAD_AT4("name = y", "key 'name' given twice");
    BAD_AT4("tokens = 1,2", "give one of prompt, prompt_file or tokens");
    BAD_AT4("steps = 1,0", "'0' is not an integer in 1..4294967295 or full");
    BAD_AT4("steps = 1,,2", "empty list item");
    BAD_AT4("steps = 1,2,", "empty list item");
    BAD_AT4("steps = 2,2", "listed twice");
    BAD_AT4("steps = fast", "'fast'");
    BAD_AT4("steps = 4294967296", "'4294967296'");
    BAD_AT4("backends = blas,gpu", "unknown backend 'gpu'");
    BAD_AT4("backends = blas,blas", "listed twice");
    BAD_AT4("threads = 0", "'0' is not an integer in 1..256");
    BAD_AT4("threads = 257", "'257' is not an integer in 1..256"); /* LM_MAX_THREADS */
    BAD_AT4("threads = full", "'full'");
    BAD_AT4("attn = sparse", "unknown variant 'sparse'");
    BAD_AT4("n_gen = -1", "n_gen '-1'");
    BAD_AT4("n_gen = 1000001", "n_gen '1000001'");
    BAD_AT4("precision = 23", "precision '23'");
    /* the reference's own limits (REF_MIN_PREC..REF_MAX_PREC), refused with FILE:LINE here
     * rather than mid-run */
    BAD_AT4("precision = 30", "precision '30'");
    BAD_AT4("precision = 4097", "precision '4097'");
    BAD_AT4("precision = 8193", "precision '8193'");
    BAD_AT4("precision = 12x", "precision '12x'");
    BAD_AT4("strict_bits = yes", "expected true or false");
    BAD_AT4("invariant_bits = 1", "invariant_bits '1': expected true or false");
    BAD_AT4("this line has no equals sign", "malformed line");
#undef BAD_AT4
    bad("name=x\n[other]\nmodel=m\n", "t.case:3: unknown section [other]");
    bad("name=a b\n", "t.case:1: name 'a b'");
    bad("name=\n", "t.case:1: name is empty");
    bad("name=x\nmodel=synth:\n", "t.case:2: model 'synth:'");
    bad("name=x\nmodel=synth:Tiny\n", "bad character in preset");
    bad("name=x\nmodel=synth:t:seed=x\n", "expected synth:PRESET[:seed=N]");
    bad("name=x\nmodel=synth:t:sead=1\n", "expected synth:PRESET[:seed=N]");
    bad("name=x\nmodel=${HOME}/m.gguf\n", "only ${KVDRIFT_MODELS}");
    bad("name=x\nmodel=m\nprompt=\n", "t.case:3: prompt is empty");
    bad("name=x\nmodel=m\ntokens=1,-2\n", "t.case:3: tokens: '-2'");
    bad("name=x\nmodel=m\ntokens=2147483648\n", "'2147483648'");
    /* Missing keys: no line, but the file. */
    bad("model=m\nprompt=p\n", "t.case: missing key 'name'");
    bad("name=x\nprompt=p\n", "t.case: missing key 'model'");
    bad("name=x\nmodel=m\n", "t.case: missing key 'prompt', 'prompt_file' or 'tokens'");
    bad("", "missing key 'name'");
}

static void test_case_load_files(void)
{
    hx_case *c;
    lm_err err = {0};
    const char good[] = "name=f\nmodel=m.gguf\ntokens=5\n";
    const char *p = tu_write_file("good.case", good, sizeof good - 1);
    CU_ASSERT_EQUAL(hx_case_load(&c, p, &err), LM_OK);
    CU_ASSERT_STRING_EQUAL(c->file, p);
    hx_case_free(c);
    const char badtext[] = "name=f\nmodel=m.gguf\nsteps=0\ntokens=5\n";
    p = tu_write_file("bad.case", badtext, sizeof badtext - 1);
    CU_ASSERT_EQUAL(hx_case_load(&c, p, &err), LM_E_INPUT);
    char want[1100];
    snprintf(want, sizeof want, "%s:3: ", p);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, want));
    lm_err_clear(&err);
    const char nul[] = "name=f\0model=m\n";
    p = tu_write_file("nul.case", nul, sizeof nul - 1);
    CU_ASSERT_EQUAL(hx_case_load(&c, p, &err), LM_E_INPUT);
    lm_err_clear(&err);
    char absent[1024];
    snprintf(absent, sizeof absent, "%s/absent.case", tu_tmpdir());
    CU_ASSERT_EQUAL(hx_case_load(&c, absent, &err), LM_E_IO);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "absent.case"));
}

/* Chat prompts in case files: escapes in prompt, the same text from prompt_file (relative to
 * the case file), special = true; a relative model path is anchored at the case file. */
static void test_case_chat_prompts(void)
{
    lm_err err = {0};
    hx_case *c = NULL;
    static const char esc[] = "name = chat\nmodel = m.gguf\nspecial = true\n"
                              "prompt = <|im_start|>user\\nHi \\\"you\\\"\\t\\\\<|im_end|>\\n\n";
    const char *dir = tu_tmpdir();
    char path[1024];
    snprintf(path, sizeof path, "%s/chatcase", dir);
    CU_ASSERT_FATAL(mkdir(path, 0755) == 0);
    snprintf(path, sizeof path, "%s", tu_write_file("chatcase/esc.case", esc, strlen(esc)));
    CU_ASSERT_EQUAL_FATAL(hx_case_load(&c, path, &err), LM_OK);
    static const char want[] = "<|im_start|>user\nHi \"you\"\t\\<|im_end|>\n";
    CU_ASSERT_STRING_EQUAL(c->prompt, want);
    CU_ASSERT(c->special);
    char model[1100];
    snprintf(model, sizeof model, "%s/chatcase/m.gguf", dir);
    CU_ASSERT_STRING_EQUAL(c->model.path, model);
    hx_case_free(c);
    /* The same prompt from a file, byte for byte. */
    tu_write_file("chatcase/chat.txt", want, strlen(want));
    static const char pf[] = "name = chat2\nmodel = synth:tiny\nprompt_file = chat.txt\n";
    snprintf(path, sizeof path, "%s", tu_write_file("chatcase/pf.case", pf, strlen(pf)));
    CU_ASSERT_EQUAL_FATAL(hx_case_load(&c, path, &err), LM_OK);
    CU_ASSERT_STRING_EQUAL(c->prompt, want);
    CU_ASSERT_FALSE(c->special);
    CU_ASSERT_EQUAL(c->line_input, 3);
    hx_case_free(c);
    /* Errors: an unknown escape, two prompt sources, a missing prompt file. */
    static const char *bad[][2] = {
        {"name = x\nmodel = synth:tiny\nprompt = a\\qb\n", "unknown escape"},
        {"name = x\nmodel = synth:tiny\nprompt = a\nprompt_file = chat.txt\n", "give one of"},
        {"name = x\nmodel = synth:tiny\nprompt_file = none.txt\n", "none.txt"},
        {"name = x\nmodel = synth:tiny\ntokens = 1\nspecial = yes\n", "special 'yes'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
        snprintf(path, sizeof path, "%s", tu_write_file("chatcase/bad.case", bad[i][0],
                                                         strlen(bad[i][0])));
        lm_err_clear(&err);
        CU_ASSERT_NOT_EQUAL(hx_case_load(&c, path, &err), LM_OK);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, bad[i][1]));
        if (strstr(err.msg, bad[i][1]) == NULL)
            fprintf(stderr, "\n  %s\n", err.msg);
    }
}

/* Another engine's case: engine and its [knobs] axes kept as hx_adapter_plan's "KNOB=V,..."
 * in file order, a relative adapter path anchored at the case file; kvdrift's own engine keys
 * refused beside engine, [knobs] without engine refused, malformed knobs refused with the line. */
static void test_case_engine_knobs(void)
{
    hx_case *c = ok("name = e\nmodel = m.gguf\ntokens = 1,2\nengine = llamacpp\nn_gen = 4\n"
                    "[knobs]\nn_ubatch = 1,7,512\ntype_k = f32,f16\n");
    CU_ASSERT_STRING_EQUAL(c->engine, "llamacpp");
    CU_ASSERT_EQUAL_FATAL(c->n_knobs, 2);
    CU_ASSERT_STRING_EQUAL(c->knobs[0], "n_ubatch=1,7,512");
    CU_ASSERT_STRING_EQUAL(c->knobs[1], "type_k=f32,f16");
    CU_ASSERT_EQUAL(c->n_gen, 4);
    hx_case_free(c);
    c = ok("name = e\nmodel = m.gguf\ntokens = 1\nengine = llamacpp\n");
    CU_ASSERT_EQUAL(c->n_knobs, 0);
    hx_case_free(c);
    bad("name = e\nmodel = m.gguf\ntokens = 1\nsteps = 1,2\nengine = x\n",
        "t.case:4: 'steps' is a key of kvdrift's own engine; with engine = x");
    bad("name = e\nmodel = m.gguf\ntokens = 1\nengine = x\n[case]\ninvariant_bits = true\n",
        "t.case:6: 'invariant_bits' is a key of kvdrift's own engine");
    bad("name = e\nmodel = m.gguf\ntokens = 1\nturn = 2\nengine = x\n",
        "'turn' is a key of kvdrift's own engine");
    bad("name = e\nmodel = m.gguf\ntokens = 1\n[knobs]\nn_ubatch = 1\n",
        "t.case: [knobs] without 'engine = ADAPTER'");
    bad("name = e\nmodel = m.gguf\ntokens = 1\nengine = x\n[knobs]\nUbatch = 1\n",
        "t.case:6: [knobs] Ubatch: a knob's name is [a-z0-9_]{1,31}");
    bad("name = e\nmodel = m.gguf\ntokens = 1\nengine = x\n[knobs]\na = 1\na = 2\n",
        "t.case:7: [knobs] a given twice");
    bad("name = e\nmodel = m.gguf\ntokens = 1\nengine = x\n[knobs]\na =\n",
        "t.case:6: [knobs] a: no values");
    bad("name = e\nmodel = m.gguf\ntokens = 1\nengine =\n", "engine is empty");
    bad("name = e\nmodel = m.gguf\ntokens = 1\n[engine]\na = 1\n", "unknown section [engine]");
    /* a path is relative to the case file's folder, a name stays a name */
    static const char rel[] = "name = e\nmodel = m.gguf\ntokens = 1\nengine = ad/fake\n";
    lm_err err = {0};
    char path[1024], want[1100];
    snprintf(path, sizeof path, "%s/enginecase", tu_tmpdir());
    CU_ASSERT_FATAL(mkdir(path, 0755) == 0);
    snprintf(path, sizeof path, "%s", tu_write_file("enginecase/e.case", rel, strlen(rel)));
    CU_ASSERT_EQUAL_FATAL(hx_case_load(&c, path, &err), LM_OK);
    snprintf(want, sizeof want, "%s/enginecase/ad/fake", tu_tmpdir());
    CU_ASSERT_STRING_EQUAL(c->engine, want);
    hx_case_free(c);
}

void test_case_register(void)
{
    CU_pSuite s = CU_add_suite("case", NULL, NULL);
    CU_add_test(s, "test_case_full_and_configs", test_case_full_and_configs);
    CU_add_test(s, "test_case_defaults_tokens_synth", test_case_defaults_tokens_synth);
    CU_add_test(s, "test_case_errors_name_file_and_line", test_case_errors_name_file_and_line);
    CU_add_test(s, "test_case_load_files", test_case_load_files);
    CU_add_test(s, "test_case_chat_prompts", test_case_chat_prompts);
    CU_add_test(s, "test_case_engine_knobs", test_case_engine_knobs);
}
