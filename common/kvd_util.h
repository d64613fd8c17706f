/* kvd_util.h — small helpers the engine, the reference and the harness share (no arithmetic on
 * model data, no files): the monotonic clock, strict unsigned parsing, hex, index lookup,
 * one-line text fields and word lists for messages. */
#ifndef KVD_UTIL_H
#define KVD_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Seconds on CLOCK_MONOTONIC (durations only: the origin is arbitrary). */
double lm_now_s(void);
/* This process's peak resident memory so far in bytes (getrusage's ru_maxrss); 0 when
 * unknown. */
uint64_t lm_peak_rss_bytes(void);

/* s[0..len) as a decimal integer in lo..hi: one or more digits and nothing else (no sign,
 * space or base prefix; leading zeros allowed); false on anything else or overflow. */
bool lm_parse_u64(const char *s, size_t len, uint64_t lo, uint64_t hi, uint64_t *out);
bool lm_parse_u32(const char *s, size_t len, uint32_t lo, uint32_t hi, uint32_t *out);
/* The NUL-terminated s as lm_parse_u32 / lm_parse_u64 read it. */
bool lm_parse_u32z(const char *s, uint32_t lo, uint32_t hi, uint32_t *out);
bool lm_parse_u64z(const char *s, uint64_t lo, uint64_t hi, uint64_t *out);
/* A seed: the NUL-terminated s as a decimal integer, or as 0x/0X and hex digits; 0..2^64-1. */
bool lm_parse_seed(const char *s, uint64_t *out);

/* bytes[n] -> 2n lowercase hex digits and a NUL in out[2n + 1]. */
void lm_hex_encode(char *out, const uint8_t *bytes, size_t n);
/* 2n hex digits (either case), exactly, -> bytes[n]; false when malformed (out may then be
 * partly written). */
bool lm_hex_decode(uint8_t *bytes, size_t n, const char *hex);

/* The index of the first x in v[n], or -1. */
int64_t lm_index_of_u32(const uint32_t *v, size_t n, uint32_t x);

/* Whether every x[0..n) is finite (no NaN, no Inf). */
bool lm_all_finite(const float *x, size_t n);

/* A one-line "key=value; ..." field value: src ("unknown" when NULL or empty) copied into
 * dst[n] (truncated to n - 1 bytes), with newlines and ';' (the part separator) turned into
 * spaces and trailing spaces dropped. */
void lm_field_copy(char *dst, size_t n, const char *src);

/* Appends word i of count to the NUL-terminated list in buf[n] as "a, b or c" does (no
 * separator before word 0, last (" or ", " and ") before the last, ", " otherwise); truncates
 * at n. */
void lm_words_append(char *buf, size_t n, size_t i, size_t count, const char *word,
                     const char *last);

#endif
