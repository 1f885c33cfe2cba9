/* calls.c — the per-thread records of plugin calls (see calls.h), the exit guard that turns a
 * plugin's exit() into a named failure, and the async-signal-safe texts that crash reports and
 * the watchdog print from them. Not for: installing signal handlers (supervise.c, fatal.c).
 */
#include "plugin/calls.h"

#include "base/fatal.h"
#include "plugin/plugin.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* What the exit guard records, beside the slots (shared with check children: calls_share). */
typedef struct calls_table {
    calls_slot slots[CALLS_SLOTS];
    int32_t    expected;       /* rank slots of this process (calls_expect_ranks) */
    int32_t    exit_requested; /* status of the latest guarded exit, -1 none, -2 quick_exit */
    int32_t    quiet;
} calls_table;

static calls_table private_table = {.exit_requested = -1};
static calls_table *table = &private_table;

__thread calls_slot *calls_self;

/* An empty record: no call, no operation, no thread. */
static void clear_record(calls_slot *s) {
    CALLS_STORE(s->active, 0);
    CALLS_STORE(s->plugin, NULL);
    CALLS_STORE(s->call, NULL);
    CALLS_STORE(s->host_op, NULL);
    CALLS_STORE(s->stop_seen, 0);
    CALLS_STORE(s->done, 0);
    CALLS_STORE(s->bound, 0);
}

void calls_bind(int32_t slot, int32_t rank) {
    if (slot < 0 || slot >= CALLS_SLOTS) return;
    calls_slot *s = &table->slots[slot];
    clear_record(s);
    CALLS_STORE(s->rank, slot == 0 ? -1 : rank);
    CALLS_STORE(s->bound, 1);
    calls_self = s;
}

void calls_unbind(void) {
    calls_slot *s = calls_self;
    if (!s) return;
    CALLS_STORE(s->host_op, NULL);
    CALLS_STORE(s->done, 1);
    CALLS_STORE(s->bound, 0);
    calls_self = NULL;
}

void calls_set_rank(int32_t rank) {
    if (calls_self) CALLS_STORE(calls_self->rank, rank);
}

void calls_mark_stop_seen(void) {
    if (calls_self) CALLS_STORE(calls_self->stop_seen, 1);
}

const calls_slot *calls_slot_at(int32_t i) {
    return &table->slots[i >= 0 && i < CALLS_SLOTS ? i : 0];
}

void calls_expect_ranks(int32_t n) { CALLS_STORE(table->expected, n); }
int32_t calls_expected_ranks(void) { return CALLS_LOAD(table->expected); }

void calls_quiet(int quiet) { CALLS_STORE(table->quiet, quiet ? 1 : 0); }
int calls_exit_requested(void) { return CALLS_LOAD(table->exit_requested); }
void calls_clear_exit_requested(void) { CALLS_STORE(table->exit_requested, -1); }

int calls_share(void) {
    if (table != &private_table) return 0;
    void *m = mmap(NULL, sizeof(calls_table), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                   -1, 0);
    if (m == MAP_FAILED) return -1;
    memcpy(m, &private_table, sizeof private_table);
    table = m;
    calls_bind(0, -1);
    return 0;
}

/* ---- texts (async-signal-safe: no stdio, no allocation) ---------------------------------- */

/* "KIND NAME (FILE)" of plugin p; "file FILE" while it is being loaded (no descriptor yet). */
static size_t put_plugin(char *buf, size_t n, size_t cap, const host_plugin *p) {
    if (!p->desc.name) {
        n = fatal_put_str(buf, n, cap, "file ");
        return fatal_put_str(buf, n, cap, p->path ? p->path : "?");
    }
    n = fatal_put_str(buf, n, cap, kind_name(p->desc.kind));
    n = fatal_put_str(buf, n, cap, " ");
    n = fatal_put_str(buf, n, cap, p->desc.name ? p->desc.name : "?");
    n = fatal_put_str(buf, n, cap, " (");
    n = fatal_put_str(buf, n, cap, p->path ? p->path : "?");
    return fatal_put_str(buf, n, cap, ")");
}

size_t calls_put_where(char *buf, size_t n, size_t cap, const calls_slot *s) {
    const host_plugin *p = CALLS_LOAD(s->plugin);
    const char *call = CALLS_LOAD(s->call), *op = CALLS_LOAD(s->host_op);
    if (CALLS_LOAD(s->active) && p) {
        n = put_plugin(buf, n, cap, p);
        n = fatal_put_str(buf, n, cap, ": ");
        return fatal_put_str(buf, n, cap, call ? call : "?");
    }
    n = fatal_put_str(buf, n, cap, "ctrain");
    if (op) {
        n = fatal_put_str(buf, n, cap, ": ");
        n = fatal_put_str(buf, n, cap, op);
    }
    return n;
}

/* "rank R" or "the main thread" for slot s. */
static size_t put_who(char *buf, size_t n, size_t cap, const calls_slot *s) {
    int32_t rank = CALLS_LOAD(s->rank);
    if (rank < 0) return fatal_put_str(buf, n, cap, "the main thread");
    n = fatal_put_str(buf, n, cap, "rank ");
    return fatal_put_int(buf, n, cap, rank);
}

/* The slots whose plugin call is in progress, "rank 0 in KIND NAME (F): CALL; ...", other than
 * `except`; returns the new length, *found how many. */
