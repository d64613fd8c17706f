/* probe_reply.h — an OpenAI-compatible /v1/completions reply (JSON) as the tokens and top-k
 * log-probabilities `kvdrift probe` judges, and the server's self-description from /v1/models,
 * /props and /version.
 *
 * Two shapes of choices[0].logprobs are read:
 *  - OpenAI's legacy completions (llama-cpp-python's server, vLLM): parallel arrays tokens
 *    [T] (text), token_logprobs [T] and top_logprobs [T] (objects text -> log-probability;
 *    null entries allowed: the first echoed token carries none), and text_offset [T] when
 *    given (where each token starts in choices[0].text). Token text "token_id:N"
 *    (vLLM's return_tokens_as_token_ids) gives the id N.
 *  - content [T] of {id, token, logprob, top_logprobs: [{id, token, logprob}]} (llama.cpp's
 *    llama-server).
 * and vLLM's prompt log-probabilities beside either: choices[0].prompt_logprobs [P], entry 0
 * null (the first prompt token is scored by nothing), then per position an object token id
 * (a decimal key) -> {logprob, rank (>= 1 or null), decoded_token}, holding the prompt's own
 * token (choices[0].prompt_token_ids [P] when given, else the entry's first key: vLLM lists it
 * first) and the top alternatives. Its tokens are placed before the tokens of logprobs, or,
 * where logprobs echoes the prompt (usage: more tokens than completion_tokens), in place of
 * the last P of the echoed ones (their ids are exact where the echo gives only text); the null
 * entry 0 is left out when no prompt_token_ids name it (a token with neither id nor score).
 * A reply without usage is taken as not echoing.
 * Rules: the reply is a JSON object with choices[0]; an "error" member is the server's error
 * (its message kept); a reply without logprobs, arrays of different lengths, a log-probability
 * that is not a number or is above 0 (beyond 1e-6) are LM_E_INPUT naming what is wrong; ids
 * must be integers in [0, 2^31). Everything is copied out of the JSON: the reply text may be
 * freed afterwards. */
#ifndef HX_PROBE_REPLY_H
#define HX_PROBE_REPLY_H

#include "kvd_common.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct hx_probe_alt {
    int32_t id;        /* -1 when the server gave only the text */
    char *text;        /* the token's text as the server wrote it ("" when absent) */
    double logprob;
} hx_probe_alt;

typedef struct hx_probe_tok {
    int32_t id;        /* -1 when the server gave only the text */
    char *text;
    bool has_logprob;  /* false: null in the reply (the first echoed token) */
    double logprob;    /* the token's own log-probability */
    int64_t offset;    /* text_offset: where the token starts in the reply's text, in Unicode
                          code points; -1 when absent */
    uint32_t k;        /* alternatives listed (0 when null) */
    hx_probe_alt *top; /* [k] in the reply's order */
} hx_probe_tok;

typedef struct hx_probe_reply {
    char model[128];           /* "model" of the reply ("" when absent) */
    char finish_reason[32];
    char *text;                /* choices[0].text ("" when absent) */
    int64_t prompt_tokens;     /* usage; -1 when absent */
    int64_t completion_tokens;
    uint32_t n;
    hx_probe_tok *toks;        /* [n] every token the reply scores, in order */
    uint32_t n_prompt_scored;  /* of them, the prompt's from prompt_logprobs (0: none) */
} hx_probe_reply;

/* Parses json[len] (not necessarily NUL-terminated). */
int hx_probe_reply_parse(hx_probe_reply **out, const char *json, size_t len, lm_err *err);
void hx_probe_reply_free(hx_probe_reply *r);

/* usage.completion_tokens of any completion reply (a filler's); -1 when absent or not JSON. */
int64_t hx_probe_reply_completion_tokens(const char *json, size_t len);

/* What a server says it is: the model ids of /v1/models (data[].id, comma-separated), and a
 * few fields of /props (model_path, build_info, total_slots) and /version (version); "" where
 * absent or not JSON. Never fails: a reply it cannot read leaves its fields empty. */
typedef struct hx_server_info {
    char models[256];
    char props[384];           /* "model_path=... build_info=... total_slots=4" */
    char version[128];
} hx_server_info;
void hx_server_info_models(hx_server_info *s, const char *json, size_t len);
void hx_server_info_props(hx_server_info *s, const char *json, size_t len);
void hx_server_info_version(hx_server_info *s, const char *json, size_t len);

/* The "error" of an error reply (a 4xx/5xx body) in one line into buf[n]: error.message,
 * error (a string), detail (FastAPI's validation errors: their first msg) or the body's first
 * 120 characters. */
void hx_probe_error_text(char *buf, size_t n, const char *json, size_t len);

#endif
