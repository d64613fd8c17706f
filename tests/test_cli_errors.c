/* test_cli_errors.c — every subcommand's bad-input paths, end to end: each must exit 2 with
 * exactly one line on stderr (naming the thing and the reason), nothing on stdout, and leave no
 * output file or folder behind. Each command runs in a forked child (its own getopt state, its
 * own stdio; a crash or a hang is a failure, not a lost test binary). The model is the synthetic
 * tiny preset written by `kvdrift synth` into tu_tmpdir(), so no shared model file is needed;
 * every cache is under tu_tmpdir() ($KVDRIFT_CACHE is set in the child as well). */
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "test_util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

typedef int (*cmd_fn)(int, char **);

typedef struct cli_result {
    int rc;            /* exit code; 128 + signal when the child died of a signal */
    int n_lines;       /* '\n'-terminated lines on stderr (+1 for an unterminated tail) */
    size_t n_stdout;   /* bytes on stdout */
    char err[4096];    /* stderr text */
} cli_result;

static char base[900], model[1000], trunc_model[1000], adir[1000], under_file[1000],
    cache[1000], out_txt[1000], err_txt[1000];

static size_t slurp(char *buf, size_t cap, const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return 0;
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = '\0';
    return n;
}

static bool exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

/* Runs cmd(argv) in a child with stdout/stderr sent to files; argv is NULL-terminated. */
static cli_result cli(cmd_fn cmd, ...)
{
    char *argv[40];
    int argc = 0;
    va_list ap;
    va_start(ap, cmd);
    for (char *a; argc < 39 && (a = va_arg(ap, char *)) != NULL;)
        argv[argc++] = a;
    va_end(ap);
    argv[argc] = NULL;

    cli_result r;
    memset(&r, 0, sizeof r);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) {
        int fo = open(out_txt, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int fe = open(err_txt, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fo < 0 || fe < 0)
            _exit(99);
        dup2(fo, STDOUT_FILENO);
        dup2(fe, STDERR_FILENO);
        close(fo);
        close(fe);
        setenv("KVDRIFT_CACHE", cache, 1);
        alarm(60); /* every case here fails fast; a hang is a failure */
        int rc = cmd(argc, argv);
        fflush(stdout);
        fflush(stderr);
        _exit(rc); /* _exit: the parent's atexit handlers (tmpdir removal) must not run here */
    }
    int status = 0;
    CU_ASSERT_FATAL(waitpid(pid, &status, 0) == pid);
    r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    char out[256];
    r.n_stdout = slurp(out, sizeof out, out_txt);
    size_t n = slurp(r.err, sizeof r.err, err_txt);
    for (size_t i = 0; i < n; ++i)
        r.n_lines += r.err[i] == '\n';
    if (n > 0 && r.err[n - 1] != '\n')
        ++r.n_lines;
    return r;
}

/* The contract for bad input: exit 2, one line on stderr that contains `want` (the thing named
 * or the reason), and (quiet) nothing on stdout. check and bless print their platform header on
 * stdout once the case files parse, before any model is opened: those cases pass quiet = false. */