static size_t put_active(char *buf, size_t n, size_t cap, const calls_slot *except, int *found) {
    *found = 0;
    for (int32_t i = 0; i < CALLS_SLOTS; i++) {
        const calls_slot *s = &table->slots[i];
        if (s == except || !CALLS_LOAD(s->active) || !CALLS_LOAD(s->plugin)) continue;
        n = fatal_put_str(buf, n, cap, (*found)++ ? "; " : "");
        n = put_who(buf, n, cap, s);
        n = fatal_put_str(buf, n, cap, " was in ");
        n = calls_put_where(buf, n, cap, s);
    }
    return n;
}

size_t calls_put_crash_context(char *buf, size_t n, size_t cap) {
    const calls_slot *s = calls_self;
    if (s && CALLS_LOAD(s->active) && CALLS_LOAD(s->plugin)) {
        n = fatal_put_str(buf, n, cap, " in ");
        return calls_put_where(buf, n, cap, s);
    }
    if (s) { /* ctrain's own code on a thread of ctrain's */
        n = fatal_put_str(buf, n, cap, " in ");
        return calls_put_where(buf, n, cap, s);
    }
    int found = 0;
    char list[600];
    size_t k = put_active(list, 0, sizeof list - 1, NULL, &found);
    list[k] = '\0';
    if (found) {
        n = fatal_put_str(buf, n, cap, " in a thread ctrain did not start (a plugin's own), "
                                       "while ");
        return fatal_put_str(buf, n, cap, list);
    }
    n = fatal_put_str(buf, n, cap, " in a thread ctrain did not start (a plugin's own); no "
                                   "plugin call in progress, the latest: ");
    const calls_slot *latest = &table->slots[0];
    for (int32_t i = 1; i < CALLS_SLOTS; i++)
        if (CALLS_LOAD(table->slots[i].plugin) && CALLS_LOAD(table->slots[i].bound))
            latest = &table->slots[i];
    if (!CALLS_LOAD(latest->plugin)) return fatal_put_str(buf, n, cap, "none");
    n = put_plugin(buf, n, cap, CALLS_LOAD(latest->plugin));
    n = fatal_put_str(buf, n, cap, ": ");
    return fatal_put_str(buf, n, cap, CALLS_LOAD(latest->call) ? CALLS_LOAD(latest->call) : "?");
}

/* ---- the exit guard ------------------------------------------------------------------------ */

/* An exit() while a plugin call is in progress: say who asked for it and end the process now. */
static void guard(int status, int quick) {
    const calls_slot *s = calls_self;
    int mine = s && CALLS_LOAD(s->active) && CALLS_LOAD(s->plugin);
    int others = 0;
    char list[800];
    size_t k = put_active(list, 0, sizeof list - 1, mine ? s : NULL, &others);
    list[k] = '\0';
    if (!mine && !others) return; /* ctrain's own exit */
    CALLS_STORE(table->exit_requested, quick ? -2 : status);
    if (!CALLS_LOAD(table->quiet)) {
        char buf[1400];
        size_t n = 0, cap = sizeof buf - 1;
        n = fatal_put_str(buf, n, cap, "ctrain: ");
        if (mine) {
            if (CALLS_LOAD(s->rank) >= 0) {
                n = put_who(buf, n, cap, s);
                n = fatal_put_str(buf, n, cap, ": ");
            }
            n = fatal_put_str(buf, n, cap, "plugin ");
            n = put_plugin(buf, n, cap, CALLS_LOAD(s->plugin));
            n = fatal_put_str(buf, n, cap, " called ");
        } else {
            n = fatal_put_str(buf, n, cap, "a thread ctrain did not start (a plugin's own) "
                                           "called ");
        }
        if (quick) {
            n = fatal_put_str(buf, n, cap, "quick_exit()");
        } else {
            n = fatal_put_str(buf, n, cap, "exit(");
            n = fatal_put_int(buf, n, cap, status);
            n = fatal_put_str(buf, n, cap, ")");
        }
        if (mine) {
            n = fatal_put_str(buf, n, cap, " in ");
            n = fatal_put_str(buf, n, cap, CALLS_LOAD(s->call) ? CALLS_LOAD(s->call) : "?");
        } else {
            n = fatal_put_str(buf, n, cap, " while ");
            n = fatal_put_str(buf, n, cap, list);
        }
        n = fatal_put_str(buf, n, cap, " ---> a plugin never ends the process: it returns an "
                                       "error (ct_error_set) instead; ctrain ends with status ");
        n = fatal_put_int(buf, n, cap, CALLS_EXIT_PLUGIN_EXIT);
        n = fatal_put_str(buf, n, cap, " (nothing of the step in progress is saved)\n");
        buf[n] = '\0';
        fatal_write(buf);
    }
    _exit(CALLS_EXIT_PLUGIN_EXIT);
}

static void on_exit_guard(int status, void *arg) {
    (void)arg;
    guard(status, 0);
}

static void on_quick_exit_guard(void) { guard(0, 1); }

static int started; /* calls_start has run */

void calls_start(void) {
    if (!calls_self) calls_bind(0, -1);
    on_exit(on_exit_guard, NULL);
    at_quick_exit(on_quick_exit_guard);
    started = 1;
}

void calls_rearm(void) {
    if (!started) return;
    on_exit(on_exit_guard, NULL);
    at_quick_exit(on_quick_exit_guard);
}

void calls_clear(void) {
    for (int32_t i = 0; i < CALLS_SLOTS; i++) clear_record(&table->slots[i]);
    calls_bind(0, -1);
}
