/* cli_progress.c — cost line and progress lines of a reference pass (cli_progress.h). */
#include "cli/cli_progress.h"

#include "ref_sr.h"

#include <stdio.h>
#include <unistd.h>

void hx_progress_init(hx_progress *p, const char *prefix, bool quiet)
{
    *p = (hx_progress){.prefix = prefix, .quiet = quiet, .tty = isatty(STDERR_FILENO) != 0};
}

static const char *phase(const ref_progress *pr)
{
    return pr->n_member ? "envelope" : "reference";
}

/* An envelope's cost: n_member members of ref_macs each, at the SR kernel's calibrated speed. */
static void envelope_cost(const hx_progress *p, const ref_progress *pr)
{
    const int nt = pr->rq->n_threads > 0 ? pr->rq->n_threads : 1;
    const double s = ref_sr_calibrate_s_per_mac(pr->m->hp.n_embd);
    fprintf(stderr, "%senvelope: %u members x %.3g multiply-adds, about %.2g s on %d thread%s "
                    "(%.2f ns each, calibrated); %s%s\n",
            p->prefix, pr->n_member, pr->total / pr->n_member, pr->total * s / nt, nt,
            nt == 1 ? "" : "s", s * 1e9, p->cache_dir ? "the result is cached in " : "not cached",
            p->cache_dir ? p->cache_dir : "");
}

void hx_progress_cost(hx_progress *p, const ref_model *m, const ref_request *rq, int threads,
                      const char *cache_dir)
{
    if (p->quiet)
        return;
    long nc = sysconf(_SC_NPROCESSORS_ONLN);
    int nt = threads > 0 ? threads : (nc < 1 ? 1 : (int)nc);
    double macs = ref_macs(m, rq);
    double s = ref_calibrate_s_per_mac(m, rq, nt), fixed = ref_fixed_cost_s(m, nt);
    fprintf(stderr, "%sreference: %.3g multiply-adds, about %.2g s on %d thread%s (%.2f ns each, "
                    "and %.2g s for the weights' split, calibrated); %s%s\n",
            p->prefix, macs, macs * s / nt + fixed, nt, nt == 1 ? "" : "s", s * 1e9, fixed,
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
        if (pr->n_member)
            envelope_cost(p, pr);
        else
            hx_progress_cost(p, pr->m, pr->rq, pr->rq->n_threads, p->cache_dir);
        p->last = 0.0;
        return;
    }
    const double gap = p->tty ? 1.0 : 5.0;
    if (pr->elapsed_s - p->last < gap)
        return;
    p->last = pr->elapsed_s;
    const double eta = pr->elapsed_s * (pr->total - pr->done) / pr->done;
    char where[48];
    if (pr->n_member)
        snprintf(where, sizeof where, "%u of %u members done", pr->members_done, pr->n_member);
    else if (pr->layer < pr->n_layer)
        snprintf(where, sizeof where, "layer %u/%u", pr->layer + 1, pr->n_layer);
    else
        snprintf(where, sizeof where, "output");
    fprintf(stderr, "%s%s%s: %s, %3.0f%%, %.1f s, ETA %.1f s%s", p->tty ? "\r" : "", p->prefix,
            phase(pr), where, 100.0 * pr->done / pr->total, pr->elapsed_s, eta, p->tty ? "   " : "\n");
    p->open_line = p->tty;
    fflush(stderr);
}

void hx_progress_end(hx_progress *p)
{
    if (p->open_line)
        fputc('\n', stderr);
    p->open_line = false;
}
