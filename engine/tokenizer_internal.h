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
    /* BPE pre-tokenizer: every \p{N} code point is a word of its own before the GPT-2 split
     * (llama.cpp's "smollm"/"starcoder" family, tokenizer.ggml.pre; see tokenizer_bpe.c). */
    bool pre_digits;
    /* BPE pre-tokenizer split (tokenizer.ggml.pre): 0 GPT-2 pattern; 1 Llama 3 ("llama-bpe",
     * digits in runs of up to 3); 2 Qwen 2 (single digits). */
    uint8_t pre_split;
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

/* GPT-2 byte-to-unicode mapping: the code point byte b is written as in BPE token texts. */
uint32_t lm_bpe_byte_to_cp(uint8_t b);
/* Inverse: the byte for code point cp, or -1 when cp is not in the mapping's image. */
int lm_bpe_cp_to_byte(uint32_t cp);

#endif
