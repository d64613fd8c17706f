/* kvd_gguf.h — GGUF v2/v3 reader (memory-mapped, fully validated) and writer. */
#ifndef KVD_GGUF_H
#define KVD_GGUF_H

#include "kvd_common.h"

#include <stdbool.h>

/* Metadata value types, numbered as in the GGUF specification. */
typedef enum lm_gguf_vtype {
    LM_GGUF_U8 = 0, LM_GGUF_I8 = 1, LM_GGUF_U16 = 2, LM_GGUF_I16 = 3,
    LM_GGUF_U32 = 4, LM_GGUF_I32 = 5, LM_GGUF_F32 = 6, LM_GGUF_BOOL = 7,
    LM_GGUF_STR = 8, LM_GGUF_ARR = 9, LM_GGUF_U64 = 10, LM_GGUF_I64 = 11, LM_GGUF_F64 = 12
} lm_gguf_vtype;

/* Tensor element types, numbered as ggml numbers them. The reader accepts every type whose
 * block geometry is known (lm_type_geom_of); which ones can be decoded is each part's own
 * question (the engine's kvd_dequant.h, the reference's ref_dequant). */
typedef enum lm_tensor_type {
    LM_TYPE_F32 = 0, LM_TYPE_F16 = 1, LM_TYPE_Q4_0 = 2, LM_TYPE_Q4_1 = 3,
    LM_TYPE_Q5_0 = 6, LM_TYPE_Q5_1 = 7, LM_TYPE_Q8_0 = 8, LM_TYPE_Q8_1 = 9,
    LM_TYPE_Q2_K = 10, LM_TYPE_Q3_K = 11, LM_TYPE_Q4_K = 12, LM_TYPE_Q5_K = 13,
    LM_TYPE_Q6_K = 14, LM_TYPE_Q8_K = 15, LM_TYPE_IQ2_XXS = 16, LM_TYPE_IQ2_XS = 17,
    LM_TYPE_IQ3_XXS = 18, LM_TYPE_IQ1_S = 19, LM_TYPE_IQ4_NL = 20, LM_TYPE_IQ3_S = 21,
    LM_TYPE_IQ2_S = 22, LM_TYPE_IQ4_XS = 23, LM_TYPE_I8 = 24, LM_TYPE_I16 = 25,
    LM_TYPE_I32 = 26, LM_TYPE_I64 = 27, LM_TYPE_F64 = 28, LM_TYPE_IQ1_M = 29,
    LM_TYPE_BF16 = 30, LM_TYPE_TQ1_0 = 34, LM_TYPE_TQ2_0 = 35, LM_TYPE_MXFP4 = 39,
    LM_TYPE_NVFP4 = 40, LM_TYPE_Q1_0 = 41
} lm_tensor_type;

/* One row per ggml tensor type (common/gguf_types.c): a block of block_elems elements takes
 * block_bytes bytes. */
typedef struct lm_type_geom {
    const char *name;
    uint32_t block_elems;
    uint32_t block_bytes;
} lm_type_geom;

/* The row of ggml type number `type`, or NULL when it is no ggml type. */
const lm_type_geom *lm_type_geom_of(uint32_t type);

/* A string inside the file: NUL-terminated copy owned by the lm_gguf handle. */
typedef struct lm_gguf_str {
    const char *ptr; /* [len + 1], ptr[len] == '\0'; may contain interior NULs */
    uint64_t len;
} lm_gguf_str;

/* An array value. Scalars are copied to aligned host memory at open time. */
typedef struct lm_gguf_arr {
    lm_gguf_vtype type; /* element type (never LM_GGUF_ARR: nested arrays are refused) */
    uint64_t n;
    const void *data;   /* [n] elements of `type`; lm_gguf_str[n] for LM_GGUF_STR */
} lm_gguf_arr;

