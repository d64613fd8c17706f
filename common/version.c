/* version.c — the build's git commit (kvd_version.h), from the header the Makefile generates. */
#include "kvd_version.h"

#include "kvd_commit.h" /* KVD_GIT_COMMIT, generated into the build folder */

const char *lm_git_commit(void)
{
    return KVD_GIT_COMMIT;
}
