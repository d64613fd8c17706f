/* cli_util.c — shared pieces of the `kvdrift` subcommands (see cli_util.h). */
#include "cli/cli_util.h"

#include "fs.h"
#include "judge/model_check.h"
#include "plan/model_spec.h"
#include "plan/prompt.h"
#include "kvd_engine.h"
#include "kvd_util.h"


#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int hx_cli_fail(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "kvdrift %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 2;
}

int hx_cli_setting(const char *cmd, uint32_t *out, hx_setting which, const char *opt,
                   const char *arg)
{
    lm_err e = {0};
    return hx_setting_parse(out, which, opt, arg, &e) == LM_OK ? 0 : hx_cli_fail(cmd, "%s", e.msg);
}

void hx_cli_warn_kernels(const char *cmd, const hx_config *cfgs, size_t n)
{
    for (size_t i = 0; i < n; ++i) {
        bool seen = false;
        for (size_t j = 0; j < i && !seen; ++j)
            seen = strcmp(cfgs[j].backend, cfgs[i].backend) == 0;
        lm_backend_kernels k;
        if (!seen && lm_backend_kernels_of(&k, cfgs[i].backend) && k.older)
            fprintf(stderr, "kvdrift %s: warning: %s: %s\n", cmd, cfgs[i].backend, k.warning);
    }
}

void hx_cli_log(void *user, const char *line)
{
    fprintf(stderr, "%s: %s\n", (const char *)user, line);
}

int hx_cli_getopt(hx_cli_optstate *st, int argc, char **argv, const char *optstring,
                  const struct option *opts, int *longindex, const int *repeatable)
{
    int li = -1;
    int c = getopt_long(argc, argv, optstring, opts, &li);
    if (longindex != NULL)
        *longindex = li;
    if (c == -1 || c == '?' || c == ':')
        return c;
    const char *s = li < 0 ? strchr(optstring, c) : NULL;
    bool takes_value = li >= 0 ? opts[li].has_arg != no_argument : s && s[1] == ':';
    for (const int *r = repeatable; r && *r && takes_value; ++r)
        takes_value = *r != c;
    if (!takes_value)
        return c;
    for (size_t i = 0; i < st->n_seen; ++i)
        if (st->seen[i] == c) {
            if (li >= 0)
                snprintf(st->twice, sizeof st->twice, "--%s", opts[li].name);
            else
                snprintf(st->twice, sizeof st->twice, "-%c", c);
            return '?';
        }
    if (st->n_seen < sizeof st->seen / sizeof *st->seen)
        st->seen[st->n_seen++] = c;
    return c;
}

int hx_cli_bad_option(const hx_cli_optstate *st, const char *cmd, int o, char **argv)
{
    if (o == '?' && st->twice[0] != '\0')
        return hx_cli_fail(cmd, "option '%s' is given more than once (give it once)", st->twice);
    if (o == ':')
        return hx_cli_fail(cmd, "option '%s' needs a value", argv[optind - 1]);
    return hx_cli_fail(cmd, "unknown option '%s' (try kvdrift %s --help)", argv[optind - 1], cmd);
}

int hx_cli_prompt_ids(int32_t **out, uint32_t *n, const lm_model *m, const char *model_path,
                      const char *text, const char *tokens, bool parse_special, lm_err *err)
{
    *out = NULL;
    *n = 0;
    if (tokens != NULL) {
        int32_t *ids = NULL;
        uint32_t k = 0;
        int rc = hx_parse_tokens(&ids, &k, tokens, err);
        if (rc != LM_OK)
            return rc;
        if ((rc = hx_check_token_ids(ids, k, m->hp.n_vocab, "--tokens", err)) != LM_OK) {
            free(ids);
            return rc;
        }
        *out = ids;
        *n = k;
        return LM_OK;
    }
    return hx_prompt_tokenize(out, n, m, model_path, text, parse_special, "-p", err);
}

int hx_cli_load_cases(hx_case **cases, char *const *files, size_t n, bool *case_error,
                      lm_err *err)
{
    int st = LM_OK;
    *case_error = false;
    for (size_t i = 0; i < n && st == LM_OK; ++i) {
        st = hx_case_load(&cases[i], files[i], err);
        *case_error = st != LM_OK;
        for (size_t j = 0; j < i && st == LM_OK; ++j)
            if (strcmp(cases[j]->name, cases[i]->name) == 0)
                st = LM_FAIL(err, LM_E_INPUT, "%s: case name '%s' is also used by %s (names key "
                             "the golden files)", cases[i]->file, cases[i]->name, cases[j]->file);
    }
    return st;
}

int hx_cli_status(const char *cmd, int st, bool case_error, const lm_err *err)
{
    /* A bad case file is reported compiler-style, FILE:LINE: reason, on one line. */
    if (case_error)
        fprintf(stderr, "%s\n", err->msg);
    else
        fprintf(stderr, "kvdrift %s: %s\n", cmd, err->msg);
    return lm_status_exit_code(st);
}

