/* supervise.h — watching the rank threads of this process while they run: each failure is
 * recorded as it happens and the first real one printed at once; a rank that does not stop
 * after a failure is named and the process ended; a fatal signal is reported with the rank
 * whose thread received it. Not for: starting the threads or the ranks' work (train.c), or
 * telling the other ranks (the comm plugin's abort()).
 *
 * Order of messages: a rank's own error (any code but CT_ERR_COMM) is printed the moment it is
 * recorded. A CT_ERR_COMM failure is usually the echo of another rank's error, so it is held
 * back SUPERVISE_SETTLE_S; it is printed only when no real error came in that time (then it is
 * the cause: a rank timed out, or the ranks called different collectives). Record a failure
 * before aborting the comm world, so the echoes cannot overtake it. */
#ifndef CTRAIN_HOST_SUPERVISE_H
#define CTRAIN_HOST_SUPERVISE_H

#include <ctrain/ctrain.h>

#include <stdio.h>

#define SUPERVISE_SETTLE_S 0.5 /* how long a comm error waits for the real cause */

typedef struct supervisor supervisor;

/* A supervisor of n_slots ranks that prints to `out` (stderr in ctrain). grace_s: how long
 * supervise_wait waits for the other ranks to stop after the first failure. NULL when out of
 * memory. */
supervisor *supervise_new(int32_t n_slots, double grace_s, FILE *out);
/* Only once every slot is done (or the process is about to end). */
void supervise_free(supervisor *sv);

/* Slot `slot` is rank `rank` (messages name ranks, not slots); also sets the rank of the calling
 * thread's call record (calls.h), which the fatal-signal report names. */
void supervise_set_rank(supervisor *sv, int32_t slot, int32_t rank);

/* Slot `slot` failed with rc != CT_OK and err; prints it now when it is the first real error
 * (see the order above). Thread-safe. */
void supervise_failed(supervisor *sv, int32_t slot, int32_t rc, const ct_error *err);

/* Slot `slot`'s work is over (success or failure); call last in its thread. Thread-safe. */
void supervise_done(supervisor *sv, int32_t slot);

/* Wait until every slot is done, or until grace_s after the first failure. Prints a failure not
 * printed yet. Returns 0 when every slot succeeded, else 1. *still_running: slots not done when
 * the grace period ended (they are named in a message; the caller then ends the process, since
 * their threads still use what the run owns). */
int32_t supervise_wait(supervisor *sv, int32_t *still_running);

/* Report SIGSEGV, SIGBUS, SIGFPE, SIGILL and SIGABRT on stderr with the rank of the thread that
 * received it and the plugin call it was in (calls.h): "ctrain: rank 1 crashed: signal 11
 * (Segmentation fault) in loss fault (FILE): forward_backward ---> ..."; a thread ctrain did not
 * start (a plugin's own) is reported with the plugin calls in progress on ctrain's threads.
 * Then die by the same signal (exit status 128 + signal). Signals already handled (e.g. by a
 * sanitizer) are left. Any command that calls plugins installs it (main.c). */
void supervise_report_fatal_signals(void);

#endif /* CTRAIN_HOST_SUPERVISE_H */
