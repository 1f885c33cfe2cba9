/* preempt.c — the stop-request signal handlers (see preempt.h): a flag on the first signal,
 * _exit(128 + signal) on the second. Async-signal-safe: the handler touches a sig_atomic_t,
 * posts a semaphore (for the watchdog) and calls _exit, nothing else. Not for: deciding when
 * the ranks stop (train.c).
 */
#include "run/preempt.h"

#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t requested; /* signal number of the first request, 0: none */
static sem_t came;                        /* posted once, by the first request */

static void on_stop_signal(int sig) {
    if (requested) _exit(128 + sig); /* the second request: at once, nothing flushed */
    requested = sig;
    sem_post(&came);
}

int preempt_install(void) {
    static int sem_ready;
    if (!sem_ready && sem_init(&came, 0, 0) != 0) return -1;
    sem_ready = 1;
    static const int sigs[] = {SIGTERM, SIGINT, SIGUSR1};
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++)
        if (sigaction(sigs[i], &sa, NULL) != 0) return -1;
    return 0;
}

int preempt_requested(void) { return (int)requested; }

int preempt_wait(void) {
    while (sem_wait(&came) != 0) {} /* EINTR: a signal (maybe this one) interrupted the wait */
    return (int)requested;
}

const char *preempt_signal_name(int sig) {
    static char other[32];
    switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGUSR1: return "SIGUSR1";
    default: snprintf(other, sizeof other, "signal %d", sig); return other;
    }
}
