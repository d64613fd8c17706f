/* npy.h — a strict reader of NumPy .npy arrays (format versions 1.0, 2.0, 3.0) of the element
 * types an imported dump may hold: float32 '<f4', float16 '<f2', float64 '<f8', and bfloat16
 * stored as uint16 '<u2' (the float's upper 16 bits).
 *
 * Every header field is validated, nothing is guessed:
 *   magic "\x93NUMPY"; major 1, 2 or 3 and minor 0; header length (u16 for 1.x, u32 for 2.x
 *   and 3.x, little-endian) within the file; preamble + header a multiple of 16 bytes (NumPy
 *   pads to 64, older writers to 16); the header is a Python dict literal with exactly the keys
 *   'descr', 'fortran_order' and 'shape', each once, in any order, single or double quotes,
 *   then optional trailing comma, '}', spaces, and one final '\n';
 *   descr one of the four above ('>' or '|' byte orders, any other type: error naming it);
 *   fortran_order False (True: error); shape a tuple of 1..HX_NPY_MAX_DIM decimal integers
 *   ("(n,)" for one dimension; "()" and leading zeros refused), each < 2^40;
 *   the data after the header exactly prod(shape) * itemsize bytes (short or trailing bytes:
 *   error).
 * Errors are LM_E_INPUT, one line naming the file (`name`) and the field. */
#ifndef HX_NPY_H
#define HX_NPY_H

#include "kvd_common.h"

#include <stddef.h>
#include <stdint.h>

#define HX_NPY_MAX_DIM 4

typedef enum hx_npy_dtype {
    HX_NPY_F32 = 0, /* '<f4' */
    HX_NPY_F16 = 1, /* '<f2' IEEE binary16 */
    HX_NPY_F64 = 2, /* '<f8' */
    HX_NPY_BF16 = 3 /* '<u2' holding bfloat16 bits */
} hx_npy_dtype;

typedef struct hx_npy {
    hx_npy_dtype dtype;
    uint32_t ndim;
    uint64_t shape[HX_NPY_MAX_DIM]; /* [ndim] */
    uint64_t n_elems;               /* prod(shape) */
    const uint8_t *data;            /* [n_elems * itemsize] inside the parsed buffer */
} hx_npy;

/* Parses buf[n] (a whole .npy file); out->data points into buf (no allocation). */
int hx_npy_parse(hx_npy *out, const void *buf, size_t n, const char *name, lm_err *err);
/* "float32", "float16", "float64", "bfloat16". */
const char *hx_npy_dtype_name(hx_npy_dtype t);
/* Element i as float32: float16 and bfloat16 widen exactly, float64 rounds to nearest. */
float hx_npy_get_f32(const hx_npy *a, uint64_t i);

#endif
