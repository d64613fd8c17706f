/* test_fs.c — common/fs.c: what a write does to each kind of target (new, regular, read-only,
 * symbolic link, dangling link, /dev/null, /dev/full, FIFO, an open descriptor, folder), all-or-nothing
 * group commits, reads that refuse non-regular files without blocking, the size cap, mkdir -p,
 * the cache folder policy and stale temp cleanup. */
#include "fs.h"
#include "test_util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

/* A fresh folder under tu_tmpdir() (static buffer per call site is the caller's copy). */
static void fresh_dir(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "%s/fs-%s", tu_tmpdir(), name);
    lm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(lm_mkdir_p(out, &err), LM_OK);
}

static size_t slurp(char *buf, size_t cap, const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return (size_t)-1;
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = '\0';
    return n;
}

/* Entries of dir whose name contains ".tmp." */
static int count_temps(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL)
        n += strstr(de->d_name, ".tmp.") != NULL;
    if (d)
        closedir(d);
    return n;
}

static void test_fs_regular_new_and_replaced(void)
{
    char dir[600], path[700], buf[64];
    fresh_dir(dir, sizeof dir, "regular");
    snprintf(path, sizeof path, "%s/a.txt", dir);
    lm_err err = {0};
    CU_ASSERT_EQUAL(lm_write_file(path, "one", 3, &err), LM_OK);
    CU_ASSERT_EQUAL(slurp(buf, sizeof buf, path), 3);
    CU_ASSERT_STRING_EQUAL(buf, "one");
    struct stat st;
    CU_ASSERT_FATAL(stat(path, &st) == 0);
    CU_ASSERT_EQUAL(st.st_mode & 0777, 0644);
    /* replacing keeps the permission bits */
    CU_ASSERT_FATAL(chmod(path, 0600) == 0);
    CU_ASSERT_EQUAL(lm_write_file(path, "two!", 4, &err), LM_OK);
    CU_ASSERT_EQUAL(slurp(buf, sizeof buf, path), 4);
    CU_ASSERT_STRING_EQUAL(buf, "two!");
    CU_ASSERT_FATAL(stat(path, &st) == 0);
    CU_ASSERT_EQUAL(st.st_mode & 0777, 0600);
    CU_ASSERT_EQUAL(count_temps(dir), 0);
    /* a missing folder: one error naming the path, nothing created */
    snprintf(path, sizeof path, "%s/no/such/a.txt", dir);
    CU_ASSERT_EQUAL(lm_write_file(path, "x", 1, &err), LM_E_IO);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, path));
}

/* A read-only regular file is refused, by lm_wfile_check and by a write, and left as it was;
 * also through a symbolic link; the mode check holds for root too. */
static void test_fs_read_only_refused(void)
{
    char dir[600], path[700], link[700], buf[64];
    fresh_dir(dir, sizeof dir, "readonly");
    snprintf(path, sizeof path, "%s/golden.json", dir);
    snprintf(link, sizeof link, "%s/link.json", dir);
    lm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(lm_write_file(path, "kept", 4, &err), LM_OK);
    CU_ASSERT_FATAL(chmod(path, 0444) == 0);
    (void)unlink(link);
    CU_ASSERT_FATAL(symlink(path, link) == 0);
    const char *const names[] = {path, link};
    for (int i = 0; i < 2; ++i) {
        lm_err ec = {0}, ew = {0};
        CU_ASSERT_EQUAL(lm_wfile_check(names[i], &ec), LM_E_INPUT);
        CU_ASSERT_PTR_NOT_NULL(strstr(ec.msg, "read-only"));
        CU_ASSERT_EQUAL(lm_write_file(names[i], "lost", 4, &ew), LM_E_INPUT);
        CU_ASSERT_PTR_NOT_NULL(strstr(ew.msg, names[i]));
        CU_ASSERT_PTR_NULL(strchr(ew.msg, '\n'));
    }
    CU_ASSERT_EQUAL(slurp(buf, sizeof buf, path), 4);
    CU_ASSERT_STRING_EQUAL(buf, "kept");
    struct stat st;
    CU_ASSERT_FATAL(stat(path, &st) == 0);
    CU_ASSERT_EQUAL(st.st_mode & 0777, 0444);
    CU_ASSERT_EQUAL(count_temps(dir), 0);
    /* writable again: replaced as any file */
    CU_ASSERT_FATAL(chmod(path, 0644) == 0);
    CU_ASSERT_EQUAL(lm_write_file(path, "new", 3, &err), LM_OK);
    CU_ASSERT_EQUAL(slurp(buf, sizeof buf, path), 3);
}

