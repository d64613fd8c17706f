/* adapter_exec.h — runs an adapter (adapter.h) as a child process: execv of the file itself
 * (never a shell: every argument reaches it as one word, uninterpreted), stdin from /dev/null,
 * stdout and stderr read through pipes, in a process group of its own, under a time limit.
 *
 * On timeout, or when SIGINT or SIGTERM reaches kvdrift while the adapter runs, the whole group
 * (the adapter and its children) is killed with SIGKILL and reaped; after a signal the
 * previous disposition is restored and the signal raised again, so kvdrift ends as it would
 * have without an adapter running (its reports are written atomically at the end, so nothing
 * is left half-written). */
#ifndef HX_ADAPTER_EXEC_H
#define HX_ADAPTER_EXEC_H

#include "kvd_common.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct hx_exec_result {
    int exit_code;          /* its exit status; -1 when it did not exit (signal, timeout) */
    int signal;             /* the signal that ended it; 0 when it exited */
    bool timed_out;         /* killed at the time limit */
    char *out;              /* [out_len + 1] its stdout, NUL-terminated (malloc'd) */
    size_t out_len;
    bool out_truncated;     /* more than out_max bytes came (the rest was read and dropped) */
    char err_line[256];     /* the last non-empty line it wrote to stderr ("" when none) */
    double wall_s;
} hx_exec_result;

/* Runs path with argv [NULL-terminated; argv[0] is what the adapter sees as its name] for at
 * most timeout_s seconds, keeping at most out_max bytes of stdout. A file that does not exist or
 * is not executable, or an execv that fails, is LM_E_INPUT naming path and the reason; every
 * way the process ends is in *res (LM_OK). hx_exec_result_free releases res->out. */
int hx_exec_run(hx_exec_result *res, const char *path, char *const *argv, double timeout_s,
                size_t out_max, lm_err *err);
void hx_exec_result_free(hx_exec_result *res);

/* Whether res is a clean exit 0; otherwise why [cap] gets one line: "exit status 3: <its last
 * stderr line>", "killed by signal 11 (Segmentation fault)", "no answer within 30 s (killed)". */
bool hx_exec_ok(const hx_exec_result *res, double timeout_s, char *why, size_t cap);

#endif
