/* error.c — the lm_err record: set, clear, map to an exit code; the always-on assertion;
 * checked size arithmetic. */
#include "kvd_common.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int lm_err_set(lm_err *err, int code, const char *src_file, int src_line, const char *fmt, ...)
{
    if (err == NULL || err->code != LM_OK)
        return code;
    err->code = code;
    err->src_file = src_file;
    err->src_line = src_line;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    /* One line, always: a message built from file contents must not break the format. */
    for (char *p = err->msg; *p; ++p)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    return code;
}

void lm_err_clear(lm_err *err)
{
    if (err != NULL)
        memset(err, 0, sizeof *err);
}

int lm_err_prefix(int rc, const char *prefix, lm_err *err)
{
    if (rc == LM_OK || err == NULL)
        return rc;
    char msg[sizeof err->msg];
    snprintf(msg, sizeof msg, "%s", err->msg);
    lm_err_clear(err); /* the first error set is kept: replace it with the prefixed one */
    return lm_err_set(err, rc, __FILE__, __LINE__, "%s %.400s", prefix, msg);
}

void lm_vlog(lm_log_fn log, void *user, const char *fmt, va_list ap)
{
    if (log == NULL)
        return;
    char line[1024];
    vsnprintf(line, sizeof line, fmt, ap);
    log(user, line);
}

void lm_log(lm_log_fn log, void *user, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    lm_vlog(log, user, fmt, ap);
    va_end(ap);
}

int lm_status_exit_code(int status)
{
    if (status == LM_OK)
        return 0;
    if (status == LM_E_DISAGREE) /* a regression found, as a failing configuration is */
        return 1;
    return status == LM_E_INTERNAL ? 3 : 2;
}

int lm_mul_u64(uint64_t *out, uint64_t a, uint64_t b)
{
    if (a != 0 && b > UINT64_MAX / a)
        return -1;
    *out = a * b;
    return 0;
}

int lm_add_u64(uint64_t *out, uint64_t a, uint64_t b)
{
    if (b > UINT64_MAX - a)
        return -1;
    *out = a + b;
    return 0;
}

void lm_assert_fail(const char *file, int line, const char *cond)
{
    fprintf(stderr, "%s:%d: internal error: %s\n", file, line, cond);
    abort();
}