static void expect_bad_at(const cli_result *r, const char *want, bool quiet, const char *what,
                          int line)
{
    const bool ok = r->rc == 2 && r->n_lines == 1 && (!quiet || r->n_stdout == 0) &&
                    (want == NULL || strstr(r->err, want) != NULL);
    if (!ok)
        fprintf(stderr, "\n  line %d: %s: rc %d, %d stderr line(s), %zu stdout bytes, "
                        "wanted '%s' in: %s", line, what, r->rc, r->n_lines, r->n_stdout,
                want ? want : "", r->err);
    CU_ASSERT_EQUAL(r->rc, 2);
    CU_ASSERT_EQUAL(r->n_lines, 1);
    if (quiet)
        CU_ASSERT_EQUAL(r->n_stdout, 0);
    if (want != NULL)
        CU_ASSERT_PTR_NOT_NULL(strstr(r->err, want));
}
#define BAD_(quiet, want, cmd, ...)                                                            \
    do {                                                                                       \
        cli_result r_ = cli(cmd, __VA_ARGS__, (char *)NULL);                                   \
        expect_bad_at(&r_, want, quiet, #cmd " " #__VA_ARGS__, __LINE__);                     \
    } while (0)
#define BAD(want, cmd, ...) BAD_(true, want, cmd, __VA_ARGS__)
#define BAD_HDR(want, cmd, ...) BAD_(false, want, cmd, __VA_ARGS__)

/* Shared fixtures: a synthetic tiny model (vocab 512), its first 1000 bytes, a folder and a
 * path under a regular file (ENOTDIR: unwritable even for root, unlike a chmod'ed folder). */
static void setup(void)
{
    if (base[0])
        return;
    snprintf(base, sizeof base, "%s/cli", tu_tmpdir());
    CU_ASSERT_FATAL(mkdir(base, 0755) == 0);
    snprintf(model, sizeof model, "%s/tiny.gguf", base);
    snprintf(trunc_model, sizeof trunc_model, "%s/trunc.gguf", base);
    snprintf(adir, sizeof adir, "%s/adir", base);
    snprintf(under_file, sizeof under_file, "%s/trunc.gguf/x", base);
    snprintf(cache, sizeof cache, "%s/cache", base);
    snprintf(out_txt, sizeof out_txt, "%s/stdout.txt", base);
    snprintf(err_txt, sizeof err_txt, "%s/stderr.txt", base);
    CU_ASSERT_FATAL(mkdir(adir, 0755) == 0);
    cli_result r = cli(cmd_synth, "synth", "--preset", "tiny", "-o", model, (char *)NULL);
    if (r.rc != 0)
        fprintf(stderr, "\n  synth failed (%d): %s", r.rc, r.err);
    CU_ASSERT_EQUAL_FATAL(r.rc, 0);
    FILE *f = fopen(model, "rb");
    CU_ASSERT_FATAL(f != NULL);
    char head[1000];
    CU_ASSERT_FATAL(fread(head, 1, sizeof head, f) == sizeof head);
    fclose(f);
    FILE *g = fopen(trunc_model, "wb");
    CU_ASSERT_FATAL(g != NULL);
    CU_ASSERT_FATAL(fwrite(head, 1, sizeof head, g) == sizeof head);
    CU_ASSERT_FATAL(fclose(g) == 0);
}

/* Paths under base that a failed command must not have created. */
static char *p(const char *name)
{
    static char buf[4][1100];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", base, name);
    return buf[k];
}

static void test_cli_errors_run(void)
{
    setup();
    BAD("missing MODEL", cmd_run, "run");
    BAD("--bogus", cmd_run, "run", "--bogus", model, "-p", "hi");
    BAD("-p", cmd_run, "run", model, "-p");
    BAD("-p", cmd_run, "run", model);
    BAD("No such file", cmd_run, "run", p("absent.gguf"), "-p", "hi");
    BAD("not a regular file", cmd_run, "run", adir, "-p", "hi");
    BAD("trunc.gguf", cmd_run, "run", trunc_model, "-p", "hi");
    BAD("abc", cmd_run, "run", model, "-p", "hi", "-n", "abc");
    BAD("-1", cmd_run, "run", model, "-p", "hi", "-n", "-1");
    BAD("context", cmd_run, "run", model, "-p", "hi", "-n", "100000");
    BAD("sweep --spec", cmd_run, "run", model, "-p", "hi", "--config", "naive:spec=4");
    BAD("nope", cmd_run, "run", model, "-p", "hi", "--backend", "nope");
    BAD("--step", cmd_run, "run", model, "-p", "hi", "--step", "0");
    BAD("--top-p", cmd_run, "run", model, "-p", "hi", "--top-p", "2");
}

static void test_cli_errors_synth(void)
{
    setup();
    BAD("nope", cmd_synth, "synth", "--preset", "nope", "-o", p("s1.gguf"));
    BAD("-o", cmd_synth, "synth", "--preset", "tiny");
    BAD("--preset", cmd_synth, "synth", "-o", p("s1.gguf"));
    BAD("--n-layer", cmd_synth, "synth", "--preset", "tiny", "-o", p("s1.gguf"), "--n-layer", "0");
    BAD("n_head", cmd_synth, "synth", "--arch", "llama", "--n-head", "3", "-o", p("s1.gguf"));
    CU_ASSERT_FALSE(exists(p("s1.gguf")));
    /* Unwritable: under a regular file, and onto an existing folder (which must survive). */
    BAD(under_file, cmd_synth, "synth", "--preset", "tiny", "-o", under_file);
    BAD(adir, cmd_synth, "synth", "--preset", "tiny", "-o", adir);
    struct stat st;
    CU_ASSERT(stat(adir, &st) == 0 && S_ISDIR(st.st_mode));
}

static void test_cli_errors_ref(void)
{
    setup();
    BAD("--bogus", cmd_ref, "ref", "--bogus");
    BAD("trunc.gguf", cmd_ref, "ref", trunc_model, "-p", "hi", "--no-cache", "-o", p("r1.bin"));
    BAD("not a regular file", cmd_ref, "ref", adir, "-p", "hi", "--no-cache", "-o", p("r1.bin"));
    BAD("99999", cmd_ref, "ref", model, "--tokens", "1,99999", "--no-cache", "-o", p("r1.bin"));
    BAD("99999", cmd_ref, "ref", model, "--tokens", "1,2", "--gen-tokens", "3,99999",
        "--no-cache", "-o", p("r1.bin"));
    BAD("'x'", cmd_ref, "ref", model, "--tokens", "1,x", "--no-cache", "-o", p("r1.bin"));
    BAD("--prec", cmd_ref, "ref", model, "-p", "hi", "--prec", "3", "-o", p("r1.bin"));
    BAD("--threads", cmd_ref, "ref", model, "-p", "hi", "--threads", "-1", "-o", p("r1.bin"));
    CU_ASSERT_FALSE(exists(p("r1.bin")));
    /* --check: not a capture, a folder, a truncated capture. */
    BAD("magic", cmd_ref, "ref", "--check", trunc_model);
    BAD("not a regular file", cmd_ref, "ref", "--check", adir);
    cli_result r = cli(cmd_ref, "ref", model, "--tokens", "1,2,3", "--prec", "53", "--no-cache",
                       "-o", p("good.bin"), (char *)NULL);
    CU_ASSERT_EQUAL_FATAL(r.rc, 0);
    char buf[600];
    FILE *f = fopen(p("good.bin"), "rb");
    CU_ASSERT_FATAL(f != NULL);
    CU_ASSERT_FATAL(fread(buf, 1, sizeof buf, f) == sizeof buf);
    fclose(f);
    tu_write_file("cli/cut.bin", buf, sizeof buf);
    BAD("truncated", cmd_ref, "ref", "--check", p("cut.bin"));
}

/* Unwritable outputs are found before the reference is computed and its summary printed, and a
 * run that fails on its second output (--npy) must not leave its first one (-o) behind. */
static void test_cli_errors_ref_no_partial_outputs(void)
{
    setup();
    BAD(under_file, cmd_ref, "ref", model, "--tokens", "1,2,3", "--prec", "53", "--no-cache",
        "-o", under_file);
    BAD(adir, cmd_ref, "ref", model, "--tokens", "1,2,3", "--prec", "53", "--no-cache", "-o",
        adir);
    BAD(under_file, cmd_ref, "ref", model, "--tokens", "1,2,3", "--prec", "53", "--no-cache",
        "-o", p("r2.bin"), "--npy", under_file);
    CU_ASSERT_FALSE(exists(p("r2.bin")));
}

/* search: bad input is one line and exit 2; a valid --cache goes on to the rest of the
 * command (here the missing corpus file), never a silent exit 0. */
static void test_cli_errors_search(void)
{
    setup();
    BAD("--bogus", cmd_search, "search", "--bogus");
    BAD("absent.txt", cmd_search, "search", model, "--corpus", p("absent.txt"), "--cache", cache);
    BAD("give one of", cmd_search, "search", model, "--corpus", p("a.txt"), "-p", "hi");
}

static void test_cli_errors_sweep(void)
{
    setup();
    const char *o = p("sw1");
    BAD("--bogus", cmd_sweep, "sweep", "--bogus");
    BAD("trunc.gguf", cmd_sweep, "sweep", trunc_model, "-p", "hi", "--cache", cache, "-o", o, "-q");
    BAD("not a regular file", cmd_sweep, "sweep", adir, "-p", "hi", "--cache", cache, "-o", o, "-q");
    BAD("No such file", cmd_sweep, "sweep", p("absent.gguf"), "-p", "hi", "--cache", cache, "-o",
        o, "-q");
    BAD("99999", cmd_sweep, "sweep", model, "--tokens", "1,99999", "--cache", cache, "-o", o, "-q");
    BAD("'0'", cmd_sweep, "sweep", model, "-p", "hi", "--steps", "0", "--cache", cache, "-o", o,
        "-q");
    BAD("foo", cmd_sweep, "sweep", model, "-p", "hi", "--backends", "foo", "--cache", cache, "-o",
        o, "-q");
    BAD("--ensemble", cmd_sweep, "sweep", model, "-p", "hi", "--ensemble", "2", "--cache", cache,
        "-o", o, "-q");
    BAD("context", cmd_sweep, "sweep", model, "-p", "hi", "-n", "100000", "--cache", cache, "-o",
        o, "-q");
    BAD("nope", cmd_sweep, "sweep", "synth:nope", "-p", "hi", "--cache", cache, "-o", o, "-q");
    BAD("--repeat-penalty", cmd_sweep, "sweep", model, "-p", "hi", "--repeat-penalty", "0");
    BAD("--frequency-penalty", cmd_sweep, "sweep", model, "-p", "hi", "--frequency-penalty",
        "inf");
    BAD("--repeat-last-n", cmd_sweep, "sweep", model, "-p", "hi", "--repeat-last-n", "-1");
    BAD("--sampler", cmd_sweep, "sweep", model, "-p", "hi", "--sampler", "diffusion");
    BAD("--block-criterion", cmd_sweep, "sweep", model, "-p", "hi", "--block-criterion", "x");
    CU_ASSERT_FALSE(exists(o));
}

/* A report folder that cannot be made is bad input, found before the sweep runs (not after
 * printing a full result table on stdout). */
static void test_cli_errors_sweep_output_checked_first(void)
{
    setup();
    BAD(trunc_model, cmd_sweep, "sweep", model, "-p", "hi", "-n", "1", "--steps", "full",
        "--backends", "naive", "--cache", cache, "-o", trunc_model, "-q");
    BAD(under_file, cmd_sweep, "sweep", model, "-p", "hi", "-n", "1", "--steps", "full",
        "--backends", "naive", "--cache", cache, "-o", under_file, "-q");
    /* a read-only report in the folder: refused before the sweep, kept as it was (the rename
     * the write would end with could replace it, root or not) */
    const char *ro_dir = p("ro-reports"), *ro = p("ro-reports/report.json");
    CU_ASSERT_FATAL(mkdir(ro_dir, 0755) == 0 || errno == EEXIST);
    tu_write_file("cli/ro-reports/report.json", "{}", 2);
    CU_ASSERT_FATAL(chmod(ro, 0444) == 0);
    BAD("read-only", cmd_sweep, "sweep", model, "-p", "hi", "-n", "1", "--steps", "full",
        "--backends", "naive", "--cache", cache, "-o", ro_dir, "-q");
    struct stat st;
    CU_ASSERT(stat(ro, &st) == 0 && st.st_size == 2 && (st.st_mode & 0777) == 0444);
    CU_ASSERT_FALSE(exists(p("ro-reports/report.md")));
}

/* compare and trace take the same MODEL / prompt / --a / --b arguments. */
static void pair_errors(cmd_fn cmd, const char *name)
{
    BAD("--bogus", cmd, (char *)name, "--bogus");
    BAD("trunc.gguf", cmd, (char *)name, trunc_model, "-p", "hi", "--a", "naive", "--b", "blas");
    BAD("not a regular file", cmd, (char *)name, adir, "-p", "hi", "--a", "naive", "--b", "blas");
    BAD("No such file", cmd, (char *)name, p("absent.gguf"), "-p", "hi", "--a", "naive", "--b",
        "blas");
    BAD("step", cmd, (char *)name, model, "-p", "hi", "--a", "naive:step=0", "--b", "blas");
    BAD("foo", cmd, (char *)name, model, "-p", "hi", "--a", "foo", "--b", "blas");
    BAD("--b", cmd, (char *)name, model, "-p", "hi", "--a", "naive");
    BAD("99999", cmd, (char *)name, model, "--tokens", "1,99999", "--a", "naive", "--b", "blas");
    BAD("context", cmd, (char *)name, model, "-p", "hi", "--a", "naive", "--b", "blas", "-n",
        "100000");
    /* speculative decoding is the sweep's check, never silently dropped here */
    BAD("sweep --spec", cmd, (char *)name, model, "-p", "hi", "--a", "naive:spec=2", "--b",
        "naive");
    BAD("sweep --spec", cmd, (char *)name, model, "-p", "hi", "--a", "naive", "--b",
        "naive:draft=self:1");
}

static void test_cli_errors_compare(void)
{
    setup();
    pair_errors(cmd_compare, "compare");
}

static void test_cli_errors_trace(void)
{
    setup();
    pair_errors(cmd_trace, "trace");
    BAD("--ensemble", cmd_trace, "trace", model, "-p", "hi", "--a", "naive", "--b", "blas",
        "--ensemble", "1");
}

/* Case files for check and bless: one good, one whose model is truncated, one whose model is a
 * folder, one malformed, one with a token id past the vocabulary. */
static char good[1200], trunc_case[1200], dir_case[1200], syntax[1200], vocab_case[1200];

static void write_cases(void)
{
    char text[1400];
    snprintf(text, sizeof text,
             "[case]\nname = c-ok\nmodel = %s\ntokens = 1,2,3\nsteps = full\nbackends = naive\n"
             "n_gen = 1\n", model);
    snprintf(good, sizeof good, "%s", tu_write_file("cli/ok.case", text, strlen(text)));
    snprintf(text, sizeof text,
             "[case]\nname = c-trunc\nmodel = %s\ntokens = 1,2,3\nsteps = full\n"
             "backends = naive\nn_gen = 1\n", trunc_model);
    snprintf(trunc_case, sizeof trunc_case, "%s",
             tu_write_file("cli/trunc.case", text, strlen(text)));
    snprintf(text, sizeof text,
             "[case]\nname = c-dir\nmodel = %s\ntokens = 1,2,3\nsteps = full\nbackends = naive\n"
             "n_gen = 1\n", adir);
    snprintf(dir_case, sizeof dir_case, "%s", tu_write_file("cli/dir.case", text, strlen(text)));
    snprintf(syntax, sizeof syntax, "%s", tu_write_file("cli/syntax.case", "[case\n", 6));
    snprintf(text, sizeof text,
             "[case]\nname = c-vocab\nmodel = %s\ntokens = 1,2,512\nsteps = full\n"
             "backends = naive\nn_gen = 1\n", model);
    snprintf(vocab_case, sizeof vocab_case, "%s",
             tu_write_file("cli/vocab.case", text, strlen(text)));
}

/* check and bless: bad case files and models are refused, and no report or golden is written. */
static void case_errors(cmd_fn cmd, const char *name)
{
    write_cases();
    const char *g = p("golden");
    const char *j = p("r.xml"), *js = p("r.json");
    BAD("--bogus", cmd, (char *)name, "--bogus");
    BAD("CASE", cmd, (char *)name);
    BAD("No such file", cmd, (char *)name, p("absent.case"), "--golden-dir", g, "--cache", cache);
    BAD("not a regular file", cmd, (char *)name, adir, "--golden-dir", g, "--cache", cache);
    BAD("syntax.case:1", cmd, (char *)name, good, syntax, "--golden-dir", g, "--cache", cache);
    BAD_HDR("trunc.gguf", cmd, (char *)name, trunc_case, "--golden-dir", g, "--cache", cache,
            "-q");
    BAD_HDR("not a regular file", cmd, (char *)name, dir_case, "--golden-dir", g, "--cache",
            cache, "-q");
    BAD_HDR("token id 512 (item 3) is not below the vocabulary size 512", cmd, (char *)name,
            vocab_case, "--golden-dir", g, "--cache", cache, "-q");
    CU_ASSERT_FALSE(exists(g));
    if (cmd == cmd_check) {
        BAD("--junit", cmd, (char *)name, good, "--golden-dir", g, "--cache", cache, "--junit",
            under_file, "--json", js, "-q");
        BAD("--json", cmd, (char *)name, good, "--golden-dir", g, "--cache", cache, "--junit", j,
            "--json", under_file, "-q");
        /* a bad second case: the first one's report must not be written either */
        BAD_HDR("trunc.gguf", cmd, (char *)name, good, trunc_case, "--golden-dir", g, "--cache",
                cache, "--junit", j, "--json", js, "-q");
        CU_ASSERT_FALSE(exists(j));
        CU_ASSERT_FALSE(exists(js));
    } else {
        BAD_HDR(trunc_model, cmd, (char *)name, good, "--golden-dir", trunc_model, "--cache",
                cache, "-q");
    }
}

static void test_cli_errors_check(void)
{
    setup();
    case_errors(cmd_check, "check");
}

/* A case file's out-of-range value is refused when the file is read (check exits 2 before any
 * model is opened, naming FILE:LINE), with the message `kvdrift sweep` gives for the same value
 * of the matching option: one parser and one set of limits for both. Compared: the text after
 * the key (case) and after the option (sweep). */
static void test_cli_errors_case_limits_as_options(void)
{
    setup();
    static const struct { const char *key, *option, *value; } v[] = {
        {"precision", "--prec", "30"},      /* below the reference's REF_MIN_PREC */
        {"precision", "--prec", "4097"},    /* above REF_MAX_PREC */
        {"n_gen", "-n", "100001"},          /* above HX_MAX_N_GEN */
        {"turn", "--turn", "4097"},         /* above HX_TURN_MAX */
        {"threads", "--threads", "257"},    /* above the engine's LM_MAX_THREADS */
        {"steps", "--steps", "1,0"},
        {"backends", "--backends", "naive,gpu"},
        {"attn", "--attn", "sparse"},
        {"rot", "--rot", "8:9"},            /* KEEP >= MAX */
        {"profile", "--profile", "fp8"},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; ++i) {
        char text[1200], path[1100], cname[64];
        snprintf(text, sizeof text, "name = lim\nmodel = %s\ntokens = 1,2,3\n%s = %s\n", model,
                 v[i].key, v[i].value);
        snprintf(cname, sizeof cname, "cli/limit%zu.case", i);
        snprintf(path, sizeof path, "%s", tu_write_file(cname, text, strlen(text)));
        cli_result c = cli(cmd_check, "check", path, "--golden-dir", p("golden"), "--cache",
                           cache, "-q", (char *)NULL);
        expect_bad_at(&c, ":4: ", true, v[i].key, __LINE__);
        cli_result o = cli(cmd_sweep, "sweep", model, "--tokens", "1,2,3", v[i].option,
                           v[i].value, "--cache", cache, "-o", p("limits"), "-q", (char *)NULL);
        expect_bad_at(&o, "kvdrift sweep: ", true, v[i].option, __LINE__);
        char kq[64], oq[64];
        snprintf(kq, sizeof kq, ":4: %s ", v[i].key);
        snprintf(oq, sizeof oq, "sweep: %s ", v[i].option);
        const char *ct = strstr(c.err, kq), *ot = strstr(o.err, oq);
        CU_ASSERT_PTR_NOT_NULL_FATAL(ct);
        CU_ASSERT_PTR_NOT_NULL_FATAL(ot);
        ct += strlen(kq);
        ot += strlen(oq);
        if (strcmp(ct, ot) != 0)
            fprintf(stderr, "\n  %s vs %s: '%s' vs '%s'", v[i].key, v[i].option, ct, ot);
        CU_ASSERT_STRING_EQUAL(ct, ot);
    }
    CU_ASSERT_FALSE(exists(p("golden")));
    CU_ASSERT_FALSE(exists(p("limits")));
}

/* --prec has one grammar and one message in every command that takes it (the sweep's). */
static void test_cli_errors_prec_same_everywhere(void)
{
    setup();
    cli_result sw = cli(cmd_sweep, "sweep", model, "--tokens", "1,2,3", "--prec", "30", "--cache",
                        cache, "-o", p("prec"), "-q", (char *)NULL);
    expect_bad_at(&sw, "kvdrift sweep: --prec '30': ", true, "sweep", __LINE__);
    const char *want = strstr(sw.err, "--prec ");
    CU_ASSERT_PTR_NOT_NULL_FATAL(want);
    static const char *const names[] = {"judge", "compare", "ref"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i) {
        cli_result r = i == 0   ? cli(cmd_judge, "judge", model, "--tokens", "1,2,3", "--dump",
                                      p("nodump"), "--prec", "30", (char *)NULL)
                       : i == 1 ? cli(cmd_compare, "compare", model, "--tokens", "1,2,3", "--a",
                                      "naive", "--b", "blas", "--prec", "30", (char *)NULL)
                                : cli(cmd_ref, "ref", model, "--tokens", "1,2,3", "--prec", "30",
                                      (char *)NULL);
        expect_bad_at(&r, "--prec '30': ", false, names[i], __LINE__);
        const char *got = strstr(r.err, "--prec ");
        CU_ASSERT_PTR_NOT_NULL_FATAL(got);
        if (strcmp(got, want) != 0)
            fprintf(stderr, "\n  %s: '%s' vs sweep's '%s'", names[i], got, want);
        CU_ASSERT_STRING_EQUAL(got, want);
    }
    CU_ASSERT_FALSE(exists(p("prec")));
}

static void test_cli_errors_bless(void)
{
    setup();
    case_errors(cmd_bless, "bless");
}

/* bless is all or nothing: when a later case is bad input (exit 2), no golden of an earlier
 * case may have been written. */
static void test_cli_errors_bless_all_or_nothing(void)
{
    setup();
    write_cases();
    const char *g = p("golden-aon");
    BAD_HDR("trunc.gguf", cmd_bless, "bless", good, trunc_case, "--golden-dir", g, "--cache",
            cache, "-q");
    CU_ASSERT_FALSE(exists(p("golden-aon/c-ok.json")));
}

/* Inputs that are not regular files (FIFO, devices) are refused at once: never opened for a
 * blocking read, never read without end (the child's alarm turns a hang into a failure). */
static void test_cli_errors_not_regular_inputs(void)
{
    setup();
    write_cases();
    const char *fifo = p("in.fifo");
    if (!exists(fifo))
        CU_ASSERT_FATAL(mkfifo(fifo, 0600) == 0);
    BAD("not a regular file", cmd_run, "run", fifo, "-p", "hi");
    BAD("not a regular file", cmd_sweep, "sweep", fifo, "-p", "hi", "--cache", cache, "-o",
        p("sw-fifo"), "-q");
    BAD("not a regular file", cmd_ref, "ref", fifo, "-p", "hi", "--no-cache", "-o", p("r3.bin"));
    BAD("not a regular file", cmd_ref, "ref", "--check", fifo);
    BAD("not a regular file", cmd_check, "check", fifo, "--cache", cache);
    BAD("not a regular file", cmd_check, "check", "/dev/zero", "--cache", cache);
    BAD("not a regular file", cmd_check, "check", "/dev/urandom", "--cache", cache);
    BAD("not a regular file", cmd_diff, "diff", fifo, "/dev/zero");
    /* a golden file that is a FIFO */
    const char *gd = p("golden-fifo");
    if (!exists(gd))
        CU_ASSERT_FATAL(mkdir(gd, 0755) == 0);
    char gfifo[1200];
    snprintf(gfifo, sizeof gfifo, "%s/c-ok.json", gd);
    if (!exists(gfifo))
        CU_ASSERT_FATAL(mkfifo(gfifo, 0600) == 0);
    BAD_HDR("not a regular file", cmd_check, "check", good, "--golden-dir", gd, "--cache", cache,
            "-q");
    CU_ASSERT_FALSE(exists(p("sw-fifo")));
    CU_ASSERT_FALSE(exists(p("r3.bin")));
}

/* Outputs that are devices are written, never replaced: /dev/full is a write error (exit 2, the
 * node stays a device), /dev/null succeeds. */
static void test_cli_errors_device_outputs(void)
{
    setup();
    BAD("/dev/full", cmd_synth, "synth", "--preset", "tiny", "-o", "/dev/full");
    struct stat st;
    CU_ASSERT(stat("/dev/full", &st) == 0 && S_ISCHR(st.st_mode));
    cli_result r = cli(cmd_synth, "synth", "--preset", "tiny", "-o", "/dev/null", (char *)NULL);
    CU_ASSERT_EQUAL(r.rc, 0);
    CU_ASSERT(stat("/dev/null", &st) == 0 && S_ISCHR(st.st_mode));
}

/* ref refuses more tokens than the model's context, like run/sweep/check, before any MPFR
 * work (the tiny preset's context is 2048). */
static void test_cli_errors_ref_context_limit(void)
{
    setup();
    static char toks[2 * 2049 + 1];
    for (int i = 0; i < 2049; ++i) {
        toks[2 * i] = '1';
        toks[2 * i + 1] = ',';
    }
    toks[2 * 2049 - 1] = '\0';
    BAD("context of 2048", cmd_ref, "ref", model, "--tokens", toks, "--no-cache", "-o",
        p("r4.bin"));
    CU_ASSERT_FALSE(exists(p("r4.bin")));
}

/* One thread limit (LM_MAX_THREADS = 256) for run, sweep and ref. */
static void test_cli_errors_thread_limit(void)
{
    setup();
    BAD("--threads", cmd_run, "run", model, "-p", "hi", "--threads", "257");
    BAD("--threads", cmd_sweep, "sweep", model, "-p", "hi", "--threads", "257", "--cache", cache,
        "-o", p("sw-t"), "-q");
    BAD("--threads", cmd_ref, "ref", model, "-p", "hi", "--threads", "257", "-o", p("r5.bin"));
    cli_result r = cli(cmd_run, "run", model, "-p", "hi", "-n", "1", "--threads", "256",
                       (char *)NULL);
    CU_ASSERT_EQUAL(r.rc, 0);
}

/* bless writes all goldens or none: with room for the first case's golden but not the second's
 * (RLIMIT_FSIZE between their sizes: the full-disk case), no golden may be written. The cache
 * is warmed first so that the limited run writes only goldens. */
static void test_cli_errors_bless_write_all_or_nothing(void)
{
    setup();
    write_cases();
    char text[1400];
    snprintf(text, sizeof text,
             "[case]\nname = c-big\nmodel = %s\ntokens = 1,2,3\nsteps = 1,2,3,full\n"
             "backends = naive,blas\nn_gen = 1\n", model);
    char big[1200];
    snprintf(big, sizeof big, "%s", tu_write_file("cli/big.case", text, strlen(text)));
    cli_result r = cli(cmd_bless, "bless", good, big, "--golden-dir", p("golden-warm"), "--cache",
                       cache, "-q", (char *)NULL);
    CU_ASSERT_EQUAL_FATAL(r.rc, 0);
    const char *g = p("golden-group");
    fflush(NULL);
    pid_t pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, STDOUT_FILENO);
        dup2(null, STDERR_FILENO);
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit rl = {2048, 2048}; /* c-ok's golden is ~1 KB, c-big's ~6 KB */
        setrlimit(RLIMIT_FSIZE, &rl);
        alarm(60);
        char *argv[] = {"bless", good, big, "--golden-dir", (char *)g, "--cache", cache, "-q",
                        NULL};
        _exit(cmd_bless(8, argv));
    }
    int status = 0;
    CU_ASSERT_FATAL(waitpid(pid, &status, 0) == pid);
    CU_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 2);
    CU_ASSERT_FALSE(exists(p("golden-group/c-ok.json")));
    CU_ASSERT_FALSE(exists(p("golden-group/c-big.json")));
}

