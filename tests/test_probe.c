/* test_probe.c — kvdrift probe's parts: the completion reply parser (special and bad replies
 * first), the top-k KL bound, the HTTP client against a fake server this test runs on loopback
 * (refused, slow, 4xx/5xx, truncated), the loopback rule, and the probe's one-line errors
 * (real servers: test_probe_serve.c). */
#include "judge/compare_topk.h"
#include "model/probe_reply.h"
#include "run/http_client.h"
#include "run/probe.h"
#include "test_util.h"

#include <CUnit/CUnit.h>
#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int parse(hx_probe_reply **r, const char *json, lm_err *e)
{
    return hx_probe_reply_parse(r, json, strlen(json), e);
}

/* json parsed: the reply, or NULL (the error printed) when it does not parse. */
static hx_probe_reply *parse_ok(const char *json)
{
    hx_probe_reply *r = NULL;
    lm_err e = {0};
    if (parse(&r, json, &e) != LM_OK)
        fprintf(stderr, "\n  %s\n", e.msg);
    return r;
}

static void test_probe_reply_legacy(void)
{
    const char *j = "{\"model\":\"m\",\"choices\":[{\"text\":\"ab\",\"logprobs\":{\"text_offset\":"
                    "[0,1],\"tokens\":[\"a\",\"token_id:7\"],\"token_logprobs\":[null,-0.5],"
                    "\"top_logprobs\":[null,{\"token_id:7\":-0.5,\"x\":-1.25}]},"
                    "\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":2,"
                    "\"completion_tokens\":1}}";
    hx_probe_reply *r = parse_ok(j);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_EQUAL(r->n, 2);
    CU_ASSERT_FALSE(r->toks[0].has_logprob);
    CU_ASSERT_EQUAL(r->toks[0].k, 0);
    CU_ASSERT_EQUAL(r->toks[1].id, 7);
    CU_ASSERT_EQUAL(r->toks[1].k, 2);
    CU_ASSERT_EQUAL(r->toks[1].offset, 1);
    CU_ASSERT_EQUAL(r->completion_tokens, 1);
    CU_ASSERT_STRING_EQUAL(r->model, "m");
    hx_probe_reply_free(r);
}

static void test_probe_reply_content(void)
{
    const char *j = "{\"choices\":[{\"logprobs\":{\"content\":[{\"id\":3,\"token\":\"t\","
                    "\"logprob\":-0.1,\"top_logprobs\":[{\"id\":3,\"token\":\"t\",\"logprob\":"
                    "-0.1},{\"id\":9,\"token\":\"u\",\"logprob\":-2.5}]}]}}]}";
    hx_probe_reply *r = parse_ok(j);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_EQUAL(r->n, 1);
    CU_ASSERT_EQUAL(r->toks[0].id, 3);
    CU_ASSERT_EQUAL(r->toks[0].top[1].id, 9);
    CU_ASSERT_EQUAL(r->prompt_tokens, -1);
    hx_probe_reply_free(r);
}

/* vLLM's prompt_logprobs: ids from prompt_token_ids or the entries' first keys, placed before
 * the generated tokens, or in place of the echoed ones. */