/* The folder part of path ("." when it has none, "/" for "/x") into buf. */
static int parent_of(char *buf, size_t cap, const char *path, lm_err *err)
{
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') /* "a/b/" names a/b: its parent is a */
        --n;
    while (n > 0 && path[n - 1] != '/')
        --n;
    while (n > 1 && path[n - 1] == '/')
        --n;
    if (n == 0)
        return snprintf(buf, cap, ".") < 0 ? LM_FAIL(err, LM_E_INPUT, "%s: bad path", path)
                                           : LM_OK;
    if (n >= cap)
        return LM_FAIL(err, LM_E_INPUT, "%.64s...: path too long", path);
    memcpy(buf, path, n);
    buf[n] = '\0';
    return LM_OK;
}

int hx_cli_check_out_file(const char *path, lm_err *err)
{
    return lm_wfile_check(path, err);
}

int hx_cli_check_out_dir(const char *path, lm_err *err)
{
    if (*path == '\0')
        return LM_FAIL(err, LM_E_INPUT, "output folder name is empty");
    struct stat st;
    if (stat(path, &st) == 0)
        return S_ISDIR(st.st_mode) ? lm_dir_probe(path, path, err)
                                   : LM_FAIL(err, LM_E_INPUT, "%s: exists and is not a folder",
                                             path);
    if (errno != ENOENT)
        return LM_FAIL(err, LM_E_INPUT, "%s: %s", path, strerror(errno));
    char up[4096];
    int rc = parent_of(up, sizeof up, path, err);
    return rc != LM_OK ? rc : lm_dir_probe(up, path, err);
}

int hx_cli_check_out_in_dir(const char *dir, const char *path, lm_err *err)
{
    struct stat st;
    int rc = hx_cli_check_out_dir(dir, err);
    if (rc == LM_OK && stat(dir, &st) == 0)
        rc = hx_cli_check_out_file(path, err);
    return rc;
}

int hx_cli_golden_dir(const char *dir, lm_err *err)
{
    struct stat st;
    if (dir == NULL)
        return LM_OK;
    if (*dir == '\0')
        return LM_FAIL(err, LM_E_INPUT, "--golden-dir '': empty folder name");
    if (stat(dir, &st) == 0 && !S_ISDIR(st.st_mode))
        return LM_FAIL(err, LM_E_INPUT, "--golden-dir %s: not a folder", dir);
    return LM_OK;
}

int hx_cli_report_dir(char *dir, size_t cap, const char *outdir, const char *label, lm_err *err)
{
    if (outdir != NULL) {
        if (snprintf(dir, cap, "%s", outdir) >= (int)cap)
            return LM_FAIL(err, LM_E_INPUT, "%.64s...: path too long", outdir);
        return hx_cli_check_out_dir(dir, err);
    }
    char ts[32];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(ts, sizeof ts, "%Y%m%dT%H%M%SZ", &tm);
    if (snprintf(dir, cap, "%s/%s-%s", HX_CLI_REPORTS_DIR, label, ts) >= (int)cap)
        return LM_FAIL(err, LM_E_INPUT, "%.64s...: path too long", dir);
    return hx_cli_check_out_dir(HX_CLI_REPORTS_DIR, err);
}

int hx_cli_cache_option(const char **out, const char *cmd, const char *arg)
{
    lm_err err = {0};
    if (hx_cli_check_out_dir(arg, &err) != LM_OK)
        return hx_cli_fail(cmd, "--cache %s", err.msg);
    *out = arg;
    return 0;
}

int hx_cli_err_prefix(int rc, const char *prefix, lm_err *err)
{
    return lm_err_prefix(rc, prefix, err);
}

int hx_cli_out_not_input(const char *out, const char *in, const char *in_what, lm_err *err)
{
    struct stat so, si;
    if (stat(out, &so) != 0 || stat(in, &si) != 0 || so.st_dev != si.st_dev ||
        so.st_ino != si.st_ino || !S_ISREG(so.st_mode))
        return LM_OK;
    return LM_FAIL(err, LM_E_INPUT, "%s: is also the %s (%s); refusing to overwrite an input",
                   out, in_what, in);
}

static char *prompt_file_text;

static void free_prompt_file(void)
{
    free(prompt_file_text);
    prompt_file_text = NULL;
}

const char *hx_cli_prompt_file(const char *path, lm_err *err)
{
    static bool registered;
    if (!registered)
        registered = atexit(free_prompt_file) == 0;
    free_prompt_file();
    size_t n = 0;
    if (lm_read_file(&prompt_file_text, &n, path, 1u << 24, err) != LM_OK)
        return NULL;
    if (n == 0 || strlen(prompt_file_text) != n) {
        LM_FAIL(err, LM_E_INPUT, "-f %s: %s", path, n ? "contains a NUL byte" : "is empty");
        free_prompt_file();
        return NULL;
    }
    return prompt_file_text;
}

