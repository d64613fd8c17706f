/* kvd_tokenizer.h — SentencePiece-style (llama) and GPT-2 byte-level BPE vocabularies. */
#ifndef KVD_TOKENIZER_H
#define KVD_TOKENIZER_H

#include "kvd_gguf.h"

typedef enum lm_vocab_kind { LM_VOCAB_SPM = 1, LM_VOCAB_BPE = 2 } lm_vocab_kind;

typedef struct lm_vocab lm_vocab;

/* Reads tokenizer.ggml.* from g (model "llama" -> SPM, "gpt2" -> BPE); other models are
 * LM_E_UNSUPPORTED. The vocabulary copies what it needs: g may be closed afterwards. */
int lm_vocab_load(lm_vocab **out, const lm_gguf *g, lm_err *err);
void lm_vocab_free(lm_vocab *v);

lm_vocab_kind lm_vocab_type(const lm_vocab *v);
uint32_t lm_vocab_n_tokens(const lm_vocab *v);
int32_t lm_vocab_bos(const lm_vocab *v); /* -1 when none */
int32_t lm_vocab_eos(const lm_vocab *v); /* -1 when none */
bool lm_vocab_adds_bos(const lm_vocab *v); /* per metadata; SPM defaults to true as llama.cpp */
/* A BPE vocabulary whose tokenizer.ggml.pre names a pre-tokenizer kvdrift does not implement
 * ("gpt-4o", "tekken", ...): one sentence saying so, for a warning where text is tokenized
 * (lm_tokenize splits such text with the GPT-2 pattern). NULL otherwise. */
const char *lm_vocab_pre_note(const lm_vocab *v);

/* Encodes text[len]. With add_special, prepends BOS when the vocabulary adds one.
 * *out_ids is malloc'd ([*out_n]); the caller frees it. */
int lm_tokenize(const lm_vocab *v, const char *text, size_t len, bool add_special,
                int32_t **out_ids, size_t *out_n, lm_err *err);

/* lm_tokenize, and with parse_special the text of CONTROL and UNKNOWN tokens ("<s>",
 * "<|im_start|>") written in text becomes those tokens (USER_DEFINED ones always do): the input
 * is cut at them longest text first, left to right, and the text between is encoded as usual.
 * SPM adds its space prefix to text that follows such a token, as llama.cpp does.
 * lm_tokenize(...) == lm_tokenize_ex(..., parse_special = false, ...). */
int lm_tokenize_ex(const lm_vocab *v, const char *text, size_t len, bool add_special,
                   bool parse_special, int32_t **out_ids, size_t *out_n, lm_err *err);

/* The bytes token id stands for in decoded text (SPM: U+2581 -> ' ', <0xNN> -> byte NN;
 * BPE: GPT-2 byte-to-unicode mapping undone). Control tokens (BOS/EOS) decode to "".
 * Writes at most cap bytes to buf (no NUL added); returns the full length, or -1 for a bad id. */
int lm_token_to_piece(const lm_vocab *v, int32_t id, char *buf, size_t cap);

/* Decodes ids[n] into a malloc'd NUL-terminated string. The space SPM's prefix puts before the
 * first token that produces text is dropped (as llama.cpp does), so decode(encode(s)) == s. */
int lm_detokenize(const lm_vocab *v, const int32_t *ids, size_t n, char **out, lm_err *err);

#endif