static void test_probe_reply_vllm_prompt(void)
{
    /* no echo: [null, {7 (own, rank 2), 9}, {4 (own)}] + prompt_token_ids, one generated */
    const char *j = "{\"choices\":[{\"text\":\"x\",\"logprobs\":{\"tokens\":[\"token_id:5\"],"
                    "\"token_logprobs\":[-0.25],\"top_logprobs\":[{\"token_id:5\":-0.25}]},"
                    "\"prompt_token_ids\":[1,7,4],\"prompt_logprobs\":[null,{\"7\":{\"logprob\":"
                    "-1.5,\"rank\":2,\"decoded_token\":\"a\"},\"9\":{\"logprob\":-0.5,\"rank\":1,"
                    "\"decoded_token\":\"b\"}},{\"4\":{\"logprob\":-0.125,\"rank\":1,"
                    "\"decoded_token\":\"c\"}}]}],\"usage\":{\"prompt_tokens\":3,"
                    "\"completion_tokens\":1}}";
    hx_probe_reply *r = parse_ok(j);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_EQUAL_FATAL(r->n, 4);
    CU_ASSERT_EQUAL(r->n_prompt_scored, 3);
    CU_ASSERT_EQUAL(r->toks[0].id, 1);
    CU_ASSERT_FALSE(r->toks[0].has_logprob);
    CU_ASSERT_EQUAL(r->toks[0].k, 0);
    CU_ASSERT_EQUAL(r->toks[1].id, 7);
    CU_ASSERT_EQUAL(r->toks[1].logprob, -1.5); /* exact in binary, copied unchanged */
    CU_ASSERT_EQUAL(r->toks[1].k, 2);
    CU_ASSERT_EQUAL(r->toks[1].top[1].id, 9);
    CU_ASSERT_STRING_EQUAL(r->toks[1].top[1].text, "b");
    CU_ASSERT_EQUAL(r->toks[2].id, 4);
    CU_ASSERT_EQUAL(r->toks[3].id, 5);
    hx_probe_reply_free(r);
    /* without prompt_token_ids: the first key is the prompt's token; the null entry, naming
     * none, is left out */
    j = "{\"choices\":[{\"logprobs\":{\"tokens\":[\"z\"],\"token_logprobs\":[-1]},"
        "\"prompt_logprobs\":[null,{\"8\":{\"logprob\":-3,\"rank\":4},\"2\":{\"logprob\":-0.1,"
        "\"rank\":1}}]}],\"usage\":{\"completion_tokens\":1}}";
    CU_ASSERT_PTR_NOT_NULL_FATAL(r = parse_ok(j));
    CU_ASSERT_EQUAL_FATAL(r->n, 2);
    CU_ASSERT_EQUAL(r->n_prompt_scored, 1);
    CU_ASSERT_EQUAL(r->toks[0].id, 8);
    CU_ASSERT_EQUAL(r->toks[0].logprob, -3.0);
    CU_ASSERT_STRING_EQUAL(r->toks[0].top[0].text, "");
    CU_ASSERT_STRING_EQUAL(r->toks[1].text, "z");
    hx_probe_reply_free(r);
    /* echo: the echoed tokens (text only) give way to prompt_logprobs' (exact ids) */
    j = "{\"choices\":[{\"logprobs\":{\"tokens\":[\"<s>\",\"a\",\"q\"],\"token_logprobs\":[null,"
        "-1.5,-0.5],\"top_logprobs\":[null,{\"a\":-1.5},{\"q\":-0.5}]},\"prompt_logprobs\":"
        "[null,{\"7\":{\"logprob\":-1.5,\"rank\":1,\"decoded_token\":\"a\"}}]}],"
        "\"usage\":{\"completion_tokens\":1}}";
    CU_ASSERT_PTR_NOT_NULL_FATAL(r = parse_ok(j));
    CU_ASSERT_EQUAL_FATAL(r->n, 3);
    CU_ASSERT_STRING_EQUAL(r->toks[0].text, "<s>");
    CU_ASSERT_EQUAL(r->toks[0].id, -1);
    CU_ASSERT_EQUAL(r->toks[1].id, 7);
    CU_ASSERT_STRING_EQUAL(r->toks[2].text, "q");
    hx_probe_reply_free(r);
}

