/* pretokenize.c — the BPE pre-tokenizers: a text's code points cut into the words BPE merges
 * within, as llama.cpp's unicode_regex_split cuts them for each tokenizer.ggml.pre (its
 * llm_tokenizer_bpe regex lists; the fixture ids come from it).
 *
 * A pre-tokenizer is a list of stages applied in turn, each to every piece the previous one
 * left (the first sees the whole text), as llama.cpp applies its regexes. A stage is a regex
 * searched left to right within the piece: each match is a piece, and so is the text between
 * two matches (regex_iterator's gaps). llama.cpp runs some regexes through hand-written
 * splitters (GPT-2, Llama 3, Qwen 2, Qwen 3.5) and the others through std::regex; for the
 * latter with Unicode categories it first maps every code point >= 0x80 to one byte per
 * category (whitespace 0x0B, \p{N} 0xD1, \p{L} 0xD2, \p{P} 0xD3, \p{M} 0xD4, \p{S} 0xD5) and
 * \p{X} to that byte plus the category's ASCII members, so there \p{X} is exactly the general
 * category X and \s the White_Space property; regexes with literal non-ASCII ranges run over
 * code points with non-ASCII whitespace replaced by U+000B. The matchers below implement each
 * regex's ECMAScript semantics (first alternative that matches, greedy quantifiers that give
 * back) over those views; tests/data/pretok holds llama.cpp's own splits they are checked
 * against. */
#include "tokenizer_internal.h"
#include "unicode.h"

#include <stdint.h>
#include <stdlib.h>

/* ---------------------------------------------------------------- classes */

enum { C_END, C_LETTER, C_NUMBER, C_SPACE, C_OTHER };

/* Class of cp[i] within the piece cp[0..n); marks count as letters when marks_are_letters
 * (Qwen 3.5's [\p{L}\p{M}]). */
static int cls_at_m(const uint32_t *cp, size_t n, size_t i, bool marks_are_letters)
{
    if (i >= n)
        return C_END;
    uint32_t c = cp[i];
    if (lm_uni_is_letter(c) || (marks_are_letters && lm_uni_is_mark(c)))
        return C_LETTER;
    if (lm_uni_is_number(c))
        return C_NUMBER;
    if (lm_uni_is_space(c))
        return C_SPACE;
    return C_OTHER;
}

static int cls_at(const uint32_t *cp, size_t n, size_t i)
{
    return cls_at_m(cp, n, i, false);
}

static bool is_crlf(uint32_t c)
{
    return c == '\r' || c == '\n';
}

static uint32_t ascii_lower(uint32_t c)
{
    return c >= 'A' && c <= 'Z' ? c + 32 : c;
}

/* The view of the regexes llama.cpp runs through std::wregex: non-ASCII whitespace is U+000B. */
static uint32_t wide_view(uint32_t c)
{
    return c >= 0x80u && lm_uni_is_space(c) ? 0x0Bu : c;
}

/* End of the longest run from pos whose code points satisfy in(c). */
static size_t run_end(const uint32_t *cp, size_t n, size_t pos, bool (*in)(uint32_t))
{
    while (pos < n && in(cp[pos]))
        pos++;
    return pos;
}

/* The options of the word splitters (the Llama 3 family and the o200k ones). */
typedef struct word_opts {
    size_t max_digits;      /* \p{N}{1,max_digits} */
    bool marks_are_letters; /* [\p{L}\p{M}] for \p{L} (Qwen 3.5) */
    bool contractions;      /* the (?i:'s|'t|'re|'ve|'m|'ll|'d) alternative (o200k: suffix) */
    bool crlf_tail;         /* [\r\n]* after the run of other code points */
} word_opts;

/* A stage: its regex's matcher, which returns the end of the match that starts at pos within
 * cp[0..n) (> pos), or pos; with the code point class of the single-class regexes or the
 * options of the word splitters. */