static void test_fs_symlink_followed(void)
{
    char dir[600], target[700], link_[700], dangling[700], dtarget[700], buf[64];
    fresh_dir(dir, sizeof dir, "symlink");
    snprintf(target, sizeof target, "%s/target.json", dir);
    snprintf(link_, sizeof link_, "%s/link.json", dir);
    lm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(lm_write_file(target, "old", 3, &err), LM_OK);
    CU_ASSERT_FATAL(symlink("target.json", link_) == 0); /* relative to the link's folder */
    CU_ASSERT_EQUAL(lm_write_file(link_, "new", 3, &err), LM_OK);
    struct stat st;
    CU_ASSERT_FATAL(lstat(link_, &st) == 0);
    CU_ASSERT(S_ISLNK(st.st_mode)); /* the link stays a link */
    CU_ASSERT_EQUAL(slurp(buf, sizeof buf, target), 3);
    CU_ASSERT_STRING_EQUAL(buf, "new");
    /* a dangling link: the file it names is created */
    snprintf(dangling, sizeof dangling, "%s/dangling", dir);
    snprintf(dtarget, sizeof dtarget, "%s/made-through-link", dir);
    CU_ASSERT_FATAL(symlink(dtarget, dangling) == 0);
    CU_ASSERT_EQUAL(lm_write_file(dangling, "abc", 3, &err), LM_OK);
    CU_ASSERT_FATAL(lstat(dangling, &st) == 0);
    CU_ASSERT(S_ISLNK(st.st_mode));
    CU_ASSERT_EQUAL(slurp(buf, sizeof buf, dtarget), 3);
    CU_ASSERT_EQUAL(count_temps(dir), 0);
}

static void test_fs_devices(void)
{
    lm_err err = {0};
    struct stat st;
    CU_ASSERT_EQUAL(lm_write_file("/dev/null", "x", 1, &err), LM_OK);
    CU_ASSERT_FATAL(stat("/dev/null", &st) == 0);
    CU_ASSERT(S_ISCHR(st.st_mode));
    /* /dev/full: written directly, so the write fails and the node stays a device */
    lm_err e2 = {0};
    CU_ASSERT_EQUAL(lm_write_file("/dev/full", "x", 1, &e2), LM_E_IO);
    CU_ASSERT_PTR_NOT_NULL(strstr(e2.msg, "/dev/full"));
    CU_ASSERT_PTR_NOT_NULL(strstr(e2.msg, strerror(ENOSPC)));
    CU_ASSERT_FATAL(stat("/dev/full", &st) == 0);
    CU_ASSERT(S_ISCHR(st.st_mode));
    /* a folder is refused */
    lm_err e3 = {0};
    CU_ASSERT_EQUAL(lm_write_file(tu_tmpdir(), "x", 1, &e3), LM_E_INPUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(e3.msg, "a folder"));
}

static void test_fs_open_descriptor(void)
{
    int p[2];
    CU_ASSERT_FATAL(pipe(p) == 0);
    char name[64], buf[16] = {0};
    snprintf(name, sizeof name, "/dev/fd/%d", p[1]);
    lm_err err = {0};
    CU_ASSERT_EQUAL(lm_write_file(name, "pipe", 4, &err), LM_OK);
    CU_ASSERT(fcntl(p[1], F_GETFD) != -1); /* the caller's descriptor stays open */
    close(p[1]);
    CU_ASSERT_EQUAL(read(p[0], buf, sizeof buf - 1), 4);
    CU_ASSERT_STRING_EQUAL(buf, "pipe");
    close(p[0]);
}

