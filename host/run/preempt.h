/* preempt.h — SIGTERM, SIGINT and SIGUSR1 (what a scheduler sends before it preempts a job)
 * as a request to stop: the first sets a process flag that the training loop reads at the end
 * of every step (train.c agrees on it over ranks, checkpoints and exits with
 * PREEMPT_EXIT_STOPPED); a second one ends the process at once with 128 + its number (the
 * shell's convention: 143 for SIGTERM, 130 for SIGINT, 138 for SIGUSR1). Checkpoints are
 * written to a temporary folder and renamed (checkpoint.c), so dying mid-save leaves the
 * newest complete checkpoint as it was. When the step does not end, the watchdog (watchdog.h)
 * ends the process after a grace period, naming where each rank is.
 * Not for: crash signals (fatal.c, supervise.c) or the agreement between ranks (train.c).
 */
#ifndef CTRAIN_HOST_PREEMPT_H
#define CTRAIN_HOST_PREEMPT_H

#include <stdint.h>

/* `ctrain train`'s exit status after a stop request was honoured: every rank finished the same
 * step, the checkpoint of that step was written, and the process exited. */
#define PREEMPT_EXIT_STOPPED 3

/* Install the handlers (sigaction, SA_RESTART) for SIGTERM, SIGINT and SIGUSR1. The handlers
 * only store into a volatile sig_atomic_t, or call _exit on the second signal. Returns 0, or
 * -1 when sigaction fails (errno set). */
int preempt_install(void);

/* The signal number of the first stop request, 0 while none came. Any thread. */
int preempt_requested(void);

/* Block the calling thread until the first stop request has come (the handler posts a
 * semaphore, which is async-signal-safe); returns its signal number. For the watchdog
 * (watchdog.h). */
int preempt_wait(void);

/* "SIGTERM", "SIGINT", "SIGUSR1", or "signal N". */
const char *preempt_signal_name(int sig);

#endif /* CTRAIN_HOST_PREEMPT_H */