typedef struct stage stage;
struct stage {
    size_t (*match)(const uint32_t *cp, size_t n, size_t pos, const stage *st);
    bool (*x)(uint32_t);
    const word_opts *w;
};

/* ---------------------------------------------------------------- shared pieces of patterns */

/* (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]) at pos: its end, or pos. With
 * case_sensitive, only the lower-case forms (GPT-2's 's|'t|...). */
static size_t contraction_end(const uint32_t *cp, size_t n, size_t pos, bool case_sensitive)
{
    if (pos + 1 >= n || cp[pos] != '\'')
        return pos;
    uint32_t c1 = case_sensitive ? cp[pos + 1] : ascii_lower(cp[pos + 1]);
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd')
        return pos + 2;
    if (pos + 2 < n) {
        uint32_t c2 = case_sensitive ? cp[pos + 2] : ascii_lower(cp[pos + 2]);
        if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l'))
            return pos + 3;
    }
    return pos;
}

/* \s*[\r\n]+ | \s+(?!\S) | \s+ at pos: its end, or pos when cp[pos] is not whitespace. */
static size_t space_tail_end(const uint32_t *cp, size_t n, size_t pos)
{
    size_t w = 0, last_crlf = 0;
    while (pos + w < n && lm_uni_is_space(cp[pos + w])) {
        if (is_crlf(cp[pos + w]))
            last_crlf = pos + w + 1;
        w++;
    }
    if (last_crlf > 0)
        return last_crlf;
    if (w > 1 && pos + w < n)
        return pos + w - 1;
    return pos + w;
}

/* " ?[^\s\p{L}\p{N}]+" then, with crlf_tail, [\r\n]* (or [\r\n/]* with slash) at pos: its end,
 * or pos; with marks_are_letters the class is [^\s\p{L}\p{M}\p{N}] (Qwen 3.5). */
static size_t other_run_end(const uint32_t *cp, size_t n, size_t pos, bool marks_are_letters,
                            bool crlf_tail, bool slash)
{
    size_t q = cp[pos] == ' ' ? pos + 1 : pos;
    if (cls_at_m(cp, n, q, marks_are_letters) != C_OTHER)
        return pos;
    while (cls_at_m(cp, n, q, marks_are_letters) == C_OTHER)
        q++;
    while (crlf_tail && q < n && (is_crlf(cp[q]) || (slash && cp[q] == '/')))
        q++;
    return q;
}

/* ---------------------------------------------------------------- hand-written splitters */

/* GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)
 * (contractions case-sensitive), then \s+ as llama.cpp's splitter, which this follows, ends. */
static size_t gpt2_match(const uint32_t *cp, size_t n, size_t pos, const stage *st)
{
    (void)st;
    size_t e = contraction_end(cp, n, pos, true);
    if (e > pos)
        return e;
    /* " ?X+": an optional single space, then a run of one class */
    size_t q = cp[pos] == ' ' ? pos + 1 : pos;
    int k = cls_at(cp, n, q);
    if (k == C_LETTER || k == C_NUMBER || k == C_OTHER) {
        while (cls_at(cp, n, q) == k)
            q++;
        return q;
    }
    /* whitespace: \s+(?!\S) leaves the last space to the next word when a non-space follows;
     * otherwise (text ends) \s+ takes the whole run */
    size_t w = 0;
    while (cls_at(cp, n, pos + w) == C_SPACE)
        w++;
    if (w > 1 && pos + w < n)
        return pos + w - 1;
    if (w > 0)
        return pos + w;
    return pos + 1; /* unreachable: every code point has a class */
}

/* Llama 3 / Qwen 2 / Qwen 3.5 (llama.cpp's hand-written splitters, alternatives in order) and
 * the std::regex variants of their pattern:
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d) | [^\r\n\p{L}\p{N}]?\p{L}+ | \p{N}{1,max_digits}
 *   | ?[^\s\p{L}\p{N}]+[\r\n]* | \s*[\r\n]+ | \s+(?!\S) | \s+
 * Qwen 3.5 reads \p{L} as [\p{L}\p{M}]; some variants have no contractions or no [\r\n]*
 * (st->w). */
