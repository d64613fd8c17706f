/* cli_progress.c — cost line and progress lines of a reference pass (cli_progress.h). */
#include "cli_progress.h"

#include <stdio.h>
#include <unistd.h>

void hx_progress_init(hx_progress *p, const char *what, bool quiet)
{
    *p = (hx_progress){.what = what, .quiet = quiet, .tty = isatty(STDERR_FILENO) != 0};
}

void hx_progress_cost(hx_progress *p, const lm_model *m, const ref_request *rq, int threads,
                      const char *cache_dir)
{
    if (p->quiet)
        return;
    long nc = sysconf(_SC_NPROCESSORS_ONLN);
    int nt = threads > 0 ? threads : (nc < 1 ? 1 : (int)nc);
    double macs = ref_macs(m, rq);
    double s = ref_calibrate_s_per_mac(rq->prec ? rq->prec : REF_DEFAULT_PREC, m->hp.n_embd);
    fprintf(stderr, "%s: %.3g multiply-adds, about %.2g s on %d thread%s (%.2f ns each, "
                    "calibrated); %s%s\n",
            p->what, macs, macs * s / nt, nt, nt == 1 ? "" : "s", s * 1e9,
            cache_dir ? "the result is cached in " : "not cached",
            cache_dir ? cache_dir : "");
}

void hx_progress_cb(void *user, const ref_progress *pr)
{
    hx_progress *p = user;
    if (p->quiet)
        return;
    if (pr->done <= 0) {
        hx_progress_end(p);
        hx_progress_cost(p, pr->m, pr->rq, pr->rq->n_threads, p->cache_dir);
        p->last = 0.0;
        return;
    }
    const double gap = p->tty ? 1.0 : 5.0;
    if (pr->elapsed_s - p->last < gap)
        return;
    p->last = pr->elapsed_s;
    const double eta = pr->elapsed_s * (pr->total - pr->done) / pr->done;
    char where[32];
    if (pr->layer < pr->n_layer)
        snprintf(where, sizeof where, "layer %u/%u", pr->layer + 1, pr->n_layer);
    else
        snprintf(where, sizeof where, "output");
    fprintf(stderr, "%s%s: %s, %3.0f%%, %.1f s, ETA %.1f s%s", p->tty ? "\r" : "", p->what,
            where, 100.0 * pr->done / pr->total, pr->elapsed_s, eta, p->tty ? "   " : "\n");
    p->open_line = p->tty;
    fflush(stderr);
}

void hx_progress_end(hx_progress *p)
{
    if (p->open_line)
        fputc('\n', stderr);
    p->open_line = false;
}
