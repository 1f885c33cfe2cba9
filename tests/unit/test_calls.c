/* test_calls.c — claims about what ctrain knows of the plugin call each thread is in
 * (host/plugin/calls.c), the report the stop watchdog prints from it (host/run/watchdog.c) and
 * check-plugin's fenced buffers (host/check/check_guard.c): an exit() inside a plugin call ends the
 * process with CALLS_EXIT_PLUGIN_EXIT naming plugin, call and rank, while ctrain's own exit()
 * keeps its status; a crash report names the call of the thread, or for a thread ctrain did not
 * start the calls in progress elsewhere; nested calls restore the outer record; the watchdog
 * names each rank's plugin call or host operation; a write past a fenced buffer or into a const
 * one is named. The exit guard runs in forked children (it ends the process it runs in).
 * Not for: whole runs (tests/cli/test_plugin_faults.sh).
 */
#include "plugin/calls.h"
#include "check/check.h"
#include "ct_test.h"
#include "plugin/registry.h"
#include "run/watchdog.h"

#include <pthread.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static host_plugin fake = {.path = "/plugins/loss_fx.so",
                           .desc = {.kind = CT_KIND_LOSS, .name = "fx"}};

static int plugin_exit(int status) {
    exit(status);
    return 0;
}

typedef struct forked {
    int  status;       /* waitpid's */
    char err[2048];    /* the child's stderr */
} forked;

/* Run fn in a child whose stderr is captured; its exit status and stderr into *out. */
static void in_child(void (*fn)(void), forked *out) {
    int fds[2];
    memset(out, 0, sizeof *out);
    if (pipe(fds) != 0) return;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], STDERR_FILENO);
        fn();
        _exit(99); /* fn must end the process itself */
    }
    close(fds[1]);
    size_t got = 0;
    ssize_t r;
    while (got < sizeof out->err - 1 &&
           (r = read(fds[0], out->err + got, sizeof out->err - 1 - got)) > 0)
        got += (size_t)r;
    out->err[got] = '\0';
    close(fds[0]);
    waitpid(pid, &out->status, 0);
}

static void exit_inside_a_call(void) {
    calls_start();
    calls_bind(2, 1); /* rank 1's thread */
    CALLS(&fake, "forward_backward", plugin_exit(3));
}

CT_TEST(calls_exit_inside_a_plugin_call_ends_with_status_5_naming_plugin_call_and_rank) {
    forked f;
    in_child(exit_inside_a_call, &f);
    CT_CHECK(WIFEXITED(f.status));
    CT_CHECK_INT(WEXITSTATUS(f.status), CALLS_EXIT_PLUGIN_EXIT);
    CT_CHECK_STR_CONTAINS(f.err, "ctrain: rank 1: plugin loss fx (/plugins/loss_fx.so) called "
                                 "exit(3) in forward_backward ---> ");
}

static void exit_outside_a_call(void) {
    calls_start();
    CALLS(&fake, "create", 0); /* a call that returned */
    exit(7);
}

CT_TEST(calls_exit_of_ctrain_itself_keeps_its_status) {
    forked f;
    in_child(exit_outside_a_call, &f);
    CT_CHECK(WIFEXITED(f.status));
    CT_CHECK_INT(WEXITSTATUS(f.status), 7);
    CT_CHECK_MSG(f.err[0] == '\0', "stderr: %s", f.err);
}

static void *exits_from_its_own_thread(void *arg) {
    (void)arg;
    exit(0); /* a thread a plugin started: no record of its own */
    return NULL;
}

static int start_thread_that_exits(void) {
    pthread_t t;
    pthread_create(&t, NULL, exits_from_its_own_thread, NULL);
    pthread_join(t, NULL);
    return 0;
}

static void exit_from_a_plugin_thread(void) {
    calls_start();
    CALLS(&fake, "create", start_thread_that_exits());
}

CT_TEST(calls_exit_from_a_plugins_own_thread_names_the_call_in_progress) {
    forked f;
    in_child(exit_from_a_plugin_thread, &f);
    CT_CHECK(WIFEXITED(f.status));
    CT_CHECK_INT(WEXITSTATUS(f.status), CALLS_EXIT_PLUGIN_EXIT);
    CT_CHECK_STR_CONTAINS(f.err, "a thread ctrain did not start (a plugin's own) called exit(0) "
                                 "while the main thread was in loss fx (/plugins/loss_fx.so): "
                                 "create");
}

static int crash_context(char *buf, size_t cap) {
    size_t n = calls_put_crash_context(buf, 0, cap - 1);
    buf[n] = '\0';
    return 0;
}

typedef struct other {
    char text[512];
} other;

static void *context_of_unbound_thread(void *arg) {
    other *o = arg;
    crash_context(o->text, sizeof o->text);
    return NULL;
}

static int context_from_plugin_thread(other *o) {
    pthread_t t;
    pthread_create(&t, NULL, context_of_unbound_thread, o);
    pthread_join(t, NULL);
    return 0;
}

CT_TEST(calls_crash_context_names_the_threads_call_or_the_calls_in_progress) {
    static other o;
    char mine[512];
    calls_bind(3, 2);
    CALLS(&fake, "forward_backward_rows", crash_context(mine, sizeof mine));
    CT_CHECK_STR_CONTAINS(mine, " in loss fx (/plugins/loss_fx.so): forward_backward_rows");
    CALLS(&fake, "destroy", context_from_plugin_thread(&o));
    CT_CHECK_STR_CONTAINS(o.text, "in a thread ctrain did not start (a plugin's own), while rank "
                                  "2 was in loss fx (/plugins/loss_fx.so): destroy");
    crash_context(mine, sizeof mine); /* after the call: ctrain's own code */
    CT_CHECK_MSG(!strstr(mine, "loss fx"), "after the call returned: '%s'", mine);
    calls_unbind();
}

