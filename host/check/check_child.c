/* check_child.c — check-plugin survives what it checks: each check runs in a forked child with a
 * time limit. The child prints its verdicts as usual and counts them into memory shared with
 * the parent; when it dies (a signal, an exit() inside the plugin, any other end) or does not
 * finish in time, the parent prints a FAIL line naming the check, the plugin call in progress
 * (calls.h, whose records are shared too) and how it ended, and goes on with the next check,
 * so the summary always prints. Not for: the checks themselves (check_<kind>.c) or the fences
 * around buffers (check_guard.c).
 */
#include "check/check.h"

#include "plugin/calls.h"
#include "base/cmdout.h"
#include "plugin/contract.h"
#include "base/fatal.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CHILD_OUT_MAX (1u << 20) /* bytes a check may hand back to the parent */

/* What a child leaves for its parent, in a shared mapping. */
struct check_report {
    int32_t  passed, failed; /* verdicts the child printed (check_verdict counts them here) */
    int32_t  done;           /* the body returned */
    int32_t  stop;           /* the body says the following checks cannot run */
    char     fault[400];     /* what the fault handler found out about a fault's address */
    uint64_t out_size;
    unsigned char out[CHILD_OUT_MAX];
};

static check_report *report; /* the child's, while a check runs in it */

void check_count(host_check *c, int ok) {
    if (ok) c->passed++;
    else c->failed++;
    if (c->report) {
        if (ok) c->report->passed++;
        else c->report->failed++;
    }
}

void check_stop(host_check *c) {
    if (c->report) c->report->stop = 1;
}

/* ---- the child ----------------------------------------------------------------------------- */

/* A fault in the child: note where it hit (a guard page names its buffer), then die of it. */
static void on_child_fault(int sig, siginfo_t *si, void *uctx) {
    (void)uctx;
    if (report && si && si->si_code > 0 && (sig == SIGSEGV || sig == SIGBUS)) {
        size_t n = check_buf_where(si->si_addr, report->fault, 0, sizeof report->fault - 1);
        report->fault[n] = '\0';
    }
    raise(sig); /* SA_RESETHAND: the default action now, and SA_NODEFER lets it through */
}

static void child_handlers(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_child_fault;
    sa.sa_flags = SA_SIGINFO | SA_RESETHAND | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < FATAL_SIGNAL_COUNT; i++) sigaction(fatal_signals[i], &sa, NULL);
}

/* ---- the parent ---------------------------------------------------------------------------- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* "in KIND NAME's CALL (rank R)" for every slot of the (shared) call records still in a plugin
 * call, into buf; *create set when one of them is create. Empty when none. */
static void calls_in_progress(char *buf, size_t cap, int *in_create) {
    size_t n = 0;
    *in_create = 0;
    buf[0] = '\0';
    for (int32_t i = 0; i < CALLS_SLOTS; i++) {
        const calls_slot *s = calls_slot_at(i);
        if (!CALLS_LOAD(s->active) || !CALLS_LOAD(s->plugin)) continue;
        const char *call = CALLS_LOAD(s->call);
        if (call && !strcmp(call, "create")) *in_create = 1;
        n = fatal_put_str(buf, n, cap - 1, n ? "; " : "in ");
        n = calls_put_where(buf, n, cap - 1, s);
        if (CALLS_LOAD(s->rank) >= 0) {
            n = fatal_put_str(buf, n, cap - 1, " (rank ");
            n = fatal_put_int(buf, n, cap - 1, CALLS_LOAD(s->rank));
            n = fatal_put_str(buf, n, cap - 1, ")");
        }
        buf[n] = '\0';
    }
}

/* Wait for the child `pid` whose pipe end is `fd` until `deadline`; *status its wait status.
 * Returns 0 when it ended, 1 when it had to be killed at the deadline. */
static int wait_child(pid_t pid, int fd, double deadline, int *status) {
    int killed = 0;
    for (;;) {
        double left = deadline - now_s();
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int ready = left > 0 ? poll(&pfd, 1, (int)(left * 1000) + 1) : 0;
        if (ready < 0 && errno == EINTR) continue;
        if (ready == 0) {
            killed = 1;
            kill(-pid, SIGKILL);
            kill(pid, SIGKILL);
            break;
        }
        char b[64];
        ssize_t r = read(fd, b, sizeof b);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break; /* EOF: the child (and whatever held the pipe) is gone */
    }
    while (waitpid(pid, status, 0) < 0 && errno == EINTR) {}
    return killed;
}