/* A cache that cannot store an envelope costs time, not the sweep: the entry's path is a folder,
 * the sweep warns once, finishes and writes its report. */
static void test_cli_errors_envelope_cache_write_warns(void)
{
    setup();
    char c2[1200];
    snprintf(c2, sizeof c2, "%s/cache-envwarn", base);
    const char *o = p("sw-envwarn");
    cli_result r = cli(cmd_sweep, "sweep", model, "--tokens", "1,2,3", "-n", "1", "--steps",
                       "full", "--backends", "naive", "--cache", c2, "-o", o, "-q", (char *)NULL);
    CU_ASSERT_EQUAL_FATAL(r.rc, 0);
    /* replace every envelope entry by a folder */
    DIR *d = opendir(c2);
    CU_ASSERT_FATAL(d != NULL);
    int n_env = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        size_t len = strlen(de->d_name);
        if (len > 7 && strcmp(de->d_name + len - 7, ".kvdenv") == 0) {
            char e[1600];
            snprintf(e, sizeof e, "%s/%s", c2, de->d_name);
            CU_ASSERT(unlink(e) == 0 && mkdir(e, 0755) == 0);
            n_env++;
        }
    }
    closedir(d);
    CU_ASSERT_EQUAL(n_env, 1);
    char json[1300];
    snprintf(json, sizeof json, "%s/report.json", o);
    CU_ASSERT_FATAL(unlink(json) == 0);
    r = cli(cmd_sweep, "sweep", model, "--tokens", "1,2,3", "-n", "1", "--steps", "full",
            "--backends", "naive", "--cache", c2, "-o", o, "-q", (char *)NULL);
    CU_ASSERT_EQUAL(r.rc, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.err, "not stored"));
    CU_ASSERT(exists(json));
}

