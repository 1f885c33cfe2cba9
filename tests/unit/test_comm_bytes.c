/* test_comm_bytes.c — the comm plugins' traffic metric "comm/bytes_per_rank": with N rank
 * threads of the threads engine, the sum over ranks of what each rank reports (the host's SUM
 * over ranks) equals the bytes a ring sends, counted here hop by hop, divided by N; the local
 * engine reports 0 for every call. Not for: the collectives' values (test_comm_threads.c) or
 * the mpi engine (tests/cli/test_comm_bytes.sh compares it with this one end to end).
 */
#include "ct_test.h"
#include "config/config.h"
#include "plugin/hostapi.h"

#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define MAX_RANKS 8
#define METRIC "comm/bytes_per_rank"

static const ct_plugin_desc *load_plugin(const char *so_file) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", ct_test_plugin_dir(), so_file);
    void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL); /* never closed: plugins stay loaded */
    if (!dl) {
        ct_test_fail(__FILE__, __LINE__, "cannot load %s: %s", path, dlerror());
        return NULL;
    }
    ct_plugin_entry_fn entry = (ct_plugin_entry_fn)dlsym(dl, CT_ENTRY_SYMBOL);
    return entry ? entry() : NULL;
}

/* A world of N ranks, each with its own host context and metric table, as the host gives
 * every rank (the tables are what the test reads back). */
typedef struct bytes_world {
    host_config            *cfg;
    const ct_comm_vtable *vt;
    void                 *world;
    void                 *ranks[MAX_RANKS];
    ct_host               hosts[MAX_RANKS];
    host_metric_table      *tables; /* (MAX_RANKS) */
    int32_t               n;
} bytes_world;

static int bytes_world_open(bytes_world *w, const char *so_file, int32_t n) {
    memset(w, 0, sizeof *w);
    w->n = n;
    ct_error err = {.struct_size = sizeof err};
    const ct_plugin_desc *d = load_plugin(so_file);
    w->tables = calloc(MAX_RANKS, sizeof *w->tables);
    w->cfg = config_new();
    if (!d || !w->tables || !w->cfg) return 0;
    /* an empty [comm] section: validation fills the engine's defaults */
    if (config_load_string(w->cfg, "bytes.ini", "[comm]\n", &err) != CT_OK ||
        config_validate_section(w->cfg, "comm", d->params, d->param_struct_size, d->name, NULL,
                                &err) != CT_OK) {
        ct_test_fail(__FILE__, __LINE__, "%s config: %s", so_file, err.message);
        return 0;
    }
    w->vt = d->vtable;
    for (int32_t r = 0; r < n; r++)
        hostapi_init(&w->hosts[r], w->cfg, r, d->name, &w->tables[r]);
    ct_create_args a = {.struct_size = sizeof a, .api = hostapi_table(), .host = &w->hosts[0],
                        .section = "comm", .rank = 0, .world_size = n};
    if (w->vt->world_create) {
        w->world = w->vt->world_create(n, &a, &err);
        if (!w->world) {
            ct_test_fail(__FILE__, __LINE__, "world_create(%d): %s", (int)n, err.message);
            return 0;
        }
    }
    for (int32_t r = 0; r < n; r++) {
        a.host = &w->hosts[r];
        a.rank = r;
        a.comm_world = w->world;
        w->ranks[r] = w->vt->create(&a, &err);
        if (!w->ranks[r]) {
            ct_test_fail(__FILE__, __LINE__, "create rank %d: %s", (int)r, err.message);
            return 0;
        }
    }
    return 1;
}

static void bytes_world_close(bytes_world *w) {
    for (int32_t r = 0; r < w->n; r++)
        if (w->ranks[r]) w->vt->destroy(w->ranks[r]);
    if (w->world) w->vt->world_destroy(w->world);
    if (w->cfg) config_free(w->cfg);
    free(w->tables);
}

/* ---------------------------------------------------------------------------------------
 * the calls every rank makes, and the bytes a ring moves for them, hop by hop
 * ------------------------------------------------------------------------------------- */

enum { AR_COUNT = 1001, RS_COUNT = 300, AG_COUNT = 257, A2A_COUNT = 64, BC_COUNT = 10,
       P2P_COUNT = 100 };

typedef struct rank_job {
    bytes_world *w;
    int32_t      rank;
    int32_t      rc;
    ct_error     err;
} rank_job;

/* all_reduce f32 (AR_COUNT: not a multiple of N, so ring chunks are uneven), reduce_scatter
 * bf16, all_gather f32, all_to_all bf16, broadcast f64, a barrier, and rank 0 sending
 * P2P_COUNT f32 to rank 1. */
static void *rank_calls(void *p) {
    rank_job *job = p;
    bytes_world *w = job->w;
    void *c = w->ranks[job->rank];
    int32_t n = w->n;
    float *f = calloc((size_t)n * AR_COUNT * 2, sizeof *f);
    uint16_t *h = calloc((size_t)n * RS_COUNT * 2, sizeof *h);
    double *d = calloc(BC_COUNT, sizeof *d);
    ct_error *err = &job->err;
    int32_t rc = f && h && d ? CT_OK : CT_ERR_NOMEM;
    const ct_comm_vtable *vt = w->vt;
    if (!rc) rc = vt->all_reduce(c, f, f + AR_COUNT, AR_COUNT, CT_DTYPE_F32, CT_REDUCE_SUM, NULL, err);
    if (!rc) rc = vt->reduce_scatter(c, h, h + n * RS_COUNT, RS_COUNT, CT_DTYPE_BF16, CT_REDUCE_SUM,
                                     NULL, err);
    if (!rc) rc = vt->all_gather(c, f, f + n * AG_COUNT, AG_COUNT, CT_DTYPE_F32, NULL, err);
    if (!rc) rc = vt->all_to_all(c, h, h + n * A2A_COUNT, A2A_COUNT, CT_DTYPE_BF16, NULL, err);
    if (!rc) rc = vt->broadcast(c, d, BC_COUNT, CT_DTYPE_F64, 0, err);
    if (!rc) rc = vt->barrier(c, err);
    if (!rc && n > 1 && job->rank == 0)
        rc = vt->send(c, f, P2P_COUNT, CT_DTYPE_F32, 1, 5, err);
    if (!rc && n > 1 && job->rank == 1)
        rc = vt->recv(c, f, P2P_COUNT, CT_DTYPE_F32, 0, 5, err);
    job->rc = rc;
    free(f);
    free(h);
    free(d);
    return NULL;
}

