/* ref_calib.h — what the reference's cost calibrations (ref_calibrate_s_per_mac of the exact
 * dot product, ref_sr_calibrate_s_per_mac of the SR kernel) share: the pseudo-random sequence
 * of their operands and their clock. */
#ifndef KVD_REF_CALIB_H
#define KVD_REF_CALIB_H

#include <stdbool.h>
#include <stdint.h>

/* The start of the operands' sequence. */
#define REF_CALIB_SEED 0x9e3779b97f4a7c15ull

/* The next value of the 64-bit LCG z <- z * 6364136223846793005 + 1442695040888963407 (the
 * MMIX constants), also left in *z. */
uint64_t ref_calib_next(uint64_t *z);
/* dst[i] = k_i * scale for i < n, k_i the top 24 bits of the next LCG value as an integer in
 * [-2^23, 2^23) (exact in float32; with a power-of-two scale so is dst[i]). */
void ref_calib_fill_f32(float *dst, uint64_t n, float scale, uint64_t *z);
void ref_calib_fill_f64(double *dst, uint64_t n, double scale, uint64_t *z);
/* dst[0..n), n >= 2, whose significant bits span exactly span bits (1 <= span < 128:
 * ref_dx_row_span(dst, n) == span): integers below 2^min(span, 24) from the sequence, random
 * signs, shifted up by random amounts within the span when it passes 24 bits, times 2^-24;
 * dst[0] holds the top bit, dst[1] the lowest. */
void ref_calib_fill_span(float *dst, uint64_t n, uint32_t span, uint64_t *z);
/* Seconds per multiply-add of round(user), which does macs multiply-adds a call: the first
 * call (page faults, cold caches) is not timed, then calls until at least 20 ms have passed,
 * and the fastest of them gives the figure (a call that other processes' work interrupted
 * does not count: the figure is this machine's speed, not its load at that moment). 0 when
 * a call returns false or macs <= 0. */
double ref_calib_time(bool (*round)(void *user), void *user, double macs);

#endif
