/* cli_util.h — the pieces the `kvdrift` subcommands (harness/cmd_*.c) share: the one-line
 * "kvdrift CMD: reason" error with exit code 2, bounded integer options, the prompt given as
 * -p TEXT or --tokens ID,..., and loading the case files of check and bless. */
#ifndef KVD_CLI_UTIL_H
#define KVD_CLI_UTIL_H

#include "plan/case.h"
#include "plan/mem_check.h"
#include "model/config.h"
#include "kvd_model.h"
#include "ref_model.h"

#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Prints "kvdrift CMD: <message>" and a newline on stderr; returns 2 (usage or input error).
 * The message names the thing and the reason; this adds the command prefix, once. */
int hx_cli_fail(const char *cmd, const char *fmt, ...) LM_PRINTF(2, 3);
/* Option opt's value arg as setting `which` (hx_setting_parse: the limits and message case
 * files share); 0, or 2 after the one-line error "kvdrift CMD: ...". */
int hx_cli_setting(const char *cmd, uint32_t *out, hx_setting which, const char *opt,
                   const char *arg);

/* A CONFIG given to a command that runs plain greedy decoding of one configuration (run,
 * compare, trace): hx_config_parse, with spec= and draft= refused (speculative decoding is
 * checked by `kvdrift sweep --spec`, token for token against plain decoding). 0, or 2 after
 * the one-line error "kvdrift CMD: OPT 'ARG': reason". */
int hx_cli_parse_plain_config(hx_config *out, const char *cmd, const char *opt,
                              const char *arg);

/* One line "kvdrift CMD: warning: BACKEND: ..." on stderr for each distinct backend of
 * cfgs[n] whose kernel set is older than the CPU (lm_backend_kernels_of: OpenBLAS's core
 * below the CPU's instruction set), saying what runs and what to do; nothing otherwise. Run
 * and sweep call it before they compute: a slow blas is named, not left to be found. */
void hx_cli_warn_kernels(const char *cmd, const hx_config *cfgs /* [n] */, size_t n);

/* A library log callback (hx_sweep_params.log): prints "<user>: <line>" and a newline on
 * stderr; user is the prefix (a const char *). */
void hx_cli_log(void *user, const char *line);

/* One parse's own state (the caller's, zeroed before the first hx_cli_getopt call): the value
 * options seen so far and the one found given twice. */
typedef struct hx_cli_optstate {
    int seen[128];
    size_t n_seen;
    char twice[80]; /* "--name" or "-c" of the option given twice; "" when none */
} hx_cli_optstate;

/* getopt_long(argc, argv, optstring, opts, longindex: -1 for a short option), and an option
 * that takes a value found a second time (by either of its names) is '?' with
 * hx_cli_bad_option saying so: a value given twice is refused, never silently replaced.
 * repeatable: the option values that may repeat (0-terminated; NULL: none). getopt_long's own
 * state is process-wide: set optind first. */
int hx_cli_getopt(hx_cli_optstate *st, int argc, char **argv, const char *optstring,
                  const struct option *opts, int *longindex, const int *repeatable);

/* The getopt_long error of a command parsed with a leading ':' in its optstring: an option
 * given twice (st) is "option 'X' is given more than once", o == ':' "option 'X' needs a
 * value", anything else "unknown option 'X' (try kvdrift CMD --help)", X being
 * argv[optind - 1]; returns 2. */
int hx_cli_bad_option(const hx_cli_optstate *st, const char *cmd, int o, char **argv);

/* The prompt of a command that takes -p TEXT or --tokens ID,... (exactly one of text and
 * tokens non-NULL): text is tokenized with m's vocabulary (BOS when the vocabulary asks for
 * it; control tokens written in text parsed when parse_special, the --special flag; LM_E_INPUT
 * naming model_path when m has none), tokens parsed as a comma list
 * (hx_parse_tokens) with every id below the vocabulary size. *out is malloc'ed. */
int hx_cli_prompt_ids(int32_t **out /* [*n] */, uint32_t *n, const lm_model *m,
                      const char *model_path, const char *text, const char *tokens,
                      bool parse_special, lm_err *err);

