/* unicode.c — UTF-8 decoding/encoding and category look-ups over the generated range tables. */
#include "unicode.h"

size_t lm_utf8_seq_len(unsigned char lead)
{
    static const unsigned char by_nibble[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return by_nibble[lead >> 4];
}

static bool is_cont(unsigned char c) { return (c & 0xC0u) == 0x80u; }

uint32_t lm_utf8_decode(const char *s, size_t n, size_t *adv)
{
    const unsigned char *u = (const unsigned char *)s;
    unsigned char c = u[0];
    *adv = 1;
    if (c < 0x80u)
        return c;
    if (c < 0xC0u) /* a stray continuation byte */
        return LM_UNI_REPLACEMENT;
    if (c < 0xE0u) {
        if (n < 2 || !is_cont(u[1]))
            return LM_UNI_REPLACEMENT;
        *adv = 2;
        return ((uint32_t)(c & 0x1Fu) << 6) | (u[1] & 0x3Fu);
    }
    if (c < 0xF0u) {
        if (n < 3 || !is_cont(u[1]) || !is_cont(u[2]))
            return LM_UNI_REPLACEMENT;
        *adv = 3;
        return ((uint32_t)(c & 0x0Fu) << 12) | ((uint32_t)(u[1] & 0x3Fu) << 6) | (u[2] & 0x3Fu);
    }
    if (c < 0xF8u) {
        if (n < 4 || !is_cont(u[1]) || !is_cont(u[2]) || !is_cont(u[3]))
            return LM_UNI_REPLACEMENT;
        uint32_t cp = ((uint32_t)(c & 0x07u) << 18) | ((uint32_t)(u[1] & 0x3Fu) << 12) |
                      ((uint32_t)(u[2] & 0x3Fu) << 6) | (u[3] & 0x3Fu);
        if (cp > 0x10FFFFu)
            return LM_UNI_REPLACEMENT;
        *adv = 4;
        return cp;
    }
    return LM_UNI_REPLACEMENT; /* F8..FF never start a sequence */
}

size_t lm_utf8_encode(uint32_t cp, char out[4])
{
    if (cp < 0x80u) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800u) {
        out[0] = (char)(0xC0u | (cp >> 6));
        out[1] = (char)(0x80u | (cp & 0x3Fu));
        return 2;
    }
    if (cp < 0x10000u) {
        out[0] = (char)(0xE0u | (cp >> 12));
        out[1] = (char)(0x80u | ((cp >> 6) & 0x3Fu));
        out[2] = (char)(0x80u | (cp & 0x3Fu));
        return 3;
    }
    if (cp <= 0x10FFFFu) {
        out[0] = (char)(0xF0u | (cp >> 18));
        out[1] = (char)(0x80u | ((cp >> 12) & 0x3Fu));
        out[2] = (char)(0x80u | ((cp >> 6) & 0x3Fu));
        out[3] = (char)(0x80u | (cp & 0x3Fu));
        return 4;
    }
    return 0;
}

bool lm_uni_in_ranges(uint32_t cp, const uint32_t (*r)[2], size_t n)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cp < r[mid][0])
            hi = mid;
        else if (cp > r[mid][1])
            lo = mid + 1;
        else
            return true;
    }
    return false;
}

/* ASCII answers inline: the pre-tokenizer asks once or twice per code point, and most text is
 * ASCII; the tables agree with these (checked in test_tokenizer). */
bool lm_uni_is_letter(uint32_t cp)
{
    if (cp < 0x80u)
        return (cp | 0x20u) >= 'a' && (cp | 0x20u) <= 'z';
    return lm_uni_in_ranges(cp, lm_uni_letter_ranges, lm_uni_letter_n);
}

bool lm_uni_is_number(uint32_t cp)
{
    if (cp < 0x80u)
        return cp >= '0' && cp <= '9';
    return lm_uni_in_ranges(cp, lm_uni_number_ranges, lm_uni_number_n);
}

bool lm_uni_is_space(uint32_t cp)
{
    if (cp < 0x80u)
        return cp == ' ' || (cp >= 0x09u && cp <= 0x0Du);
    return lm_uni_in_ranges(cp, lm_uni_space_ranges, lm_uni_space_n);
}

/* No ASCII code point is a mark; the ASCII punctuation and symbols are in the tables. */
bool lm_uni_is_mark(uint32_t cp)
{
    return cp >= 0x80u && lm_uni_in_ranges(cp, lm_uni_mark_ranges, lm_uni_mark_n);
}

bool lm_uni_is_punct(uint32_t cp)
{
    return lm_uni_in_ranges(cp, lm_uni_punct_ranges, lm_uni_punct_n);
}

bool lm_uni_is_symbol(uint32_t cp)
{
    return lm_uni_in_ranges(cp, lm_uni_symbol_ranges, lm_uni_symbol_n);
}