static void test_fs_fifo_written_directly(void)
{
    char dir[600], fifo[700];
    fresh_dir(dir, sizeof dir, "fifo");
    snprintf(fifo, sizeof fifo, "%s/f", dir);
    CU_ASSERT_FATAL(mkfifo(fifo, 0600) == 0);
    int p[2];
    CU_ASSERT_FATAL(pipe(p) == 0);
    fflush(NULL);
    pid_t pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) { /* the reader: copies what arrives to the pipe */
        close(p[0]);
        alarm(20);
        int fd = open(fifo, O_RDONLY);
        char b[64];
        ssize_t k, tot = 0;
        while (fd >= 0 && (k = read(fd, b, sizeof b)) > 0)
            tot += write(p[1], b, (size_t)k);
        _exit(tot == 5 ? 0 : 1);
    }
    close(p[1]);
    lm_err err = {0};
    CU_ASSERT_EQUAL(lm_write_file(fifo, "fifo!", 5, &err), LM_OK);
    int status = 0;
    CU_ASSERT(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    char buf[16] = {0};
    CU_ASSERT_EQUAL(read(p[0], buf, sizeof buf - 1), 5);
    close(p[0]);
    struct stat st;
    CU_ASSERT_FATAL(lstat(fifo, &st) == 0);
    CU_ASSERT(S_ISFIFO(st.st_mode)); /* not replaced by a regular file */
    CU_ASSERT_EQUAL(count_temps(dir), 0);
    /* no reader: an error after LM_FS_FIFO_WAIT_MS, never a hang (alarm: a hang fails) */
    lm_err e2 = {0};
    alarm(20);
    CU_ASSERT_EQUAL(lm_write_file(fifo, "x", 1, &e2), LM_E_IO);
    alarm(0);
    CU_ASSERT_PTR_NOT_NULL(strstr(e2.msg, "no reader"));
    CU_ASSERT_FATAL(lstat(fifo, &st) == 0);
    CU_ASSERT(S_ISFIFO(st.st_mode));
}

/* A write that fails midway (RLIMIT_FSIZE: the disk-full path) leaves the old file and no temp. */
static void test_fs_failed_write_keeps_old(void)
{
    char dir[600], path[700], buf[64];
    fresh_dir(dir, sizeof dir, "fsize");
    snprintf(path, sizeof path, "%s/g.json", dir);
    lm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(lm_write_file(path, "old", 3, &err), LM_OK);
    fflush(NULL);
    pid_t pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit rl = {16, 16};
        setrlimit(RLIMIT_FSIZE, &rl);
        char big[100];
        memset(big, 'x', sizeof big);
        lm_err e = {0};
        int rc = lm_write_file(path, big, sizeof big, &e);
        _exit(rc == LM_E_IO && strstr(e.msg, path) != NULL ? 0 : 1);
    }
    int status = 0;
    CU_ASSERT(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CU_ASSERT_EQUAL(slurp(buf, sizeof buf, path), 3);
    CU_ASSERT_EQUAL(count_temps(dir), 0);
}