/* One rule for every output option: a folder the user did not name is never created. An output
 * file's folder, and an output folder's parent, must exist; otherwise exit 2 naming the missing
 * folder, before any work, and nothing is made. */
static void test_cli_errors_no_parent_folders(void)
{
    setup();
    write_cases();
    const char *rep = p("sw-paths");
    cli_result r = cli(cmd_sweep, "sweep", model, "--tokens", "1,2,3", "-n", "1", "--steps",
                       "full", "--backends", "naive", "--cache", cache, "-o", rep, "-q",
                       (char *)NULL);
    CU_ASSERT_EQUAL_FATAL(r.rc, 0);
    char json[1300];
    snprintf(json, sizeof json, "%s/report.json", rep);
    const char *gone = p("nofolder"), *file = p("nofolder/x.out"), *dir = p("nofolder/sub");
    BAD(gone, cmd_diff, "diff", json, json, "-o", file);
    BAD(gone, cmd_synth, "synth", "--preset", "tiny", "-o", file);
    BAD(gone, cmd_ref, "ref", model, "--tokens", "1,2,3", "--no-cache", "-o", file);
    BAD(gone, cmd_ref, "ref", model, "--tokens", "1,2,3", "--no-cache", "--npy", dir);
    BAD(gone, cmd_ref, "ref", model, "--tokens", "1,2,3", "--cache", dir);
    BAD(gone, cmd_sweep, "sweep", model, "--tokens", "1,2,3", "--cache", cache, "-o", dir, "-q");
    BAD(gone, cmd_sweep, "sweep", model, "--tokens", "1,2,3", "--cache", dir, "-o", rep, "-q");
    BAD(gone, cmd_compare, "compare", model, "--tokens", "1,2,3", "--a", "naive", "--b", "blas",
        "--cache", dir);
    BAD(gone, cmd_judge, "judge", model, "--tokens", "1,2,3", "--dump", adir, "-o", dir);
    BAD(gone, cmd_check, "check", good, "--cache", cache, "-o", dir, "-q");
    BAD(gone, cmd_check, "check", good, "--cache", cache, "--junit", file, "-q");
    BAD(gone, cmd_check, "check", good, "--cache", dir, "-q");
    BAD(gone, cmd_bless, "bless", good, "--cache", cache, "--golden-dir", dir, "-q");
    BAD(gone, cmd_bless, "bless", good, "--cache", dir, "--golden-dir", p("golden-np"), "-q");
    CU_ASSERT_FALSE(exists(gone));
    CU_ASSERT_FALSE(exists(p("golden-np")));
    /* a named folder whose parent exists is made (check -o, bless --golden-dir) */
    r = cli(cmd_check, "check", good, "--cache", cache, "-o", p("chk-made"), "-q", (char *)NULL);
    CU_ASSERT_EQUAL(r.rc, 0);
    CU_ASSERT(exists(p("chk-made/report.json")));
}

