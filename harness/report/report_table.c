/* report_table.c — the terminal table: one row per configuration, columns padded to fit. */
#include "report.h"
#include "routing.h"

#include <string.h>

void hx_report_print_table(FILE *f, const hx_report *r)
{
    size_t width[HX_REPORT_NCOLS];
    for (int j = 0; j < HX_REPORT_NCOLS; ++j)
        width[j] = strlen(hx_report_col_names[j]);
    char cells[HX_REPORT_NCOLS][HX_REPORT_CELL];
    for (size_t i = 0; i < r->n_configs; ++i) {
        hx_report_cells(cells, &r->configs[i]);
        for (int j = 0; j < HX_REPORT_NCOLS; ++j)
            if (strlen(cells[j]) > width[j])
                width[j] = strlen(cells[j]);
    }
    fprintf(f, "case %s  model %s  prompt %u tokens, %u generated, reference %u bits\n",
            r->case_name, r->model, (unsigned)r->n_prompt, (unsigned)r->n_gen,
            (unsigned)r->precision);
    if (r->fingerprint[0])
        fprintf(f, "platform %s\n", r->fingerprint);
    /* Text columns left-aligned, numbers right-aligned. */
    for (int j = 0; j < HX_REPORT_NCOLS; ++j)
        fprintf(f, j < 2 ? "%-*s%s" : "%*s%s", (int)width[j], hx_report_col_names[j],
                j + 1 < HX_REPORT_NCOLS ? "  " : "\n");
    for (size_t i = 0; i < r->n_configs; ++i) {
        hx_report_cells(cells, &r->configs[i]);
        for (int j = 0; j < HX_REPORT_NCOLS; ++j)
            fprintf(f, j < 2 ? "%-*s%s" : "%*s%s", (int)width[j], cells[j],
                    j + 1 < HX_REPORT_NCOLS ? "  " : "\n");
    }
    hx_class w = hx_report_worst(r);
    int fails = 0;
    for (size_t i = 0; i < r->n_configs; ++i)
        fails += hx_config_report_fails(&r->configs[i], r->strict_bits);
    fprintf(f, "%zu configurations, worst %s, %d failing%s\n", r->n_configs, hx_class_name(w),
            fails, r->strict_bits ? " (strict: any changed bit fails)" : "");
}

void hx_report_print_routing(FILE *f, const hx_report *r, const hx_routing_result *rr)
{
    if (!rr->measured)
        return;
    fprintf(f, "\nMoE routing flips vs the reference's routing of the prompt (%u layers, "
               "top-%u of %u; TIE = reference margin <= %.3g, measured: %.0f x the largest "
               "margin deviation of %u naive-sr runs)\n",
            rr->n_layer, rr->k, rr->n_expert, (double)rr->tie_tol, HX_ROUTING_SAFETY,
            rr->members);
    for (size_t ci = 0; ci < rr->n_configs && ci < r->n_configs; ++ci) {
        const uint32_t flips = rr->n_flip[ci], ties = rr->n_tie[ci];
        const hx_routing_flips *fl = rr->flips + ci * rr->n_layer;
        fprintf(f, "  %-38s %4u flips (%u TIE, %u real)", r->configs[ci].config, flips, ties,
                flips - ties);
        for (uint32_t il = 0; il < rr->n_layer && flips > 0; ++il)
            if (fl[il].n_flip > 0)
                fprintf(f, "  L%u: %u from pos %u", il, fl[il].n_flip, fl[il].first_pos);
        fputc('\n', f);
    }
}