/* commit_all: a rename failing on the second file puts the first one's old contents back. */
static void test_fs_commit_all_rolls_back(void)
{
    char dir[600], a[700], b[700], c[700], buf[64];
    fresh_dir(dir, sizeof dir, "group");
    snprintf(a, sizeof a, "%s/a.json", dir);
    snprintf(b, sizeof b, "%s/b.json", dir);
    snprintf(c, sizeof c, "%s/c.json", dir);
    lm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(lm_write_file(a, "old a", 5, &err), LM_OK);
    lm_wfile *w[3];
    CU_ASSERT_EQUAL_FATAL(lm_wfile_open(&w[0], a, &err), LM_OK);
    CU_ASSERT_EQUAL_FATAL(lm_wfile_open(&w[1], c, &err), LM_OK);
    CU_ASSERT_EQUAL_FATAL(lm_wfile_open(&w[2], b, &err), LM_OK);
    for (int i = 0; i < 3; ++i)
        CU_ASSERT_EQUAL(lm_wfile_write(w[i], "new", 3, &err), LM_OK);
    /* b becomes a non-empty folder after it was opened: its rename must fail */
    char inner[800];
    CU_ASSERT_FATAL(mkdir(b, 0755) == 0);
    snprintf(inner, sizeof inner, "%s/keep", b);
    CU_ASSERT_EQUAL_FATAL(lm_write_file(inner, "k", 1, &err), LM_OK);
    lm_err e2 = {0};
    CU_ASSERT_EQUAL(lm_wfile_commit_all(w, 3, &e2), LM_E_IO);
    CU_ASSERT_PTR_NOT_NULL(strstr(e2.msg, b));
    CU_ASSERT_EQUAL(slurp(buf, sizeof buf, a), 5);
    CU_ASSERT_STRING_EQUAL(buf, "old a");
    struct stat st;
    CU_ASSERT(lstat(c, &st) != 0); /* created by the group, removed by the rollback */
    CU_ASSERT_EQUAL(count_temps(dir), 0);
    /* and the same group succeeds once the obstacle is gone */
    unlink(inner);
    rmdir(b);
    CU_ASSERT_EQUAL_FATAL(lm_wfile_open(&w[0], a, &err), LM_OK);
    CU_ASSERT_EQUAL_FATAL(lm_wfile_open(&w[1], b, &err), LM_OK);
    w[2] = NULL;
    CU_ASSERT_EQUAL(lm_wfile_write(w[0], "A", 1, &err), LM_OK);
    CU_ASSERT_EQUAL(lm_wfile_write(w[1], "B", 1, &err), LM_OK);
    CU_ASSERT_EQUAL(lm_wfile_commit_all(w, 3, &err), LM_OK);
    CU_ASSERT_EQUAL(slurp(buf, sizeof buf, a), 1);
    CU_ASSERT_EQUAL(slurp(buf, sizeof buf, b), 1);
    CU_ASSERT_EQUAL(count_temps(dir), 0);
}

static void test_fs_read_refuses_non_regular(void)
{
    char dir[600], fifo[700], path[700];
    fresh_dir(dir, sizeof dir, "read");
    snprintf(fifo, sizeof fifo, "%s/in.fifo", dir);
    CU_ASSERT_FATAL(mkfifo(fifo, 0600) == 0);
    const char *bad[] = {fifo, "/dev/zero", "/dev/urandom", dir};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; ++i) {
        char *text = NULL;
        size_t n = 0;
        lm_err err = {0};
        alarm(10); /* a FIFO opened without O_NONBLOCK would block here */
        CU_ASSERT_EQUAL(lm_read_file(&text, &n, bad[i], SIZE_MAX, &err), LM_E_INPUT);
        alarm(0);
        CU_ASSERT_PTR_NULL(text);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "not a regular file"));
    }
    /* the size cap: refused before reading, naming the limit */
    snprintf(path, sizeof path, "%s/big", dir);
    char big[100];
    memset(big, 'y', sizeof big);
    lm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(lm_write_file(path, big, sizeof big, &err), LM_OK);
    char *text = NULL;
    size_t n = 0;
    CU_ASSERT_EQUAL(lm_read_file(&text, &n, path, 99, &err), LM_E_INPUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "limit of 99 bytes"));
    CU_ASSERT_EQUAL(lm_read_file(&text, &n, path, 100, &err), LM_OK);
    CU_ASSERT_EQUAL(n, 100);
    CU_ASSERT_EQUAL(text[100], '\0');
    free(text);
    lm_err e2 = {0};
    CU_ASSERT_EQUAL(lm_open_regular(fifo, NULL, &e2), LM_E_INPUT);
}