/* Every bad reply: LM_E_INPUT, a message naming the fault, nothing returned. */
static void test_probe_reply_bad(void)
{
    static const struct { const char *json, *says; } bad[] = {
        {"", "malformed JSON"},
        {"{\"choices\":[{\"logprobs\":{\"tokens\":[\"a\"]", "malformed JSON"},
        {"[1,2]", "not a JSON object"},
        {"{\"error\":{\"message\":\"model not loaded\"}}", "model not loaded"},
        {"{\"choices\":[]}", "no choices"},
        {"{\"choices\":[{\"text\":\"x\"}]}", "no log-probabilities"},
        {"{\"choices\":[{\"logprobs\":null}]}", "no log-probabilities"},
        {"{\"choices\":[{\"logprobs\":{\"tokens\":[\"a\",\"b\"],\"token_logprobs\":[-1]}}]}",
         "different lengths"},
        {"{\"choices\":[{\"logprobs\":{\"tokens\":[\"a\"],\"token_logprobs\":[0.5]}}]}",
         "not a log-probability"},
        {"{\"choices\":[{\"logprobs\":{\"tokens\":[\"a\"],\"token_logprobs\":[\"x\"]}}]}",
         "not a number"},
        {"{\"choices\":[{\"logprobs\":{\"content\":[{\"id\":-4,\"logprob\":-1}]}}]}",
         "no valid id"},
        {"{\"choices\":[{\"logprobs\":{\"tokens\":[\"a\"],\"token_logprobs\":[-1],"
         "\"top_logprobs\":[[1]]}}]}", "not an object"},
        /* vLLM's prompt_logprobs */
        {"{\"choices\":[{\"logprobs\":{\"tokens\":[],\"token_logprobs\":[]},"
         "\"prompt_logprobs\":{}}]}", "not a list"},
        {"{\"choices\":[{\"logprobs\":{\"tokens\":[],\"token_logprobs\":[]},"
         "\"prompt_logprobs\":[null,null]}]}", "is not an object"},
        {"{\"choices\":[{\"logprobs\":{\"tokens\":[],\"token_logprobs\":[]},"
         "\"prompt_logprobs\":[null,{\"x\":{\"logprob\":-1}}]}]}", "not a token id"},
        {"{\"choices\":[{\"logprobs\":{\"tokens\":[],\"token_logprobs\":[]},"
         "\"prompt_logprobs\":[null,{\"3\":{\"logprob\":-1}}],\"prompt_token_ids\":[1,4]}]}",
         "not in its own"},
        {"{\"choices\":[{\"logprobs\":{\"tokens\":[],\"token_logprobs\":[]},"
         "\"prompt_logprobs\":[null,{\"3\":{\"logprob\":-1}}],\"prompt_token_ids\":[1]}]}",
         "not a list of 2 ids"},
        {"{\"choices\":[{\"logprobs\":{\"tokens\":[],\"token_logprobs\":[]},"
         "\"prompt_logprobs\":[null,{\"3\":{\"logprob\":-1,\"rank\":0}}]}]}", "rank"},
        {"{\"choices\":[{\"logprobs\":{\"tokens\":[],\"token_logprobs\":[]},"
         "\"prompt_logprobs\":[null,{\"3\":{\"logprob\":2}}]}]}", "not a log-probability"},
        {"{\"choices\":[{\"logprobs\":{\"tokens\":[\"a\"],\"token_logprobs\":[null]},"
         "\"prompt_logprobs\":[null,{\"3\":{\"logprob\":-1}},{\"4\":{\"logprob\":-1}}]}],"
         "\"usage\":{\"completion_tokens\":0}}", "the echo holds 1"},
        {"{\"choices\":[{\"logprobs\":{\"tokens\":[],\"token_logprobs\":[]},"
         "\"prompt_logprobs\":[null,{}]}]}", "is empty"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
        hx_probe_reply *r = (hx_probe_reply *)1;
        lm_err e = {0};
        CU_ASSERT_EQUAL(parse(&r, bad[i].json, &e), LM_E_INPUT);
        CU_ASSERT_PTR_NULL(r);
        if (strstr(e.msg, bad[i].says) == NULL)
            fprintf(stderr, "\n  reply %zu: '%s' does not say '%s'\n", i, e.msg, bad[i].says);
        CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, bad[i].says));
    }
}

/* The bound: 0 for the reference's own values, the full KL when every id is returned, never
 * above the full KL, and growing as more ids are returned. */