/* MODEL as every command takes it (hx_model_spec: a GGUF path, or synth:PRESET[:seed=N], the
 * preset written into the cache folder cache, NULL for the default; cmd prefixes a line about a
 * replaced copy): the file to load in path[cap] and its report label in label[label_cap]
 * (label may be NULL). A missing file is left to the loader's "cannot open" error. */
int hx_cli_model_resolve(char *path, size_t cap, char *label, size_t label_cap, const char *text,
                         const char *cache, const char *cmd, lm_err *err);
/* hx_cli_model_resolve, then (need not NULL) hx_mem_check of that file for need, then
 * lm_model_load of it into *m and, when r is not NULL, the reference's own view of it into *r
 * (judge/model_check.h hx_models_open). */
int hx_cli_model_load(lm_model **m, ref_model **r, char *path, size_t cap, const char *text,
                      const char *cache, const char *cmd, const hx_mem_need *need, lm_err *err);

/* Greedy tokens generated when -n is not given: the same for sweep, compare and trace (and
 * a case file's n_gen). */
#define HX_CLI_DEFAULT_N_GEN HX_CASE_DEFAULT_N_GEN

/* -f FILE: the prompt text read from FILE (its bytes as they are, at most 16 MiB, no NUL);
 * valid until the next call. NULL with err set when it cannot be read. */
const char *hx_cli_prompt_file(const char *path, lm_err *err);

/* -p TEXT (opt 'p') or -f FILE (opt 'f', hx_cli_prompt_file) into *text, which must still be
 * NULL (the prompt is given once, by one of them). 0, or 2 after the one-line error. */
int hx_cli_prompt_option(const char **text, const char *cmd, int opt, const char *arg);

/* The options of the commands that run two configurations A and B on one prompt (compare,
 * trace): MODEL, -p TEXT | -f FILE | --tokens ID,..., --special, --a CONFIG, --b CONFIG and
 * -n N. Each command adds its own options beside them (getopt values below 1200 or above
 * HX_CLI_PAIR_O_LAST). */
typedef struct hx_cli_pair_opts {
    const char *model, *text, *tok_s;
    hx_config a, b;
    uint32_t n_gen;
    bool have_a, have_b, special;
} hx_cli_pair_opts;

enum { HX_CLI_PAIR_O_A = 1200, HX_CLI_PAIR_O_B, HX_CLI_PAIR_O_TOKENS, HX_CLI_PAIR_O_SPECIAL,
       HX_CLI_PAIR_O_LAST = HX_CLI_PAIR_O_SPECIAL };

/* Their getopt_long entries (short options: "p:f:n:"). */
#define HX_CLI_PAIR_LONG_OPTIONS                                                                \
    {"prompt", required_argument, NULL, 'p'}, {"file", required_argument, NULL, 'f'},           \
        {"tokens", required_argument, NULL, HX_CLI_PAIR_O_TOKENS},                              \
        {"special", no_argument, NULL, HX_CLI_PAIR_O_SPECIAL},                                  \
        {"a", required_argument, NULL, HX_CLI_PAIR_O_A},                                        \
        {"b", required_argument, NULL, HX_CLI_PAIR_O_B},                                        \
        {"n-gen", required_argument, NULL, 'n'}

/* Their usage lines, -n excepted (each command says what its N counts). */
#define HX_CLI_PAIR_USAGE                                                                       \
    "  -p, --prompt TEXT     prompt text (BOS added when the vocabulary asks for it)\n"          \
    "  -f, --file FILE       the prompt text read from FILE (its bytes as they are)\n"          \
    "      --tokens ID,...   prompt as token ids instead of text\n"                             \
    "      --special         parse control tokens written in TEXT (\"<|im_start|>\", \"<s>\")\n" \
    "      --a CONFIG        first configuration (BACKEND[:step=N|full][:threads=T])\n"         \
    "      --b CONFIG        second configuration\n"

/* Defaults (n_gen HX_CLI_DEFAULT_N_GEN, nothing given). */
void hx_cli_pair_init(hx_cli_pair_opts *o);
/* One getopt value: 1 when opt is not one of the shared options, 0 when taken, else the exit
 * code of its error (2, after printing "kvdrift CMD: ..."). */
