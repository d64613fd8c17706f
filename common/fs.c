/* fs.c — atomic or direct file writes, whole-file reads with a regular-file check, mkdir -p,
 * the cache folder and stale temp cleanup (contracts in fs.h). */
#include "fs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct lm_wfile {
    char *path;   /* the name written: the target itself, or a symbolic link's final target */
    char *tmp;    /* temp file beside path; NULL for a direct write */
    int fd;       /* -1 once closed */
    bool direct;  /* written in place (device, FIFO, an open descriptor) */
    bool dup_fd;  /* fd is a dup of an already open descriptor */
    bool existed; /* path was a regular file before */
    mode_t mode;  /* permission bits for the new file */
};

/* ---------------------------------------------------------------- names */

static char *str_cat3(const char *a, const char *b, const char *c)
{
    size_t na = strlen(a), nb = strlen(b), nc = strlen(c);
    char *s = malloc(na + nb + nc + 1);
    if (s != NULL) {
        memcpy(s, a, na);
        memcpy(s + na, b, nb);
        memcpy(s + na + nb, c, nc + 1);
    }
    return s;
}

/* The folder part of path ("." when it has none), malloc'd. */
static char *dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (slash == NULL)
        return strdup(".");
    if (slash == path)
        return strdup("/");
    char *d = malloc((size_t)(slash - path) + 1);
    if (d != NULL) {
        memcpy(d, path, (size_t)(slash - path));
        d[slash - path] = '\0';
    }
    return d;
}

/* The descriptor a /dev/stdout-like name stands for, or -1. */
static int named_fd(const char *path)
{
    if (strcmp(path, "/dev/stdout") == 0)
        return STDOUT_FILENO;
    if (strcmp(path, "/dev/stderr") == 0)
        return STDERR_FILENO;
    const char *digits = NULL;
    if (strncmp(path, "/dev/fd/", 8) == 0)
        digits = path + 8;
    else if (strncmp(path, "/proc/self/fd/", 14) == 0)
        digits = path + 14;
    if (digits == NULL || *digits < '0' || *digits > '9')
        return -1;
    char *end;
    long v = strtol(digits, &end, 10);
    return *end == '\0' && v <= 1024 ? (int)v : -1;
}

/* Follows symbolic links from path to the name that is not one (it may not exist: a dangling
 * link is written where it points). *st is that name's lstat, *exists whether there is one. */
static int follow_links(char **out, struct stat *st, bool *exists, const char *path, lm_err *err)
{
    char *cur = strdup(path);
    *out = NULL;
    for (int hop = 0; cur != NULL; ++hop) {
        if (lstat(cur, st) != 0) {
            int e = errno;
            if (e == ENOENT) {
                *exists = false;
                *out = cur;
                return LM_OK;
            }
            free(cur);
            return LM_FAIL(err, LM_E_IO, "%s: %s", path, strerror(e));
        }
        if (!S_ISLNK(st->st_mode)) {
            *exists = true;
            *out = cur;
            return LM_OK;
        }
        if (hop == 40) {
            free(cur);
            return LM_FAIL(err, LM_E_INPUT, "%s: too many levels of symbolic links", path);
        }
        char target[4096];
        ssize_t k = readlink(cur, target, sizeof target - 1);
        if (k < 0) {
            int e = errno;
            free(cur);
            return LM_FAIL(err, LM_E_IO, "%s: cannot read link: %s", path, strerror(e));
        }
        target[k] = '\0';
        char *next;
        if (target[0] == '/' || strchr(cur, '/') == NULL) {
            next = strdup(target);
        } else {
            char *d = dir_of(cur);
            next = d ? str_cat3(d, "/", target) : NULL;
            free(d);
        }
        free(cur);
        cur = next;
    }
    return LM_FAIL(err, LM_E_NOMEM, "%s: out of memory", path);
}

/* ---------------------------------------------------------------- stale temp files */

/* "<anything>.tmp.<pid>.XXXXXX": the writer's pid, or 0 when name is not a temp name. */
static long temp_pid(const char *name)
{
    const char *t = NULL;
    for (const char *q = strstr(name, ".tmp."); q != NULL; q = strstr(q + 1, ".tmp."))
        t = q;
    if (t == NULL || t == name)
        return 0;
    const char *d = t + 5;
    long pid = 0;
    const char *q = d;
    for (; *q >= '0' && *q <= '9' && q - d < 10; ++q)
        pid = pid * 10 + (*q - '0');
    if (q == d || *q != '.' || strlen(q + 1) != 6)
        return 0;
    return pid;
}

