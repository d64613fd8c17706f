/* kvd_dequant.h — the engine's dequantization of GGUF tensors into float32 (engine/dequant.c):
 * one decoder per tensor type it loads, bitwise ggml's reference dequantizers. The types'
 * geometry is common (kvd_gguf.h lm_type_geom_of). */
#ifndef KVD_DEQUANT_H
#define KVD_DEQUANT_H

#include "kvd_gguf.h"

#include <stdbool.h>

/* Converts n_blocks consecutive blocks (src: [n_blocks * block_bytes]) into
 * out: [n_blocks * block_elems]. */
typedef void (*lm_to_f32_fn)(const uint8_t *src, float *out, uint64_t n_blocks);

/* The engine's decoder of ggml type number `type`; NULL for a type the engine does not load. */
lm_to_f32_fn lm_type_to_f32(uint32_t type);
/* Whether the engine dequantizes the type. */
bool lm_tensor_type_loadable(lm_tensor_type type);
/* Dequantizes a tensor of a loadable type into out: [t->n_elem]. */
int lm_gguf_tensor_to_f32(float *out, const lm_gguf_tensor *t, lm_err *err);

/* The first of n_blocks blocks of a quantized type that is damaged: a scale that is NaN or
 * infinite, or so large that a product overflows, so that some value of the block decodes to
 * a NaN or an infinity (decoded: the blocks' values, [n_blocks * block_elems]); for MXFP4 also
 * a scale byte 0xFF (NaN in the OCP MX specification, 2^127 in ggml's decoding). n_blocks
 * when none is, and always for float types (F32, F16, BF16: their values are the weights). */
uint64_t lm_blocks_first_bad(lm_tensor_type type, const uint8_t *src, const float *decoded,
                             uint64_t n_blocks);
/* binary16 and bfloat16 to float32 (exact). */
float lm_f16_to_f32(uint16_t h);
float lm_bf16_to_f32(uint16_t h);

#endif