/* A golden folder that cannot take files (/proc, even for root) is refused before any case
 * runs: nothing on stdout (no platform header, no case line), exit 2 at once. */
static void test_cli_errors_bless_golden_dir_first(void)
{
    setup();
    write_cases();
    BAD("/proc/nope", cmd_bless, "bless", good, "--golden-dir", "/proc/nope", "--cache", cache);
    BAD("/proc", cmd_bless, "bless", good, "--golden-dir", "/proc", "--cache", cache);
    BAD("/proc", cmd_sweep, "sweep", model, "--tokens", "1,2,3", "--cache", cache, "-o",
        "/proc/nope", "-q");
    BAD("/proc", cmd_diff, "diff", good, good, "-o", "/proc/nope.md");
}

/* An out-of-vocabulary id is named by its place in the user's own list (not counting the
 * prompt before it), with the id and the vocabulary size. */
static void test_cli_errors_token_position(void)
{
    setup();
    BAD("--gen-tokens: token id 99999 (item 2) is not below the vocabulary size 512",
        cmd_ref, "ref", model, "--tokens", "1,2,3", "--gen-tokens", "7,99999", "--no-cache");
    BAD("--tokens: token id 512 (item 3) is not below the vocabulary size 512", cmd_ref,
        "ref", model, "--tokens", "1,2,512", "--no-cache");
}

