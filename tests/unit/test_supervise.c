/* test_supervise.c — claims about host/plugin/supervise.c, the watcher of a process's rank threads:
 * a real error is printed the moment it is recorded, a comm error (the echo of another rank's
 * failure) never comes before the real cause that follows it within the settle time, a comm
 * error alone is printed, and ranks that do not stop within the grace period are named.
 * Not for: the whole run (tests/cli/test_faults.sh drives ctrain with a failing plugin).
 */
#include "ct_test.h"
#include "plugin/supervise.h"

#include <pthread.h>
#include <string.h>
#include <time.h>

static ct_error error_of(int32_t code, const char *msg) {
    ct_error e = {.struct_size = sizeof e};
    ct_error_set(&e, code, "%s", msg);
    return e;
}

/* Everything written to f so far. */
static const char *contents(FILE *f) {
    static char buf[4096];
    fflush(f);
    long at = ftell(f);
    rewind(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fseek(f, at, SEEK_SET);
    return buf;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

CT_TEST(supervise_prints_a_real_error_when_it_is_recorded) {
    FILE *f = tmpfile();
    supervisor *sv = supervise_new(2, 5.0, f);
    if (!f || !sv) {
        ct_test_fail(__FILE__, __LINE__, "setup: tmpfile or supervise_new failed");
        return;
    }
    supervise_set_rank(sv, 1, 7);
    ct_error e = error_of(CT_ERR_INVALID, "data: token 300 out of range");
    supervise_failed(sv, 1, e.code, &e);
    /* before any done(), before wait(): already out */
    CT_CHECK_STR_CONTAINS(contents(f), "ctrain: rank 7: data: token 300 out of range\n");
    supervise_done(sv, 0);
    supervise_done(sv, 1);
    int32_t left = -1;
    CT_CHECK_INT(supervise_wait(sv, &left), 1);
    CT_CHECK_INT(left, 0);
    supervise_free(sv);
    fclose(f);
}

typedef struct late_cause {
    supervisor *sv;
    double      delay_s;
} late_cause;

static void *record_late_cause(void *arg) {
    late_cause *lc = arg;
    struct timespec nap = {0, (long)(lc->delay_s * 1e9)};
    nanosleep(&nap, NULL);
    ct_error e = error_of(CT_ERR_INVALID, "loss fault: injected error");
    supervise_failed(lc->sv, 1, e.code, &e);
    supervise_done(lc->sv, 1);
    return NULL;
}

CT_TEST(supervise_holds_a_comm_echo_back_for_the_real_cause) {
    /* rank 0 fails with the comm's echo first; rank 1's own error is recorded 100 ms later
     * (well within SUPERVISE_SETTLE_S): only the real error is printed */
    FILE *f = tmpfile();
    supervisor *sv = supervise_new(3, 5.0, f);
    if (!f || !sv) {
        ct_test_fail(__FILE__, __LINE__, "setup: tmpfile or supervise_new failed");
        return;
    }
    ct_error echo = error_of(CT_ERR_COMM, "comm threads: rank 1 failed: loss fault: injected error");
    supervise_failed(sv, 0, echo.code, &echo);
    supervise_done(sv, 0);
    supervise_done(sv, 2);
    late_cause lc = {sv, 0.1};
    pthread_t th;
    pthread_create(&th, NULL, record_late_cause, &lc);
    int32_t left = -1;
    CT_CHECK_INT(supervise_wait(sv, &left), 1);
    pthread_join(th, NULL);
    const char *out = contents(f);
    CT_CHECK_MSG(strncmp(out, "ctrain: rank 1: loss fault: injected error\n", 43) == 0,
                 "expected the real cause first, got: %s", out);
    CT_CHECK_MSG(!strstr(out, "comm threads"), "expected no echo, got: %s", out);
    supervise_free(sv);
    fclose(f);
}

CT_TEST(supervise_prints_a_comm_failure_that_has_no_other_cause) {
    /* a timeout found by the comm is the cause itself: printed after the settle time while
     * the other ranks still run */
    FILE *f = tmpfile();
    supervisor *sv = supervise_new(2, 5.0, f);
    if (!f || !sv) {
        ct_test_fail(__FILE__, __LINE__, "setup: tmpfile or supervise_new failed");
        return;
    }
    ct_error e = error_of(CT_ERR_COMM, "comm threads: rank 1 failed: did not reach "
                          "all_reduce #3 within 2 s");
    supervise_failed(sv, 0, e.code, &e);
    supervise_done(sv, 0);
    late_cause lc = {sv, SUPERVISE_SETTLE_S + 0.3}; /* slot 1 is still running at settle */
    pthread_t th;
    pthread_create(&th, NULL, record_late_cause, &lc);
    int32_t left = -1;
    supervise_wait(sv, &left);
    pthread_join(th, NULL);
    const char *out = contents(f);
    CT_CHECK_MSG(strncmp(out, "ctrain: rank 0: comm threads: rank 1 failed: did not reach", 58) == 0,
                 "expected the comm failure first, got: %s", out);
    supervise_free(sv);
    fclose(f);
}

CT_TEST(supervise_names_the_ranks_that_do_not_stop_within_the_grace_period) {
    FILE *f = tmpfile();
    supervisor *sv = supervise_new(3, 0.3, f);
    if (!f || !sv) {
        ct_test_fail(__FILE__, __LINE__, "setup: tmpfile or supervise_new failed");
        return;
    }
    supervise_set_rank(sv, 0, 4);
    supervise_set_rank(sv, 1, 5);
    supervise_set_rank(sv, 2, 6);
    ct_error e = error_of(CT_ERR_INVALID, "step 3: boom");
    supervise_failed(sv, 1, e.code, &e);
    supervise_done(sv, 1);
    /* slots 0 and 2 never finish */
    double t0 = now_s();
    int32_t left = -1;
    CT_CHECK_INT(supervise_wait(sv, &left), 1);
    double took = now_s() - t0;
    CT_CHECK_INT(left, 2);
    CT_CHECK_MSG(took >= 0.25 && took < 2.0, "waited %.3f s; expected the 0.3 s grace", took);
    CT_CHECK_STR_CONTAINS(contents(f), "ctrain: ranks 4, 6 did not stop within 0.3 s after the "
                                       "first failure");
    supervise_free(sv); /* no thread uses it in this test */
    fclose(f);
}

CT_TEST(supervise_returns_zero_when_every_rank_succeeds) {
    FILE *f = tmpfile();
    supervisor *sv = supervise_new(2, 1.0, f);
    if (!f || !sv) {
        ct_test_fail(__FILE__, __LINE__, "setup: tmpfile or supervise_new failed");
        return;
    }
    supervise_done(sv, 0);
    supervise_done(sv, 1);
    int32_t left = -1;
    CT_CHECK_INT(supervise_wait(sv, &left), 0);
    CT_CHECK_INT(left, 0);
    CT_CHECK_MSG(contents(f)[0] == 0, "expected no output, got: %s", contents(f));
    supervise_free(sv);
    fclose(f);
}
