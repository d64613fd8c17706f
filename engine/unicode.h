/* unicode.h — UTF-8 decoding/encoding with llama.cpp's invalid-byte rules, and the Unicode
 * category predicates the BPE pre-tokenizers need (engine-internal). */
#ifndef KVD_UNICODE_H
#define KVD_UNICODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LM_UNI_REPLACEMENT 0xFFFDu

/* Bytes a UTF-8 sequence claims from its first byte alone (high nibble: 0x0-0xB -> 1,
 * 0xC-0xD -> 2, 0xE -> 3, 0xF -> 4). Continuation bytes count as 1. This is how SentencePiece
 * and BPE symbol splitting walk text: it never fails, so invalid input still advances. */
size_t lm_utf8_seq_len(unsigned char lead);

/* Decodes the code point at s[0..n) (n >= 1). A valid sequence (lead byte with the right number
 * of continuation bytes, all present) returns its code point and sets *adv to its length;
 * anything else returns U+FFFD and sets *adv = 1, so each bad byte becomes one replacement
 * character. As llama.cpp, overlong forms and surrogates are not rejected; unlike it, code
 * points above U+10FFFF (F4 90.., F5..F7 leads) are invalid here (llama.cpp aborts on them). */
uint32_t lm_utf8_decode(const char *s, size_t n, size_t *adv);

/* Writes cp as UTF-8 into out (1..4 bytes) and returns the length; cp > 0x10FFFF -> 0. */
size_t lm_utf8_encode(uint32_t cp, char out[4]);

/* General category L* / N* / M* / P* / S*, and the White_Space property (tables:
 * unicode_tables.c, Unicode 15.1 as llama.cpp's). */
bool lm_uni_is_letter(uint32_t cp);
bool lm_uni_is_number(uint32_t cp);
bool lm_uni_is_mark(uint32_t cp);
bool lm_uni_is_punct(uint32_t cp);
bool lm_uni_is_symbol(uint32_t cp);
bool lm_uni_is_space(uint32_t cp);

/* Whether cp lies in one of r[n], sorted, disjoint, inclusive [first, last] ranges (binary
 * search). */
bool lm_uni_in_ranges(uint32_t cp, const uint32_t (*r)[2], size_t n);

/* Generated tables (engine/unicode_tables.c). */
extern const uint32_t lm_uni_letter_ranges[][2];
extern const size_t lm_uni_letter_n;
extern const uint32_t lm_uni_number_ranges[][2];
extern const size_t lm_uni_number_n;
extern const uint32_t lm_uni_mark_ranges[][2];
extern const size_t lm_uni_mark_n;
extern const uint32_t lm_uni_punct_ranges[][2];
extern const size_t lm_uni_punct_n;
extern const uint32_t lm_uni_symbol_ranges[][2];
extern const size_t lm_uni_symbol_n;
extern const uint32_t lm_uni_space_ranges[][2];
extern const size_t lm_uni_space_n;
extern const char lm_uni_version[];

#endif