int hx_cli_pair_option(hx_cli_pair_opts *o, const char *cmd, int opt, const char *arg);
/* After getopt: exactly one MODEL argument left (argv[optind]), exactly one of -p/-f and
 * --tokens, both --a and --b. -1 when complete, else 2 after printing the error. */
int hx_cli_pair_finish(hx_cli_pair_opts *o, const char *cmd, int argc, char **argv);
/* Loads MODEL (hx_cli_model_load, default cache) into *m (and *r unless r is NULL) and the
 * prompt into *prompt [*n] (hx_cli_prompt_ids); on failure *m, *r and *prompt are what was made
 * so far, for the caller to free. */
int hx_cli_pair_load(lm_model **m, ref_model **r, int32_t **prompt, uint32_t *n,
                     const hx_cli_pair_opts *o, const char *cmd, lm_err *err);

/* Loads files[n] into cases[n] (check, bless): every case file is read and validated, and no
 * two may share a name (names key the golden files), before anything runs. On failure the
 * cases loaded so far stay in cases[] for the caller to free; *case_error is true when the
 * message is a case file's own ("FILE:LINE: reason", printed as is). */
int hx_cli_load_cases(hx_case **cases /* [n] */, char *const *files /* [n] */, size_t n,
                      bool *case_error, lm_err *err);

/* Output paths checked before any work is done (so a bad -o never costs a whole run, and
 * nothing is written when one of several outputs is bad). One rule for every command: a folder
 * the user did not name is never created. LM_E_INPUT naming path and the reason; nothing is
 * left behind (a probe file is created and removed at once, fs.h lm_dir_probe).
 * hx_cli_check_out_file: what writing path needs (fs.h lm_wfile_check): its folder exists and
 * takes a new file, or path is a writable device or FIFO; never a folder.
 * hx_cli_check_out_dir: path is a folder that takes new files, or does not exist and its
 * parent folder exists and takes new entries (only path itself is made, when written). */
int hx_cli_check_out_file(const char *path, lm_err *err);
int hx_cli_check_out_dir(const char *path, lm_err *err);
/* A file path to be written into folder dir (its folder part), which is made (one folder)
 * when missing: dir as hx_cli_check_out_dir takes it, then path as hx_cli_check_out_file
 * takes it once dir exists (a folder still to be made holds nothing else to check). */
int hx_cli_check_out_in_dir(const char *dir, const char *path, lm_err *err);
/* --golden-dir DIR (bless writes into it, check reads it): not empty, and a folder when it
 * exists (a missing one holds no golden yet). NULL: the default (nothing to check). Errors
 * name the option. */
int hx_cli_golden_dir(const char *dir, lm_err *err);

/* The folder that holds the default report folders of sweep and judge. */
#define HX_CLI_REPORTS_DIR "reports"
/* A report folder: outdir (-o DIR; hx_cli_check_out_dir), or when NULL the default
 * HX_CLI_REPORTS_DIR/LABEL-<UTC timestamp>, whose folder reports/ is made when missing (in the
 * working folder, which must take it). The name into dir[cap]. */
int hx_cli_report_dir(char *dir, size_t cap, const char *outdir, const char *label, lm_err *err);

/* --cache DIR: *out = arg once hx_cli_check_out_dir accepts it (a named cache folder is made
 * on first use, never its parent; a cache that later cannot store an entry only warns).
 * 0, or 2 after the one-line error "kvdrift CMD: --cache ...". */
int hx_cli_cache_option(const char **out, const char *cmd, const char *arg);

/* rc unchanged; when it is an error, err's message becomes "PREFIX <message>" (the option
 * that named the path, e.g. "--golden-dir"). */
int hx_cli_err_prefix(int rc, const char *prefix, lm_err *err);

/* LM_E_INPUT when output file out exists and is the same file as input in (in_what names the
 * input, e.g. "OLD report"): an output never overwrites what the command reads. */
int hx_cli_out_not_input(const char *out, const char *in, const char *in_what, lm_err *err);

/* The exit code of a failed command (st != LM_OK), after printing its error on one line:
 * a case file's error as is, any other as "kvdrift CMD: message". */
int hx_cli_status(const char *cmd, int st, bool case_error, const lm_err *err);

#endif
