/* supervise.c — the rank threads' watcher (see supervise.h): failure records under one mutex,
 * a timed wait for the stragglers, and the fatal-signal report.
 * Not for: the threads themselves (train.c) or aborting the comm world (the ranks do that). */
#include "plugin/supervise.h"

#include "base/printable.h"
#include "plugin/calls.h"
#include "plugin/contract.h"
#include "base/fatal.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct slot {
    int32_t  rank;
    int32_t  done;
    int32_t  rc;       /* CT_OK until it fails */
    int32_t  printed;
    ct_error err;
} slot;

struct supervisor {
    pthread_mutex_t mu;
    pthread_cond_t  cv;          /* signalled on every failure and every done */
    FILE           *out;
    double          grace_s;
    int32_t         n, n_done;
    double          t_first;     /* monotonic time of the first failure; < 0 while none */
    int32_t         real_shown;  /* a real (non-comm) error has been printed */
    int32_t         first_comm;  /* slot of the first comm failure, or -1 */
    slot           *slots;       /* (n) */
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static struct timespec at_time(double t) {
    struct timespec ts;
    ts.tv_sec = (time_t)t;
    ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

supervisor *supervise_new(int32_t n_slots, double grace_s, FILE *out) {
    if (n_slots < 1) return NULL;
    supervisor *sv = calloc(1, sizeof *sv);
    if (!sv) return NULL;
    sv->slots = calloc((size_t)n_slots, sizeof *sv->slots);
    if (!sv->slots) goto out_free_sv;
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca)) goto out_free_slots;
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int bad = pthread_cond_init(&sv->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (bad) goto out_free_slots;
    if (pthread_mutex_init(&sv->mu, NULL)) goto out_destroy_cond;
    sv->out = out;
    sv->grace_s = grace_s;
    sv->n = n_slots;
    sv->t_first = -1;
    sv->first_comm = -1;
    for (int32_t i = 0; i < n_slots; i++) sv->slots[i].rank = i;
    return sv;

out_destroy_cond:
    pthread_cond_destroy(&sv->cv);
out_free_slots:
    free(sv->slots);
out_free_sv:
    free(sv);
    return NULL;
}

void supervise_free(supervisor *sv) {
    if (!sv) return;
    pthread_mutex_destroy(&sv->mu);
    pthread_cond_destroy(&sv->cv);
    free(sv->slots);
    free(sv);
}

void supervise_set_rank(supervisor *sv, int32_t slot, int32_t rank) {
    pthread_mutex_lock(&sv->mu);
    sv->slots[slot].rank = rank;
    pthread_mutex_unlock(&sv->mu);
    calls_set_rank(rank); /* the fatal-signal report names it */
}

static void print_locked(supervisor *sv, slot *s) {
    char prefix[32];
    snprintf(prefix, sizeof prefix, "ctrain: rank %d: ", (int)s->rank);
    if (s->err.message[0])
        print_message_line(sv->out, prefix, s->err.message);
    else /* a plugin call the host did not name; contract_name_silent_error covers most */
        fprintf(sv->out, "ctrain: rank %d: a plugin call failed with %s (%d) but no message "
                "---> the plugin must fill its ct_error; report this to its author\n",
                (int)s->rank, contract_status_name(s->rc), (int)s->rc);
    fflush(sv->out);
    s->printed = 1;
}

void supervise_failed(supervisor *sv, int32_t slot_i, int32_t rc, const ct_error *err) {
    if (rc == CT_OK) return;
    pthread_mutex_lock(&sv->mu);
    slot *s = &sv->slots[slot_i];
    s->rc = rc;
    s->err = *err;
    if (sv->t_first < 0) sv->t_first = now_s();
    if (rc != CT_ERR_COMM) {
        /* the first real error, and later ones that say something else */
        int same = 0;
        for (int32_t i = 0; i < sv->n && !same; i++)
            same = i != slot_i && sv->slots[i].printed && sv->slots[i].rc != CT_ERR_COMM &&
                   !strcmp(sv->slots[i].err.message, s->err.message);
        if (!same) print_locked(sv, s);
        sv->real_shown = 1;
    } else if (sv->first_comm < 0) {
        sv->first_comm = slot_i;
    }
    pthread_cond_broadcast(&sv->cv);
    pthread_mutex_unlock(&sv->mu);
}

void supervise_done(supervisor *sv, int32_t slot_i) {
    pthread_mutex_lock(&sv->mu);
    sv->slots[slot_i].done = 1;
    sv->n_done++;
    pthread_cond_broadcast(&sv->cv);
    pthread_mutex_unlock(&sv->mu);
}

/* Print the held-back comm failure when no real error has been shown. */
static void show_comm_locked(supervisor *sv) {
    if (sv->real_shown || sv->first_comm < 0 || sv->slots[sv->first_comm].printed) return;
    print_locked(sv, &sv->slots[sv->first_comm]);
}

int32_t supervise_wait(supervisor *sv, int32_t *still_running) {
    pthread_mutex_lock(&sv->mu);
    while (sv->n_done < sv->n) {
        double t = now_s(), wake = t + 3600;
        if (sv->t_first >= 0) {
            double settle = sv->t_first + SUPERVISE_SETTLE_S, end = sv->t_first + sv->grace_s;
            if (t >= settle) show_comm_locked(sv);
            else wake = settle;
            if (t >= end) break;
            if (end < wake) wake = end;
        }
        struct timespec ts = at_time(wake);
        pthread_cond_timedwait(&sv->cv, &sv->mu, &ts);
    }
    show_comm_locked(sv);
    int32_t status = 0, left = sv->n - sv->n_done;
    for (int32_t i = 0; i < sv->n; i++) status |= sv->slots[i].rc != CT_OK;
    if (left > 0) {
        status = 1;
        char list[256] = "";
        size_t used = 0;
        for (int32_t i = 0; i < sv->n && used + 16 < sizeof list; i++)
            if (!sv->slots[i].done)
                used += (size_t)snprintf(list + used, sizeof list - used, "%s%d",
                                         used ? ", " : "", (int)sv->slots[i].rank);
        fprintf(sv->out,
                "ctrain: %s %s did not stop within %.3g s after the first failure (hung in a "
                "plugin, or busy in a long computation); ending the process ---> the first "
                "error above is the cause; the newest checkpoint is the last good one\n",
                left == 1 ? "rank" : "ranks", list, sv->grace_s);
        fflush(sv->out);
    }
    *still_running = left;
    pthread_mutex_unlock(&sv->mu);
    return status;
}

/* ---------------------------------------------------------------------------------------
 * fatal signals: only async-signal-safe calls below (write, sigaction, raise)
 * ------------------------------------------------------------------------------------- */

static void on_fatal_signal(int sig) {
    char buf[1400];
    size_t n = 0, cap = sizeof buf - 1;
    const calls_slot *me = calls_self;
    int32_t rank = me ? me->rank : -1;
    n = fatal_put_str(buf, n, cap, "ctrain: ");
    if (rank >= 0) {
        n = fatal_put_str(buf, n, cap, "rank ");
        n = fatal_put_int(buf, n, cap, (long)rank);
        n = fatal_put_str(buf, n, cap, " ");
    }
    n = fatal_put_str(buf, n, cap, "crashed: signal ");
    n = fatal_put_int(buf, n, cap, sig);
    n = fatal_put_str(buf, n, cap, " (");
    n = fatal_put_str(buf, n, cap, fatal_signal_label(sig));
    n = fatal_put_str(buf, n, cap, ")");
    n = calls_put_crash_context(buf, n, cap);
    if (me && CALLS_LOAD(me->active) && CALLS_LOAD(me->plugin))
        n = fatal_put_str(buf, n, cap, " ---> a bug in the plugin named");
    else if (me)
        n = fatal_put_str(buf, n, cap, " ---> a bug in ctrain, or memory a plugin damaged "
                                       "earlier (`ctrain check-plugin` fences a plugin's "
                                       "buffers and names a stray write)");
    else
        n = fatal_put_str(buf, n, cap, " ---> a bug in a plugin named");
    n = fatal_put_str(buf, n, cap, "; nothing of this step was saved: the newest checkpoint "
                                   "is the last good one\n");
    ssize_t w = write(STDERR_FILENO, buf, n);
    (void)w;
    /* SA_RESETHAND restored the default action; SA_NODEFER lets this raise through now */
    raise(sig);
}

void supervise_report_fatal_signals(void) {
    fatal_install(on_fatal_signal, NULL, 1); /* a sanitizer's own handlers stay */
}