static void test_probe_kl_lower_bound(void)
{
    enum { V = 16 };
    double r[V], lse = 0.0, q[V], lq = 0.0;
    uint64_t st = tu_seed();
    for (int v = 0; v < V; ++v) {
        r[v] = 3.0 * (double)tu_rand_f32(&st);
        q[v] = r[v] + 0.5 * (double)tu_rand_f32(&st);
        lse += exp(r[v]);
        lq += exp(q[v]);
    }
    int32_t ids[V];
    float lp[V], own[V];
    double full = 0.0;
    for (int v = 0; v < V; ++v) {
        r[v] -= log(lse);
        ids[v] = v;
        lp[v] = (float)(q[v] - log(lq));
        own[v] = (float)r[v];
    }
    for (int v = 0; v < V; ++v)
        full += exp(r[v]) * (r[v] - (double)lp[v]);
    CU_ASSERT_EQUAL(hx_kl_lower_topk(r, V, ids, lp, 0), 0.0);
    CU_ASSERT(hx_kl_lower_topk(r, V, ids, own, V) < 1e-5);
    const double all = hx_kl_lower_topk(r, V, ids, lp, V);
    CU_ASSERT(all <= full + 1e-12);
    CU_ASSERT(all > 0.5 * full);
    CU_ASSERT(hx_kl_lower_topk(r, V, ids, lp, 4) <= full + 1e-12);
}

static void test_probe_loopback_rule(void)
{
    bool ok = false;
    CU_ASSERT_TRUE(hx_url_is_loopback("http://127.0.0.1:8080", &ok) && ok);
    CU_ASSERT_TRUE(hx_url_is_loopback("http://localhost/v1", &ok) && ok);
    CU_ASSERT_TRUE(hx_url_is_loopback("http://[::1]:80", &ok) && ok);
    CU_ASSERT_FALSE(hx_url_is_loopback("http://10.0.0.1:8080", &ok));
    CU_ASSERT_FALSE(hx_url_is_loopback("http://127.0.0.1.example.com/", &ok));
    CU_ASSERT_FALSE(hx_url_is_loopback("http://example.com", &ok));
    CU_ASSERT_FALSE(hx_url_is_loopback("ftp://127.0.0.1/", &ok) && ok);
    CU_ASSERT_FALSE(ok);
}

/* A fake server on loopback: each connection read, then answered as the mode says. */
typedef enum { FAKE_OK, FAKE_500, FAKE_404, FAKE_SLOW, FAKE_TRUNCATED } fake_mode;
typedef struct fake {
    int fd, port;
    fake_mode mode;
    const char *body;
    int n_conn;      /* connections to serve before the thread ends */
    pthread_t th;
} fake;

static void *fake_main(void *arg)
{
    fake *f = arg;
    for (int i = 0; i < f->n_conn; ++i) {
        int c = accept(f->fd, NULL, NULL);
        if (c < 0)
            break;
        char buf[8192];
        ssize_t got = recv(c, buf, sizeof buf, 0);
        (void)got;
        char head[256];
        const size_t bl = strlen(f->body);
        if (f->mode == FAKE_SLOW) {
            usleep(1500 * 1000);
        } else {
            const int st = f->mode == FAKE_500 ? 500 : f->mode == FAKE_404 ? 404 : 200;
            int hl = snprintf(head, sizeof head, "HTTP/1.1 %d X\r\nContent-Type: application/json"
                              "\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n", st,
                              f->mode == FAKE_TRUNCATED ? bl + 100 : bl);
            if (send(c, head, (size_t)hl, MSG_NOSIGNAL) < 0 ||
                send(c, f->body, bl, MSG_NOSIGNAL) < 0)
                fprintf(stderr, "\n  fake server: send failed\n");
        }
        close(c);
    }
    return NULL;
}

