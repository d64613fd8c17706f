/* unicode.h — UTF-8 decoding/encoding with llama.cpp's invalid-byte rules, and the Unicode
 * category predicates the GPT-2 pre-tokenizer needs (engine-internal). */
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

/* General category L* / N*, and the White_Space property (tables: unicode_tables.c). */
bool lm_uni_is_letter(uint32_t cp);
bool lm_uni_is_number(uint32_t cp);
bool lm_uni_is_space(uint32_t cp);

/* Generated tables (engine/unicode_tables.c). */
extern const uint32_t lm_uni_letter_ranges[][2];
extern const size_t lm_uni_letter_n;
extern const uint32_t lm_uni_number_ranges[][2];
extern const size_t lm_uni_number_n;
extern const uint32_t lm_uni_space_ranges[][2];
extern const size_t lm_uni_space_n;
extern const char lm_uni_version[];

#endif
