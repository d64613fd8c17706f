/* ref_mpi.c — the reference pass across MPI ranks (kvd_ref.h ref_mpi_start): rank 0 runs the
 * command, every other rank serves rank 0's reference passes. Built with MPI when the Makefile
 * finds mpicc (KVD_HAVE_MPI); without it ref_mpi_start returns false and nothing changes.
 *
 * Protocol, on a duplicate of MPI_COMM_WORLD with errors returned, not fatal: before each pass
 * rank 0 broadcasts a fixed header (a pass, or the end) and a payload (token ids, logit
 * positions, the model's path); then every rank runs ref_run on the same request, and its
 * collectives (ref_group.h) are MPI_Allgatherv of bytes. A rank waiting for the next header
 * polls every millisecond instead of spinning in MPI: it shares the cores with rank 0's other
 * work (a sweep's engine runs). A rank that dies ends the whole job (mpirun's default), and a
 * result is kept only after every rank agreed on it (ref_group_same), so no rank ever keeps a
 * reference computed with a missing or mismatched part. */
#include "kvd_ref.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Started by an MPI launcher: Open MPI, PMIx or PMI (MPICH, Slurm) set one of these. */
static const char *launch_size(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "PMI_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; ++i) {
        const char *v = getenv(vars[i]);
        if (v != NULL && *v != '\0')
            return v;
    }
    return getenv("PMIX_RANK") ? "?" : NULL;
}

#ifdef KVD_HAVE_MPI
#include "kvd_version.h"

#include <mpi.h>
#include <time.h>
#include <unistd.h>

enum { OP_PASS = 1, OP_END = 2 };

/* What rank 0 broadcasts before a pass (the same binary layout on every rank: one build). */
typedef struct hdr {
    uint32_t op, ref_version;
    char build[64];          /* KVD_VERSION and commit of rank 0's binary */
    uint8_t hash[16];        /* the model's content hash */
    uint32_t n_tokens, n_prompt, n_pos, prec; /* n_pos 0: the default positions */
    int32_t n_threads;
    uint32_t rot_max_size, rot_keep, rot_step, rot_turn_at, rot_turn_d, mpfr_dot, path_len;
    char key[33];            /* ref_cache_key of the request: every field that changes numbers */
} hdr;

static struct {
    MPI_Comm comm;
    ref_group g;
    bool started, stopped;
    bool broken; /* an MPI call failed: the ranks can no longer follow each other */
} S;

static int mpi_fail(lm_err *err, int rc, const char *what)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    S.broken = true;
    return LM_FAIL(err, LM_E_IO, "MPI %s failed on rank %d: %s", what, S.g.rank, msg);
}

/* Parts above INT_MAX bytes in all go by one broadcast per rank, in pieces MPI's int counts
 * can hold. */
static int mpi_allgather(const ref_group *g, void *buf, const uint64_t *count,
                         const uint64_t *displ, lm_err *err)
{
    const int size = g->size;
    int *c = malloc(2 * (size_t)size * sizeof *c);
    if (c == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "out of memory for an MPI exchange");
    int *d = c + size;
    bool small = displ[size - 1] + count[size - 1] <= (uint64_t)INT32_MAX;
    for (int r = 0; small && r < size; ++r) {
        c[r] = (int)count[r];
        d[r] = (int)displ[r];
    }
    int rc = MPI_SUCCESS;
    if (small) {
        rc = MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, c, d, MPI_BYTE, S.comm);
    } else {
        const uint64_t piece = (uint64_t)1 << 30;
        for (int r = 0; rc == MPI_SUCCESS && r < size; ++r)
            for (uint64_t o = 0; rc == MPI_SUCCESS && o < count[r]; o += piece) {
                const uint64_t k = count[r] - o < piece ? count[r] - o : piece;
                rc = MPI_Bcast((char *)buf + displ[r] + o, (int)k, MPI_BYTE, r, S.comm);
            }
    }
    free(c);
    return rc == MPI_SUCCESS ? LM_OK : mpi_fail(err, rc, "allgather");
}

/* A broadcast from rank 0 that the others wait for by polling (one sleep per millisecond). */
static int bcast(void *buf, uint64_t n, lm_err *err)
{
    MPI_Request req;
    int rc = MPI_Ibcast(buf, (int)n, MPI_BYTE, 0, S.comm, &req), done = 0;
    while (rc == MPI_SUCCESS && !done) {
        rc = MPI_Test(&req, &done, MPI_STATUS_IGNORE);
        if (rc == MPI_SUCCESS && !done) {
            const struct timespec ms = {0, 1000000};
            nanosleep(&ms, NULL);
        }
    }
    return rc == MPI_SUCCESS ? LM_OK : mpi_fail(err, rc, "broadcast");
}

