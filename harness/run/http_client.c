/* http_client.c — concurrent HTTP requests through curl's multi interface, and the loopback
 * test of a URL (contract in http_client.h). */
#include "run/http_client.h"

#include "kvd_util.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc = CURLE_FAILED_INIT;

static void curl_init(void)
{
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* One transfer's state: the reply being filled and the body's growth. */
typedef struct xfer {
    hx_http_reply *r;
    size_t cap;
    bool too_long, oom;
} xfer;

static size_t on_data(char *p, size_t size, size_t nmemb, void *user)
{
    xfer *x = user;
    size_t n = size * nmemb;
    if (x->r->len + n > HX_HTTP_MAX_BODY) {
        x->too_long = true;
        return 0; /* stops the transfer */
    }
    if (x->r->len + n + 1 > x->cap) {
        size_t cap = x->cap ? x->cap : 4096;
        while (cap < x->r->len + n + 1)
            cap *= 2;
        char *b = realloc(x->r->body, cap);
        if (b == NULL) {
            x->oom = true;
            return 0;
        }
        x->r->body = b;
        x->cap = cap;
    }
    memcpy(x->r->body + x->r->len, p, n);
    x->r->len += n;
    x->r->body[x->r->len] = '\0';
    return n;
}

void hx_http_reply_clear(hx_http_reply *r)
{
    if (r == NULL)
        return;
    free(r->body);
    memset(r, 0, sizeof *r);
}

/* The failure of a finished transfer in one phrase. */
static void describe(hx_http_reply *r, const xfer *x, CURLcode c, const hx_http_req *q)
{
    if (c == CURLE_OK) {
        r->ok = true;
        return;
    }
    if (x->too_long)
        snprintf(r->error, sizeof r->error, "reply longer than %u MiB",
                 (unsigned)(HX_HTTP_MAX_BODY >> 20));
    else if (x->oom)
        snprintf(r->error, sizeof r->error, "out of memory reading the reply");
    else if (c == CURLE_OPERATION_TIMEDOUT)
        snprintf(r->error, sizeof r->error, "no complete reply within %g s", q->timeout_s);
    else if (c == CURLE_COULDNT_CONNECT)
        snprintf(r->error, sizeof r->error, "connection refused (is the server running?)");
    else
        snprintf(r->error, sizeof r->error, "%s", curl_easy_strerror(c));
}

static int setup(CURL **h, struct curl_slist *hdr, const hx_http_req *q, xfer *x, lm_err *err)
{
    if ((*h = curl_easy_init()) == NULL)
        return LM_FAIL(err, LM_E_INTERNAL, "libcurl: cannot create a transfer");
    CURL *e = *h;
    long ms = (long)(q->timeout_s * 1000.0);
    if (curl_easy_setopt(e, CURLOPT_URL, q->url) != CURLE_OK)
        return LM_FAIL(err, LM_E_INPUT, "URL '%s': not a URL libcurl accepts", q->url);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, ms > 0 ? ms : 1L);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, ms > 0 ? ms : 1L);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(e, CURLOPT_PRIVATE, x);
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
    /* one connection per request, so that concurrent requests really are concurrent */
    curl_easy_setopt(e, CURLOPT_FORBID_REUSE, 1L);
    curl_easy_setopt(e, CURLOPT_FRESH_CONNECT, 1L);
    if (q->body != NULL) {
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, q->body);
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, (long)strlen(q->body));
        curl_easy_setopt(e, CURLOPT_HTTPHEADER, hdr);
    }
    return LM_OK;
}

int hx_http_run(hx_http_reply *out, const hx_http_req *reqs, size_t n, double overall_s,
                const volatile sig_atomic_t *cancel, lm_err *err)
{
    memset(out, 0, n * sizeof *out);
    pthread_once(&curl_once, curl_init);
    if (curl_init_rc != CURLE_OK)
        return LM_FAIL(err, LM_E_INTERNAL, "libcurl: %s", curl_easy_strerror(curl_init_rc));
    CURLM *m = curl_multi_init();
    CURL **h = calloc(n, sizeof *h);
    xfer *x = calloc(n, sizeof *x);
    bool *live = calloc(n, sizeof *live);
    struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: application/json");
    int rc = m && h && x && live && hdr ? LM_OK : LM_FAIL(err, LM_E_NOMEM, "out of memory");
    const double t0 = lm_now_s();
    for (size_t i = 0; i < n && rc == LM_OK; ++i) {
        x[i].r = &out[i];
        if ((rc = setup(&h[i], hdr, &reqs[i], &x[i], err)) != LM_OK)
            break;
        out[i].t_start_s = lm_now_s() - t0;
        if (curl_multi_add_handle(m, h[i]) != CURLM_OK) {
            rc = LM_FAIL(err, LM_E_INTERNAL, "libcurl: cannot start a transfer");
            break;
        }
        live[i] = true;
    }
    int running = rc == LM_OK ? 1 : 0;
    while (running > 0) {
        if (curl_multi_perform(m, &running) != CURLM_OK) {
            rc = LM_FAIL(err, LM_E_INTERNAL, "libcurl: transfer loop failed");
            break;
        }
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(m, &left)) != NULL) {
            if (msg->msg != CURLMSG_DONE)
                continue;
            xfer *xi = NULL;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&xi);
            const size_t i = (size_t)(xi - x);
            curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, &out[i].status);
            describe(&out[i], xi, msg->data.result, &reqs[i]);
            out[i].t_end_s = lm_now_s() - t0;
            curl_multi_remove_handle(m, msg->easy_handle);
            live[i] = false;
        }
        const double now = lm_now_s() - t0;
        const bool stop = (cancel != NULL && *cancel != 0) || now >= overall_s;
        if (running > 0 && stop)
            break;
        if (running > 0)
            curl_multi_poll(m, NULL, 0, 50, NULL);
    }
    /* whatever still runs is cancelled here: its connection is closed with its handle */
    for (size_t i = 0; i < n && h != NULL; ++i) {
        if (live[i]) {
            curl_multi_remove_handle(m, h[i]);
            out[i].t_end_s = lm_now_s() - t0;
            snprintf(out[i].error, sizeof out[i].error, "%s",
                     cancel != NULL && *cancel != 0 ? "cancelled"
                                               : "cancelled at the overall time limit");
            out[i].ok = false;
        }
        if (h[i] != NULL)
            curl_easy_cleanup(h[i]);
    }
    curl_slist_free_all(hdr);
    if (m != NULL)
        curl_multi_cleanup(m);
    free(h);
    free(x);
    free(live);
    return rc;
}

/* An IPv4 dotted quad whose first octet is 127. */
static bool is_127(const char *s)
{
    unsigned a, b, c, d;
    char tail;
    return sscanf(s, "%u.%u.%u.%u%c", &a, &b, &c, &d, &tail) == 4 && a == 127 && b < 256 &&
           c < 256 && d < 256;
}

bool hx_url_is_loopback(const char *url, bool *scheme_ok)
{
    *scheme_ok = false;
    pthread_once(&curl_once, curl_init);
    CURLU *u = curl_url();
    char *host = NULL, *scheme = NULL;
    bool lo = false;
    if (u != NULL && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK) {
        *scheme_ok = strcasecmp(scheme, "http") == 0 || strcasecmp(scheme, "https") == 0;
        lo = strcasecmp(host, "localhost") == 0 || is_127(host) || strcmp(host, "[::1]") == 0 ||
             strcmp(host, "::1") == 0;
    }
    curl_free(host);
    curl_free(scheme);
    curl_url_cleanup(u);
    return lo;
}