static size_t llama3_family_match(const uint32_t *cp, size_t n, size_t pos, const stage *st)
{
    const word_opts *o = st->w;
    const uint32_t c = cp[pos];
    const int k = cls_at_m(cp, n, pos, o->marks_are_letters);
    size_t e = o->contractions ? contraction_end(cp, n, pos, false) : pos;
    if (e > pos)
        return e;
    if (!is_crlf(c) && k != C_NUMBER &&
        (k == C_LETTER || cls_at_m(cp, n, pos + 1, o->marks_are_letters) == C_LETTER)) {
        size_t q = pos + 1;
        while (cls_at_m(cp, n, q, o->marks_are_letters) == C_LETTER)
            q++;
        return q;
    }
    if (k == C_NUMBER) {
        size_t q = pos;
        while (q < n && q - pos < o->max_digits && cls_at(cp, n, q) == C_NUMBER)
            q++;
        return q;
    }
    e = other_run_end(cp, n, pos, o->marks_are_letters, o->crlf_tail, false);
    if (e > pos)
        return e;
    e = space_tail_end(cp, n, pos);
    return e > pos ? e : pos + 1;
}

/* ---------------------------------------------------------------- o200k-style (std::regex) */

/* The gpt-4o and tekken regexes spell \p{Lu}-ish as (?=[\p{L}])([^a-z]) and \p{Ll}-ish as
 * (?=[\p{L}])([^A-Z]): over llama.cpp's collapsed text every non-ASCII letter is both. */
static bool upperish(uint32_t c)
{
    return lm_uni_is_letter(c) && !(c >= 'a' && c <= 'z');
}

static bool lowerish(uint32_t c)
{
    return lm_uni_is_letter(c) && !(c >= 'A' && c <= 'Z');
}

/* [^\r\n\p{L}\p{N}] */
static bool word_prefix(uint32_t c)
{
    return !is_crlf(c) && !lm_uni_is_letter(c) && !lm_uni_is_number(c);
}

/* gpt-4o (contractions) and tekken (none, digits alone):
 *   [^\r\n\p{L}\p{N}]?U*W+C? | [^\r\n\p{L}\p{N}]?U+W*C? | \p{N}{1,max_digits}
 *   | ?[^\s\p{L}\p{N}]+[\r\n/]* | \s*[\r\n]+ | \s+(?!\S) | \s+
 * with U = upperish, W = lowerish, C the case-insensitive contractions. U* gives back one code
 * point at a time until W+ can start, so the first alternative ends after the last lowerish
 * code point it can reach. */
static size_t o200k_match(const uint32_t *cp, size_t n, size_t pos, const stage *st)
{
    const bool contractions = st->w->contractions;
    const size_t max_digits = st->w->max_digits;
    /* [^\r\n\p{L}\p{N}]? is taken when it can be: without it, the body starts at a code
     * point that is no letter and fails */
    size_t q = word_prefix(cp[pos]) ? pos + 1 : pos;
    size_t u = run_end(cp, n, q, upperish) - q;
    for (size_t k = u + 1; k-- > 0;) { /* U* of k code points, then W+ */
        if (q + k < n && lowerish(cp[q + k])) {
            size_t e = run_end(cp, n, q + k, lowerish);
            return contractions ? contraction_end(cp, n, e, false) : e;
        }
    }
    if (u > 0) { /* U+ then W* */
        size_t e = run_end(cp, n, q + u, lowerish);
        return contractions ? contraction_end(cp, n, e, false) : e;
    }
    if (lm_uni_is_number(cp[pos])) {
        size_t e = pos;
        while (e < n && e - pos < max_digits && lm_uni_is_number(cp[e]))
            e++;
        return e;
    }
    size_t e = other_run_end(cp, n, pos, false, true, true);
    if (e > pos)
        return e;
    return space_tail_end(cp, n, pos);
}

