/* http_client.h — HTTP requests over libcurl for `kvdrift probe`: a set of requests run
 * concurrently (curl's multi interface on the calling thread: every request is started before
 * any reply is read, so a server sees them at once), each under its own time limit and all
 * under one overall limit; and the loopback test of a URL.
 *
 * Nothing outlives hx_http_run: a request still running when the overall limit passes (or when
 * the caller's cancel flag is set) is cancelled (its connection closed) before it returns. */
#ifndef HX_HTTP_CLIENT_H
#define HX_HTTP_CLIENT_H

#include "kvd_common.h"

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>

#define HX_HTTP_MAX_BODY (64u << 20) /* a reply longer than this is an error ("too long") */

typedef struct hx_http_req {
    const char *url;   /* absolute http:// or https:// URL */
    const char *body;  /* POST this JSON body; NULL: GET */
    double timeout_s;  /* this request's limit (connect to last byte), > 0 */
} hx_http_req;

typedef struct hx_http_reply {
    long status;       /* HTTP status; 0 when no response arrived */
    char *body;        /* [len + 1] the reply's body, NUL-terminated (malloc'd; NULL: none) */
    size_t len;
    double t_start_s;  /* when it was started, seconds after hx_http_run began */
    double t_end_s;    /* when it ended (completed, failed or cancelled) */
    bool ok;           /* a complete response arrived (any status) */
    char error[192];   /* "" when ok, else what happened in one phrase ("connection refused",
                          "no reply within 5 s", "cancelled at the overall limit of 60 s") */
} hx_http_reply;

/* Runs reqs[n] side by side (n >= 1), out[n] zeroed first and filled in. Returns LM_OK when
 * every request ran to an outcome (each out[i] says which: a failed request is not an error
 * of this call); LM_E_INPUT for a URL libcurl refuses, LM_E_NOMEM, LM_E_INTERNAL when libcurl
 * cannot be set up. overall_s > 0 bounds the whole call; *cancel (optional; a signal handler
 * may set it), read at least every 50 ms, cancels what still runs when it becomes nonzero. */
int hx_http_run(hx_http_reply *out /* [n] */, const hx_http_req *reqs /* [n] */, size_t n,
                double overall_s, const volatile sig_atomic_t *cancel, lm_err *err);
void hx_http_reply_clear(hx_http_reply *r);

/* Whether url's host is this machine's loopback: "localhost", 127.0.0.0/8 or ::1 (as an IP
 * literal, never resolved). False for anything libcurl cannot parse. scheme_ok gets whether
 * the scheme is http or https. */
bool hx_url_is_loopback(const char *url, bool *scheme_ok);

#endif
