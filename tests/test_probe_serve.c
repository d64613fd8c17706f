/* test_probe_serve.c — kvdrift probe against real servers on loopback, each started here on a
 * free port and stopped again: llama-cpp-python's server (the llamacpp adapter's venv with the
 * [server] extra: make adapters) and llama.cpp's llama-server (make llama-server; -np 4: four
 * slots, continuous batching, its prompt cache), each with SKIP when absent. Covered: the whole
 * probe over concurrency and the prefix modes cold, warm and shared:P (llama-server's /slots
 * shows the fillers really began with the prompt's first P tokens), and SIGINT: in-process,
 * the requests are cancelled, nothing is returned and the signal is raised again; as a
 * process, `kvdrift probe` ends by SIGINT with nothing written in its report folder. */
#include "fs.h"
#include "kvd_tokenizer.h"
#include "run/http_client.h"
#include "run/probe.h"
#include "fixtures.h"
#include "test_util.h"

#include <CUnit/CUnit.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* stories260K's ids for a short prompt (BOS first), as the other probe tests use. */
static const int32_t prompt_ids[] = {1, 403, 407, 261, 378};
#define N_PROMPT 5u

typedef enum { SRV_LLAMACPP_PYTHON, SRV_LLAMA_SERVER } srv_kind;

/* A port nothing listens on just now (the kernel's choice for port 0). */
static int free_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &al) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

/* The executable of kind under the kvdrift cache (lm_cache_dir) into path [n]; false when it
 * is not there. */
static bool server_path(char *path, size_t n, srv_kind kind)
{
    char cache[2048];
    lm_err e = {0};
    if (lm_cache_dir(cache, sizeof cache, NULL, &e) != LM_OK)
        cache[0] = '\0';
    snprintf(path, n, "%s/%s", cache, kind == SRV_LLAMA_SERVER
                                          ? "llama-server/build/bin/llama-server"
                                          : "adapters/llamacpp/bin/python");
    return cache[0] != '\0' && access(path, X_OK) == 0;
}

/* GET url: status 200 within timeout_s, its body into *body (malloc'd, optional). */
static bool get_ok(const char *url, double timeout_s, char **body)
{
    hx_http_reply r;
    hx_http_req q = {.url = url, .timeout_s = timeout_s};
    lm_err e = {0};
    bool ok = hx_http_run(&r, &q, 1, timeout_s + 1.0, NULL, &e) == LM_OK && r.ok &&
              r.status == 200;
    if (ok && body != NULL) {
        *body = r.body;
        r.body = NULL;
    }
    hx_http_reply_clear(&r);
    return ok;
}

/* Starts the server of kind for model on a free loopback port (its output to /dev/null) and
 * waits up to 60 s for /v1/models; its pid, or -1 (a SKIP line when it is not installed or
 * exits at once, a failure when it does not answer). */