static void build_id(char out[64])
{
    snprintf(out, 64, "%s %s", KVD_VERSION, lm_git_commit());
}

static int mpi_begin(const ref_group *g, const ref_model *m, const ref_request *rq, lm_err *err)
{
    (void)g;
    if (m->path == NULL)
        return LM_FAIL(err, LM_E_UNSUPPORTED, "the reference across MPI ranks needs a model file "
                       "(every rank loads it); this model was built in memory");
    hdr h = {.op = OP_PASS, .ref_version = REF_VERSION, .n_tokens = rq->n_tokens,
             .n_prompt = rq->n_prompt, .n_pos = rq->pos ? rq->n_pos : 0, .prec = rq->prec,
             .n_threads = rq->n_threads, .rot_max_size = rq->rot_max_size,
             .rot_keep = rq->rot_keep, .rot_step = rq->rot_step, .rot_turn_at = rq->rot_turn_at,
             .rot_turn_d = rq->rot_turn_d, .mpfr_dot = rq->mpfr_dot,
             .path_len = (uint32_t)strlen(m->path)};
    build_id(h.build);
    ref_cache_key(h.key, m, rq);
    memcpy(h.hash, m->content_hash, 16);
    const uint64_t n = 4 * ((uint64_t)h.n_tokens + h.n_pos) + h.path_len + 1;
    char *p = malloc(n);
    if (p == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    memcpy(p, rq->tokens, 4 * (uint64_t)h.n_tokens);
    if (h.n_pos)
        memcpy(p + 4 * (uint64_t)h.n_tokens, rq->pos, 4 * (uint64_t)h.n_pos);
    memcpy(p + 4 * ((uint64_t)h.n_tokens + h.n_pos), m->path, h.path_len + 1);
    int st = bcast(&h, sizeof h, err);
    if (st == LM_OK)
        st = bcast(p, n, err);
    free(p);
    return st;
}

static void hex16(char out[33], const uint8_t h[16])
{
    for (int i = 0; i < 16; ++i)
        snprintf(out + 2 * i, 3, "%02x", h[i]);
}

/* One pass of rank 0's, on this rank; *m is the model kept from the last pass (reloaded when
 * the path or the hash changes). */
static int serve_pass(ref_model **m, const hdr *h, lm_err *err)
{
    const uint64_t n = 4 * ((uint64_t)h->n_tokens + h->n_pos) + h->path_len + 1;
    char *p = malloc(n);
    if (p == NULL) /* without the payload this rank cannot follow: the job ends */
        MPI_Abort(S.comm, 2);
    int st = bcast(p, n, err);
    if (st != LM_OK) {
        free(p);
        return st;
    }
    const char *path = p + 4 * ((uint64_t)h->n_tokens + h->n_pos);
    char mine[64], host[256] = "?", a[33], b[33];
    build_id(mine);
    gethostname(host, sizeof host - 1);
    if (h->ref_version != REF_VERSION || strncmp(h->build, mine, sizeof mine) != 0)
        st = LM_FAIL(err, LM_E_INPUT, "runs kvdrift %s (reference version %u) on %s, rank 0 "
                     "runs %.64s (%u): every rank needs the same build", mine, REF_VERSION, host,
                     h->build, h->ref_version);
    if (st == LM_OK && (*m == NULL || strcmp((*m)->path, path) != 0 ||
                        memcmp((*m)->content_hash, h->hash, 16) != 0)) {
        ref_model_free(*m);
        *m = NULL;
        st = ref_model_open(m, path, err);
    }
    if (st == LM_OK && memcmp((*m)->content_hash, h->hash, 16) != 0) {
        hex16(a, (*m)->content_hash);
        hex16(b, h->hash);
        st = LM_FAIL(err, LM_E_INPUT, "model %s on %s has content hash %s, rank 0's has %s: "
                     "the file differs between the ranks", path, host, a, b);
    }
    if (st != LM_OK) { /* ref_run's first agreement, from this side */
        free(p);
        return ref_group_agree(&S.g, st, err);
    }
    ref_request rq = {.tokens = (const int32_t *)p, .n_tokens = h->n_tokens,
                      .n_prompt = h->n_prompt,
                      .pos = h->n_pos ? (const uint32_t *)(p + 4 * (uint64_t)h->n_tokens) : NULL,
                      .n_pos = h->n_pos, .prec = h->prec, .n_threads = h->n_threads,
                      .rot_max_size = h->rot_max_size, .rot_keep = h->rot_keep,
                      .rot_step = h->rot_step, .rot_turn_at = h->rot_turn_at,
                      .rot_turn_d = h->rot_turn_d, .mpfr_dot = h->mpfr_dot != 0, .group = &S.g};
    char key[33];
    ref_cache_key(key, *m, &rq);
    if (memcmp(key, h->key, sizeof key) != 0) { /* a field rank 0's request has and hdr lacks */
        free(p);
        return ref_group_agree(&S.g, LM_FAIL(err, LM_E_INTERNAL, "the request did not reach "
                                             "this rank whole (cache key %s, rank 0's %.32s)",
                                             key, h->key), err);
    }
    ref_result *res = NULL;
    st = ref_run(&res, *m, &rq, err);
    ref_result_free(res);
    free(p);
    return st;
}

/* Every rank but 0: passes until rank 0's end. Failures of a pass are rank 0's to report
 * (every rank learns them through the agreements); only MPI failures end the loop. */
static int serve(void)
{
    ref_model *m = NULL;
    int rc = 0;
    for (;;) {
        hdr h;
        lm_err err = {0};
        if (bcast(&h, sizeof h, &err) != LM_OK) {
            fprintf(stderr, "kvdrift: %s\n", err.msg);
            rc = 2;
            break;
        }
        if (h.op != OP_PASS)
            break;
        if (serve_pass(&m, &h, &err) != LM_OK && S.broken) {
            fprintf(stderr, "kvdrift: %s\n", err.msg);
            rc = 2;
            break;
        }
    }
    ref_model_free(m);
    return rc;
}

static void stop_at_exit(void)
{
    ref_mpi_stop();
}

bool ref_mpi_start(int *argc, char ***argv, int *rc)
{
    if (S.started || launch_size() == NULL)
        return false;
    int prov = 0, rank = 0, size = 1;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &prov) != MPI_SUCCESS)
        return false;
    S.started = true;
    MPI_Comm_dup(MPI_COMM_WORLD, &S.comm);
    MPI_Comm_set_errhandler(S.comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(S.comm, &rank);
    MPI_Comm_size(S.comm, &size);
    /* default threads: this host's cores shared by the ranks on it */
    MPI_Comm local;
    int n_local = 1;
    if (MPI_Comm_split_type(S.comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local) ==
        MPI_SUCCESS) {
        MPI_Comm_size(local, &n_local);
        MPI_Comm_free(&local);
    }
    long nc = sysconf(_SC_NPROCESSORS_ONLN);
    int threads = (int)(nc > 0 ? nc : 1) / (n_local > 0 ? n_local : 1);
    S.g = (ref_group){.rank = rank, .size = size, .threads = threads > 0 ? threads : 1,
                      .allgather = mpi_allgather, .begin = rank == 0 ? mpi_begin : NULL};
    if (rank == 0) {
        if (size > 1)
            ref_group_set(&S.g);
        atexit(stop_at_exit);
        return false;
    }
    *rc = serve();
    S.stopped = true;
    MPI_Comm_free(&S.comm);
    MPI_Finalize();
    return true;
}

void ref_mpi_stop(void)
{
    if (!S.started || S.stopped || S.g.rank != 0)
        return;
    S.stopped = true;
    if (S.g.size > 1) {
        hdr h = {.op = OP_END};
        lm_err err = {0};
        if (bcast(&h, sizeof h, &err) != LM_OK)
            fprintf(stderr, "kvdrift: %s\n", err.msg);
        ref_group_set(NULL);
    }
    MPI_Comm_free(&S.comm);
    MPI_Finalize();
}

#else /* built without MPI */

bool ref_mpi_start(int *argc, char ***argv, int *rc)
{
    (void)argc;
    (void)argv;
    (void)rc;
    const char *n = launch_size();
    if (n != NULL && strcmp(n, "1") != 0)
        fprintf(stderr, "kvdrift: started as one of %s MPI ranks by a build without MPI: every "
                        "rank runs the whole command alone (rebuild with mpicc on PATH)\n", n);
    return false;
}

void ref_mpi_stop(void)
{
}

#endif
