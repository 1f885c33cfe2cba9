/* watchdog.h — after the first stop signal (preempt.h), a thread that gives the ranks of this
 * process a grace period to reach the end of their step. When one has not (it hangs in a
 * plugin call, or ctrain itself is blocked, say in an open() that does not return), it prints
 * where each rank is — which plugin and call, or which operation of ctrain's own (calls.h) —
 * and ends the process with WATCHDOG_EXIT_STUCK, without a checkpoint.
 * Not for: the stop itself when the step does end (train.c checkpoints and exits 3) or a rank
 * that fails (supervise.h).
 */
#ifndef CTRAIN_HOST_WATCHDOG_H
#define CTRAIN_HOST_WATCHDOG_H

#include <stddef.h>

/* `ctrain train`'s exit status when the ranks did not reach the end of their step within the
 * grace period after a stop signal. */
#define WATCHDOG_EXIT_STUCK 4

/* The grace period is [run] stop_grace_s, or this many times the longest step a rank of this
 * process has taken, whichever is longer: a run whose steps take minutes is given the time to
 * finish the step it is in, and a hang is still reported. */
#define WATCHDOG_STEPS_OF_GRACE 3

/* A rank took `seconds` for its latest step (the loop calls it once a step; any thread). */
void watchdog_step_took(double seconds);
/* The grace period as it stands: max(grace_s of watchdog_start, WATCHDOG_STEPS_OF_GRACE x the
 * longest step reported so far), in seconds. */
double watchdog_grace(void);

/* Start the watchdog thread (detached; it waits for the first stop request, so preempt_install
 * must have run): after the request, once every rank slot the process expects (calls.h:
 * calls_expect_ranks) has reached the end of a step or finished, it does nothing more; when
 * the grace period (grace_s, or WATCHDOG_STEPS_OF_GRACE longest steps) passes first, it prints
 * the report and calls _exit(WATCHDOG_EXIT_STUCK). 0, or -1
 * when the thread cannot be started. */
int watchdog_start(double grace_s);

/* Change the grace period's floor (grace_s of watchdog_start): a command starts the watchdog
 * before it has read its configuration, then sets [run] stop_grace_s. Any thread. */
void watchdog_set_grace(double grace_s);

/* The report, as the watchdog prints it (one line per thread that is busy), into buf; `sig`
 * the stop signal, `waited_s` how long ago it came. Returns the length (at most cap - 1). For
 * tests and for the watchdog itself; reads the call records without locks. */
size_t watchdog_report(char *buf, size_t cap, int sig, double waited_s,
                       const unsigned long long *seq_at_signal);

#endif /* CTRAIN_HOST_WATCHDOG_H */