/* ---------------------------------------------------------------- DeepSeek V3 (std::regex) */

static bool is_letter_or_mark(uint32_t c)
{
    return lm_uni_is_letter(c) || lm_uni_is_mark(c);
}

static bool is_punct_or_symbol(uint32_t c)
{
    return lm_uni_is_punct(c) || lm_uni_is_symbol(c);
}

static bool is_ascii_letter(uint32_t c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
}

/* [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+ | [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+
 * | ?[\p{P}\p{S}]+[\r\n]* | \s*[\r\n]+ | \s+(?!\S) | \s+ */
static size_t deepseek3_match(const uint32_t *cp, size_t n, size_t pos, const stage *st)
{
    (void)st;
    const uint32_t c = cp[pos];
    bool ascii_punct = c >= 0x21 && c <= 0x7E && !is_ascii_letter(c) && !(c >= '0' && c <= '9');
    if (ascii_punct && pos + 1 < n && is_ascii_letter(cp[pos + 1]))
        return run_end(cp, n, pos + 1, is_ascii_letter);
    bool prefix = !is_crlf(c) && !lm_uni_is_letter(c) && !is_punct_or_symbol(c);
    if (prefix && pos + 1 < n && is_letter_or_mark(cp[pos + 1]))
        return run_end(cp, n, pos + 1, is_letter_or_mark);
    if (is_letter_or_mark(c))
        return run_end(cp, n, pos, is_letter_or_mark);
    size_t q = c == ' ' && pos + 1 < n && is_punct_or_symbol(cp[pos + 1]) ? pos + 1 : pos;
    if (is_punct_or_symbol(cp[q])) {
        size_t e = run_end(cp, n, q, is_punct_or_symbol);
        while (e < n && is_crlf(cp[e]))
            e++;
        return e;
    }
    return space_tail_end(cp, n, pos);
}

/* ---------------------------------------------------------------- single-class regexes */

static bool is_ascii_digit(uint32_t c) { return c >= '0' && c <= '9'; }

/* [\p{P}\$\+<=>\^~\|]+ (llama.cpp's default) and the same with ` (falcon) */
static bool default_punct(uint32_t c)
{
    return lm_uni_is_punct(c) || c == '$' || c == '+' || c == '<' || c == '=' || c == '>' ||
           c == '^' || c == '~' || c == '|';
}

static bool falcon_punct(uint32_t c)
{
    return default_punct(c) || c == '`';
}