/* Bytes all ranks together put on the wire, walking the ring: chunk k of an all-reduce (the
 * elements [count*k/N, count*(k+1)/N)) makes N-1 hops in the reduce-scatter pass and N-1 in the
 * all-gather pass; each of the N blocks of a reduce-scatter, all-gather or all-to-all is sent
 * N-1 times (once per hop, or once to each other rank); a pipelined broadcast crosses N-1
 * links; a send crosses one. */
static double ring_total_bytes(int32_t n) {
    double total = 0;
    for (int32_t k = 0; k < n; k++) {
        uint64_t lo = (uint64_t)AR_COUNT * (uint64_t)k / (uint64_t)n;
        uint64_t hi = (uint64_t)AR_COUNT * (uint64_t)(k + 1) / (uint64_t)n;
        for (int32_t hop = 0; hop < 2 * (n - 1); hop++) total += (double)(hi - lo) * 4;
    }
    for (int32_t block = 0; block < n; block++)
        for (int32_t hop = 0; hop < n - 1; hop++)
            total += RS_COUNT * 2.0 + AG_COUNT * 4.0 + A2A_COUNT * 2.0;
    for (int32_t hop = 0; hop < n - 1; hop++) total += BC_COUNT * 8.0;
    if (n > 1) total += P2P_COUNT * 4.0;
    return total;
}

static const host_metric *table_find(const host_metric_table *t, const char *name) {
    for (int32_t i = 0; i < t->n; i++)
        if (strcmp(t->items[i].name, name) == 0) return &t->items[i];
    return NULL;
}

static void run_world(const char *so_file, int32_t n) {
    bytes_world w;
    if (!bytes_world_open(&w, so_file, n)) {
        bytes_world_close(&w);
        return;
    }
    rank_job jobs[MAX_RANKS];
    pthread_t tid[MAX_RANKS];
    for (int32_t r = 0; r < n; r++) {
        jobs[r] = (rank_job){.w = &w, .rank = r, .err = {.struct_size = sizeof(ct_error)}};
        pthread_create(&tid[r], NULL, rank_calls, &jobs[r]);
    }
    for (int32_t r = 0; r < n; r++) pthread_join(tid[r], NULL);
    double logged = 0; /* what the host logs: the reports summed over calls and ranks */
    for (int32_t r = 0; r < n; r++) {
        CT_CHECK_MSG(jobs[r].rc == CT_OK, "%s N=%d rank %d: %s", so_file, (int)n, (int)r,
                     jobs[r].err.message);
        const host_metric *m = table_find(&w.tables[r], METRIC);
        CT_CHECK_MSG(m != NULL, "%s N=%d rank %d reported no %s", so_file, (int)n, (int)r,
                     METRIC);
        if (!m) continue;
        CT_CHECK_MSG(m->reduce == CT_METRIC_SUM, "%s: %s is reduced with %d, expected SUM "
                     "(the host sums it over calls and ranks)", so_file, METRIC, (int)m->reduce);
        /* five collectives (the barrier moves nothing), plus rank 0's send */
        int32_t want_calls = 5 + (n > 1 && r == 0);
        CT_CHECK_MSG(m->count == want_calls, "%s N=%d rank %d: %d reports, expected %d", so_file,
                     (int)n, (int)r, (int)m->count, (int)want_calls);
        logged += metrics_value(&w.tables[r], METRIC);
    }
    double want = ring_total_bytes(n) / n; /* mean over ranks of the bytes each sent */
    CT_CHECK_MSG(fabs(logged - want) <= 1e-9 * want,
                 "%s N=%d: logged %s %.17g, ring walk gives %.17g bytes per rank", so_file,
                 (int)n, METRIC, logged, want);
    bytes_world_close(&w);
}

CT_TEST(comm_threads_bytes_per_rank_equals_ring_walk_for_2_3_4_8_ranks) {
    int32_t sizes[] = {2, 3, 4, 8};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        run_world("comm_threads.so", sizes[i]);
}

CT_TEST(comm_threads_world_of_one_reports_zero_bytes) { run_world("comm_threads.so", 1); }

CT_TEST(comm_local_reports_zero_bytes_for_every_call) { run_world("comm_local.so", 1); }

/* The ring figures for a 2-rank world written out as numbers, so a mistake shared by the
 * plugin's formula and the ring walk above (both N-generic) would still show. */
CT_TEST(comm_threads_bytes_two_ranks_written_out) {
    /* all_reduce 1001 f32: chunks 500 and 501, each one hop per pass: 2 * 1001 * 4 = 8008;
     * reduce_scatter 2 blocks of 300 bf16, one hop each: 1200; all_gather 2 * 257 * 4 = 2056;
     * all_to_all 2 * 64 * 2 = 256; broadcast 10 f64 over one link: 80; send 100 f32: 400. */
    double total = 8008 + 1200 + 2056 + 256 + 80 + 400;
    CT_CHECK_CLOSE(ring_total_bytes(2), total, 0, 0);
}
