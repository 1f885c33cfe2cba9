/* test_nccl_watch.c — the decisions of comm nccl's waiting loop (plugins/comm/nccl/nccl_watch.h),
 * checked on a CPU: completed work wins, a peer's abort message beats NCCL's own error, the
 * clock ends a wait only strictly after timeout_s, and the naps start only after the spins.
 * Then the loop itself, driven as comm_nccl.c drives it with a fake clock: a dead peer (never
 * done, no message, no error) is declared within timeout_s plus one nap on every rank.
 * Not for: NCCL itself (tests/gpu/cuda_vs_cpu.c runs comm nccl on a GPU).
 */
#include "ct_test.h"

#include "../../plugins/comm/nccl/nccl_watch.h"

CT_TEST(nccl_watch_done_wins_over_every_failure) {
    CT_CHECK_INT(nw_look(1, 1, 1, 0.0, 1e9, 10.0), NW_DONE);
    CT_CHECK_INT(nw_look(1, 0, 0, 0.0, 0.0, 10.0), NW_DONE);
}

CT_TEST(nccl_watch_peer_message_beats_nccl_error_and_clock) {
    CT_CHECK_INT(nw_look(0, 1, 1, 0.0, 1e9, 10.0), NW_PEER_FAILED);
    CT_CHECK_INT(nw_look(0, 0, 1, 0.0, 1e9, 10.0), NW_NCCL_ERROR);
    CT_CHECK_INT(nw_look(0, 0, 1, 0.0, 0.0, 10.0), NW_NCCL_ERROR);
}

CT_TEST(nccl_watch_times_out_strictly_after_timeout) {
    CT_CHECK_INT(nw_look(0, 0, 0, 100.0, 110.0, 10.0), NW_WAIT);
    CT_CHECK_INT(nw_look(0, 0, 0, 100.0, 110.001, 10.0), NW_TIMED_OUT);
    CT_CHECK_INT(nw_look(0, 0, 0, 100.0, 100.5, 1.0), NW_WAIT);
}

CT_TEST(nccl_watch_naps_only_after_the_spins) {
    CT_CHECK_INT(nw_nap_ns(0), 0);
    CT_CHECK_INT(nw_nap_ns(NW_SPIN_LOOKS - 1), 0);
    CT_CHECK_INT(nw_nap_ns(NW_SPIN_LOOKS), NW_NAP_NS);
    CT_CHECK_INT(nw_nap_ns(1000000000ull), NW_NAP_NS);
}

/* The loop of comm_nccl.c's watch() with a clock that advances by each nap (and 1 us per
 * look): returns the verdict and the simulated seconds it took. `peer_at` / `error_at`: the
 * simulated time at which an abort message / an NCCL error appears (< 0: never). */
static nw_verdict simulate(double timeout_s, double peer_at, double error_at, double *took) {
    double now = 0.0;
    for (uint64_t looks = 0;; looks++) {
        nw_verdict v = nw_look(0, peer_at >= 0 && now >= peer_at, error_at >= 0 && now >= error_at,
                               0.0, now, timeout_s);
        if (v != NW_WAIT) {
            *took = now;
            return v;
        }
        now += 1e-6 + (double)nw_nap_ns(looks) * 1e-9;
    }
}

CT_TEST(nccl_watch_dead_peer_declared_within_timeout_plus_one_nap) {
    for (double timeout = 1.0; timeout <= 4.0; timeout *= 2) {
        double took = 0;
        CT_CHECK_INT(simulate(timeout, -1, -1, &took), NW_TIMED_OUT);
        CT_CHECK_MSG(took > timeout && took <= timeout + (NW_NAP_NS + 1000) * 1e-9,
                     "timeout %.1f s: declared after %.9f s, expected in (%.1f, %.9f]", timeout,
                     took, timeout, timeout + (NW_NAP_NS + 1000) * 1e-9);
    }
}

CT_TEST(nccl_watch_abort_message_ends_the_wait_before_the_timeout) {
    double took = 0;
    CT_CHECK_INT(simulate(600.0, 0.5, -1, &took), NW_PEER_FAILED);
    CT_CHECK_CLOSE(took, 0.5, 0, (NW_NAP_NS + 1000) * 1e-9);
    CT_CHECK_INT(simulate(600.0, -1, 2.0, &took), NW_NCCL_ERROR);
    CT_CHECK_CLOSE(took, 2.0, 0, (NW_NAP_NS + 1000) * 1e-9);
}
