/* nccl_watch.h — the decisions of comm nccl's waiting loop as pure functions (no NCCL, no CUDA,
 * no clock): what one look at the awaited work, NCCL's asynchronous error state, the control
 * channel and the clock means, and how long to nap between looks. comm_nccl.c feeds them;
 * tests/unit/test_nccl_watch.c checks them on a CPU. Not for: anything that calls NCCL.
 */
#ifndef CT_NCCL_WATCH_H
#define CT_NCCL_WATCH_H

#include <stdint.h>

typedef enum nw_verdict {
    NW_WAIT        = 0, /* nothing decided: look again */
    NW_DONE        = 1, /* the awaited work completed */
    NW_PEER_FAILED = 2, /* another rank's abort message arrived on the control channel */
    NW_NCCL_ERROR  = 3, /* ncclCommGetAsyncError reports an error (a peer's connection broke) */
    NW_TIMED_OUT   = 4, /* timeout_s passed since the wait began */
} nw_verdict;

/* One look. done: the work completed; peer_failed: an abort message is there; nccl_error:
 * NCCL's asynchronous state is an error (neither success nor in progress); started_s / now_s:
 * monotonic seconds at the start of the wait and now; timeout_s > 0. Completed work wins (the
 * next call sees the failure), then a peer's own reason, then NCCL's, then the clock; the wait
 * times out only strictly after timeout_s. */
static inline nw_verdict nw_look(int done, int peer_failed, int nccl_error, double started_s,
                                 double now_s, double timeout_s) {
    if (done) return NW_DONE;
    if (peer_failed) return NW_PEER_FAILED;
    if (nccl_error) return NW_NCCL_ERROR;
    if (now_s - started_s > timeout_s) return NW_TIMED_OUT;
    return NW_WAIT;
}

#define NW_SPIN_LOOKS 4096  /* looks without a nap: short collectives return at once */
#define NW_NAP_NS     20000 /* then 20 us between looks: a long wait does not burn a core */

/* Nanoseconds to sleep after look number `looks` (0-based). */
static inline long nw_nap_ns(uint64_t looks) { return looks < NW_SPIN_LOOKS ? 0 : NW_NAP_NS; }

#endif /* CT_NCCL_WATCH_H */
