/* fs.h — the file utilities engine, reference and harness share: one way to write a file, one
 * way to read one, mkdir -p, the cache folder, and the removal of temp files left by killed runs.
 *
 * Writing a path (lm_wfile_open) depends on what is there:
 * - nothing, or a regular file: a temp file "<path>.tmp.<pid>.XXXXXX" in the same folder is
 *   written, fsync'ed and renamed over the path (readers see the old or the new contents, never
 *   a mix); an existing file keeps its permission bits, a new one gets 0644;
 * - a symbolic link (also a dangling one): followed, and the file it names is written as above
 *   (the temp file sits next to the link's target, the link stays);
 * - /dev/stdout, /dev/stderr, /dev/fd/N, /proc/self/fd/N: the already open descriptor is written;
 * - a character device (/dev/null, /dev/tty, /dev/full) or a FIFO: opened and written directly,
 *   not atomically (what a user naming one means); /dev/full fails with "No space left on
 *   device" and the device node is never replaced; a FIFO is written once a reader has it open,
 *   waiting at most LM_FS_FIFO_WAIT_MS for one (then LM_E_IO "no reader": never a hang);
 * - a folder, a block device or a socket: refused (LM_E_INPUT);
 * - a regular file that is read-only (no write permission bit at all, as chmod a-w leaves it,
 *   or not writable by this user): refused (LM_E_INPUT), for root too, although renaming over
 *   it would succeed: its mode says it is not to be replaced.
 * Errors are one line naming the path and the reason. */
#ifndef LM_FS_H
#define LM_FS_H

#include "kvd_common.h"

#include <stdbool.h>
#include <stddef.h>

/* A temp file older than this whose writer process is gone is removed by lm_fs_clean_stale. */
#define LM_FS_STALE_SECONDS 60
/* How long a write to a FIFO waits for a reader to open it. */
#define LM_FS_FIFO_WAIT_MS 2000

/* One file being written. */
typedef struct lm_wfile lm_wfile;

/* Starts writing path (see the header comment). LM_E_INPUT for a refused target, LM_E_IO when
 * the temp file or the target cannot be created. Cleans the target's folder of stale temp files
 * first (once per folder and process). */
int lm_wfile_open(lm_wfile **out, const char *path, lm_err *err);
/* What lm_wfile_open(path) would meet, checked before any work and with nothing left behind:
 * a refused target (a folder, a block device, a socket, a read-only file) is LM_E_INPUT as there; a device or
 * FIFO must be writable; for a new or regular file the folder that receives the temp file must
 * exist (it is never created) and take a new file (lm_dir_probe). Errors name path. */
int lm_wfile_check(const char *path, lm_err *err);
/* Whether folder dir exists and a file can be created in it: a temp file is created there and
 * removed at once, which access(2) cannot tell (root in /proc or on a read-only mount).
 * LM_E_INPUT "PATH: ..." naming path (what the user gave) and dir. */
int lm_dir_probe(const char *dir, const char *path, lm_err *err);
/* Appends bytes[n]; LM_E_IO naming the path (a full disk, /dev/full, RLIMIT_FSIZE). */
int lm_wfile_write(lm_wfile *w, const void *bytes, size_t n, lm_err *err);
/* Finishes the temp file (permission bits, fsync, close) without renaming it: after this only
 * the rename is left, which needs no space. Nothing to do for a direct write. */
int lm_wfile_stage(lm_wfile *w, lm_err *err);
/* Stages if needed, renames the temp file over the target and fsyncs the folder (a direct write
 * is closed). Frees w on every path; on failure the target is as it was and the temp is gone. */
int lm_wfile_commit(lm_wfile *w, lm_err *err);
/* Drops a write: the temp file is removed, the target untouched (a direct write keeps what was
 * already written). Frees w; NULL is allowed. */
void lm_wfile_abort(lm_wfile *w);
/* All or nothing for several files: stages each, then renames each; if a rename fails, the
 * targets already replaced get their old contents back (kept as hard links until the end) or
 * are removed when they did not exist. Frees every w[i] (NULL entries are skipped). */
int lm_wfile_commit_all(lm_wfile **w, size_t n, lm_err *err);

/* One whole file in one call (open, write, commit). */
int lm_write_file(const char *path, const void *bytes, size_t n, lm_err *err);

/* Reads a whole regular file into a malloc'd, NUL-terminated buffer (*n excludes the NUL). The
 * file is opened with O_NONBLOCK, so a FIFO never blocks; anything but a regular file is
 * LM_E_INPUT "<path>: not a regular file". A file larger than max_bytes is LM_E_INPUT naming the
 * limit (SIZE_MAX: no limit). LM_E_IO when it cannot be opened or read. */
int lm_read_file(char **out, size_t *n, const char *path, size_t max_bytes, lm_err *err);
/* Opens path read-only for a reader that maps or reads it itself: O_NONBLOCK (cleared after
 * the check) and CLOEXEC; the same "not a regular file" refusal. Returns the descriptor or a
 * negative status. size, when not NULL, receives the file's size. */
int lm_open_regular(const char *path, unsigned long long *size, lm_err *err);

/* mkdir -p with mode 0777 (the umask applies); every component must end up a folder.
 * LM_E_IO naming the component that failed. */
int lm_mkdir_p(const char *dir, lm_err *err);
/* lm_mkdir_p of the folder part of path (nothing for a bare file name or one under "/"). */
int lm_mkdir_parent(const char *path, lm_err *err);

/* The cache folder: dir if not NULL/empty, else $KVDRIFT_CACHE, else $XDG_CACHE_HOME/kvdrift,
 * else $HOME/.cache/kvdrift. LM_E_INPUT when none applies or the name does not fit in cap. */
int lm_cache_dir(char *out, size_t cap, const char *dir, lm_err *err);
/* lm_cache_dir, then lm_mkdir_p and lm_fs_clean_stale on it. */
int lm_cache_open(char *out, size_t cap, const char *dir, lm_err *err);
/* The models folder (what ${KVDRIFT_MODELS} names in a case file; tests and benchmarks read
 * their GGUF files there): $KVDRIFT_MODELS, else the cache folder's models/ (lm_cache_dir with
 * no dir), where `make models` downloads. scripts/paths.sh gives the shell the same folder.
 * LM_E_INPUT as lm_cache_dir. */
int lm_models_dir(char *out, size_t cap, lm_err *err);

/* Removes, from folder dir, temp files named "*.tmp.<pid>.XXXXXX" that are older than
 * LM_FS_STALE_SECONDS and whose process <pid> no longer exists. Returns how many were removed
 * (best effort: an unreadable folder removes nothing). */
unsigned lm_fs_clean_stale(const char *dir);

#endif