static pid_t start_server(srv_kind kind, const char *model, int *port)
{
    char exe[4200], ps[16];
    if (!server_path(exe, sizeof exe, kind)) {
        fprintf(stderr, "\n  SKIP: %s absent (%s)\n", exe,
                kind == SRV_LLAMA_SERVER ? "make llama-server" : "make adapters");
        return -1;
    }
    if ((*port = free_port()) < 0) {
        CU_FAIL("no free loopback port");
        return -1;
    }
    snprintf(ps, sizeof ps, "%d", *port);
    char *py[] = {exe, "-m", "llama_cpp.server", "--model", (char *)model, "--host",
                  "127.0.0.1", "--port", ps, "--n_ctx", "512", NULL};
    /* 4 slots of 512 positions, 1 thread: ggml's threads spin while they wait for each other,
     * which on a small shared machine costs far more than it gains */
    char *ls[] = {exe, "-m", (char *)model, "--host", "127.0.0.1", "--port", ps, "-np", "4",
                  "-c", "2048", "-t", "1", NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    pid_t pid = -1;
    /* llama-server's /slots names each slot's last prompt only with this set */
    setenv("LLAMA_SERVER_SLOTS_DEBUG", "1", 1);
    int rc = posix_spawn(&pid, exe, &fa, NULL, kind == SRV_LLAMA_SERVER ? ls : py, environ);
    unsetenv("LLAMA_SERVER_SLOTS_DEBUG");
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
        CU_FAIL("the server could not be started");
        return -1;
    }
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/models", *port);
    for (int i = 0; i < 120; ++i) {
        if (get_ok(url, 2.0, NULL))
            return pid;
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            fprintf(stderr, "\n  SKIP: %s exited at once (%s)\n", exe,
                    kind == SRV_LLAMA_SERVER ? "rebuild with make llama-server"
                                             : "no [server] extra in the venv?");
            return -1;
        }
        usleep(500 * 1000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    CU_FAIL("the server did not answer /v1/models within 60 s");
    return -1;
}

static void stop_server(pid_t pid)
{
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
}

/* The probe's parameters for the server at url: top-3, 4 tokens, profiles f32 and f16kv. */
static hx_probe_params params(const char *url, lm_model *m, ref_model *rm)
{
    static const char *prof[] = {"f32", "f16kv"};
    return (hx_probe_params){.url = url, .n_gen = 4, .k = 3, .repeat = 1, .timeout_s = 60.0,
                             .overall_s = 300.0, .seed = 1,
                             .judge = {.model = m, .ref = rm, .prompt = prompt_ids,
                                       .n_prompt = N_PROMPT, .quiet = true,
                                       .cache_dir = tu_tmpdir(), .profiles = prof,
                                       .n_profiles = 2}};
}

/* Concurrency 1 and n_conc, prefixes cold, warm and shared:3 against the server of kind:
 * every reply explained by a profile, the rows in the planned order; the server's /props
 * contain props_has (NULL: a server without /props, whose properties are empty). */
static void probe_server(srv_kind kind, uint32_t n_conc, const char *props_has)
{
    const char *mp = NULL;
    lm_model *m = tu_load_model_at("stories260K.gguf", &mp);
    if (m == NULL)
        return;
    int port = 0;
    pid_t pid = start_server(kind, mp, &port);
    if (pid < 0) {
        lm_model_free(m);
        return;
    }
    ref_model *rm = tf_ref_open(m);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", port);
    hx_probe_params p = params(url, m, rm);
    p.concurrency[0] = 1;
    p.concurrency[1] = n_conc;
    p.n_concurrency = 2;
    p.prefixes[0] = (hx_probe_prefix){HX_PREFIX_COLD, 0};
    p.prefixes[1] = (hx_probe_prefix){HX_PREFIX_WARM, 0};
    p.prefixes[2] = (hx_probe_prefix){HX_PREFIX_SHARED, 3};
    p.n_prefixes = 3;
    hx_report *rep = NULL;
    lm_err e = {0};
    int rc = hx_probe_run(&rep, &p, &e);
    if (rc != LM_OK)
        fprintf(stderr, "\n  %s\n", e.msg);
    CU_ASSERT_EQUAL(rc, LM_OK);
    if (rep != NULL) {
        const hx_probe_report *pr = &rep->probe;
        CU_ASSERT_EQUAL_FATAL(pr->n_rows, 6);
        CU_ASSERT_TRUE(pr->rows[0].is_baseline && pr->rows[0].bits_same);
        CU_ASSERT_STRING_EQUAL(pr->rows[4].config, "c=1,prefix=shared:3,rep=0");
        CU_ASSERT_EQUAL(pr->rows[5].concurrency, n_conc);
        if (props_has != NULL) {
            CU_ASSERT_PTR_NOT_NULL(strstr(pr->server_props, props_has));
        } else { /* a server without /props: nothing said of it */
            CU_ASSERT_STRING_EQUAL(pr->server_props, "");
        }
        CU_ASSERT_EQUAL(hx_report_exit_code(rep, false), 0);
        CU_ASSERT_EQUAL(rep->dumps[0].topk.n_vocab, 512);
    }
    hx_report_free(rep);
    if (kind == SRV_LLAMA_SERVER && rc == LM_OK) {
        /* the last batch (c=n_conc, shared:3) left its prompts in the slots: they all begin
         * with the text of the prompt's ids 1..2 (after BOS), which random fillers would not */
        char surl[64], *body = NULL, *shared = NULL;
        snprintf(surl, sizeof surl, "http://127.0.0.1:%d/slots", port);
        CU_ASSERT_TRUE_FATAL(get_ok(surl, 10.0, &body));
        CU_ASSERT_EQUAL_FATAL(lm_detokenize(m->vocab, prompt_ids + 1, 2, &shared, &e), LM_OK);
        json_t *slots = json_loads(body, 0, NULL);
        size_t n_with = 0, n_slots = json_array_size(slots);
        for (size_t i = 0; i < n_slots; ++i) {
            const char *pt = json_string_value(json_object_get(json_array_get(slots, i),
                                                               "prompt"));
            n_with += pt != NULL && strstr(pt, shared) != NULL &&
                      (size_t)(strstr(pt, shared) - pt) <= 4; /* after "<s>" and a space */
        }
        if (n_with != n_conc)
            fprintf(stderr, "\n  /slots: %zu of %zu slots begin with '%s': %s\n", n_with,
                    n_slots, shared, body);
        CU_ASSERT_EQUAL(n_with, n_conc);
        json_decref(slots);
        free(shared);
        free(body);
    }
    stop_server(pid);
    ref_model_free(rm);
    lm_model_free(m);
}

static void test_probe_serve_llamacpp_python(void)
{
    probe_server(SRV_LLAMACPP_PYTHON, 2, NULL);
}

static void test_probe_serve_llama_server(void)
{
    probe_server(SRV_LLAMA_SERVER, 4, "total_slots=4");
}

/* The in-process SIGINT: the test's own handler counts what the probe raises again. */
static volatile sig_atomic_t n_sigint;
static void count_sigint(int sig)
{
    (void)sig;
    n_sigint++;
}

/* Sends SIGINT to this process when the probe announces its second request configuration. */
static void interrupt_at_second(void *user, const char *line)
{
    (void)user;
    if (strncmp(line, "request 2 of", 12) == 0)
        kill(getpid(), SIGINT);
}

/* The first server found (llama-server, else llama-cpp-python's), started for model. */
static pid_t start_any(const char *model, int *port)
{
    char exe[4200];
    const srv_kind kind = server_path(exe, sizeof exe, SRV_LLAMA_SERVER) ? SRV_LLAMA_SERVER
                                                                          : SRV_LLAMACPP_PYTHON;
    return start_server(kind, model, port);
}

/* SIGINT during the probe's requests: hx_probe_run cancels them and returns LM_E_INPUT with
 * no report, having raised the signal again under the disposition it found (the test's
 * handler, called once); the server answers again at once. */
static void test_probe_serve_sigint_in_process(void)
{
    const char *mp = NULL;
    lm_model *m = tu_load_model_at("stories260K.gguf", &mp);
    if (m == NULL)
        return;
    int port = 0;
    pid_t pid = start_any(mp, &port);
    if (pid < 0) {
        lm_model_free(m);
        return;
    }
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", port);
    hx_probe_params p = params(url, m, NULL);
    p.concurrency[0] = 4;
    p.n_concurrency = 1;
    p.prefixes[0] = (hx_probe_prefix){HX_PREFIX_COLD, 0};
    p.n_prefixes = 1;
    p.repeat = 20;
    p.judge.quiet = false;
    p.judge.log = interrupt_at_second;
    struct sigaction sa = {.sa_handler = count_sigint}, old;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old);
    n_sigint = 0;
    hx_report *rep = NULL;
    lm_err e = {0};
    CU_ASSERT_EQUAL(hx_probe_run(&rep, &p, &e), LM_E_INPUT);
    sigaction(SIGINT, &old, NULL);
    CU_ASSERT_PTR_NULL(rep);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "interrupted by SIGINT"));
    CU_ASSERT_EQUAL(n_sigint, 1);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/models", port);
    CU_ASSERT_TRUE(get_ok(url, 5.0, NULL));
    stop_server(pid);
    lm_model_free(m);
}