static bool fake_start(fake *f, fake_mode mode, const char *body, int n_conn)
{
    *f = (fake){.mode = mode, .body = body, .n_conn = n_conn};
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    f->fd = socket(AF_INET, SOCK_STREAM, 0);
    if (f->fd < 0 || bind(f->fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(f->fd, 64) != 0 ||
        getsockname(f->fd, (struct sockaddr *)&a, &al) != 0)
        return false;
    f->port = ntohs(a.sin_port);
    return pthread_create(&f->th, NULL, fake_main, f) == 0;
}

static void fake_stop(fake *f)
{
    shutdown(f->fd, SHUT_RDWR);
    close(f->fd);
    pthread_join(f->th, NULL);
}

static void one_request(hx_http_reply *r, int port, double timeout_s)
{
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/completions", port);
    hx_http_req q = {.url = url, .body = "{}", .timeout_s = timeout_s};
    lm_err e = {0};
    CU_ASSERT_EQUAL(hx_http_run(r, &q, 1, 30.0, NULL, &e), LM_OK);
}

static void test_probe_http_bad_servers(void)
{
    fake f;
    hx_http_reply r;
    /* ok, then the statuses a server answers with */
    CU_ASSERT_TRUE_FATAL(fake_start(&f, FAKE_OK, "{\"a\":1}", 1));
    one_request(&r, f.port, 10.0);
    CU_ASSERT_TRUE(r.ok && r.status == 200 && r.len == 7);
    hx_http_reply_clear(&r);
    fake_stop(&f);
    CU_ASSERT_TRUE_FATAL(fake_start(&f, FAKE_500, "{\"error\":{\"message\":\"boom\"}}", 1));
    one_request(&r, f.port, 10.0);
    CU_ASSERT_TRUE(r.ok && r.status == 500);
    char msg[64];
    hx_probe_error_text(msg, sizeof msg, r.body, r.len);
    CU_ASSERT_STRING_EQUAL(msg, "boom");
    hx_http_reply_clear(&r);
    fake_stop(&f);
    CU_ASSERT_TRUE_FATAL(fake_start(&f, FAKE_404, "not here", 1));
    one_request(&r, f.port, 10.0);
    CU_ASSERT_TRUE(r.ok && r.status == 404);
    hx_http_reply_clear(&r);
    fake_stop(&f);
    /* slow: the per-request limit */
    CU_ASSERT_TRUE_FATAL(fake_start(&f, FAKE_SLOW, "", 1));
    one_request(&r, f.port, 0.3);
    CU_ASSERT_FALSE(r.ok);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.error, "within 0.3 s"));
    hx_http_reply_clear(&r);
    fake_stop(&f);
    /* truncated: fewer bytes than Content-Length */
    CU_ASSERT_TRUE_FATAL(fake_start(&f, FAKE_TRUNCATED, "{\"choices\":[", 1));
    one_request(&r, f.port, 10.0);
    CU_ASSERT_FALSE(r.ok);
    hx_http_reply_clear(&r);
    fake_stop(&f);
    /* refused: nothing listens on a port just closed */
    CU_ASSERT_TRUE_FATAL(fake_start(&f, FAKE_OK, "", 0));
    const int port = f.port;
    fake_stop(&f);
    one_request(&r, port, 10.0);
    CU_ASSERT_FALSE(r.ok);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.error, "refused"));
    hx_http_reply_clear(&r);
}

/* The overall limit cancels what still runs, and every request has ended on return. */
static void test_probe_http_overall_limit(void)
{
    fake f;
    CU_ASSERT_TRUE_FATAL(fake_start(&f, FAKE_SLOW, "", 3));
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/", f.port);
    hx_http_req q[3];
    for (int i = 0; i < 3; ++i)
        q[i] = (hx_http_req){.url = url, .body = "{}", .timeout_s = 10.0};
    hx_http_reply r[3];
    lm_err e = {0};
    CU_ASSERT_EQUAL(hx_http_run(r, q, 3, 0.4, NULL, &e), LM_OK);
    for (int i = 0; i < 3; ++i) {
        CU_ASSERT_FALSE(r[i].ok);
        CU_ASSERT_PTR_NOT_NULL(strstr(r[i].error, "overall"));
        CU_ASSERT(r[i].t_end_s < 1.4);
        hx_http_reply_clear(&r[i]);
    }
    fake_stop(&f);
}

/* Counts (in *(int *)user) the progress lines saying an echo was too short. */
static void count_echo_short(void *user, const char *line)
{
    *(int *)user += strstr(line, "prompt token(s) too few") != NULL;
}

/* The probe's one-line errors: a remote URL, a server down, replies without log-probabilities
 * and malformed ones, each LM_E_INPUT before any report exists. */