/* DeepSeek LLM's letters: the literal ranges of its regex \s?[A-Za-zµÀ-ÖØ-öø-ƺ...𞤀-𞥃]+ */
static const uint32_t deepseek_letters[][2] = {
    {0x00041, 0x0005A}, {0x00061, 0x0007A}, {0x000B5, 0x000B5}, {0x000C0, 0x000D6},
    {0x000D8, 0x000F6}, {0x000F8, 0x001BA}, {0x001BC, 0x001BF}, {0x001C4, 0x00293},
    {0x00295, 0x002AF}, {0x00370, 0x00373}, {0x00376, 0x00377}, {0x0037B, 0x0037D},
    {0x0037F, 0x0037F}, {0x00386, 0x00386}, {0x00388, 0x0038A}, {0x0038C, 0x0038C},
    {0x0038E, 0x003A1}, {0x003A3, 0x003F5}, {0x003F7, 0x00481}, {0x0048A, 0x0052F},
    {0x00531, 0x00556}, {0x010A0, 0x010C5}, {0x013A0, 0x013F5}, {0x013F8, 0x013FD},
    {0x01C90, 0x01CBA}, {0x01CBD, 0x01CBF}, {0x01D00, 0x01D2B}, {0x01D6B, 0x01D77},
    {0x01D79, 0x01D9A}, {0x01E00, 0x01F15}, {0x01F18, 0x01F1D}, {0x01F20, 0x01F45},
    {0x01F48, 0x01F4D}, {0x01F50, 0x01F57}, {0x01F59, 0x01F59}, {0x01F5B, 0x01F5B},
    {0x01F5D, 0x01F5D}, {0x01F5F, 0x01F7D}, {0x01F80, 0x01FB4}, {0x01FB6, 0x01FBC},
    {0x01FBE, 0x01FBE}, {0x01FC2, 0x01FC4}, {0x01FC6, 0x01FCC}, {0x01FD0, 0x01FD3},
    {0x01FD6, 0x01FDB}, {0x01FE0, 0x01FEC}, {0x01FF2, 0x01FF4}, {0x01FF6, 0x01FFC},
    {0x02102, 0x02102}, {0x02107, 0x02107}, {0x0210A, 0x02113}, {0x02115, 0x02115},
    {0x02119, 0x0211D}, {0x02124, 0x02124}, {0x02126, 0x02126}, {0x02128, 0x02128},
    {0x0212A, 0x0212D}, {0x0212F, 0x02134}, {0x02139, 0x02139}, {0x0213C, 0x0213F},
    {0x02145, 0x02149}, {0x0214E, 0x0214E}, {0x02183, 0x02184}, {0x02C00, 0x02C7B},
    {0x02C7E, 0x02CE4}, {0x02CEB, 0x02CEE}, {0x02CF2, 0x02CF3}, {0x0A640, 0x0A66D},
    {0x0A680, 0x0A69B}, {0x0A722, 0x0A76F}, {0x0A771, 0x0A787}, {0x0A78B, 0x0A78E},
    {0x0AB70, 0x0ABBF}, {0x0FB00, 0x0FB06}, {0x0FB13, 0x0FB17}, {0x0FF21, 0x0FF3A},
    {0x0FF41, 0x0FF5A}, {0x10400, 0x1044F}, {0x104B0, 0x104D3}, {0x104D8, 0x104FB},
    {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2}, {0x118A0, 0x118DF}, {0x1E900, 0x1E943},
};

/* DeepSeek LLM's punctuation: [!-/:-~！-／：-～‘-‟　-。] */
static const uint32_t deepseek_punct[][2] = {
    {0x00021, 0x0002F}, {0x0003A, 0x0007E}, {0x02018, 0x0201F},
    {0x03000, 0x03002}, {0x0FF01, 0x0FF0F}, {0x0FF1A, 0x0FF5E},
};

/* DeepSeek LLM and Coder: [一-龥ࠀ-一가-퟿] */
static const uint32_t deepseek_cjk[][2] = {
    {0x00800, 0x09FA5}, {0x0AC00, 0x0D7FF},
};

/* DeepSeek V3: [一-龥぀-ゟ゠-ヿ] */
static const uint32_t deepseek3_cjk[][2] = {
    {0x03040, 0x030FF}, {0x04E00, 0x09FA5},
};

#define N_RANGES(r) (sizeof(r) / sizeof((r)[0]))

static bool ds_letter(uint32_t c)
{
    return lm_uni_in_ranges(wide_view(c), deepseek_letters, N_RANGES(deepseek_letters));
}

static bool ds_punct(uint32_t c)
{
    return lm_uni_in_ranges(wide_view(c), deepseek_punct, N_RANGES(deepseek_punct));
}

static bool ds_cjk(uint32_t c)
{
    return lm_uni_in_ranges(wide_view(c), deepseek_cjk, N_RANGES(deepseek_cjk));
}

static bool ds3_cjk(uint32_t c)
{
    return lm_uni_in_ranges(wide_view(c), deepseek3_cjk, N_RANGES(deepseek3_cjk));
}

/* The regexes over one class X of code points (the stage's class, see stage): */

/* X+ */
static size_t run_match(const uint32_t *cp, size_t n, size_t pos, const stage *st)
{
    return run_end(cp, n, pos, st->x);
}

