/* ref_spans.c — a model's weight-span histograms, kept with it (ref_spans.h): a hash table of
 * matrices (open addressing, linear probing, at most half full) behind one mutex, attached to
 * the model (ref_model.spans) on first use. */
#include "ref_spans.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

typedef struct span_entry {
    const float *w;
    uint64_t n_out, n_in;
    uint32_t hist[REF_DX_SPAN_BINS]; /* rows of a matrix: below 2^32 (n_out is a uint32_t) */
} span_entry;

typedef struct ref_span_table {
    pthread_mutex_t mu;
    span_entry **slot; /* [cap], NULL where free */
    size_t cap, n;
} span_table;

static void table_release(span_table *t)
{
    for (size_t i = 0; i < t->cap; ++i)
        free(t->slot[i]);
    free(t->slot);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

/* m's table slot: the model is const to its readers, its table is not */
static span_table *_Atomic *slot_of_model(const ref_model *m)
{
    return (span_table *_Atomic *)(uintptr_t)&m->spans;
}

/* m's table, attached now when it has none (another thread may attach at the same time: one
 * wins); NULL when out of memory. */
static span_table *table_of(const ref_model *m, bool make)
{
    span_table *x = atomic_load(slot_of_model(m));
    if (x != NULL || !make)
        return x;
    span_table *t = calloc(1, sizeof *t);
    if (t == NULL)
        return NULL;
    if (pthread_mutex_init(&t->mu, NULL) != 0) {
        free(t);
        return NULL;
    }
    if (atomic_compare_exchange_strong(slot_of_model(m), &x, t))
        return t;
    table_release(t); /* another thread attached first: x is its table */
    return x;
}

void ref_spans_release(ref_model *m)
{
    span_table *t = atomic_exchange(slot_of_model(m), NULL);
    if (t != NULL)
        table_release(t);
}

static size_t slot_of(const span_table *t, const float *w)
{
    uint64_t h = (uint64_t)(uintptr_t)w * 0x9e3779b97f4a7c15ull;
    return (size_t)(h >> 20) & (t->cap - 1);
}

/* The slot holding matrix (w, n_out, n_in) or the free slot where it would go (cap > n). */
static size_t probe(const span_table *t, const float *w, uint64_t n_out, uint64_t n_in)
{
    size_t i = slot_of(t, w);
    while (t->slot[i] != NULL &&
           !(t->slot[i]->w == w && t->slot[i]->n_out == n_out && t->slot[i]->n_in == n_in))
        i = (i + 1) & (t->cap - 1);
    return i;
}

bool ref_spans_find(const ref_model *m, const float *w, uint64_t n_out, uint64_t n_in,
                    uint64_t *hist)
{
    span_table *t = table_of(m, false);
    if (t == NULL)
        return false;
    bool found = false;
    pthread_mutex_lock(&t->mu);
    if (t->cap > 0) {
        const span_entry *e = t->slot[probe(t, w, n_out, n_in)];
        if (e != NULL) {
            for (uint32_t b = 0; b < REF_DX_SPAN_BINS; ++b)
                hist[b] = e->hist[b];
            found = true;
        }
    }
    pthread_mutex_unlock(&t->mu);
    return found;
}

/* Doubles t's slots (at least 64). */
static bool table_grow(span_table *t)
{
    const size_t cap = t->cap ? 2 * t->cap : 64;
    span_entry **old = t->slot, **nw = calloc(cap, sizeof *nw);
    if (nw == NULL)
        return false;
    const size_t old_cap = t->cap;
    t->slot = nw;
    t->cap = cap;
    for (size_t i = 0; i < old_cap; ++i)
        if (old[i] != NULL)
            t->slot[probe(t, old[i]->w, old[i]->n_out, old[i]->n_in)] = old[i];
    free(old);
    return true;
}

void ref_spans_keep(const ref_model *m, const float *w, uint64_t n_out, uint64_t n_in,
                    const uint64_t *hist)
{
    span_table *t = table_of(m, true);
    if (t == NULL || n_out > UINT32_MAX)
        return;
    span_entry *e = malloc(sizeof *e);
    if (e == NULL)
        return;
    *e = (span_entry){.w = w, .n_out = n_out, .n_in = n_in};
    for (uint32_t b = 0; b < REF_DX_SPAN_BINS; ++b)
        e->hist[b] = (uint32_t)hist[b];
    pthread_mutex_lock(&t->mu);
    if (2 * (t->n + 1) > t->cap && !table_grow(t)) {
        pthread_mutex_unlock(&t->mu);
        free(e);
        return;
    }
    const size_t i = probe(t, w, n_out, n_in);
    if (t->slot[i] == NULL) {
        t->slot[i] = e;
        ++t->n;
        e = NULL;
    }
    pthread_mutex_unlock(&t->mu);
    free(e); /* kept already */
}

void ref_spans_count(uint64_t *hist, const float *w, uint64_t n_in, uint64_t r0, uint64_t r1)
{
    for (uint64_t r = r0; r < r1; ++r) {
        const uint32_t sp = ref_dx_row_span(w + r * n_in, n_in);
        ++hist[sp < REF_DX_SPAN_BINS ? sp : REF_DX_SPAN_BINS - 1];
    }
}