unsigned lm_fs_clean_stale(const char *dir)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return 0;
    unsigned removed = 0;
    time_t now = time(NULL);
    size_t nd = strlen(dir);
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        long pid = temp_pid(de->d_name);
        if (pid <= 0 || pid == (long)getpid())
            continue;
        size_t nn = strlen(de->d_name);
        char *p = malloc(nd + nn + 2);
        if (p == NULL)
            break;
        memcpy(p, dir, nd);
        p[nd] = '/';
        memcpy(p + nd + 1, de->d_name, nn + 1);
        struct stat st;
        /* a live process (kill answers, or EPERM: it exists under another user) keeps its file */
        if (lstat(p, &st) == 0 && S_ISREG(st.st_mode) &&
            now - st.st_mtime > LM_FS_STALE_SECONDS && kill((pid_t)pid, 0) != 0 &&
            errno == ESRCH && unlink(p) == 0)
            removed++;
        free(p);
    }
    closedir(d);
    return removed;
}

/* lm_fs_clean_stale on dir unless this process already did (at most 64 folders remembered). */
static void clean_once(const char *dir)
{
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static char *seen[64];
    static size_t n_seen;
    pthread_mutex_lock(&mu);
    bool done = false;
    for (size_t i = 0; i < n_seen && !done; ++i)
        done = strcmp(seen[i], dir) == 0;
    if (!done && n_seen < sizeof seen / sizeof *seen && (seen[n_seen] = strdup(dir)) != NULL)
        n_seen++;
    pthread_mutex_unlock(&mu);
    if (!done)
        lm_fs_clean_stale(dir);
}

/* ---------------------------------------------------------------- writing */

static void wfile_free(lm_wfile *w)
{
    if (w == NULL)
        return;
    if (w->fd >= 0)
        close(w->fd);
    free(w->path);
    free(w->tmp);
    free(w);
}

/* A FIFO opened for writing once a reader has it (O_NONBLOCK open: ENXIO while there is none),
 * polled every 20 ms for at most LM_FS_FIFO_WAIT_MS; blocking writes afterwards. */
