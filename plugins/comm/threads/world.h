/* world.h — what the rank threads of one in-process world share: a rendezvous (a barrier that
 * gives up when the world has failed or a rank does not come), the posted arguments of the
 * collective in progress, the failure flag set by abort, and tagged mailboxes for send/recv.
 * Not for: the arithmetic (reduce.h) or the vtable (comm_threads.c). No busy waiting:
 * everything sleeps on one condition variable, so 64 ranks run on 2 cores.
 */
#ifndef COMM_THREADS_WORLD_H
#define COMM_THREADS_WORLD_H

#include <ctrain/ctrain.h>

#include "orders.h"

#include <pthread.h>

/* Kinds of collective, for matching the calls of all ranks. */
typedef enum coll_kind {
    COLL_ALL_REDUCE     = 1,
    COLL_REDUCE_SCATTER = 2,
    COLL_ALL_GATHER     = 3,
    COLL_ALL_TO_ALL     = 4,
    COLL_BROADCAST      = 5,
    COLL_BARRIER        = 6,
} coll_kind;

/* What a rank posts before the rendezvous; the others read it between the rendezvous that
 * opens the collective and the one that closes it. The buffers are the rank's own. */
typedef struct coll_post {
    int32_t     kind;  /* a coll_kind */
    uint64_t    count;
    int32_t     dtype;
    int32_t     op;    /* reductions only */
    int32_t     root;  /* broadcast only */
    const void *send;
    void       *recv;
    int32_t     sr;        /* reductions: 1 = stochastic rounding (all_reduce_sr, ...) */
    uint64_t    sr_stream; /* its random stream (ABI 1.5) */
} coll_post;

typedef struct mail mail; /* one buffered message (world.c) */

typedef struct comm_world {
    int32_t         world_size;
    order_config    order;     /* the reduction order ([comm] algo, channels, gpus_per_node) */
    double          timeout_s; /* longest wait for a peer before the world is declared failed */

    pthread_mutex_t mu;        /* guards everything below */
    pthread_cond_t  cv;        /* signalled on every rendezvous completion, mail and failure */
    uint64_t        generation;  /* rendezvous completed */
    int32_t         arrived;     /* ranks waiting in the current rendezvous */
    uint64_t       *entered;     /* (world_size) rendezvous each rank has entered */
    coll_post      *posts;       /* (world_size) */
    int32_t         failed_rank; /* -1 while healthy; otherwise the rank that failed */
    char            why[400];    /* its reason */
    mail          **inbox;       /* (world_size) FIFO of messages to each rank */
} comm_world;

/* A world of world_size ranks; NULL + err when out of memory. */
comm_world *world_new(int32_t world_size, const order_config *order, double timeout_s,
                      ct_error *err);
void world_free(comm_world *w);

/* Wait until every rank has entered this rendezvous (`what` names it in messages, e.g.
 * "all_reduce #12"). CT_OK, or CT_ERR_COMM when the world has failed (abort by a rank, or a
 * rank that did not arrive within timeout_s: it is then declared the failed one). */
int32_t world_rendezvous(comm_world *w, int32_t rank, const char *what, ct_error *err);

/* Mark the world failed by `rank` for `why` (first failure wins) and wake every waiter. */
void world_fail(comm_world *w, int32_t rank, const char *why);

/* CT_ERR_COMM with "rank R failed: why" when the world has failed, else CT_OK. */
int32_t world_check(comm_world *w, int32_t rank, ct_error *err);

/* Point-to-point: send copies buf into the peer's mailbox and returns (never blocks); recv
 * takes the oldest message from `src` with `tag`, waiting up to timeout_s. A size mismatch
 * is CT_ERR_COMM naming both sides. */
int32_t world_send(comm_world *w, int32_t src, int32_t dst, int32_t tag, const void *buf,
                   uint64_t bytes, ct_error *err);
int32_t world_recv(comm_world *w, int32_t dst, int32_t src, int32_t tag, void *buf,
                   uint64_t bytes, ct_error *err);

#endif /* COMM_THREADS_WORLD_H */
