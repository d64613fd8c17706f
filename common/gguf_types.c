/* gguf_types.c — the geometry of every ggml tensor type (name, elements and bytes per block):
 * what the GGUF reader needs to validate a tensor's extent. Decoding the values is not here:
 * the engine (engine/dequant.c) and the reference (reference/ref_dequant.c) each do their own. */
#include "kvd_gguf.h"

/* Indexed by ggml type number; a NULL name is no type (removed numbers 4, 5, 31..33, 36..38). */
static const lm_type_geom geoms[] = {
    [LM_TYPE_F32] = {"F32", 1, 4},
    [LM_TYPE_F16] = {"F16", 1, 2},
    [LM_TYPE_Q4_0] = {"Q4_0", 32, 18},
    [LM_TYPE_Q4_1] = {"Q4_1", 32, 20},
    [LM_TYPE_Q5_0] = {"Q5_0", 32, 22},
    [LM_TYPE_Q5_1] = {"Q5_1", 32, 24},
    [LM_TYPE_Q8_0] = {"Q8_0", 32, 34},
    [LM_TYPE_Q8_1] = {"Q8_1", 32, 36},
    [LM_TYPE_Q2_K] = {"Q2_K", 256, 84},
    [LM_TYPE_Q3_K] = {"Q3_K", 256, 110},
    [LM_TYPE_Q4_K] = {"Q4_K", 256, 144},
    [LM_TYPE_Q5_K] = {"Q5_K", 256, 176},
    [LM_TYPE_Q6_K] = {"Q6_K", 256, 210},
    [LM_TYPE_Q8_K] = {"Q8_K", 256, 292},
    [LM_TYPE_IQ2_XXS] = {"IQ2_XXS", 256, 66},
    [LM_TYPE_IQ2_XS] = {"IQ2_XS", 256, 74},
    [LM_TYPE_IQ3_XXS] = {"IQ3_XXS", 256, 98},
    [LM_TYPE_IQ1_S] = {"IQ1_S", 256, 50},
    [LM_TYPE_IQ4_NL] = {"IQ4_NL", 32, 18},
    [LM_TYPE_IQ3_S] = {"IQ3_S", 256, 110},
    [LM_TYPE_IQ2_S] = {"IQ2_S", 256, 82},
    [LM_TYPE_IQ4_XS] = {"IQ4_XS", 256, 136},
    [LM_TYPE_I8] = {"I8", 1, 1},
    [LM_TYPE_I16] = {"I16", 1, 2},
    [LM_TYPE_I32] = {"I32", 1, 4},
    [LM_TYPE_I64] = {"I64", 1, 8},
    [LM_TYPE_F64] = {"F64", 1, 8},
    [LM_TYPE_IQ1_M] = {"IQ1_M", 256, 56},
    [LM_TYPE_BF16] = {"BF16", 1, 2},
    [LM_TYPE_TQ1_0] = {"TQ1_0", 256, 54},
    [LM_TYPE_TQ2_0] = {"TQ2_0", 256, 66},
    [LM_TYPE_MXFP4] = {"MXFP4", 32, 17},
    [LM_TYPE_NVFP4] = {"NVFP4", 64, 36},
    [LM_TYPE_Q1_0] = {"Q1_0", 128, 18},
};

const lm_type_geom *lm_type_geom_of(uint32_t type)
{
    if (type >= sizeof geoms / sizeof geoms[0] || geoms[type].name == NULL)
        return NULL;
    return &geoms[type];
}

size_t lm_tensor_type_block_bytes(lm_tensor_type type)
{
    const lm_type_geom *t = lm_type_geom_of((uint32_t)type);
    return t ? t->block_bytes : 0;
}

size_t lm_tensor_type_block_elems(lm_tensor_type type)
{
    const lm_type_geom *t = lm_type_geom_of((uint32_t)type);
    return t ? t->block_elems : 0;
}

const char *lm_tensor_type_name(lm_tensor_type type)
{
    const lm_type_geom *t = lm_type_geom_of((uint32_t)type);
    return t ? t->name : "unknown";
}
