/* watchdog.c — the grace period after a stop signal and the report of where each rank is (see
 * watchdog.h). Not for: the signal handlers (preempt.c) or the call records (calls.c).
 */
#include "run/watchdog.h"

#include "plugin/calls.h"
#include "base/fatal.h"
#include "run/preempt.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <stdatomic.h>
#include <unistd.h>

static _Atomic double grace;
/* The longest step any rank of this process took, in microseconds (the grace period is at least
 * WATCHDOG_STEPS_OF_GRACE of them). */
static _Atomic unsigned long long longest_step_us;
static unsigned long long seq_at[CALLS_SLOTS]; /* each slot's calls when the signal came */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Every rank slot the process runs has reached the end of a step after the request, or is done. */
static int all_at_step_end(void) {
    int32_t n = calls_expected_ranks();
    if (n <= 0) return 0; /* the ranks have not started: the main thread is setting up */
    for (int32_t i = 1; i <= n && i < CALLS_SLOTS; i++) {
        const calls_slot *s = calls_slot_at(i);
        if (!CALLS_LOAD(s->stop_seen) && !CALLS_LOAD(s->done)) return 0;
    }
    return 1;
}

size_t watchdog_report(char *buf, size_t cap, int sig, double waited_s,
                       const unsigned long long *seq_at_signal) {
    size_t n = 0;
    if (cap == 0) return 0;
    cap--;
    char num[64];
    snprintf(num, sizeof num, "%.3g", waited_s);
    n = fatal_put_str(buf, n, cap, "ctrain: ");
    n = fatal_put_str(buf, n, cap, preempt_signal_name(sig));
    n = fatal_put_str(buf, n, cap, " came ");
    n = fatal_put_str(buf, n, cap, num);
    int32_t ranks = calls_expected_ranks();
    n = fatal_put_str(buf, n, cap, ranks > 0 ? " s ago and the step has not ended ([run] "
                                               "stop_grace_s); where each rank is:\n"
                                             : " s ago, before any rank started (ctrain was "
                                               "setting up); where it is:\n");
    for (int32_t i = 0; i < CALLS_SLOTS; i++) {
        const calls_slot *s = calls_slot_at(i);
        int busy = CALLS_LOAD(s->active) || CALLS_LOAD(s->host_op);
        if (i > 0 && (i > ranks || CALLS_LOAD(s->done) || CALLS_LOAD(s->stop_seen))) continue;
        if (i == 0 && (!busy || !CALLS_LOAD(s->bound))) continue; /* main: only when busy */
        n = fatal_put_str(buf, n, cap, "ctrain:   ");
        if (i == 0) {
            n = fatal_put_str(buf, n, cap, "the main thread");
        } else {
            n = fatal_put_str(buf, n, cap, "rank ");
            n = fatal_put_int(buf, n, cap, CALLS_LOAD(s->rank));
        }
        if (i > 0 && !CALLS_LOAD(s->bound)) {
            n = fatal_put_str(buf, n, cap, ": not started yet\n");
            continue;
        }
        n = fatal_put_str(buf, n, cap, busy ? ": in " : ": in ctrain between plugin calls");
        if (busy) n = calls_put_where(buf, n, cap, s);
        if (CALLS_LOAD(s->active) && seq_at_signal &&
            (unsigned long long)CALLS_LOAD(s->seq) == seq_at_signal[i])
            n = fatal_put_str(buf, n, cap, " (the same call since the signal)");
        n = fatal_put_str(buf, n, cap, "\n");
    }
    if (ranks <= 0 && !(CALLS_LOAD(calls_slot_at(0)->active) ||
                        CALLS_LOAD(calls_slot_at(0)->host_op)))
        n = fatal_put_str(buf, n, cap, "ctrain:   the ranks have not started (setting up)\n");
    n = fatal_put_str(buf, n, cap, "ctrain: ending the process with status ");
    n = fatal_put_int(buf, n, cap, WATCHDOG_EXIT_STUCK);
    n = fatal_put_str(buf, n, cap, ", without a checkpoint ---> a call named above does not "
                                   "return (a hang in that plugin, or ctrain blocked) or a step "
                                   "takes longer than [run] stop_grace_s; the newest checkpoint "
                                   "is the last good one\n");
    buf[n] = '\0';
    return n;
}

static void *watch(void *arg) {
    (void)arg;
    int sig = preempt_wait();
    double t0 = now_s();
    for (int32_t i = 0; i < CALLS_SLOTS; i++) seq_at[i] = CALLS_LOAD(calls_slot_at(i)->seq);
    for (;;) {
        if (now_s() - t0 >= watchdog_grace()) break;
        if (all_at_step_end()) return NULL; /* train.c checkpoints and exits */
        struct timespec nap = {0, 20 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
    if (all_at_step_end()) return NULL;
    static char report[16384];
    watchdog_report(report, sizeof report, sig, now_s() - t0, seq_at);
    fatal_write(report);
    _exit(WATCHDOG_EXIT_STUCK);
}

double watchdog_grace(void) {
    double steps = (double)atomic_load(&longest_step_us) * 1e-6 * WATCHDOG_STEPS_OF_GRACE;
    double floor_s = atomic_load(&grace);
    return steps > floor_s ? steps : floor_s;
}

void watchdog_step_took(double seconds) {
    unsigned long long us = seconds > 0 ? (unsigned long long)(seconds * 1e6) : 0;
    unsigned long long seen = atomic_load(&longest_step_us);
    while (us > seen && !atomic_compare_exchange_weak(&longest_step_us, &seen, us)) {
    }
}

void watchdog_set_grace(double grace_s) {
    atomic_store(&grace, grace_s);
}

int watchdog_start(double grace_s) {
    atomic_store(&grace, grace_s);
    pthread_t t;
    pthread_attr_t attr;
    if (pthread_attr_init(&attr) != 0) return -1;
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&t, &attr, watch, NULL);
    pthread_attr_destroy(&attr);
    return rc == 0 ? 0 : -1;
}
