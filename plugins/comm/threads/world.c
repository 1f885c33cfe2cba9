/* world.c — the shared state of an in-process world (see world.h): rendezvous with timed
 * waits, the failure flag, tagged mailboxes. One mutex and one condition variable; waits are
 * timed so that a rank that never comes is found within timeout_s.
 * Not for: reading other ranks' buffers (comm_threads.c does that between two rendezvous).
 */
#include "world.h"

#include <errno.h>
#include <stdlib.h>
#include <time.h>

struct mail {
    mail    *next;
    int32_t  src;
    int32_t  tag;
    uint64_t bytes;
    unsigned char data[]; /* (bytes) */
};

comm_world *world_new(int32_t world_size, const order_config *order, double timeout_s,
                      ct_error *err) {
    comm_world *w = calloc(1, sizeof *w);
    if (!w) goto out_nomem;
    w->world_size = world_size;
    w->order = *order;
    w->timeout_s = timeout_s;
    w->failed_rank = -1;
    w->entered = calloc((size_t)world_size, sizeof *w->entered);
    w->posts = calloc((size_t)world_size, sizeof *w->posts);
    w->inbox = calloc((size_t)world_size, sizeof *w->inbox);
    if (!w->entered || !w->posts || !w->inbox) goto out_free_arrays;

    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca)) goto out_free_arrays;
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* deadlines immune to clock changes */
    int bad = pthread_cond_init(&w->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (bad) goto out_free_arrays;
    if (pthread_mutex_init(&w->mu, NULL)) goto out_destroy_cond;
    return w;

out_destroy_cond:
    pthread_cond_destroy(&w->cv);
out_free_arrays:
    free(w->entered);
    free(w->posts);
    free(w->inbox);
    free(w);
out_nomem:
    ct_error_set(err, CT_ERR_NOMEM, "comm threads: out of memory creating a world of %d ranks",
                 (int)world_size);
    return NULL;
}

void world_free(comm_world *w) {
    if (!w) return;
    for (int32_t r = 0; r < w->world_size; r++) {
        for (mail *m = w->inbox[r], *next; m; m = next) {
            next = m->next;
            free(m);
        }
    }
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w->entered);
    free(w->posts);
    free(w->inbox);
    free(w);
}

/* ---------------------------------------------------------------------------------------
 * failure
 * ------------------------------------------------------------------------------------- */

static void fail_locked(comm_world *w, int32_t rank, const char *why) {
    if (w->failed_rank >= 0) return; /* the first failure is the cause; later ones follow */
    w->failed_rank = rank;
    snprintf(w->why, sizeof w->why, "%s", why && *why ? why : "(no reason given)");
    pthread_cond_broadcast(&w->cv);
}

void world_fail(comm_world *w, int32_t rank, const char *why) {
    pthread_mutex_lock(&w->mu);
    fail_locked(w, rank, why);
    pthread_mutex_unlock(&w->mu);
}

static int32_t failed_error_locked(comm_world *w, int32_t rank, ct_error *err) {
    if (w->failed_rank == rank)
        return ct_error_set(err, CT_ERR_COMM, "comm threads: rank %d (this rank) failed: %s",
                            (int)rank, w->why);
    return ct_error_set(err, CT_ERR_COMM,
                        "comm threads: rank %d failed: %s ---> HINT: the cause is in rank %d's "
                        "log; this rank stopped because of it",
                        (int)w->failed_rank, w->why, (int)w->failed_rank);
}

int32_t world_check(comm_world *w, int32_t rank, ct_error *err) {
    pthread_mutex_lock(&w->mu);
    int32_t rc = w->failed_rank >= 0 ? failed_error_locked(w, rank, err) : CT_OK;
    pthread_mutex_unlock(&w->mu);
    return rc;
}

/* ---------------------------------------------------------------------------------------
 * timed waiting
 * ------------------------------------------------------------------------------------- */

static struct timespec deadline_after(double seconds) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    double whole = (double)(time_t)seconds;
    t.tv_sec += (time_t)seconds;
    t.tv_nsec += (long)((seconds - whole) * 1e9);
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    return t;
}

/* Sleep on the condition variable until signalled or the deadline; 1 when the deadline has
 * passed. Called with the mutex held. */
static int wait_until(comm_world *w, const struct timespec *deadline) {
    int rc = pthread_cond_timedwait(&w->cv, &w->mu, deadline);
    return rc == ETIMEDOUT;
}