static void test_fs_mkdir_p(void)
{
    char dir[600], deep[800], file[800], under[900];
    fresh_dir(dir, sizeof dir, "mkdir");
    snprintf(deep, sizeof deep, "%s/a//b/c/", dir);
    lm_err err = {0};
    CU_ASSERT_EQUAL(lm_mkdir_p(deep, &err), LM_OK);
    CU_ASSERT_EQUAL(lm_mkdir_p(deep, &err), LM_OK); /* existing is fine */
    struct stat st;
    CU_ASSERT(stat(deep, &st) == 0 && S_ISDIR(st.st_mode));
    snprintf(file, sizeof file, "%s/file", dir);
    CU_ASSERT_EQUAL_FATAL(lm_write_file(file, "f", 1, &err), LM_OK);
    snprintf(under, sizeof under, "%s/x", file);
    lm_err e2 = {0};
    CU_ASSERT_EQUAL(lm_mkdir_p(under, &e2), LM_E_IO);
    lm_err e3 = {0};
    CU_ASSERT_EQUAL(lm_mkdir_p(file, &e3), LM_E_IO);
    CU_ASSERT_PTR_NOT_NULL(strstr(e3.msg, "not a folder"));
}

static void test_fs_cache_dir_policy(void)
{
    char out[512];
    lm_err err = {0};
    CU_ASSERT(lm_cache_dir(out, sizeof out, "/x/y", &err) == LM_OK);
    CU_ASSERT_STRING_EQUAL(out, "/x/y");
    const char *old = getenv("KVDRIFT_CACHE");
    char *saved = old ? strdup(old) : NULL;
    setenv("KVDRIFT_CACHE", "/env/cache", 1);
    CU_ASSERT(lm_cache_dir(out, sizeof out, NULL, &err) == LM_OK);
    CU_ASSERT_STRING_EQUAL(out, "/env/cache");
    unsetenv("KVDRIFT_CACHE");
    const char *oldx = getenv("XDG_CACHE_HOME");
    char *savedx = oldx ? strdup(oldx) : NULL;
    setenv("XDG_CACHE_HOME", "/xdg", 1);
    CU_ASSERT(lm_cache_dir(out, sizeof out, "", &err) == LM_OK);
    CU_ASSERT_STRING_EQUAL(out, "/xdg/kvdrift");
    if (savedx)
        setenv("XDG_CACHE_HOME", savedx, 1);
    else
        unsetenv("XDG_CACHE_HOME");
    if (saved)
        setenv("KVDRIFT_CACHE", saved, 1);
    free(saved);
    free(savedx);
    char small[4];
    CU_ASSERT_EQUAL(lm_cache_dir(small, sizeof small, "/long/folder", &err), LM_E_INPUT);
}

/* $KVDRIFT_MODELS when non-empty, else the cache folder's models/ (the default needs no folder
 * outside the cache). */
static void test_fs_models_dir_policy(void)
{
    const char *names[2] = {"KVDRIFT_MODELS", "KVDRIFT_CACHE"};
    char *saved[2];
    for (int i = 0; i < 2; i++)
        saved[i] = getenv(names[i]) ? strdup(getenv(names[i])) : NULL;
    char out[512];
    lm_err err = {0};
    setenv("KVDRIFT_MODELS", "/m", 1);
    setenv("KVDRIFT_CACHE", "/c", 1);
    CU_ASSERT_EQUAL(lm_models_dir(out, sizeof out, &err), LM_OK);
    CU_ASSERT_STRING_EQUAL(out, "/m");
    setenv("KVDRIFT_MODELS", "", 1);
    CU_ASSERT_EQUAL(lm_models_dir(out, sizeof out, &err), LM_OK);
    CU_ASSERT_STRING_EQUAL(out, "/c/models");
    unsetenv("KVDRIFT_MODELS");
    CU_ASSERT_EQUAL(lm_models_dir(out, sizeof out, &err), LM_OK);
    CU_ASSERT_STRING_EQUAL(out, "/c/models");
    char small[8];
    CU_ASSERT_EQUAL(lm_models_dir(small, sizeof small, &err), LM_E_INPUT);
    for (int i = 0; i < 2; i++) {
        if (saved[i])
            setenv(names[i], saved[i], 1);
        else
            unsetenv(names[i]);
        free(saved[i]);
    }
}

