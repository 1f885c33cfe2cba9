/* calls.h — which plugin call (or which operation of ctrain's own) each rank of this process is
 * in, so that a crash, an exit() inside a plugin and a rank that does not stop after a signal
 * can be reported naming the plugin, the call and the rank. One record (slot) per thread that
 * calls plugins: the main thread and every rank thread; a plugin's own threads have none.
 * Not for: deciding what happens after a fault (supervise.c, watchdog.c, check_child.c).
 *
 * Cost: a plugin call made through CALLS() is three plain stores into the calling thread's own
 * slot before it and one after (no lock, no atomic read-modify-write; slots are cache-line
 * aligned so rank threads never share one). Readers (a signal handler, the exit guard, the
 * watchdog thread) read the slots without locks: a record may be one call late, never torn
 * into a crash.
 */
#ifndef CTRAIN_HOST_CALLS_H
#define CTRAIN_HOST_CALLS_H

#include <ctrain/ctrain.h>

#include <stddef.h>
#include <stdint.h>

struct host_plugin;

/* Slots: 0 is the main thread, 1 .. CALLS_MAX_RANKS the rank threads of this process (train.c
 * binds slot 1 + its index among this process's ranks). */
#define CALLS_MAX_RANKS 1024
#define CALLS_SLOTS     (CALLS_MAX_RANKS + 1)

/* The status ctrain ends with when a plugin calls exit() (or quick_exit()) during a call. */
#define CALLS_EXIT_PLUGIN_EXIT 5

typedef struct calls_slot {
    const struct host_plugin *plugin;  /* the plugin of the latest call (kept after it returns) */
    const char               *call;    /* its member ("forward_backward"), a static string */
    const char               *host_op; /* ctrain's own operation in progress, or NULL */
    int32_t                   active;  /* 1 while that plugin call has not returned */
    int32_t                   rank;    /* the rank this thread runs; -1 for the main thread */
    uint64_t                  seq;     /* plugin calls entered so far */
    int32_t                   bound;   /* a thread uses this slot */
    int32_t                   done;    /* the rank's thread has finished its work */
    int32_t                   stop_seen; /* the rank reached the end of a step after a stop
                                            request (watchdog.h) */
} __attribute__((aligned(64))) calls_slot;

/* The calling thread's slot; NULL in threads ctrain did not bind (a plugin's own). */
extern __thread calls_slot *calls_self;

/* What calls_enter replaced, for calls_leave (calls nest: a host call inside a host call). */
typedef struct calls_mark {
    calls_slot               *slot;
    const struct host_plugin *plugin;
    const char               *call;
    int32_t                   active;
} calls_mark;

#define CALLS_STORE(field, value) __atomic_store_n(&(field), (value), __ATOMIC_RELAXED)
#define CALLS_LOAD(field)         __atomic_load_n(&(field), __ATOMIC_RELAXED)

static inline calls_mark calls_enter(const struct host_plugin *p, const char *call) {
    calls_slot *s = calls_self;
    calls_mark m = {s, NULL, NULL, 0};
    if (!s) return m;
    m.plugin = s->plugin;
    m.call = s->call;
    m.active = s->active;
    CALLS_STORE(s->call, call);
    CALLS_STORE(s->plugin, p);
    CALLS_STORE(s->active, 1);
    CALLS_STORE(s->seq, s->seq + 1);
    return m;
}

static inline void calls_leave(calls_mark m) {
    if (!m.slot) return;
    if (m.active) { /* back inside the outer call */
        CALLS_STORE(m.slot->call, m.call);
        CALLS_STORE(m.slot->plugin, m.plugin);
    }
    CALLS_STORE(m.slot->active, m.active);
}

/* Evaluate `expr`, a call into plugin p's member `name` (a string literal), with the calling
 * thread's record saying so; the value of expr. CALLS_VOID for calls that return nothing. */
#define CALLS(p, name, expr)                                                                   \
    __extension__({                                                                            \
        calls_mark calls_m_ = calls_enter((p), (name));                                        \
        __typeof__(expr) calls_r_ = (expr);                                                    \
        calls_leave(calls_m_);                                                                 \
        calls_r_;                                                                              \
    })
#define CALLS_VOID(p, name, expr)                                                              \
    do {                                                                                       \
        calls_mark calls_m_ = calls_enter((p), (name));                                        \
        (expr);                                                                                \
        calls_leave(calls_m_);                                                                 \
    } while (0)

/* ctrain's own operation of the calling thread ("resuming from a checkpoint"; a static string),
 * or NULL when it is over; returns the one it replaces, to put back. */
static inline const char *calls_host_op(const char *op) {
    calls_slot *s = calls_self;
    if (!s) return NULL;
    const char *old = s->host_op;
    CALLS_STORE(s->host_op, op);
    return old;
}

/* Bind the calling thread to slot `slot` (0: the main thread, rank -1; else a rank thread of
 * rank `rank`) and clear the slot's record. */
void calls_bind(int32_t slot, int32_t rank);
/* The bound rank thread has finished (its slot keeps its last record); it is unbound. */
void calls_unbind(void);
/* The rank of the calling thread's slot changes (a comm engine decided it). */
void calls_set_rank(int32_t rank);
/* The calling rank has reached the end of a step after a stop request. */
void calls_mark_stop_seen(void);

/* Slot i (0 .. CALLS_SLOTS-1); never NULL. */
const calls_slot *calls_slot_at(int32_t i);
/* The number of rank slots this process runs (set by the driver before it starts them; 0
 * before). */
void calls_expect_ranks(int32_t n);
int32_t calls_expected_ranks(void);

/* Start the guards of a command that calls plugins: bind the main thread (slot 0) and register
 * the exit guard (on_exit and at_quick_exit): an exit() while a plugin call is in progress on
 * any slot prints "ctrain: [rank R: ]plugin KIND NAME (FILE) called exit(S) in CALL ---> ..."
 * and ends the process at once with CALLS_EXIT_PLUGIN_EXIT, before any other exit handler or
 * library destructor runs while other ranks' threads still use them (handlers registered later
 * run first: calls_rearm registers it again after each plugin file is loaded). */
void calls_start(void);

/* Put the slots into memory shared with child processes forked later (check-plugin's checks:
 * the parent reads which call a child that died was in). Binds the main thread again. 0, or -1
 * when mmap fails (the slots stay private). */
int calls_share(void);
/* Clear every slot's record (a check child that died left its threads' records behind) and
 * bind the calling thread as the main thread again. */
void calls_clear(void);
/* Register the exit guard again, if calls_start ran: called after a plugin file is loaded, so
 * the guard runs before any exit handler the plugin's constructors registered. */
void calls_rearm(void);
/* Exit guard: print nothing (the parent of a check child reports instead). */
void calls_quiet(int quiet);
/* The exit status a plugin asked for in the latest guarded exit (shared like the slots), or -1
 * when none was seen; quick_exit records -2. */
int calls_exit_requested(void);
void calls_clear_exit_requested(void);

/* Async-signal-safe: "KIND NAME (FILE): CALL" of slot s's latest plugin call into buf[n..cap);
 * "ctrain: OP" for ctrain's own operation; "ctrain" when neither. Returns the new length. */
size_t calls_put_where(char *buf, size_t n, size_t cap, const calls_slot *s);

/* Async-signal-safe: the sentence a fatal-signal report adds about where the calling thread
 * was (" in loss fault (F): forward_backward", for a thread ctrain did not start the calls in
 * progress on the other threads), into buf[n..cap). Returns the new length. */
size_t calls_put_crash_context(char *buf, size_t n, size_t cap);

#endif /* CTRAIN_HOST_CALLS_H */
