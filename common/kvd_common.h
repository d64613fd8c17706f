/* kvd_common.h — status codes and the error record every fallible kvdrift function takes. */
#ifndef KVD_COMMON_H
#define KVD_COMMON_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Fallible functions return LM_OK (0) or one of these negative codes. */
typedef enum lm_status {
    LM_OK = 0,
    LM_E_INPUT = -1,       /* bad file, flag, model or case: the user's input is at fault */
    LM_E_UNSUPPORTED = -2, /* well-formed but outside what kvdrift implements */
    LM_E_IO = -3,          /* open/read/write/rename failed */
    LM_E_NOMEM = -4,
    LM_E_INTERNAL = -5,    /* a broken invariant: a kvdrift bug */
    LM_E_DISAGREE = -6     /* two independent readings of one input differ (the engine's and
                            * the reference's): a finding about the engine, not bad input */
} lm_status;

/* One error: a one-line message naming the thing and the reason, plus the source location
 * that raised it (for bug reports; not printed by default). */
typedef struct lm_err {
    int code;
    const char *src_file;
    int src_line;
    char msg[512];
} lm_err;

#if defined(__GNUC__)
#define LM_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define LM_PRINTF(a, b)
#endif

/* Records the error (first error wins: later calls do not overwrite it) and returns code. */
int lm_err_set(lm_err *err, int code, const char *src_file, int src_line, const char *fmt, ...)
    LM_PRINTF(5, 6);
/* Clears err to "no error". */
void lm_err_clear(lm_err *err);
/* rc unchanged; when it is not LM_OK, err's message becomes "PREFIX message" (lm_err_set keeps
 * the first error, so a caller adding context goes through here). */
int lm_err_prefix(int rc, const char *prefix, lm_err *err);

/* A library log callback: one warning or progress line per call, without a newline. Library
 * code never prints; it passes its lines to the caller's callback. */
typedef void (*lm_log_fn)(void *user, const char *line);
/* Formats one line (at most 1023 bytes) and passes it to log; nothing when log is NULL. */
void lm_log(lm_log_fn log, void *user, const char *fmt, ...) LM_PRINTF(3, 4);
void lm_vlog(lm_log_fn log, void *user, const char *fmt, va_list ap);

/* return LM_FAIL(err, LM_E_INPUT, "%s: truncated header", path); */
#define LM_FAIL(err, code, ...) lm_err_set((err), (code), __FILE__, __LINE__, __VA_ARGS__)

/* Always-on invariant check: a false cond is a kvdrift bug (never bad input, which is an
 * lm_err): prints "file:line: internal error: cond" on stderr and aborts. */
#define LM_ASSERT(cond)                                                                    \
    do {                                                                                   \
        if (!(cond))                                                                       \
            lm_assert_fail(__FILE__, __LINE__, #cond);                                     \
    } while (0)
#if defined(__GNUC__)
__attribute__((noreturn))
#endif
void lm_assert_fail(const char *file, int line, const char *cond);

/* Process exit code for a status: 0 ok, 2 usage/input/unsupported/io/nomem, 3 internal bug. */
int lm_status_exit_code(int status);

/* Overflow-checked size arithmetic: return 0 on success, -1 on overflow. */
int lm_mul_u64(uint64_t *out, uint64_t a, uint64_t b);
int lm_add_u64(uint64_t *out, uint64_t a, uint64_t b);

#endif