/* An output never replaces an input of the same command. */
static void test_cli_errors_output_is_input(void)
{
    setup();
    write_cases();
    char before[4096], after[4096];
    size_t nb = slurp(before, sizeof before, good);
    BAD("case file", cmd_check, "check", good, "--cache", cache, "--json", good, "-q");
    BAD("MODEL", cmd_ref, "ref", model, "--tokens", "1,2,3", "--no-cache", "-o", model);
    /* check reads the case's golden file (CASE's folder/golden/NAME.json) and its model too */
    char gdir[1100], golden[1200];
    snprintf(gdir, sizeof gdir, "%s/golden", base);
    snprintf(golden, sizeof golden, "%s/c-ok.json", gdir);
    CU_ASSERT_FATAL(mkdir(gdir, 0755) == 0 || errno == EEXIST);
    FILE *g = fopen(golden, "w");
    CU_ASSERT_FATAL(g != NULL);
    CU_ASSERT_FATAL(fputs("{}\n", g) >= 0 && fclose(g) == 0);
    BAD("golden file", cmd_check, "check", good, "--cache", cache, "--junit", golden, "-q");
    BAD("golden file", cmd_check, "check", good, "--cache", cache, "-o", gdir, "--json",
        golden, "-q");
    BAD("MODEL", cmd_check, "check", good, "--cache", cache, "--md", model, "-q");
    char gtext[8];
    CU_ASSERT(slurp(gtext, sizeof gtext, golden) == 3 && memcmp(gtext, "{}\n", 3) == 0);
    size_t na = slurp(after, sizeof after, good);
    CU_ASSERT(na == nb && memcmp(before, after, nb) == 0);
    /* diff refuses -o OLD before it reads a report, so any file stands for one here */
    BAD("OLD report", cmd_diff, "diff", good, good, "-o", good);
    na = slurp(after, sizeof after, good);
    CU_ASSERT(na == nb && memcmp(before, after, nb) == 0);
}

