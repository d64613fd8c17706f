/* adapter_exec.c — an adapter run as a child process in its own group, under a time limit
 * (the contract is in adapter_exec.h). */
#include "run/adapter_exec.h"

#include "kvd_util.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/* The signal (SIGINT or SIGTERM) that arrived while a child ran; 0 when none. */
static volatile sig_atomic_t got_signal;

static void on_signal(int sig)
{
    got_signal = sig;
}

/* The child: its own group, stdin /dev/null, stdout and stderr to the pipes, then execv; an
 * execv failure is reported through ep (close-on-exec, so it stays empty on success). */
static void child(const char *path, char *const *argv, int out_w, int err_w, int ep_w)
{
    setpgid(0, 0);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    int null = open("/dev/null", O_RDONLY);
    if (null < 0 || dup2(null, STDIN_FILENO) < 0 || dup2(out_w, STDOUT_FILENO) < 0 ||
        dup2(err_w, STDERR_FILENO) < 0)
        _exit(127);
    execv(path, argv);
    int e = errno;
    ssize_t w = write(ep_w, &e, sizeof e);
    (void)w;
    _exit(127);
}

/* The last non-empty line of tail [n] into line [cap]. */
static void last_line(char *line, size_t cap, const char *tail, size_t n)
{
    while (n > 0 && (tail[n - 1] == '\n' || tail[n - 1] == '\r' || tail[n - 1] == ' '))
        --n;
    size_t b = n;
    while (b > 0 && tail[b - 1] != '\n')
        --b;
    size_t l = n - b < cap - 1 ? n - b : cap - 1;
    memcpy(line, tail + b, l);
    line[l] = '\0';
    for (size_t i = 0; i < l; ++i)
        if ((unsigned char)line[i] < 0x20)
            line[i] = ' ';
}

/* Reads what is there from fd into the stdout buffer (out) or the stderr tail (keeping the
 * last 4 KiB); false at end of file. */
static bool drain(int fd, hx_exec_result *res, size_t out_max, char *tail, size_t *tail_n,
                  bool is_out)
{
    char buf[8192];
    ssize_t r = read(fd, buf, sizeof buf);
    if (r < 0)
        return errno == EINTR || errno == EAGAIN;
    if (r == 0)
        return false;
    if (is_out) {
        size_t take = res->out_len + (size_t)r <= out_max ? (size_t)r : out_max - res->out_len;
        memcpy(res->out + res->out_len, buf, take);
        res->out_len += take;
        res->out_truncated |= take < (size_t)r;
    } else {
        const size_t cap = 4096;
        if ((size_t)r >= cap) {
            memcpy(tail, buf + r - cap, cap);
            *tail_n = cap;
        } else {
            if (*tail_n + (size_t)r > cap) {
                size_t drop = *tail_n + (size_t)r - cap;
                memmove(tail, tail + drop, *tail_n - drop);
                *tail_n -= drop;
            }
            memcpy(tail + *tail_n, buf, (size_t)r);
            *tail_n += (size_t)r;
        }
    }
    return true;
}

static void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