/* X */
static size_t one_match(const uint32_t *cp, size_t n, size_t pos, const stage *st)
{
    (void)n;
    return st->x(cp[pos]) ? pos + 1 : pos;
}

/* X{1,3} */
static size_t upto3_match(const uint32_t *cp, size_t n, size_t pos, const stage *st)
{
    size_t e = pos;
    while (e < n && e - pos < 3 && st->x(cp[e]))
        e++;
    return e;
}

/* XXX */
static size_t three_match(const uint32_t *cp, size_t n, size_t pos, const stage *st)
{
    bool (*x)(uint32_t) = st->x;
    return pos + 3 <= n && x(cp[pos]) && x(cp[pos + 1]) && x(cp[pos + 2]) ? pos + 3 : pos;
}

/* \s?X+ */
static size_t space_opt_run_match(const uint32_t *cp, size_t n, size_t pos, const stage *st)
{
    size_t q = lm_uni_is_space(cp[pos]) && pos + 1 < n && st->x(cp[pos + 1]) ? pos + 1 : pos;
    size_t e = run_end(cp, n, q, st->x);
    return e > q ? e : pos;
}

/* [^\n]+|[\n]+ (llama.cpp's hand-written newline splitter) */
static bool is_lf(uint32_t c)
{
    return c == '\n';
}

static bool is_not_lf(uint32_t c)
{
    return c != '\n';
}

static size_t newline_runs_match(const uint32_t *cp, size_t n, size_t pos, const stage *st)
{
    (void)st;
    return run_end(cp, n, pos, is_lf(cp[pos]) ? is_lf : is_not_lf);
}

/* X+$ (X = whitespace: \s+$): searched directly by find_match, not position by position */
static size_t trailing_run_match(const uint32_t *cp, size_t n, size_t pos, const stage *st)
{
    size_t e = run_end(cp, n, pos, st->x);
    return e == n ? n : pos;
}

/* ---------------------------------------------------------------- pre-tokenizers */

static const word_opts llama3_w = {3, false, true, true}, qwen2_w = {1, false, true, true},
                       qwen35_w = {1, true, true, true}, minicpm5_w = {SIZE_MAX, false, true, true},
                       ufakzeka_w = {1, false, false, true},
                       seed_coder_w = {1, false, true, false}, gpt4o_w = {3, false, true, true},
                       tekken_w = {1, false, false, true};

#define MAX_STAGES 6

/* Each pre-tokenizer's stages, in llama.cpp's order (llm_tokenizer_bpe's regex_exprs). */
static const stage stages[LM_PRE_COUNT][MAX_STAGES] = {
    [LM_PRE_DEFAULT] = {{run_match, default_punct, NULL}, {gpt2_match, NULL, NULL},
                        {run_match, lm_uni_is_number, NULL}, {three_match, is_ascii_digit, NULL}},
    [LM_PRE_GPT2] = {{gpt2_match, NULL, NULL}},
    [LM_PRE_STARCODER] = {{one_match, lm_uni_is_number, NULL}, {gpt2_match, NULL, NULL}},
    [LM_PRE_LLAMA3] = {{llama3_family_match, NULL, &llama3_w}},
    [LM_PRE_QWEN2] = {{llama3_family_match, NULL, &qwen2_w}},
    [LM_PRE_QWEN35] = {{llama3_family_match, NULL, &qwen35_w}},
    [LM_PRE_DEEPSEEK_LLM] = {{one_match, is_crlf, NULL}, {space_opt_run_match, ds_letter, NULL},
                             {space_opt_run_match, ds_punct, NULL},
                             {trailing_run_match, lm_uni_is_space, NULL},
                             {run_match, ds_cjk, NULL}, {run_match, lm_uni_is_number, NULL}},
    [LM_PRE_DEEPSEEK_CODER] = {{one_match, is_crlf, NULL},
                               {space_opt_run_match, lm_uni_is_letter, NULL},
                               {space_opt_run_match, lm_uni_is_punct, NULL},
                               {run_match, ds_cjk, NULL}, {one_match, lm_uni_is_number, NULL}},
    [LM_PRE_DEEPSEEK3] = {{upto3_match, lm_uni_is_number, NULL}, {run_match, ds3_cjk, NULL},
                          {deepseek3_match, NULL, NULL}},
    [LM_PRE_FALCON] = {{run_match, falcon_punct, NULL}, {gpt2_match, NULL, NULL},
                       {three_match, is_ascii_digit, NULL}},
    [LM_PRE_GPT4O] = {{o200k_match, NULL, &gpt4o_w}},
    [LM_PRE_TEKKEN] = {{o200k_match, NULL, &tekken_w}},
    [LM_PRE_GEMMA4] = {{newline_runs_match, NULL, NULL}},
    [LM_PRE_MINICPM5] = {{upto3_match, lm_uni_is_number, NULL},
                         {llama3_family_match, NULL, &minicpm5_w}},
    [LM_PRE_UFAKZEKA] = {{llama3_family_match, NULL, &ufakzeka_w}},
    [LM_PRE_SEED_CODER] = {{llama3_family_match, NULL, &seed_coder_w}},
    [LM_PRE_LAGUNA] = {{newline_runs_match, NULL, NULL}, {llama3_family_match, NULL, &qwen2_w}},
};