static void test_probe_run_bad_input(void)
{
    const char *mp = NULL;
    lm_model *m = tu_load_model_at("stories260K.gguf", &mp);
    if (m == NULL)
        return;
    int32_t prompt[] = {1, 403, 407, 261, 378};
    hx_probe_params p = {.n_gen = 2, .k = 2, .concurrency = {1}, .n_concurrency = 1,
                         .prefixes = {{HX_PREFIX_COLD, 0}}, .n_prefixes = 1, .repeat = 1,
                         .timeout_s = 5.0, .overall_s = 20.0,
                         .judge = {.model = m, .prompt = prompt, .n_prompt = 5, .quiet = true}};
    hx_report *rep = NULL;
    lm_err e = {0};
    p.url = "http://192.0.2.1:8080";
    CU_ASSERT_EQUAL(hx_probe_run(&rep, &p, &e), LM_E_INPUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "--allow-remote"));
    e = (lm_err){0};
    fake f;
    CU_ASSERT_TRUE_FATAL(fake_start(&f, FAKE_OK, "", 0));
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", f.port);
    fake_stop(&f);
    p.url = url;
    CU_ASSERT_EQUAL(hx_probe_run(&rep, &p, &e), LM_E_INPUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "not reachable"));
    e = (lm_err){0};
    static const char *const replies[] = {
        "{\"choices\":[{\"text\":\"x\"}]}", "{\"choices\":[{\"logprobs\":", "not json"};
    static const char *const says[] = {"no log-probabilities", "malformed", "malformed"};
    for (int i = 0; i < 3; ++i) {
        /* 3 info requests, then the probe's first form */
        CU_ASSERT_TRUE_FATAL(fake_start(&f, FAKE_OK, replies[i], 4));
        snprintf(url, sizeof url, "http://127.0.0.1:%d", f.port);
        CU_ASSERT_EQUAL(hx_probe_run(&rep, &p, &e), LM_E_INPUT);
        if (strstr(e.msg, says[i]) == NULL)
            fprintf(stderr, "\n  reply %d: '%s'\n", i, e.msg);
        CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, says[i]));
        CU_ASSERT_PTR_NULL(rep);
        fake_stop(&f);
        e = (lm_err){0};
    }
    /* an echo that scores one prompt token too few (3 of the 4 after BOS): both echo forms are
     * passed over, each with a progress line, the first form without echo is asked next */
    CU_ASSERT_TRUE_FATAL(fake_start(&f, FAKE_OK, "{\"choices\":[{\"logprobs\":{\"tokens\":"
                                    "[\"a\",\"b\",\"c\",\"d\"],\"token_logprobs\":[null,-1,"
                                    "-1,-1]}}],\"usage\":{\"completion_tokens\":1}}", 5));
    snprintf(url, sizeof url, "http://127.0.0.1:%d", f.port);
    int n_short = 0;
    p.judge.quiet = false;
    p.judge.log = count_echo_short;
    p.judge.log_user = &n_short;
    CU_ASSERT_EQUAL(hx_probe_run(&rep, &p, &e), LM_E_INPUT);
    CU_ASSERT_EQUAL(n_short, 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "the probe:")); /* the third form found no server */
    fake_stop(&f);
    lm_model_free(m);
}

void test_probe_register(void)
{
    CU_pSuite s = CU_add_suite("probe", NULL, NULL);
    CU_add_test(s, "test_probe_reply_legacy", test_probe_reply_legacy);
    CU_add_test(s, "test_probe_reply_content", test_probe_reply_content);
    CU_add_test(s, "test_probe_reply_vllm_prompt", test_probe_reply_vllm_prompt);
    CU_add_test(s, "test_probe_reply_bad", test_probe_reply_bad);
    CU_add_test(s, "test_probe_kl_lower_bound", test_probe_kl_lower_bound);
    CU_add_test(s, "test_probe_loopback_rule", test_probe_loopback_rule);
    CU_add_test(s, "test_probe_http_bad_servers", test_probe_http_bad_servers);
    CU_add_test(s, "test_probe_http_overall_limit", test_probe_http_overall_limit);
    CU_add_test(s, "test_probe_run_bad_input", test_probe_run_bad_input);
}