/* ---------------------------------------------------------------------------------------
 * rendezvous
 * ------------------------------------------------------------------------------------- */

int32_t world_rendezvous(comm_world *w, int32_t rank, const char *what, ct_error *err) {
    pthread_mutex_lock(&w->mu);
    if (w->failed_rank >= 0) goto out_failed;
    uint64_t gen = w->generation;
    w->entered[rank]++;
    if (++w->arrived == w->world_size) {
        w->arrived = 0;
        w->generation++;
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
        return CT_OK;
    }
    struct timespec deadline = deadline_after(w->timeout_s);
    while (w->generation == gen && w->failed_rank < 0) {
        if (!wait_until(w, &deadline) || w->generation != gen) continue;
        /* Timed out: the first rank that has not entered this rendezvous is the culprit. */
        int32_t missing = -1;
        for (int32_t r = 0; r < w->world_size && missing < 0; r++)
            if (w->entered[r] < w->entered[rank]) missing = r;
        char why[300];
        snprintf(why, sizeof why,
                 "did not reach %s within %.3g s (rank %d waited): hung, crashed, or called "
                 "the collectives in another order ---> HINT: raise [comm] timeout_s if it is "
                 "only slow",
                 what, w->timeout_s, (int)rank);
        fail_locked(w, missing >= 0 ? missing : rank, why);
    }
    if (w->generation != gen) { /* completed, even if a failure came right after */
        pthread_mutex_unlock(&w->mu);
        return CT_OK;
    }
out_failed:;
    int32_t rc = failed_error_locked(w, rank, err);
    pthread_mutex_unlock(&w->mu);
    return rc;
}

/* ---------------------------------------------------------------------------------------
 * mailboxes
 * ------------------------------------------------------------------------------------- */

int32_t world_send(comm_world *w, int32_t src, int32_t dst, int32_t tag, const void *buf,
                   uint64_t bytes, ct_error *err) {
    mail *m = malloc(sizeof *m + bytes);
    if (!m)
        return ct_error_set(err, CT_ERR_NOMEM, "comm threads: out of memory buffering %llu "
                            "bytes for rank %d", (unsigned long long)bytes, (int)dst);
    m->next = NULL;
    m->src = src;
    m->tag = tag;
    m->bytes = bytes;
    if (bytes) memcpy(m->data, buf, (size_t)bytes);

    pthread_mutex_lock(&w->mu);
    if (w->failed_rank >= 0) {
        int32_t rc = failed_error_locked(w, src, err);
        pthread_mutex_unlock(&w->mu);
        free(m);
        return rc;
    }
    mail **tail = &w->inbox[dst];
    while (*tail) tail = &(*tail)->next;
    *tail = m;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return CT_OK;
}

int32_t world_recv(comm_world *w, int32_t dst, int32_t src, int32_t tag, void *buf,
                   uint64_t bytes, ct_error *err) {
    pthread_mutex_lock(&w->mu);
    struct timespec deadline = deadline_after(w->timeout_s);
    for (;;) {
        if (w->failed_rank >= 0) break;
        for (mail **pm = &w->inbox[dst]; *pm; pm = &(*pm)->next) {
            mail *m = *pm;
            if (m->src != src || m->tag != tag) continue;
            *pm = m->next;
            pthread_mutex_unlock(&w->mu);
            int32_t rc = CT_OK;
            if (m->bytes != bytes)
                rc = ct_error_set(err, CT_ERR_COMM,
                                  "comm threads: rank %d sent %llu bytes with tag %d but rank "
                                  "%d expected %llu ---> HINT: send and recv must agree on "
                                  "count and dtype",
                                  (int)src, (unsigned long long)m->bytes, (int)tag, (int)dst,
                                  (unsigned long long)bytes);
            else if (bytes)
                memcpy(buf, m->data, (size_t)bytes);
            free(m);
            return rc;
        }
        if (wait_until(w, &deadline)) {
            char why[300];
            snprintf(why, sizeof why,
                     "sent nothing with tag %d to rank %d within %.3g s ---> HINT: check that "
                     "every recv has a matching send",
                     (int)tag, (int)dst, w->timeout_s);
            fail_locked(w, src, why);
        }
    }
    int32_t rc = failed_error_locked(w, dst, err);
    pthread_mutex_unlock(&w->mu);
    return rc;
}