/* The first match at or after from within cp[0..n): its start in *start and its end, or n
 * with *start = n when none. */
static size_t find_match(const stage *st, const uint32_t *cp, size_t n, size_t from,
                         size_t *start)
{
    if (st->match == trailing_run_match) { /* one scan instead of one per position */
        size_t s = n;
        while (s > from && st->x(cp[s - 1]))
            s--;
        *start = s;
        return n;
    }
    for (size_t p = from; p < n; p++) {
        size_t e = st->match(cp, n, p, st);
        if (e > p) {
            *start = p;
            return e;
        }
    }
    *start = n;
    return n;
}

typedef struct lens {
    size_t *v; /* [cap] piece lengths in code points */
    size_t n, cap;
} lens;

static int lens_push(lens *l, size_t x, lm_err *err)
{
    if (lm_tok_grow((void **)&l->v, &l->cap, l->n + 1, sizeof *l->v, err) != LM_OK)
        return err->code;
    l->v[l->n++] = x;
    return LM_OK;
}

int lm_pretokenize(lm_pre pre, const uint32_t *cp, size_t n, size_t **out_lens, size_t *out_n,
                   lm_err *err)
{
    *out_lens = NULL;
    *out_n = 0;
    if ((unsigned)pre >= LM_PRE_COUNT)
        return LM_FAIL(err, LM_E_INTERNAL, "tokenizer: pre-tokenizer %d does not exist", (int)pre);
    lens cur = {0}, next = {0};
    int rc = n > 0 ? lens_push(&cur, n, err) : LM_OK;
    for (int s = 0; s < MAX_STAGES && stages[pre][s].match && rc == LM_OK; s++) {
        const stage *st = &stages[pre][s];
        next.n = 0;
        size_t off = 0;
        for (size_t i = 0; i < cur.n && rc == LM_OK; i++) {
            const uint32_t *piece = cp + off;
            size_t len = cur.v[i];
            for (size_t pos = 0; pos < len && rc == LM_OK;) {
                size_t start, end = find_match(st, piece, len, pos, &start);
                if (start > pos)
                    rc = lens_push(&next, start - pos, err);
                if (end > start && rc == LM_OK)
                    rc = lens_push(&next, end - start, err);
                pos = end;
            }
            off += len;
        }
        lens t = cur;
        cur = next;
        next = t;
    }
    free(next.v);
    if (rc != LM_OK) {
        free(cur.v);
        return rc;
    }
    *out_lens = cur.v;
    *out_n = cur.n;
    return LM_OK;
}