int hx_cli_prompt_option(const char **text, const char *cmd, int opt, const char *arg)
{
    if (*text != NULL)
        return hx_cli_fail(cmd, "give the prompt once: -p TEXT or -f FILE, not both");
    if (opt == 'p') {
        if (*arg == '\0') /* as -f refuses an empty file */
            return hx_cli_fail(cmd, "-p: empty prompt");
        *text = arg;
        return 0;
    }
    lm_err err = {0};
    return (*text = hx_cli_prompt_file(arg, &err)) ? 0 : hx_cli_fail(cmd, "%s", err.msg);
}

void hx_cli_pair_init(hx_cli_pair_opts *o)
{
    *o = (hx_cli_pair_opts){.n_gen = HX_CLI_DEFAULT_N_GEN};
}

int hx_cli_pair_option(hx_cli_pair_opts *o, const char *cmd, int opt, const char *arg)
{
    switch (opt) {
    case 'p':
    case 'f': return hx_cli_prompt_option(&o->text, cmd, opt, arg);
    case HX_CLI_PAIR_O_TOKENS: o->tok_s = arg; return 0;
    case HX_CLI_PAIR_O_SPECIAL: o->special = true; return 0;
    case HX_CLI_PAIR_O_A:
    case HX_CLI_PAIR_O_B:
        *(opt == HX_CLI_PAIR_O_A ? &o->have_a : &o->have_b) = true;
        return hx_cli_parse_plain_config(opt == HX_CLI_PAIR_O_A ? &o->a : &o->b, cmd,
                                         opt == HX_CLI_PAIR_O_A ? "--a" : "--b", arg);
    case 'n': return hx_cli_setting(cmd, &o->n_gen, HX_SET_N_GEN, "-n", arg);
    default: return 1;
    }
}

int hx_cli_pair_finish(hx_cli_pair_opts *o, const char *cmd, int argc, char **argv)
{
    if (optind + 1 != argc)
        return hx_cli_fail(cmd, "expected exactly one MODEL argument (try --help)");
    if ((o->text == NULL) == (o->tok_s == NULL))
        return hx_cli_fail(cmd, "give exactly one of -p TEXT or --tokens ID,... (try --help)");
    if (!o->have_a || !o->have_b)
        return hx_cli_fail(cmd, "both --a CONFIG and --b CONFIG are needed (try --help)");
    o->model = argv[optind];
    return -1;
}

int hx_cli_model_resolve(char *path, size_t cap, char *label, size_t label_cap, const char *text,
                         const char *cache, const char *cmd, lm_err *err)
{
    hx_model_spec spec = {0};
    int rc = hx_model_spec_parse(&spec, text, err);
    bool absent = false;
    if (rc == LM_OK)
        rc = hx_model_resolve(path, cap, &absent, &spec, cache, hx_cli_log, (void *)cmd, err);
    if (rc == LM_OK && label != NULL)
        hx_model_label(label, label_cap, &spec);
    free(spec.path);
    return rc;
}

int hx_cli_model_load(lm_model **m, ref_model **r, char *path, size_t cap, const char *text,
                      const char *cache, const char *cmd, const hx_mem_need *need, lm_err *err)
{
    int rc = hx_cli_model_resolve(path, cap, NULL, 0, text, cache, cmd, err);
    if (rc == LM_OK && need != NULL)
        rc = hx_mem_check(NULL, path, need, 0, err);
    if (rc != LM_OK)
        return rc;
    return r != NULL ? hx_models_open(m, r, path, err) : lm_model_load(m, path, err);
}

int hx_cli_pair_load(lm_model **m, ref_model **r, int32_t **prompt, uint32_t *n,
                     const hx_cli_pair_opts *o, const char *cmd, lm_err *err)
{
    char path[4096];
    int st = hx_cli_model_load(m, r, path, sizeof path, o->model, NULL, cmd, NULL, err);
    return st != LM_OK ? st
                       : hx_cli_prompt_ids(prompt, n, *m, path, o->text, o->tok_s, o->special,
                                           err);
}

int hx_cli_parse_plain_config(hx_config *out, const char *cmd, const char *opt,
                              const char *arg)
{
    lm_err err = {0};
    if (hx_config_parse(out, arg, &err) != LM_OK)
        return hx_cli_fail(cmd, "%s", err.msg);
    if (out->spec != 0 || out->draft[0] != '\0')
        return hx_cli_fail(cmd, "%s '%s': %s runs plain decoding; speculative decoding (spec=, "
                           "draft=) is checked by `kvdrift sweep --spec K --draft D`", opt, arg,
                           cmd);
    return 0;
}
