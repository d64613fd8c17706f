/* model_view.c — a model restricted to its first layers (kvd_speculative.h lm_model_first_layers):
 * the self-draft of speculative decoding. */
#include "kvd_speculative.h"

int lm_model_first_layers(lm_model *view, const lm_model *m, uint32_t n_layer, lm_err *err)
{
    if (n_layer == 0 || n_layer > m->hp.n_layer)
        return LM_FAIL(err, LM_E_INPUT, "self-draft of %u layers: the model has %u", n_layer,
                       m->hp.n_layer);
    *view = *m; /* borrows every pointer: weights, layers [0, n_layer), vocabulary, path */
    view->hp.n_layer = n_layer;
    view->weights_arena = NULL; /* the arena and the mapping stay m's */
    view->file_map = NULL;
    view->ext = NULL; /* a view is never freed, so nothing is attached to it */
    view->borrowed = true;
    return LM_OK;
}