/* hx_cli_getopt's memory of the options seen belongs to its caller's hx_cli_optstate: a parse
 * with a fresh state sees nothing of an earlier one (an option seen there is not "given
 * twice"), and the option found twice is named by the state of the parse that found it. */
static void test_cli_errors_getopt_state_per_parse(void)
{
    static const struct option opts[] = {{"out", required_argument, NULL, 'o'}, {0}};
    char *first[] = {"x", "-o", "a", NULL};
    char *second[] = {"y", "--out", "b", "-o", "c", NULL};
    hx_cli_optstate a = {0}, b = {0};
    opterr = 0;
    optind = 1;
    CU_ASSERT_EQUAL(hx_cli_getopt(&a, 3, first, ":o:", opts, NULL, NULL), 'o');
    CU_ASSERT_EQUAL(hx_cli_getopt(&a, 3, first, ":o:", opts, NULL, NULL), -1);
    optind = 1;
    CU_ASSERT_EQUAL(hx_cli_getopt(&b, 5, second, ":o:", opts, NULL, NULL), 'o');
    CU_ASSERT_EQUAL(hx_cli_getopt(&b, 5, second, ":o:", opts, NULL, NULL), '?');
    CU_ASSERT_STRING_EQUAL(b.twice, "-o");
    CU_ASSERT_STRING_EQUAL(a.twice, "");
    CU_ASSERT_EQUAL(a.n_seen, 1u);
    optind = 1;
}

/* A value option given twice is refused (never silently the last one), by either of its
 * names; judge's --dump is the one option meant to repeat. Empty values and a golden folder
 * check cannot read are bad input too, never a silent default. */