/* Whether folder dir holds anything (false when it does not exist). */
static bool dir_has_files(const char *dir)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return false;
    bool any = false;
    for (struct dirent *de; (de = readdir(d)) != NULL;)
        any |= strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0;
    closedir(d);
    return any;
}

/* `kvdrift probe` interrupted by SIGINT once its progress shows the second request
 * configuration: it ends by SIGINT (as kvdrift ends interrupted anywhere), within 10 s, with
 * nothing in its report folder. */
static void test_probe_serve_sigint_cli(void)
{
    if (access("build/kvdrift", X_OK) != 0) {
        fprintf(stderr, "\n  SKIP: build/kvdrift absent (run from the repository root)\n");
        return;
    }
    const char *mp = tu_model_path("stories260K.gguf");
    if (mp == NULL)
        return;
    char model[4096];
    snprintf(model, sizeof model, "%s", mp);
    int port = 0;
    pid_t srv = start_any(model, &port);
    if (srv < 0)
        return;
    char url[64], out[4200], cache[4200];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", port);
    snprintf(out, sizeof out, "%s/probe-sigint", tu_tmpdir());
    snprintf(cache, sizeof cache, "%s", tu_tmpdir());
    char *argv[] = {"build/kvdrift", "probe", url, model, "--tokens", "1,403,407,261,378",
                    "--concurrency", "4", "--repeat", "50", "-n", "8", "-o", out, "--cache",
                    cache, NULL};
    int pe[2];
    CU_ASSERT_EQUAL_FATAL(pipe(pe), 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, pe[1], 2);
    posix_spawn_file_actions_addclose(&fa, pe[0]);
    pid_t pid = -1;
    CU_ASSERT_EQUAL_FATAL(posix_spawn(&pid, "build/kvdrift", &fa, NULL, argv, environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    close(pe[1]);
    /* its stderr until the second configuration starts (at most 60 s) */
    char buf[8192] = "";
    size_t got = 0;
    bool second = false;
    for (int waited = 0; !second && waited < 600;) {
        struct pollfd pf = {.fd = pe[0], .events = POLLIN};
        if (poll(&pf, 1, 100) <= 0) {
            ++waited;
            continue;
        }
        ssize_t r = read(pe[0], buf + got, sizeof buf - 1 - got);
        if (r <= 0)
            break;
        got += (size_t)r;
        buf[got] = '\0';
        second = strstr(buf, "request 2 of") != NULL;
        if (got > sizeof buf / 2) { /* keep the tail: the line looked for is the latest */
            memmove(buf, buf + got - 256, 256);
            got = 256;
        }
    }
    if (!second)
        fprintf(stderr, "\n  kvdrift probe said: %s\n", buf);
    CU_ASSERT_TRUE(second);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    kill(pid, SIGINT);
    int st = 0;
    pid_t w = 0;
    for (int i = 0; i < 200 && (w = waitpid(pid, &st, WNOHANG)) == 0; ++i)
        usleep(50 * 1000);
    clock_gettime(CLOCK_MONOTONIC, &b);
    if (w == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
        CU_FAIL("kvdrift probe still ran 10 s after SIGINT");
    }
    close(pe[0]);
    CU_ASSERT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGINT);
    CU_ASSERT((b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec) < 10.0);
    CU_ASSERT_FALSE(dir_has_files(out));
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/models", port);
    CU_ASSERT_TRUE(get_ok(url, 5.0, NULL));
    stop_server(srv);
}

void test_probe_serve_register(void)
{
    CU_pSuite s = CU_add_suite("probe_serve", NULL, NULL);
    CU_add_test(s, "test_probe_serve_llamacpp_python", test_probe_serve_llamacpp_python);
    CU_add_test(s, "test_probe_serve_llama_server", test_probe_serve_llama_server);
    CU_add_test(s, "test_probe_serve_sigint_in_process", test_probe_serve_sigint_in_process);
    CU_add_test(s, "test_probe_serve_sigint_cli", test_probe_serve_sigint_cli);
}