static int open_fifo(const char *path)
{
    for (int waited = 0;; waited += 20) {
        int fd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
        if (fd >= 0) {
            int fl = fcntl(fd, F_GETFL);
            if (fl >= 0)
                (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
            return fd;
        }
        if (errno != ENXIO || waited >= LM_FS_FIFO_WAIT_MS)
            return -1;
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

static int open_direct(lm_wfile *w, const char *path, int fd_named, bool fifo, lm_err *err)
{
    w->direct = true;
    if (fd_named >= 0) {
        w->fd = fcntl(fd_named, F_DUPFD_CLOEXEC, 3);
        w->dup_fd = true;
    } else if (fifo) {
        w->fd = open_fifo(path);
        if (w->fd < 0 && errno == ENXIO)
            return LM_FAIL(err, LM_E_IO, "%s: FIFO has no reader (waited %d ms)", path,
                           LM_FS_FIFO_WAIT_MS);
    } else {
        w->fd = open(path, O_WRONLY | O_CLOEXEC | O_NOCTTY);
    }
    if (w->fd < 0)
        return LM_FAIL(err, LM_E_IO, "%s: cannot open for writing: %s", path, strerror(errno));
    return LM_OK;
}

static int open_temp(lm_wfile *w, const char *path, lm_err *err)
{
    char *d = dir_of(w->path);
    char suffix[48];
    snprintf(suffix, sizeof suffix, ".tmp.%ld.XXXXXX", (long)getpid());
    w->tmp = str_cat3(w->path, suffix, "");
    if (d == NULL || w->tmp == NULL) {
        free(d);
        return LM_FAIL(err, LM_E_NOMEM, "%s: out of memory", path);
    }
    clean_once(d);
    free(d);
    w->fd = mkostemp(w->tmp, O_CLOEXEC);
    if (w->fd < 0) {
        int e = errno;
        free(w->tmp);
        w->tmp = NULL;
        return LM_FAIL(err, LM_E_IO, "%s: cannot create a temp file next to it: %s", path,
                       strerror(e));
    }
    return LM_OK;
}

/* The refusal of a target that is neither a regular file, a character device nor a FIFO. */
static int refuse_kind(const char *path, const struct stat *st, lm_err *err)
{
    return LM_FAIL(err, LM_E_INPUT, "%s: is %s; refusing to write it", path,
                   S_ISDIR(st->st_mode)    ? "a folder"
                   : S_ISBLK(st->st_mode)  ? "a block device"
                   : S_ISSOCK(st->st_mode) ? "a socket"
                                           : "not a regular file");
}

int lm_dir_probe(const char *dir, const char *path, lm_err *err)
{
    struct stat st;
    if (stat(dir, &st) != 0) {
        int e = errno;
        return LM_FAIL(err, LM_E_INPUT, "%s: folder %s %s", path, dir,
                       e == ENOENT ? "does not exist" : strerror(e));
    }
    if (!S_ISDIR(st.st_mode))
        return LM_FAIL(err, LM_E_INPUT, "%s: %s is not a folder", path, dir);
    /* a name the stale cleanup recognizes, should this process die before the unlink */
    char suffix[64];
    snprintf(suffix, sizeof suffix, "/.kvdrift-probe.tmp.%ld.XXXXXX", (long)getpid());
    char *probe = str_cat3(dir, suffix, "");
    if (probe == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "%s: out of memory", path);
    int fd = mkostemp(probe, O_CLOEXEC);
    int e = errno;
    if (fd >= 0) {
        close(fd);
        unlink(probe);
    }
    free(probe);
    if (fd < 0)
        return LM_FAIL(err, LM_E_INPUT, "%s: cannot create files in folder %s: %s", path, dir,
                       strerror(e));
    return LM_OK;
}

/* How a path is written (the header comment's list): the decision lm_wfile_check and
 * lm_wfile_open share. */
typedef enum wkind {
    W_NAMED_FD, /* /dev/stdout, /dev/fd/N, ...: the open descriptor fd */
    W_TEMP,     /* nothing or a regular file at target: a temp file beside it, renamed */
    W_DIRECT    /* a character device or a FIFO at target: written in place */
} wkind;

typedef struct wtarget {
    wkind kind;
    int fd;         /* W_NAMED_FD */
    char *target;   /* W_TEMP, W_DIRECT: path with its links followed (malloc'd) */
    struct stat st; /* target's, when exists */
    bool exists;
} wtarget;

/* *t for path; a refused target (a folder, a block device, a socket, a read-only regular
 * file, an empty path) is LM_E_INPUT, and then t holds nothing to free. */
static int write_target(wtarget *t, const char *path, lm_err *err)
{
    memset(t, 0, sizeof *t);
    if (path == NULL || *path == '\0')
        return LM_FAIL(err, LM_E_INPUT, "empty output path");
    if ((t->fd = named_fd(path)) >= 0) {
        t->kind = W_NAMED_FD;
        return LM_OK;
    }
    int rc = follow_links(&t->target, &t->st, &t->exists, path, err);
    if (rc != LM_OK)
        return rc;
    if (t->exists && S_ISREG(t->st.st_mode) &&
        ((t->st.st_mode & 0222) == 0 || access(t->target, W_OK) != 0)) {
        /* the rename would replace it all the same (it needs only the folder writable) */
        rc = LM_FAIL(err, LM_E_INPUT, "%s: is read-only (mode %04o); refusing to replace it",
                     path, (unsigned)(t->st.st_mode & 07777));
        free(t->target);
        t->target = NULL;
        return rc;
    }
    if (!t->exists || S_ISREG(t->st.st_mode)) {
        t->kind = W_TEMP;
    } else if (S_ISCHR(t->st.st_mode) || S_ISFIFO(t->st.st_mode)) {
        t->kind = W_DIRECT;
    } else {
        free(t->target);
        t->target = NULL;
        return refuse_kind(path, &t->st, err);
    }
    return LM_OK;
}

int lm_wfile_check(const char *path, lm_err *err)
{
    wtarget t;
    int rc = write_target(&t, path, err);
    if (rc == LM_OK && t.kind == W_DIRECT && access(t.target, W_OK) != 0) {
        rc = LM_FAIL(err, LM_E_INPUT, "%s: not writable: %s", path, strerror(errno));
    } else if (rc == LM_OK && t.kind == W_TEMP) {
        char *d = dir_of(t.target);
        rc = d ? lm_dir_probe(d, path, err) : LM_FAIL(err, LM_E_NOMEM, "%s: out of memory", path);
        free(d);
    }
    free(t.target);
    return rc;
}

int lm_wfile_open(lm_wfile **out, const char *path, lm_err *err)
{
    *out = NULL;
    wtarget t;
    int rc = write_target(&t, path, err);
    if (rc != LM_OK)
        return rc;
    lm_wfile *w = calloc(1, sizeof *w);
    if (w == NULL) {
        free(t.target);
        return LM_FAIL(err, LM_E_NOMEM, "%s: out of memory", path);
    }
    w->fd = -1;
    w->mode = 0644;
    w->path = t.target; /* NULL for a named descriptor: path itself, below */
    if (t.kind == W_NAMED_FD) {
        rc = open_direct(w, path, t.fd, false, err);
    } else if (t.kind == W_TEMP) {
        w->existed = t.exists;
        if (t.exists)
            w->mode = t.st.st_mode & 07777;
        rc = open_temp(w, path, err);
    } else {
        rc = open_direct(w, w->path, -1, S_ISFIFO(t.st.st_mode), err);
    }
    if (rc != LM_OK) {
        wfile_free(w);
        return rc;
    }
    if (w->path == NULL && (w->path = strdup(path)) == NULL) {
        lm_wfile_abort(w);
        return LM_FAIL(err, LM_E_NOMEM, "%s: out of memory", path);
    }
    *out = w;
    return LM_OK;
}

int lm_wfile_write(lm_wfile *w, const void *bytes, size_t n, lm_err *err)
{
    const uint8_t *p = bytes;
    if (w->fd < 0)
        return LM_FAIL(err, LM_E_INTERNAL, "%s: write after the file was closed", w->path);
    while (n > 0) {
        ssize_t k = write(w->fd, p, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return LM_FAIL(err, LM_E_IO, "%s: write failed: %s", w->path,
                           k < 0 ? strerror(errno) : "no progress");
        p += k;
        n -= (size_t)k;
    }
    return LM_OK;
}

int lm_wfile_stage(lm_wfile *w, lm_err *err)
{
    if (w->direct || w->fd < 0)
        return LM_OK;
    int rc = LM_OK;
    if (fchmod(w->fd, w->mode) != 0)
        rc = LM_FAIL(err, LM_E_IO, "%s: chmod failed: %s", w->path, strerror(errno));
    else if (fsync(w->fd) != 0)
        rc = LM_FAIL(err, LM_E_IO, "%s: fsync failed: %s", w->path, strerror(errno));
    int fd = w->fd;
    w->fd = -1;
    if (close(fd) != 0 && rc == LM_OK)
        rc = LM_FAIL(err, LM_E_IO, "%s: close failed: %s", w->path, strerror(errno));
    return rc;
}

static void sync_dir_of(const char *path)
{
    char *d = dir_of(path);
    if (d == NULL)
        return;
    int dfd = open(d, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        (void)fsync(dfd); /* best effort: makes the rename durable */
        close(dfd);
    }
    free(d);
}

int lm_wfile_commit(lm_wfile *w, lm_err *err)
{
    int rc = lm_wfile_stage(w, err);
    if (w->direct) {
        int fd = w->fd;
        w->fd = -1;
        if (close(fd) != 0 && rc == LM_OK && errno != EINTR)
            rc = LM_FAIL(err, LM_E_IO, "%s: close failed: %s", w->path, strerror(errno));
        wfile_free(w);
        return rc;
    }
    if (rc == LM_OK && rename(w->tmp, w->path) != 0)
        rc = LM_FAIL(err, LM_E_IO, "%s: rename failed: %s", w->path, strerror(errno));
    if (rc != LM_OK) {
        lm_wfile_abort(w);
        return rc;
    }
    sync_dir_of(w->path);
    wfile_free(w);
    return LM_OK;
}

void lm_wfile_abort(lm_wfile *w)
{
    if (w == NULL)
        return;
    if (w->fd >= 0) {
        close(w->fd);
        w->fd = -1;
    }
    if (w->tmp != NULL)
        unlink(w->tmp);
    wfile_free(w);
}

/* A hard link to path under a fresh temp name (kept until the group commit ends), or NULL. */
static char *keep_old(const char *path)
{
    char suffix[48];
    snprintf(suffix, sizeof suffix, ".tmp.%ld.XXXXXX", (long)getpid());
    for (int attempt = 0; attempt < 8; ++attempt) {
        char *name = str_cat3(path, suffix, "");
        if (name == NULL)
            return NULL;
        int fd = mkostemp(name, O_CLOEXEC);
        if (fd >= 0) {
            close(fd);
            unlink(name);
            if (link(path, name) == 0)
                return name;
        }
        free(name);
        if (fd < 0 || errno != EEXIST)
            return NULL;
    }
    return NULL;
}

int lm_wfile_commit_all(lm_wfile **w, size_t n, lm_err *err)
{
    int rc = LM_OK;
    for (size_t i = 0; i < n && rc == LM_OK; ++i)
        if (w[i] != NULL)
            rc = lm_wfile_stage(w[i], err);
    char **old = calloc(n ? n : 1, sizeof *old);
    if (rc == LM_OK && old == NULL)
        rc = LM_FAIL(err, LM_E_NOMEM, "out of memory");
    size_t done = 0;
    for (; rc == LM_OK && done < n; ++done) {
        lm_wfile *f = w[done];
        if (f == NULL || f->direct)
            continue;
        if (f->existed && (old[done] = keep_old(f->path)) == NULL) {
            rc = LM_FAIL(err, LM_E_IO, "%s: cannot keep the old file for a rollback: %s",
                         f->path, strerror(errno));
            break;
        }
        if (rename(f->tmp, f->path) != 0) {
            rc = LM_FAIL(err, LM_E_IO, "%s: rename failed: %s", f->path, strerror(errno));
            break;
        }
        free(f->tmp);
        f->tmp = NULL; /* renamed: nothing left to remove */
    }
    if (rc != LM_OK) {
        /* put back what was replaced, remove what was created, in reverse order */
        for (size_t i = done; i-- > 0;) {
            lm_wfile *f = w[i];
            if (f == NULL || f->direct || f->tmp != NULL)
                continue;
            if (old[i] == NULL) {
                unlink(f->path);
            } else {
                /* restored, or (rename failing) the old contents stay under the temp name */
                (void)rename(old[i], f->path);
                free(old[i]);
                old[i] = NULL;
            }
        }
    }
    for (size_t i = 0; i < n; ++i) {
        if (old != NULL && old[i] != NULL) {
            unlink(old[i]);
            free(old[i]);
        }
        if (w[i] == NULL)
            continue;
        if (rc == LM_OK && !w[i]->direct)
            sync_dir_of(w[i]->path);
        lm_wfile_abort(w[i]); /* closes a direct write; removes a temp left unrenamed */
        w[i] = NULL;
    }
    free(old);
    return rc;
}

int lm_write_file(const char *path, const void *bytes, size_t n, lm_err *err)
{
    lm_wfile *w;
    int rc = lm_wfile_open(&w, path, err);
    if (rc != LM_OK)
        return rc;
    if ((rc = lm_wfile_write(w, bytes, n, err)) != LM_OK) {
        lm_wfile_abort(w);
        return rc;
    }
    return lm_wfile_commit(w, err);
}

/* ---------------------------------------------------------------- reading */

int lm_open_regular(const char *path, unsigned long long *size, lm_err *err)
{
    if (*path == '\0')
        return LM_FAIL(err, LM_E_INPUT, "empty file name");
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return LM_FAIL(err, LM_E_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return LM_FAIL(err, LM_E_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return LM_FAIL(err, LM_E_INPUT, "%s: not a regular file", path);
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    if (size != NULL)
        *size = (unsigned long long)st.st_size;
    return fd;
}

int lm_read_file(char **out, size_t *n, const char *path, size_t max_bytes, lm_err *err)
{
    *out = NULL;
    *n = 0;
    unsigned long long size;
    int fd = lm_open_regular(path, &size, err);
    if (fd < 0)
        return fd;
    if (size > max_bytes || size >= SIZE_MAX) {
        close(fd);
        return LM_FAIL(err, LM_E_INPUT, "%s: %llu bytes, more than the limit of %zu bytes", path,
                       size, max_bytes);
    }
    char *buf = malloc((size_t)size + 1);
    if (buf == NULL) {
        close(fd);
        return LM_FAIL(err, LM_E_NOMEM, "%s: out of memory reading it", path);
    }
    size_t len = 0;
    int rc = LM_OK;
    /* reads up to the size fstat gave; a file that grew meanwhile is read no further */
    while (len < (size_t)size) {
        ssize_t k = read(fd, buf + len, (size_t)size - len);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            rc = LM_FAIL(err, LM_E_IO, "%s: read failed: %s", path, strerror(errno));
            break;
        }
        if (k == 0)
            break; /* shrank meanwhile: what is there is the file */
        len += (size_t)k;
    }
    close(fd);
    if (rc != LM_OK) {
        free(buf);
        return rc;
    }
    buf[len] = '\0';
    *out = buf;
    *n = len;
    return LM_OK;
}

/* ---------------------------------------------------------------- folders */

int lm_mkdir_p(const char *dir, lm_err *err)
{
    size_t n = strlen(dir);
    if (n == 0)
        return LM_FAIL(err, LM_E_INPUT, "empty folder name");
    char *buf = strdup(dir);
    if (buf == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "%s: out of memory", dir);
    int rc = LM_OK;
    /* each prefix that ends before a '/', then the whole path */
    for (size_t i = 1; i <= n && rc == LM_OK; ++i) {
        if (buf[i] != '/' && buf[i] != '\0')
            continue;
        if (buf[i - 1] == '/') /* "a//b" or a trailing '/' */
            continue;
        char saved = buf[i];
        buf[i] = '\0';
        struct stat st;
        if (mkdir(buf, 0777) != 0 && errno != EEXIST)
            rc = LM_FAIL(err, LM_E_IO, "%s: cannot create folder: %s", buf, strerror(errno));
        else if (stat(buf, &st) != 0 || !S_ISDIR(st.st_mode))
            rc = LM_FAIL(err, LM_E_IO, "%s: not a folder", buf);
        buf[i] = saved;
    }
    free(buf);
    return rc;
}

int lm_mkdir_parent(const char *path, lm_err *err)
{
    const char *slash = strrchr(path, '/');
    if (slash == NULL || slash == path)
        return LM_OK;
    char *d = dir_of(path);
    if (d == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "%s: out of memory", path);
    int rc = lm_mkdir_p(d, err);
    free(d);
    return rc;
}

int lm_cache_dir(char *out, size_t cap, const char *dir, lm_err *err)
{
    const char *env;
    int n;
    if (dir && *dir)
        n = snprintf(out, cap, "%s", dir);
    else if ((env = getenv("KVDRIFT_CACHE")) && *env)
        n = snprintf(out, cap, "%s", env);
    else if ((env = getenv("XDG_CACHE_HOME")) && *env)
        n = snprintf(out, cap, "%s/kvdrift", env);
    else if ((env = getenv("HOME")) && *env)
        n = snprintf(out, cap, "%s/.cache/kvdrift", env);
    else
        return LM_FAIL(err, LM_E_INPUT, "cache: no folder (set KVDRIFT_CACHE or HOME)");
    if (n < 0 || (size_t)n >= cap)
        return LM_FAIL(err, LM_E_INPUT, "cache: folder name too long");
    return LM_OK;
}

int lm_models_dir(char *out, size_t cap, lm_err *err)
{
    const char *env = getenv("KVDRIFT_MODELS");
    int n;
    if (env && *env) {
        n = snprintf(out, cap, "%s", env);
    } else {
        char cache[4096];
        int rc = lm_cache_dir(cache, sizeof cache, NULL, err);
        if (rc != LM_OK)
            return rc;
        n = snprintf(out, cap, "%s/models", cache);
    }
    if (n < 0 || (size_t)n >= cap)
        return LM_FAIL(err, LM_E_INPUT, "models: folder name too long");
    return LM_OK;
}

int lm_cache_open(char *out, size_t cap, const char *dir, lm_err *err)
{
    int rc = lm_cache_dir(out, cap, dir, err);
    if (rc == LM_OK)
        rc = lm_mkdir_p(out, err);
    if (rc == LM_OK)
        clean_once(out);
    return rc;
}
