/* model_check.h — the engine's reading of a model file against the reference's own reading of
 * the same file, two independently loaded models (kvd_model.h lm_model, ref_model.h ref_model):
 * every weight bitwise, by tensor name, and every hyperparameter the reference computes with,
 * per-layer windows included. A difference is a finding about one of the two readers (a
 * dequantization defect, a misread key or default), LM_E_DISAGREE naming the tensor and element
 * or the key, and both values. Runs wherever a reference pass is judged against the engine
 * (sweep, compare, judge, check, ref), also when the reference comes from the cache. */
#ifndef HX_MODEL_CHECK_H
#define HX_MODEL_CHECK_H

#include "kvd_model.h"
#include "ref_model.h"

/* Every weight the engine loaded has the reference's bits, under the same name and element
 * count, and the reference reads no tensor the engine did not load. LM_OK when either model was
 * built or changed in memory (no path, or no weight list). */
int hx_model_check_weights(const lm_model *m, const ref_model *r, lm_err *err);
/* Every hyperparameter the reference reads equals the engine's (windows per layer; the MoE keys
 * when the model has experts). LM_OK when either model was built in memory. */
int hx_model_check_hparams(const lm_model *m, const ref_model *r, lm_err *err);
/* Both, weights first. */
int hx_model_check(const lm_model *m, const ref_model *r, lm_err *err);
/* Opens path twice, independently: the engine's model (lm_model_load) into *m and the
 * reference's view (ref_model_open) into *r; on failure both are NULL. Comparing them is
 * hx_model_check's, where a reference pass is judged. */
int hx_models_open(lm_model **m, ref_model **r, const char *path, lm_err *err);

#endif
