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

/* binary16 and bfloat16 to float32 (exact). */
float lm_f16_to_f32(uint16_t h);
float lm_bf16_to_f32(uint16_t h);

#endif
