/* synth_quant.h — the block encoders synth writes quantized tensors with (MXFP4, Q4_K, Q6_K),
 * in ggml's layouts (engine/dequant.c documents them). Each maps float32 values to blocks whose
 * dequantized values are close to them; the bytes depend only on the input values, through
 * +, -, *, / and comparisons in float32 (no libm call whose last bit may differ between C
 * libraries), so the same values give the same blocks on every machine. */
#ifndef HX_SYNTH_QUANT_H
#define HX_SYNTH_QUANT_H

#include "kvd_gguf.h"

#include <stdbool.h>
#include <stdint.h>

/* Whether synth can encode type: F32, F16, BF16 (lm_gguf_f32_encode), MXFP4, Q4_K, Q6_K. */
bool hx_synth_type_encodable(lm_tensor_type type);
/* out[n / block_elems * block_bytes] = x[n] in type's encoding (n a multiple of its block). */
void hx_synth_encode(uint8_t *out, const float *x, uint64_t n, lm_tensor_type type);

#endif