typedef struct lm_gguf_tensor {
    const char *name;    /* NUL-terminated */
    lm_tensor_type type;
    uint32_t n_dims;     /* 1..4 */
    uint64_t ne[4];      /* ne[0] is the contiguous (innermost) dimension; unused dims are 1 */
    uint64_t n_elem;
    uint64_t nbytes;
    const void *data;    /* points into the mapping; [nbytes] validated to lie inside the file */
} lm_gguf_tensor;

typedef struct lm_gguf lm_gguf;

/* Maps and validates the whole file: header, every key/value, every tensor extent. */
int lm_gguf_open(lm_gguf **out, const char *path, lm_err *err);
void lm_gguf_close(lm_gguf *g);

const char *lm_gguf_path(const lm_gguf *g);
uint32_t lm_gguf_version(const lm_gguf *g);
const void *lm_gguf_bytes(const lm_gguf *g); /* whole file, [lm_gguf_size(g)] */
uint64_t lm_gguf_size(const lm_gguf *g);
/* Hands the file's read-only mapping to the caller, who unmaps it (munmap(map, *bytes)): the
 * tensors' data pointers stay valid after lm_gguf_close. NULL (and *bytes 0) for an empty
 * file. */
const void *lm_gguf_keep_map(lm_gguf *g, uint64_t *bytes);

/* --- metadata --- */
uint64_t lm_gguf_n_kv(const lm_gguf *g);
const char *lm_gguf_key(const lm_gguf *g, uint64_t i);
lm_gguf_vtype lm_gguf_kv_type(const lm_gguf *g, uint64_t i);
/* Index of key, or -1 when absent. */
int64_t lm_gguf_find(const lm_gguf *g, const char *key);

/* Typed getters. Absent key: *out = def, LM_OK. Present with an incompatible type or a value
 * out of range: LM_E_INPUT naming the file and key. Integer getters accept any integer type
 * (and bool) whose value fits; float getters accept F32 and F64. */
int lm_gguf_get_u32(const lm_gguf *g, const char *key, uint32_t def, uint32_t *out, lm_err *err);
int lm_gguf_get_i32(const lm_gguf *g, const char *key, int32_t def, int32_t *out, lm_err *err);
int lm_gguf_get_f32(const lm_gguf *g, const char *key, float def, float *out, lm_err *err);
int lm_gguf_get_bool(const lm_gguf *g, const char *key, bool def, bool *out, lm_err *err);
/* String: *out = def (may be NULL) when absent. */
int lm_gguf_get_str(const lm_gguf *g, const char *key, const char *def, const char **out,
                    lm_err *err);
/* Array: *out = NULL when absent. elem_type < 0 accepts any element type. */
int lm_gguf_get_arr(const lm_gguf *g, const char *key, int elem_type, const lm_gguf_arr **out,
                    lm_err *err);

/* --- tensors --- */
uint64_t lm_gguf_n_tensors(const lm_gguf *g);
const lm_gguf_tensor *lm_gguf_tensor_at(const lm_gguf *g, uint64_t i);
const lm_gguf_tensor *lm_gguf_tensor_find(const lm_gguf *g, const char *name); /* NULL if absent */

/* Bytes per block and elements per block of a type (0 for an unknown type); its name
 * ("unknown" for an unknown type). Shorthands for lm_type_geom_of. */
size_t lm_tensor_type_block_bytes(lm_tensor_type type);
size_t lm_tensor_type_block_elems(lm_tensor_type type);
const char *lm_tensor_type_name(lm_tensor_type type);

/* float32 to binary16 and to bfloat16, round to nearest even (common/f16.c: the writer's
 * encodings). */
uint16_t lm_f32_to_f16(float f);
uint16_t lm_f32_to_bf16(float f);

