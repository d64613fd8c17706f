/* atomic.c — whole-file atomic writes (temp + fsync + rename) and whole-file reads. */
#include "atomic.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int hx_write_file_atomic(const char *path, const void *bytes, size_t n, lm_err *err)
{
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 16);
    char *dircopy = strdup(path);
    if (tmp == NULL || dircopy == NULL) {
        free(tmp);
        free(dircopy);
        return LM_FAIL(err, LM_E_NOMEM, "%s: out of memory", path);
    }
    /* Same folder as the target, so rename() never crosses file systems. */
    snprintf(tmp, plen + 16, "%s.tmp.XXXXXX", path);
    int rc = LM_OK;
    int fd = mkstemp(tmp);
    if (fd < 0) {
        rc = LM_FAIL(err, LM_E_IO, "%s: cannot create temp file: %s", path, strerror(errno));
        goto done;
    }
    const char *p = bytes;
    size_t left = n;
    while (left) {
        ssize_t w = write(fd, p, left);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            rc = LM_FAIL(err, LM_E_IO, "%s: write failed: %s", path, strerror(errno));
            break;
        }
        p += w;
        left -= (size_t)w;
    }
    if (rc == LM_OK && fchmod(fd, 0644) != 0)
        rc = LM_FAIL(err, LM_E_IO, "%s: chmod failed: %s", path, strerror(errno));
    if (rc == LM_OK && fsync(fd) != 0)
        rc = LM_FAIL(err, LM_E_IO, "%s: fsync failed: %s", path, strerror(errno));
    if (close(fd) != 0 && rc == LM_OK)
        rc = LM_FAIL(err, LM_E_IO, "%s: close failed: %s", path, strerror(errno));
    if (rc == LM_OK && rename(tmp, path) != 0)
        rc = LM_FAIL(err, LM_E_IO, "%s: rename failed: %s", path, strerror(errno));
    if (rc != LM_OK) {
        unlink(tmp);
        goto done;
    }
    /* Make the rename itself durable. */
    int dfd = open(dirname(dircopy), O_RDONLY | O_DIRECTORY);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
done:
    free(tmp);
    free(dircopy);
    return rc;
}

int hx_write_text_atomic(const char *path, char *text, lm_err *err)
{
    size_t n = strlen(text);
    char *withnl = realloc(text, n + 2);
    if (withnl == NULL) {
        free(text);
        return LM_FAIL(err, LM_E_NOMEM, "%s: out of memory", path);
    }
    withnl[n] = '\n';
    withnl[n + 1] = '\0';
    int rc = hx_write_file_atomic(path, withnl, n + 1, err);
    free(withnl);
    return rc;
}

int hx_read_file(char **out, size_t *n, const char *path, lm_err *err)
{
    *out = NULL;
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return LM_FAIL(err, LM_E_IO, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (len + 1 >= cap) {
            char *nb = realloc(buf, cap * 2);
            if (nb == NULL) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        errno = 0;
        size_t r = fread(buf + len, 1, cap - 1 - len, f);
        len += r;
        if (r == 0)
            break;
    }
    /* errno of the failing fread (EISDIR for a folder), kept before fclose can change it */
    const int read_errno = errno;
    int bad = buf == NULL || ferror(f);
    fclose(f);
    if (bad) {
        if (buf == NULL)
            return LM_FAIL(err, LM_E_NOMEM, "%s: out of memory reading it", path);
        free(buf);
        return LM_FAIL(err, LM_E_IO, "%s: read failed: %s", path,
                       read_errno ? strerror(read_errno) : "I/O error");
    }
    buf[len] = '\0';
    *out = buf;
    *n = len;
    return LM_OK;
}