int check_in_child(host_check *c, const char *what, check_body body, void *ctx, void *out,
                   size_t out_size) {
    if (out_size > CHILD_OUT_MAX) out_size = CHILD_OUT_MAX;
    check_report *rep = mmap(NULL, sizeof *rep, PROT_READ | PROT_WRITE,
                             MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    int fds[2] = {-1, -1};
    if (rep == MAP_FAILED || pipe(fds) != 0) {
        if (rep != MAP_FAILED) munmap(rep, sizeof *rep);
        check_verdict(c, 0, "%s: cannot start a child process for the check: %s", what,
                      strerror(errno));
        return 0;
    }
    memset(rep, 0, offsetof(check_report, out));
    calls_clear(); /* no record of an earlier child's threads may name this one's death */
    calls_clear_exit_requested();
    fflush(NULL); /* nothing buffered is written twice */
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        munmap(rep, sizeof *rep);
        check_verdict(c, 0, "%s: cannot fork: %s", what, strerror(errno));
        return 0;
    }
    if (pid == 0) { /* the child: run the body, hand back, end without exit handlers */
        close(fds[0]);
        setpgid(0, 0);
        report = rep;
        c->report = rep;
        child_handlers();
        calls_quiet(1);
        body(c, ctx, out);
        if (out && out_size) {
            memcpy(rep->out, out, out_size);
            rep->out_size = out_size;
        }
        rep->done = 1;
        fflush(NULL);
        _exit(0);
    }
    close(fds[1]);
    int status = 0;
    int killed = wait_child(pid, fds[0], now_s() + c->timeout_s, &status);
    close(fds[0]);
    c->passed += rep->passed;
    c->failed += rep->failed;
    int ok = !killed && rep->done && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (ok) {
        if (out && out_size && rep->out_size == out_size) memcpy(out, rep->out, out_size);
        if (rep->stop) c->stop = 1;
        munmap(rep, sizeof *rep);
        calls_clear();
        return 1;
    }
    /* the child died: say of what, where */
    char where[900];
    int in_create = 0;
    calls_in_progress(where, sizeof where, &in_create);
    int asked = calls_exit_requested();
    const char *hint = "---> a plugin never ends the process and returns from every call; fix "
                       "the call named";
    if (killed)
        check_verdict(c, 0, "%s: no result within %g s: %s has not returned (a hang?) ---> "
                      "fix it, or give a slow check more time with --timeout SECONDS", what,
                      c->timeout_s, where[0] ? where + 3 : "the check");
    else if (WIFSIGNALED(status))
        check_verdict(c, 0, "%s: the plugin crashed: %s (%s) %s%s%s %s", what,
                      fatal_signal_abbrev(WTERMSIG(status)) ? fatal_signal_abbrev(WTERMSIG(status))
                                                            : "a signal",
                      fatal_signal_label(WTERMSIG(status)),
                      where[0] ? where : "outside any plugin call", rep->fault[0] ? ": " : "",
                      rep->fault, hint);
    else if (WIFEXITED(status) && WEXITSTATUS(status) == CALLS_EXIT_PLUGIN_EXIT && asked != -1) {
        char how[32];
        if (asked == -2) snprintf(how, sizeof how, "quick_exit()");
        else snprintf(how, sizeof how, "exit(%d)", asked);
        check_verdict(c, 0, "%s: the plugin called %s %s %s", what, how,
                      where[0] ? where : "outside any plugin call", hint);
    }
    else
        check_verdict(c, 0, "%s: the check's process ended with status %d %s (the plugin called "
                      "_exit()?) %s", what, WIFEXITED(status) ? WEXITSTATUS(status) : -1,
                      where[0] ? where : "outside any plugin call", hint);
    /* every later check starts with create(); after a hang, each would wait its time out */
    if (in_create || killed) c->stop = 1;
    munmap(rep, sizeof *rep);
    calls_clear();
    return 0;
}
