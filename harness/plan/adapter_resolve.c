/* adapter_resolve.c — an adapter's name to its executable, and its --describe document parsed
 * (the contract is in adapter_resolve.h). */
#include "plan/adapter_resolve.h"

#include "run/adapter_exec.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static bool is_file(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

int hx_adapter_resolve(char *path, size_t cap, const char *adapter, lm_err *err)
{
    if (adapter[0] == '\0')
        return LM_FAIL(err, LM_E_INPUT, "--engine: empty adapter name");
    if (strchr(adapter, '/') != NULL) {
        if ((size_t)snprintf(path, cap, "%s", adapter) >= cap)
            return LM_FAIL(err, LM_E_INPUT, "adapter path too long");
        return LM_OK;
    }
    char exe[PATH_MAX], cand[3][PATH_MAX + 300];
    int nc = 0;
    const char *env = getenv("KVDRIFT_ADAPTERS");
    if (env != NULL && env[0] != '\0')
        snprintf(cand[nc++], sizeof cand[0], "%.4000s/%s", env, adapter);
    ssize_t l = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (l > 0) {
        exe[l] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash != NULL)
            *slash = '\0';
        snprintf(cand[nc++], sizeof cand[0], "%.4000s/../adapters/%s", exe, adapter);
        snprintf(cand[nc++], sizeof cand[0], "%.4000s/../share/kvdrift/adapters/%s", exe,
                 adapter);
    }
    for (int i = 0; i < nc; ++i)
        if (is_file(cand[i])) {
            if ((size_t)snprintf(path, cap, "%s", cand[i]) >= cap)
                return LM_FAIL(err, LM_E_INPUT, "adapter path too long");
            return LM_OK;
        }
    return LM_FAIL(err, LM_E_INPUT, "adapter '%s': not found ($KVDRIFT_ADAPTERS, and "
                   "adapters/ beside the kvdrift binary; give a path with a '/' for another)",
                   adapter);
}

int hx_adapter_describe(hx_adapter_desc *out, const char *path, lm_err *err)
{
    char *argv[] = {(char *)path, "--describe", NULL};
    hx_exec_result res;
    int rc = hx_exec_run(&res, path, argv, HX_ADAPTER_DESCRIBE_TIMEOUT,
                         HX_ADAPTER_DESCRIBE_MAX, err);
    if (rc != LM_OK)
        return rc;
    char why[300];
    if (res.exit_code == HX_ADAPTER_NOT_INSTALLED)
        rc = LM_FAIL(err, LM_E_UNSUPPORTED, "%s --describe: not installed here: %s", path,
                     res.err_line[0] ? res.err_line : "(it said nothing on stderr)");
    else if (!hx_exec_ok(&res, HX_ADAPTER_DESCRIBE_TIMEOUT, why, sizeof why))
        rc = LM_FAIL(err, LM_E_INPUT, "%s --describe: %s", path, why);
    else if (res.out_truncated)
        rc = LM_FAIL(err, LM_E_INPUT, "%s --describe: more than %u bytes on stdout", path,
                     HX_ADAPTER_DESCRIBE_MAX);
    else
        rc = hx_adapter_desc_parse(out, res.out, res.out_len, path, err);
    hx_exec_result_free(&res);
    return rc;
}
