/* ref_group.h — the pieces of a reference pass shared by the members of a group (kvd_ref.h
 * ref_group): which part each member computes, the exchange of computed MPFR values, and the
 * check that every member ends with the same result. Every function here is collective unless
 * it says otherwise: every member calls it, in the same order, with the same arguments except
 * its own values and status. */
#ifndef REF_GROUP_H
#define REF_GROUP_H

#include "kvd_ref.h"

/* Not collective. Member rank's range [*lo, *hi) of n items: contiguous, in rank order, in
 * whole groups of REF_DX_ROWS items (the last may be shorter; a range may be empty). No group
 * or a group of one: [0, n). */
void ref_group_range(const ref_group *g, int rank, uint64_t n, uint64_t *lo, uint64_t *hi);

/* The exchange buffer of ref_group_share, allocated once before a pass (not collective): room
 * for n_values values at prec, the most one exchange sends. */
typedef struct ref_group_buf {
    uint8_t *p;
    uint64_t cap;
    uint64_t *count; /* [2][size]: bytes and offsets of every member's part */
} ref_group_buf;
int ref_group_buf_init(ref_group_buf *b, const ref_group *g, uint64_t n_values, mpfr_prec_t prec,
                       lm_err *err);
void ref_group_buf_free(ref_group_buf *b);

/* Member r computed base[t * stride + c] for t < n_rows and c in its columns: unit times its
 * range (ref_group_range) of the n_cols / unit items (unit divides n_cols); afterwards every
 * member holds all of them. The values are MPFR numbers of ref_vec_new at precision prec.
 * in: the digest (ref_group_digest) of the inputs they were computed from, which every member
 * must share (LM_E_INPUT naming the member otherwise: the members do not compute alike).
 * st: this member's status; a failed member's values are not used and every member returns an
 * error then (the failure of the lowest failing rank, as ref_group_agree). */
int ref_group_share(const ref_group *g, mpfr_t *base, uint64_t n_rows, uint64_t stride,
                    uint64_t n_cols, uint64_t unit, mpfr_prec_t prec, const uint8_t in[16], int st,
                    ref_group_buf *buf, lm_err *err);

/* Not collective: XXH3-128 of n[i] values of arrays[i] (i < n_arrays): sign, kind, exponent
 * and significand of each. LM_OK or LM_E_NOMEM. */
int ref_group_digest(uint8_t out[16], mpfr_t *const *arrays, const uint64_t *n, int n_arrays);

/* Every member's n[i] values of arrays[i] (i < n_arrays) hashed (XXH3-128 over sign, kind,
 * exponent and significand); LM_OK when every member's hash is rank 0's, else LM_E_INPUT
 * naming the first member that differs. */
int ref_group_same(const ref_group *g, mpfr_t *const *arrays, const uint64_t *n, int n_arrays,
                   lm_err *err);

#endif
