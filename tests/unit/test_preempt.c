/* test_preempt.c — claims about host/run/preempt.c: the first SIGTERM / SIGINT / SIGUSR1 only sets
 * the request (the process goes on, preempt_requested names the signal); the second ends the
 * process at once with status 128 + its number. Each claim runs in a forked child, so this
 * process's own signal dispositions are untouched.
 * Not for: the training loop's agreement and checkpoint (tests/cli/test_preempt.sh).
 */
#include "ct_test.h"
#include "run/preempt.h"

#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* In a child: install, raise sig once (expect the request recorded and the child alive), then
 * raise it again. The child exits 0 after the first raise only when something is wrong with
 * the second (it should not return). Returns the child's wait status. */
static int child_raises_twice(int sig) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        if (preempt_install() != 0) _exit(90);
        if (preempt_requested() != 0) _exit(91);
        raise(sig);
        if (preempt_requested() != sig) _exit(92);
        raise(sig);
        _exit(0); /* not reached: the second signal exits */
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return status;
}

CT_TEST(preempt_first_signal_requests_second_exits_with_128_plus_signal) {
    const int sigs[] = {SIGTERM, SIGINT, SIGUSR1};
    for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) {
        int st = child_raises_twice(sigs[i]);
        CT_CHECK_MSG(WIFEXITED(st), "%s: the child did not exit normally (status %#x)",
                     preempt_signal_name(sigs[i]), st);
        if (WIFEXITED(st))
            CT_CHECK_MSG(WEXITSTATUS(st) == 128 + sigs[i], "%s: expected exit %d, got %d "
                         "(90: install failed, 91: a request before any signal, 92: the first "
                         "signal was not recorded, 0: the second did not exit)",
                         preempt_signal_name(sigs[i]), 128 + sigs[i], WEXITSTATUS(st));
    }
}

CT_TEST(preempt_signal_names) {
    CT_CHECK(!strcmp(preempt_signal_name(SIGTERM), "SIGTERM"));
    CT_CHECK(!strcmp(preempt_signal_name(SIGINT), "SIGINT"));
    CT_CHECK(!strcmp(preempt_signal_name(SIGUSR1), "SIGUSR1"));
    CT_CHECK(!strcmp(preempt_signal_name(SIGHUP), "signal 1"));
}
