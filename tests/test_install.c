/* test_install.c — `make install` into a staging folder: the binary, its man page, the
 * report schema and DESIGN.md (where the classes are defined) land under PREFIX, and the
 * installed binary runs from another folder.
 * Skipped (saying so) when build/kvdrift is not built (e.g. the ASan build folder). */
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void test_install_man_page_and_schema(void)
{
    if (access("build/kvdrift", X_OK) != 0 || access("Makefile", R_OK) != 0) {
        fprintf(stderr, "\n  SKIP: build/kvdrift not built in the working folder\n");
        return;
    }
    char dest[1024], cmd[4096];
    snprintf(dest, sizeof dest, "%s/install-root", tu_tmpdir());
    /* The sub-make must not join the calling make's jobserver. */
    snprintf(cmd, sizeof cmd, "env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s install "
             "BUILD=build DESTDIR=%s PREFIX=/usr > %s/install.log 2>&1", dest, tu_tmpdir());
    CU_ASSERT_EQUAL_FATAL(system(cmd), 0);
    const char *files[] = {"/usr/bin/kvdrift", "/usr/share/man/man1/kvdrift.1",
                           "/usr/share/doc/kvdrift/REPORT-SCHEMA.md",
                           "/usr/share/doc/kvdrift/DESIGN.md"};
    char path[1200];
    for (size_t i = 0; i < sizeof files / sizeof files[0]; ++i) {
        snprintf(path, sizeof path, "%s%s", dest, files[i]);
        struct stat st;
        CU_ASSERT(stat(path, &st) == 0 && st.st_size > 0);
    }
    snprintf(path, sizeof path, "%s/usr/share/man/man1/kvdrift.1", dest);
    FILE *f = fopen(path, "r");
    char head[64] = "";
    CU_ASSERT(f != NULL && fgets(head, sizeof head, f) != NULL);
    if (f)
        fclose(f);
    CU_ASSERT_EQUAL(strncmp(head, ".TH KVDRIFT 1", 13), 0);
    /* The installed binary, run from another folder. */
    snprintf(cmd, sizeof cmd, "cd / && %s/usr/bin/kvdrift --help > /dev/null", dest);
    CU_ASSERT_EQUAL(system(cmd), 0);
}

void test_install_register(void)
{
    CU_pSuite s = CU_add_suite("install", NULL, NULL);
    CU_add_test(s, "test_install_man_page_and_schema", test_install_man_page_and_schema);
}
