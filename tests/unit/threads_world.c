/* threads_world.c — the unit tests' in-process world of the threads comm engine (see
 * threads_world.h). Not for: assertions about the engine's results (the tests).
 */
#include "threads_world.h"

#include "ct_test.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int world_open(world_run *w, int32_t n, const char *ini) {
    memset(w, 0, sizeof *w);
    w->n = n;
    w->h = harness_new(ini);
    if (!w->h) return 0;
    ct_error err = {.struct_size = sizeof err};
    ct_harness_plugin p; /* validates [comm] against the schema (defaults filled) */
    if (harness_create(w->h, "comm_threads.so", "comm", &p, &err) != CT_OK) {
        ct_test_fail(__FILE__, __LINE__, "comm_threads.so: %s", err.message);
        return 0;
    }
    w->vt = p.vt;
    ct_create_args a0 = harness_args_rank(w->h, "comm", 0, n);
    w->world = w->vt->world_create(n, &a0, &err);
    if (!w->world) {
        ct_test_fail(__FILE__, __LINE__, "world_create(%d): %s", (int)n, err.message);
        return 0;
    }
    for (int32_t r = 0; r < n; r++) {
        ct_create_args a = harness_args_rank(w->h, "comm", r, n);
        a.comm_world = w->world;
        w->ranks[r] = w->vt->create(&a, &err);
        if (!w->ranks[r]) {
            ct_test_fail(__FILE__, __LINE__, "create rank %d: %s", (int)r, err.message);
            return 0;
        }
    }
    return 1;
}

void world_close(world_run *w) {
    for (int32_t r = 0; r < w->n; r++)
        if (w->ranks[r]) w->vt->destroy(w->ranks[r]);
    if (w->world) w->vt->world_destroy(w->world);
    harness_free(w->h);
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void *job_thread(void *p) {
    rank_job *job = p;
    double t0 = now_s();
    job->fn(job);
    job->seconds = now_s() - t0;
    return NULL;
}

void world_run_all(world_run *w, void (*fn)(rank_job *), void *arg, rank_job *jobs) {
    pthread_t tid[MAX_RANKS];
    for (int32_t r = 0; r < w->n; r++) {
        jobs[r] = (rank_job){.w = w, .rank = r, .fn = fn, .arg = arg,
                             .err = {.struct_size = sizeof(ct_error)}};
        pthread_create(&tid[r], NULL, job_thread, &jobs[r]);
    }
    for (int32_t r = 0; r < w->n; r++) pthread_join(tid[r], NULL);
}

void check_all_ok(const rank_job *jobs, int32_t n) {
    for (int32_t r = 0; r < n; r++)
        CT_CHECK_MSG(jobs[r].rc == CT_OK, "rank %d returned %d: %s", (int)r, (int)jobs[r].rc,
                     jobs[r].err.message);
}