static void test_cli_errors_repeats_and_empties(void)
{
    setup();
    write_cases();
    const char *twice = "is given more than once";
    BAD(twice, cmd_run, "run", model, "-p", "hi", "-p", "ho", "-n", "1");
    BAD(twice, cmd_run, "run", model, "--prompt=hi", "-p", "ho", "-n", "1");
    BAD(twice, cmd_synth, "synth", "--preset", "tiny", "--preset", "moe", "-o", p("twice.gguf"));
    CU_ASSERT_FALSE(exists(p("twice.gguf")));
    BAD(twice, cmd_compare, "compare", model, "--tokens", "1,2", "--a", "naive", "--b", "blas",
        "--a", "blas", "--no-ref");
    BAD(twice, cmd_sweep, "sweep", model, "--tokens", "1,2", "--steps", "1", "--steps", "2",
        "--cache", cache, "-q");
    BAD(twice, cmd_check, "check", good, "--json", p("j1"), "--json", p("j2"), "-q");
    BAD("no dump.json", cmd_judge, "judge", model, "--tokens", "1,2", "--dump", adir, "--dump",
        adir);
    BAD("-q", cmd_run, "run", model, "-p", "hi", "-q"); /* still an unknown option */
    /* -p and -f are two spellings of the one prompt */
    const char *both = "give the prompt once";
    char *txt = (char *)tu_write_file("cli/prompt.txt", "hello", 5);
    BAD(both, cmd_run, "run", model, "-p", "hi", "-f", txt, "-n", "1");
    BAD(both, cmd_ref, "ref", model, "-f", txt, "-p", "hi", "--no-cache");
    BAD(both, cmd_sweep, "sweep", model, "-p", "hi", "-f", txt, "--cache", cache, "-q");
    BAD(both, cmd_trace, "trace", model, "-p", "hi", "-f", txt, "--a", "naive", "--b", "blas");
    BAD(both, cmd_judge, "judge", model, "-f", txt, "-p", "hi", "--dump", adir);
    BAD("empty", cmd_check, "check", good, "--golden-dir", "", "--cache", cache, "-q");
    BAD("not a folder", cmd_check, "check", good, "--golden-dir", good, "--cache", cache, "-q");
    BAD("empty", cmd_bless, "bless", good, "--golden-dir", "", "--cache", cache, "-q");
    BAD("empty", cmd_check, "check", good, "-o", "", "--cache", cache, "-q");
    BAD("empty", cmd_ref, "ref", model, "--tokens", "1,2", "--cache", "");
    BAD("not a folder", cmd_sweep, "sweep", model, "--tokens", "1,2", "--cache", good, "-q");
    BAD("empty file name", cmd_run, "run", model, "-f", "");
    BAD("empty prompt", cmd_run, "run", model, "-p", "");
    BAD("empty prompt", cmd_sweep, "sweep", model, "-p", "", "--cache", cache, "-q");
    BAD("empty file name", cmd_check, "check", "");
    BAD("empty dump folder name", cmd_judge, "judge", model, "--tokens", "1,2", "--dump", "");
}

/* The harness itself can fail: a command that succeeds is not reported as bad input. */
static void test_cli_errors_harness_sees_success(void)
{
    setup();
    cli_result r = cli(cmd_run, "run", model, "-p", "hi", "-n", "2", (char *)NULL);
    CU_ASSERT_EQUAL(r.rc, 0);
    CU_ASSERT(r.n_stdout > 0);
    r = cli(cmd_run, "run", "--help", (char *)NULL);
    CU_ASSERT_EQUAL(r.rc, 0);
    CU_ASSERT_EQUAL(r.n_lines, 0);
}

void test_cli_errors_register(void)
{
    CU_pSuite s = CU_add_suite("cli_errors", NULL, NULL);
    CU_add_test(s, "test_cli_errors_harness_sees_success", test_cli_errors_harness_sees_success);
    CU_add_test(s, "test_cli_errors_run", test_cli_errors_run);
    CU_add_test(s, "test_cli_errors_synth", test_cli_errors_synth);
    CU_add_test(s, "test_cli_errors_ref", test_cli_errors_ref);
    CU_add_test(s, "test_cli_errors_ref_no_partial_outputs", test_cli_errors_ref_no_partial_outputs);
    CU_add_test(s, "test_cli_errors_sweep", test_cli_errors_sweep);
    CU_add_test(s, "test_cli_errors_sweep_output_checked_first",
                test_cli_errors_sweep_output_checked_first);
    CU_add_test(s, "test_cli_errors_compare", test_cli_errors_compare);
    CU_add_test(s, "test_cli_errors_trace", test_cli_errors_trace);
    CU_add_test(s, "test_cli_errors_check", test_cli_errors_check);
    CU_add_test(s, "test_cli_errors_case_limits_as_options",
                test_cli_errors_case_limits_as_options);
    CU_add_test(s, "test_cli_errors_prec_same_everywhere", test_cli_errors_prec_same_everywhere);
    CU_add_test(s, "test_cli_errors_bless", test_cli_errors_bless);
    CU_add_test(s, "test_cli_errors_bless_all_or_nothing", test_cli_errors_bless_all_or_nothing);
    CU_add_test(s, "test_cli_errors_not_regular_inputs", test_cli_errors_not_regular_inputs);
    CU_add_test(s, "test_cli_errors_device_outputs", test_cli_errors_device_outputs);
    CU_add_test(s, "test_cli_errors_ref_context_limit", test_cli_errors_ref_context_limit);
    CU_add_test(s, "test_cli_errors_thread_limit", test_cli_errors_thread_limit);
    CU_add_test(s, "test_cli_errors_bless_write_all_or_nothing",
                test_cli_errors_bless_write_all_or_nothing);
    CU_add_test(s, "test_cli_errors_envelope_cache_write_warns",
                test_cli_errors_envelope_cache_write_warns);
    CU_add_test(s, "test_cli_errors_no_parent_folders", test_cli_errors_no_parent_folders);
    CU_add_test(s, "test_cli_errors_bless_golden_dir_first",
                test_cli_errors_bless_golden_dir_first);
    CU_add_test(s, "test_cli_errors_token_position", test_cli_errors_token_position);
    CU_add_test(s, "test_cli_errors_output_is_input", test_cli_errors_output_is_input);
    CU_add_test(s, "test_cli_errors_search", test_cli_errors_search);
    CU_add_test(s, "test_cli_errors_repeats_and_empties", test_cli_errors_repeats_and_empties);
    CU_add_test(s, "test_cli_errors_getopt_state_per_parse",
                test_cli_errors_getopt_state_per_parse);
}
