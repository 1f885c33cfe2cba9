/* threads_world.h — the unit tests' in-process world of the threads comm engine: N ranks, each
 * with its own instance of the real comm_threads.so (world_create + create, as the host makes
 * them) and its own thread, configured by [comm] INI text. Shared by test_comm_threads.c and
 * test_nccl_split.c. Not for: what a rank computes (each test's jobs) or a one-rank harness
 * (harness.h).
 */
#ifndef CT_TEST_THREADS_WORLD_H
#define CT_TEST_THREADS_WORLD_H

#include "harness.h"

#include <ctrain/ctrain.h>

#define MAX_RANKS 64

typedef struct world_run {
    ct_harness           *h;
    const ct_comm_vtable *vt;
    void                 *world;
    void                 *ranks[MAX_RANKS];
    int32_t               n;
} world_run;

typedef struct rank_job rank_job;
struct rank_job {
    world_run *w;
    int32_t    rank;
    void     (*fn)(rank_job *job);
    void      *arg;     /* the test's shared data */
    int32_t    rc;      /* what the rank's calls returned (first failure) */
    ct_error   err;
    double     seconds; /* how long fn ran */
};

/* Opens a world of n ranks configured by the [comm] text `ini`; 0 on failure (the current test
 * has failed). */
int world_open(world_run *w, int32_t n, const char *ini);
void world_close(world_run *w);

/* Runs fn on every rank in its own thread and joins them; jobs has w->n entries. */
void world_run_all(world_run *w, void (*fn)(rank_job *), void *arg, rank_job *jobs);

/* The rank's comm instance. */
static inline void *job_comm(rank_job *job) { return job->w->ranks[job->rank]; }

/* Record the first failing call of a rank. */
static inline void job_note(rank_job *job, int32_t rc) {
    if (rc != CT_OK && job->rc == CT_OK) job->rc = rc;
}

/* A test failure for every rank whose calls failed. */
void check_all_ok(const rank_job *jobs, int32_t n);

#endif /* CT_TEST_THREADS_WORLD_H */