static host_plugin fake_device = {.path = "/plugins/device_d.so",
                                  .desc = {.kind = CT_KIND_DEVICE, .name = "d"}};

static int inner_call(char *buf, size_t cap) {
    return CALLS(&fake_device, "copy", crash_context(buf, cap));
}

CT_TEST(calls_nested_calls_restore_the_outer_record) {
    char in[512], after[512];
    calls_bind(4, 3);
    CALLS(&fake, "forward_backward",
          (inner_call(in, sizeof in), crash_context(after, sizeof after)));
    CT_CHECK_STR_CONTAINS(in, "device d (/plugins/device_d.so): copy");
    CT_CHECK_STR_CONTAINS(after, "loss fx (/plugins/loss_fx.so): forward_backward");
    const calls_slot *s = calls_slot_at(4);
    CT_CHECK_INT(CALLS_LOAD(s->active), 0);
    calls_unbind();
}

CT_TEST(watchdog_report_names_each_ranks_plugin_call_or_host_operation) {
    static char report[4096];
    calls_expect_ranks(2);
    calls_bind(1, 0); /* rank 0: ctrain blocked in its own operation */
    calls_host_op("resuming from a checkpoint");
    calls_bind(2, 1); /* rank 1 (this thread now): inside a plugin since the signal */
    calls_mark m = calls_enter(&fake, "forward_backward");
    unsigned long long seq[CALLS_SLOTS] = {0};
    for (int i = 0; i < CALLS_SLOTS; i++) seq[i] = CALLS_LOAD(calls_slot_at(i)->seq);
    watchdog_report(report, sizeof report, SIGTERM, 2.0, seq);
    calls_leave(m);
    CT_CHECK_STR_CONTAINS(report, "ctrain: SIGTERM came 2 s ago and the step has not ended");
    CT_CHECK_STR_CONTAINS(report, "ctrain:   rank 0: in ctrain: resuming from a checkpoint\n");
    CT_CHECK_STR_CONTAINS(report, "ctrain:   rank 1: in loss fx (/plugins/loss_fx.so): "
                                  "forward_backward (the same call since the signal)\n");
    CT_CHECK_STR_CONTAINS(report, "ctrain: ending the process with status 4, without a "
                                  "checkpoint");
    calls_unbind();
    calls_bind(1, 0);
    calls_unbind();
    calls_expect_ranks(0);
}

CT_TEST(watchdog_grace_grows_to_three_of_the_longest_step_and_never_shrinks) {
    double before = watchdog_grace(); /* stop_grace_s is not set in this process: 0 */
    CT_CHECK_MSG(before == 0, "grace %g before any step", before);
    watchdog_step_took(2.5);
    CT_CHECK_MSG(fabs(watchdog_grace() - 3 * 2.5) < 1e-5, "grace %g after a 2.5 s step",
                 watchdog_grace());
    watchdog_step_took(0.5); /* a shorter step does not shorten it */
    watchdog_step_took(-1);
    CT_CHECK_MSG(fabs(watchdog_grace() - 7.5) < 1e-5, "grace %g", watchdog_grace());
    watchdog_step_took(4.0);
    CT_CHECK_MSG(fabs(watchdog_grace() - 12.0) < 1e-5, "grace %g after a 4 s step",
                 watchdog_grace());
}

CT_TEST(check_guard_names_a_write_past_a_buffer_and_into_a_const_one) {
    char why[512];
    float *out = check_buf_alloc("dlogits", 13 * sizeof(float), 0);
    float *in = check_buf_alloc("logits", 13 * sizeof(float), 1);
    CT_CHECK(out && in);
    if (!out || !in) return;
    CT_CHECK((uintptr_t)out % 64 == 0 && (uintptr_t)in % 64 == 0);
    check_buf_seal(NULL);
    CT_CHECK(check_buf_verify(NULL, "fb", why, sizeof why));
    out[12] = 1; /* the last element: allowed */
    CT_CHECK(check_buf_verify(NULL, "fb", why, sizeof why));
    ((volatile float *)out)[13] = 1; /* one past the end: inside the fence */
    CT_CHECK(!check_buf_verify(out, "fb", why, sizeof why));
    CT_CHECK_STR_CONTAINS(why, "fb wrote past the end of dlogits (52 bytes): byte 0 after its end");
    ((volatile float *)out)[13] = 0;
    memset(out + 13, 0xA5, 4); /* the fence pattern back */
    CT_CHECK(check_buf_verify(out, "fb", why, sizeof why));
    in[3] += 1; /* 0.0f -> 1.0f: bytes 12..15 go 00 00 00 00 -> 00 00 80 3f */
    CT_CHECK(!check_buf_verify(in, "fb", why, sizeof why));
    CT_CHECK_STR_CONTAINS(why, "fb wrote into its const input logits (byte 14 of 52 changed)");
    /* the guard page after dlogits' fence: where() names it */
    char where[256];
    size_t n = check_buf_where((const char *)out + 64, where, 0, sizeof where - 1);
    where[n] = '\0';
    CT_CHECK_STR_CONTAINS(where, "past the end of dlogits: byte 12 after its end is a guard page");
    check_buf_free(out);
    check_buf_free(in);
}