/* --- writer (used by `kvdrift synth` and by tests that build files) --- */
typedef struct lm_gguf_writer lm_gguf_writer;
int lm_gguf_writer_create(lm_gguf_writer **out, lm_err *err);
void lm_gguf_writer_free(lm_gguf_writer *w);
int lm_gguf_w_u32(lm_gguf_writer *w, const char *key, uint32_t v, lm_err *err);
int lm_gguf_w_i32(lm_gguf_writer *w, const char *key, int32_t v, lm_err *err);
int lm_gguf_w_f32(lm_gguf_writer *w, const char *key, float v, lm_err *err);
int lm_gguf_w_bool(lm_gguf_writer *w, const char *key, bool v, lm_err *err);
int lm_gguf_w_str(lm_gguf_writer *w, const char *key, const char *v, lm_err *err);
/* Arrays: data is [n] elements of elem_type; for LM_GGUF_STR, data is const char *[n]. */
int lm_gguf_w_arr(lm_gguf_writer *w, const char *key, lm_gguf_vtype elem_type, const void *data,
                  uint64_t n, lm_err *err);
/* Adds a tensor from float32 values, converted to `type` (F32, F16 or BF16). The values are
 * copied. src: [n_elem] with ne[0] innermost. */
int lm_gguf_w_tensor_f32(lm_gguf_writer *w, const char *name, lm_tensor_type type,
                         uint32_t n_dims, const uint64_t *ne, const float *src, lm_err *err);
/* Adds a tensor from raw bytes already in `type`'s encoding (any type, quantized included). */
int lm_gguf_w_tensor_raw(lm_gguf_writer *w, const char *name, lm_tensor_type type,
                         uint32_t n_dims, const uint64_t *ne, const void *bytes, uint64_t nbytes,
                         lm_err *err);
/* Declares a tensor whose bytes are streamed after the header (lm_gguf_stream_write), in the
 * order the tensors were added. */
int lm_gguf_w_tensor_decl(lm_gguf_writer *w, const char *name, lm_tensor_type type,
                          uint32_t n_dims, const uint64_t *ne, lm_err *err);
/* out[n * element size] = src[n] in type's encoding (F32, F16 or BF16; round to nearest even),
 * little-endian: the conversion lm_gguf_w_tensor_f32 applies. */
void lm_gguf_f32_encode(uint8_t *out, const float *src, uint64_t n, lm_tensor_type type);
/* Writes GGUF v3 atomically: temp file in the same folder, fsync, rename. Every tensor must
 * hold its bytes (none declared only). */
int lm_gguf_writer_save(lm_gguf_writer *w, const char *path, lm_err *err);

/* *size = the bytes the file would have with the keys and tensors added so far. */
int lm_gguf_writer_size(const lm_gguf_writer *w, uint64_t *size, lm_err *err);

/* A file written streaming: lm_gguf_stream_open writes the header, the metadata and every
 * tensor info (no key or tensor may be added after it), then the bytes of the tensors added
 * with bytes up to the first declared one; lm_gguf_stream_write appends the bytes of the
 * declared tensors in order, in pieces of any size (each tensor's padding and the in-memory
 * tensors that follow it are written as a tensor completes); commit checks that every byte came
 * and renames the temp file over path (atomic as lm_gguf_writer_save; abort, or any failure,
 * leaves the target as it was). Only one tensor's chunk needs to be in memory at a time. */
typedef struct lm_gguf_stream lm_gguf_stream;
int lm_gguf_stream_open(lm_gguf_stream **out, lm_gguf_writer *w, const char *path, lm_err *err);
int lm_gguf_stream_write(lm_gguf_stream *s, const void *bytes, size_t n, lm_err *err);
/* Name of the tensor whose bytes come next; NULL when every tensor is complete. */
const char *lm_gguf_stream_tensor(const lm_gguf_stream *s);
/* Finishes the file (frees s on every path); sha256 (may be NULL): the SHA-256 of the file's
 * bytes; size (may be NULL): its length in bytes. A tensor still short of bytes: LM_E_INPUT
 * naming it, nothing written. */
int lm_gguf_stream_commit(lm_gguf_stream *s, uint8_t sha256[32], uint64_t *size, lm_err *err);
void lm_gguf_stream_abort(lm_gguf_stream *s);

#endif