static void make_aged(const char *dir, const char *name, int age_s)
{
    char p[900];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb"); /* not lm_write_file: that would clean dir once already */
    CU_ASSERT_FATAL(f != NULL);
    fclose(f);
    struct timeval tv[2];
    gettimeofday(&tv[0], NULL);
    tv[0].tv_sec -= age_s;
    tv[1] = tv[0];
    CU_ASSERT_FATAL(utimes(p, tv) == 0);
}

static bool present(const char *dir, const char *name)
{
    char p[900];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    struct stat st;
    return lstat(p, &st) == 0;
}

static void test_fs_clean_stale(void)
{
    char dir[600], dead_old[96], dead_new[96], live_old[96];
    fresh_dir(dir, sizeof dir, "stale");
    fflush(NULL);
    pid_t dead = fork(); /* a pid that has exited and been reaped */
    CU_ASSERT_FATAL(dead >= 0);
    if (dead == 0)
        _exit(0);
    CU_ASSERT_FATAL(waitpid(dead, NULL, 0) == dead);
    snprintf(dead_old, sizeof dead_old, "g.json.tmp.%ld.Ab3dEf", (long)dead);
    snprintf(dead_new, sizeof dead_new, "h.json.tmp.%ld.Ab3dEf", (long)dead);
    snprintf(live_old, sizeof live_old, "i.json.tmp.%ld.Ab3dEf", (long)getppid());
    make_aged(dir, dead_old, 2 * LM_FS_STALE_SECONDS);
    make_aged(dir, dead_new, 0);
    make_aged(dir, live_old, 2 * LM_FS_STALE_SECONDS);
    make_aged(dir, "notes.tmp.txt", 2 * LM_FS_STALE_SECONDS);      /* not a temp name */
    make_aged(dir, "x.tmp.123.toolong", 2 * LM_FS_STALE_SECONDS); /* not a temp name */
    CU_ASSERT_EQUAL(lm_fs_clean_stale(dir), 1);
    CU_ASSERT(!present(dir, dead_old));
    CU_ASSERT(present(dir, dead_new));
    CU_ASSERT(present(dir, live_old));
    CU_ASSERT(present(dir, "notes.tmp.txt"));
    CU_ASSERT(present(dir, "x.tmp.123.toolong"));
    /* lm_cache_open cleans the cache folder it opens */
    make_aged(dir, dead_old, 2 * LM_FS_STALE_SECONDS);
    char out[700];
    lm_err err = {0};
    CU_ASSERT_EQUAL(lm_cache_open(out, sizeof out, dir, &err), LM_OK);
    CU_ASSERT(!present(dir, dead_old));
}

void test_fs_register(void)
{
    CU_pSuite s = CU_add_suite("fs", NULL, NULL);
    CU_add_test(s, "test_fs_regular_new_and_replaced", test_fs_regular_new_and_replaced);
    CU_add_test(s, "test_fs_read_only_refused", test_fs_read_only_refused);
    CU_add_test(s, "test_fs_symlink_followed", test_fs_symlink_followed);
    CU_add_test(s, "test_fs_devices", test_fs_devices);
    CU_add_test(s, "test_fs_open_descriptor", test_fs_open_descriptor);
    CU_add_test(s, "test_fs_fifo_written_directly", test_fs_fifo_written_directly);
    CU_add_test(s, "test_fs_failed_write_keeps_old", test_fs_failed_write_keeps_old);
    CU_add_test(s, "test_fs_commit_all_rolls_back", test_fs_commit_all_rolls_back);
    CU_add_test(s, "test_fs_read_refuses_non_regular", test_fs_read_refuses_non_regular);
    CU_add_test(s, "test_fs_mkdir_p", test_fs_mkdir_p);
    CU_add_test(s, "test_fs_cache_dir_policy", test_fs_cache_dir_policy);
    CU_add_test(s, "test_fs_models_dir_policy", test_fs_models_dir_policy);
    CU_add_test(s, "test_fs_clean_stale", test_fs_clean_stale);
}
