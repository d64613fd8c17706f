/* ref_gelu.h — GELU (tanh form) in two-limb integer arithmetic for precisions of at most 128
 * bits, with the same roundings as the MPFR sequence of ref_gelu_tanh (kvd_ref.h). */
#ifndef REF_GELU_H
#define REF_GELU_H

#include <mpfr.h>
#include <stdbool.h>

/* out = RN(RN(RN(1 + tanh(RN(k RN(RN(c RN(RN(z^2) z)) + z)))) z) / 2), every RN to nearest at
 * P bits, tanh correctly rounded: the bits of the MPFR sequence, for z, c, k and out all of one
 * precision P <= 128, c and k positive. false, with out untouched, where this path does not
 * apply (other precisions, non-regular or out-of-range arguments, the rare cases listed in
 * ref_gelu.c): then the caller runs the MPFR sequence. out may be z. */
bool ref_gelu_tanh_f2(mpfr_ptr out, mpfr_srcptr z, mpfr_srcptr c, mpfr_srcptr k);

#endif
