/* kvd_version.h — the kvdrift version: printed by --version, recorded in golden entries (a
 * golden blessed by another version must be blessed again) and in reports. */
#ifndef KVD_VERSION_H
#define KVD_VERSION_H

#define KVD_VERSION "0.1.0"

/* The git commit the binary was built from ("git describe --always --dirty" at build time,
 * "unknown" when built outside a git checkout); baked in by the Makefile (common/version.c). */
const char *lm_git_commit(void);

#endif
