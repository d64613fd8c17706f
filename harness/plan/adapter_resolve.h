/* adapter_resolve.h — which executable an adapter name means, and what it says of itself
 * (`ADAPTER --describe`, run through run/adapter_exec.h, parsed by model/adapter.h). */
#ifndef HX_ADAPTER_RESOLVE_H
#define HX_ADAPTER_RESOLVE_H

#include "kvd_common.h"
#include "model/adapter.h"

#include <stddef.h>

/* The time an adapter gets to answer --describe. */
#define HX_ADAPTER_DESCRIBE_TIMEOUT 120.0

/* ADAPTER as given: a path when it holds a '/', else a shipped adapter's name, looked up as
 * $KVDRIFT_ADAPTERS/NAME, then beside the kvdrift binary as ../adapters/NAME (the source
 * tree's build/kvdrift) and ../share/kvdrift/adapters/NAME (an installed one). The first that
 * exists into path [cap]; LM_E_INPUT naming the places looked in when none does. */
int hx_adapter_resolve(char *path, size_t cap, const char *adapter, lm_err *err);

/* Runs `path --describe` (stdin /dev/null, HX_ADAPTER_DESCRIBE_TIMEOUT) and parses its stdout;
 * exit status HX_ADAPTER_NOT_INSTALLED is LM_E_UNSUPPORTED ("not installed here" and its last
 * stderr line); another failed run or a malformed document is LM_E_INPUT with one line. */
int hx_adapter_describe(hx_adapter_desc *out, const char *path, lm_err *err);

#endif