int hx_exec_run(hx_exec_result *res, const char *path, char *const *argv, double timeout_s,
                size_t out_max, lm_err *err)
{
    memset(res, 0, sizeof *res);
    res->exit_code = -1;
    struct stat sb;
    if (stat(path, &sb) != 0)
        return LM_FAIL(err, LM_E_INPUT, "adapter %s: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode) || access(path, X_OK) != 0)
        return LM_FAIL(err, LM_E_INPUT, "adapter %s: not an executable file", path);
    if ((res->out = malloc(out_max + 1)) == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    int po[2] = {-1, -1}, pe[2] = {-1, -1}, px[2] = {-1, -1};
    if (pipe2(po, O_CLOEXEC) || pipe2(pe, O_CLOEXEC) || pipe2(px, O_CLOEXEC)) {
        int e = errno;
        close_fd(&po[0]), close_fd(&po[1]), close_fd(&pe[0]), close_fd(&pe[1]);
        close_fd(&px[0]), close_fd(&px[1]);
        return LM_FAIL(err, LM_E_IO, "adapter %s: pipe: %s", path, strerror(e));
    }
    struct sigaction sa = {.sa_handler = on_signal}, old_int, old_term;
    sigemptyset(&sa.sa_mask);
    got_signal = 0;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    fflush(stdout);
    fflush(stderr);
    const double t0 = lm_now_s();
    pid_t pid = fork();
    if (pid == 0)
        child(path, argv, po[1], pe[1], px[1]);
    int rc = LM_OK;
    if (pid < 0)
        rc = LM_FAIL(err, LM_E_IO, "adapter %s: fork: %s", path, strerror(errno));
    else
        setpgid(pid, pid); /* also here: no window in which a kill of the group misses it */
    close_fd(&po[1]), close_fd(&pe[1]), close_fd(&px[1]);
    char tail[4096];
    size_t tail_n = 0;
    bool out_open = pid > 0, err_open = pid > 0, reaped = false;
    int status = 0;
    /* Reads its pipes until both close, polling at most 50 ms at a time so that its exit is
     * seen even when a child it left holds them open; stops at the time limit or a signal. */
    while (rc == LM_OK && pid > 0 && (out_open || err_open || !reaped)) {
        double left = timeout_s - (lm_now_s() - t0);
        if (got_signal || left <= 0) {
            res->timed_out = !got_signal;
            break;
        }
        struct pollfd pf[2] = {{.fd = out_open ? po[0] : -1, .events = POLLIN},
                               {.fd = err_open ? pe[0] : -1, .events = POLLIN}};
        int pr = poll(pf, 2, left < 0.05 ? (int)(left * 1000.0) + 1 : 50);
        if (pr < 0 && errno != EINTR) {
            rc = LM_FAIL(err, LM_E_IO, "adapter %s: poll: %s", path, strerror(errno));
            break;
        }
        if (pr > 0 && out_open && (pf[0].revents & (POLLIN | POLLHUP | POLLERR)))
            out_open = drain(po[0], res, out_max, tail, &tail_n, true);
        if (pr > 0 && err_open && (pf[1].revents & (POLLIN | POLLHUP | POLLERR)))
            err_open = drain(pe[0], res, out_max, tail, &tail_n, false);
        if (!reaped && waitpid(pid, &status, WNOHANG) == pid) {
            reaped = true;
            kill(-pid, SIGKILL); /* what it left behind in its group, holding the pipes */
        }
    }
    if (pid > 0 && !reaped) {
        kill(-pid, SIGKILL);
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
    } else if (pid > 0) {
        kill(-pid, SIGKILL);
    }
    const bool killed = pid > 0 && !reaped;
    res->wall_s = lm_now_s() - t0;
    int exec_errno = 0;
    if (pid > 0 && read(px[0], &exec_errno, sizeof exec_errno) == (ssize_t)sizeof exec_errno &&
        rc == LM_OK)
        rc = LM_FAIL(err, LM_E_INPUT, "adapter %s: cannot be run: %s", path,
                     strerror(exec_errno));
    close_fd(&po[0]), close_fd(&pe[0]), close_fd(&px[0]);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    if (got_signal) {
        int sig = got_signal;
        got_signal = 0;
        raise(sig);
    }
    res->out[res->out_len] = '\0';
    last_line(res->err_line, sizeof res->err_line, tail, tail_n);
    if (!killed && WIFEXITED(status))
        res->exit_code = WEXITSTATUS(status);
    else if (!res->timed_out && WIFSIGNALED(status))
        res->signal = WTERMSIG(status);
    if (rc != LM_OK) {
        free(res->out);
        res->out = NULL;
    }
    return rc;
}

void hx_exec_result_free(hx_exec_result *res)
{
    if (res == NULL)
        return;
    free(res->out);
    res->out = NULL;
}

bool hx_exec_ok(const hx_exec_result *res, double timeout_s, char *why, size_t cap)
{
    if (res->timed_out)
        snprintf(why, cap, "no answer within %.0f s (killed with its process group)",
                 timeout_s);
    else if (res->signal)
        snprintf(why, cap, "killed by signal %d (%s)", res->signal, strsignal(res->signal));
    else if (res->exit_code != 0)
        snprintf(why, cap, "exit status %d%s%s", res->exit_code, res->err_line[0] ? ": " : "",
                 res->err_line);
    else
        return true;
    return false;
}
