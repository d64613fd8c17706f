/* tokenizer_internal.h — the vocabulary record shared by tokenizer.c (loading, decoding) and
 * the two encoders, tokenizer_spm.c and tokenizer_bpe.c (engine-internal). */
#ifndef KVD_TOKENIZER_INTERNAL_H
#define KVD_TOKENIZER_INTERNAL_H

#include "kvd_tokenizer.h"

/* Token types, numbered as GGUF's tokenizer.ggml.token_type (llama.cpp's llama_token_type). */
enum {
    TOK_UNDEFINED = 0, TOK_NORMAL = 1, TOK_UNKNOWN = 2, TOK_CONTROL = 3,
    TOK_USER_DEFINED = 4, TOK_UNUSED = 5, TOK_BYTE = 6
};

#define TOK_NONE UINT32_MAX /* empty hash slot / absent id */

/* The BPE pre-tokenizers kvdrift implements, named by llama.cpp's LLAMA_VOCAB_PRE_TYPE_*; each
 * covers every tokenizer.ggml.pre value llama.cpp splits with the same regexes (the table in
 * tokenizer.c). */
typedef enum lm_pre {
    LM_PRE_DEFAULT,        /* no tokenizer.ggml.pre: llama.cpp's "default" */
    LM_PRE_GPT2,           /* gpt-2, mpt, olmo, ... */
    LM_PRE_STARCODER,      /* every \p{N} alone, then GPT-2: starcoder, refact, command-r, smollm */
    LM_PRE_LLAMA3,         /* llama-bpe, digits in runs of up to 3 */
    LM_PRE_QWEN2,          /* qwen2, single digits */
    LM_PRE_QWEN35,         /* qwen35: Qwen 2 with marks as letters */
    LM_PRE_DEEPSEEK_LLM,   /* deepseek-llm */
    LM_PRE_DEEPSEEK_CODER, /* deepseek-coder */
    LM_PRE_DEEPSEEK3,      /* deepseek-v3 */
    LM_PRE_FALCON,         /* falcon */
    LM_PRE_GPT4O,          /* gpt-4o (gpt-oss), llama4 */
    LM_PRE_TEKKEN,         /* tekken (Mistral NeMo and later) */
    LM_PRE_GEMMA4,         /* gemma4 model: runs of newlines and runs of other code points */
    LM_PRE_MINICPM5,       /* minicpm5: \p{N}{1,3}, then Llama 3's pattern with \p{N}+ */
    LM_PRE_UFAKZEKA,       /* ufakzeka: Qwen 2 without contractions */
    LM_PRE_SEED_CODER,     /* seed-coder: Qwen 2 without [\r\n]* after other code points */
    LM_PRE_LAGUNA,         /* laguna: runs of newlines and of the rest, then Qwen 2 */
    LM_PRE_COUNT
} lm_pre;

struct lm_vocab {
    lm_vocab_kind kind;
    uint32_t n_tokens;

    char *text;          /* [text_off[n_tokens]] token texts, back to back (no NULs added) */
    uint32_t *text_off;  /* [n_tokens + 1] token i is text[text_off[i] .. text_off[i+1]) */
    float *scores;       /* [n_tokens] SPM merge scores (0 when the file has none) */
    uint8_t *types;      /* [n_tokens] TOK_* */

    char *piece;         /* [piece_off[n_tokens]] decoded bytes of every token */
    uint32_t *piece_off; /* [n_tokens + 1] */

    uint32_t *tok_hash;  /* [tok_mask + 1] text -> id, open addressing; TOK_NONE = empty */
    uint32_t tok_mask;

    /* BPE merges: merge r joins merge_text[m_off[r] .. +m_llen[r]) with the m_rlen[r] bytes
     * after it (the separating space is not stored). */
    uint32_t n_merges;
    char *merge_text;    /* [merge bytes] */
    uint32_t *m_off;     /* [n_merges] */
    uint32_t *m_llen;    /* [n_merges] */
    uint32_t *m_rlen;    /* [n_merges] */
    uint32_t *merge_hash; /* [merge_mask + 1] (left, right) -> rank; TOK_NONE = empty */
    uint32_t merge_mask;

    /* USER_DEFINED, CONTROL and UNKNOWN tokens with non-empty text, longest text first (ties:
     * lower id), as llama.cpp's special-token cache: the input is cut at USER_DEFINED ones
     * always, at CONTROL and UNKNOWN ones only when special tokens are parsed. */
    uint32_t n_special;
    uint32_t *special_ids; /* [n_special] */

    int32_t byte_tok[256]; /* SPM: id of "<0xNN>"; BPE: id of the byte's GPT-2 character; -1 */
    int32_t bos, eos, unk; /* -1 when none */
    bool add_bos, add_eos, add_space_prefix;
    /* BPE pre-tokenizer (tokenizer.ggml.pre; see pretokenize.c). */
    lm_pre pre;
    /* BPE over the text's own UTF-8 with every space written U+2581, bytes outside the tokens
     * emitted as "<0xNN>" tokens, and decoding as SPM decodes (llama.cpp's gemma4 tokenizer
     * model); else GPT-2 byte-level BPE. */
    bool bpe_raw;
    /* A word that is a token as a whole is emitted as that token without merging (llama.cpp's
     * ignore_merges, set for the Llama 3 pre-tokenizer). */
    bool ignore_merges;
    /* The note lm_vocab_pre_note returns ("" when the pre-tokenizer is implemented or absent). */
    char pre_note[200];
};

/* Id of the token whose text is s[0..n), or -1. */
int32_t lm_vocab_find(const lm_vocab *v, const char *s, size_t n);
/* Rank of the merge (l[0..ln), r[0..rn)), or -1. */
int32_t lm_vocab_merge_rank(const lm_vocab *v, const char *l, size_t ln, const char *r, size_t rn);

/* Makes *p (an array of *cap elements of elem bytes) hold at least need elements: the capacity
 * doubles from 64 until it does; on failure *p and *cap are unchanged. */
int lm_tok_grow(void **p, size_t *cap, size_t need, size_t elem, lm_err *err);

/* A growable id list the encoders append to. */
typedef struct tok_out {
    int32_t *ids; /* [cap] */
    size_t n, cap;
} tok_out;
int tok_out_push(tok_out *o, int32_t id, lm_err *err);

/* Encoders: append the ids of text[0..len) (no BOS/EOS) to out. SPM prepends the escaped space
 * when space_prefix is set. */
int lm_spm_encode(const lm_vocab *v, const char *text, size_t len, bool space_prefix,
                  tok_out *out, lm_err *err);
int lm_bpe_encode(const lm_vocab *v, const char *text, size_t len, tok_out *out, lm_err *err);

/* Cuts cp[0..n) into words as pre-tokenizer pre does: *out_lens (malloc'd, *out_n entries, NULL
 * when n = 0) holds each word's length in code points, in order; they sum to n. */
int lm_pretokenize(lm_pre pre, const uint32_t *cp, size_t n, size_t **out_lens, size_t *out_n,
                   lm_err *err);

/* GPT-2 byte-to-unicode mapping: the code point byte b is written as in BPE token texts. */
uint32_t lm_bpe_byte_to_cp(uint8_t b);
/* Inverse: the byte for code point cp, or -1 when cp is not in the mapping's image. */
int lm_bpe_cp_to_byte(uint32_t cp);

#endif
