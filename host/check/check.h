/* check.h — the checks of `ctrain check-plugin FILE.so [--set k=v]...` (cli/check_plugin.c),
 * the plugin author's proof of conformance: what the per-kind checks share (the verdict lines
 * and counters, a configuration holding the plugin's own keys, the CPU device opened from the
 * search path) and one entry point per kind (check_loss.c, check_precision.c, check_strategy.c,
 * check_model.c, check_engines.c). Not for: the host's own tests (tests/) or loading plugins (registry.h).
 *
 * Every check prints one line, "ok   KIND NAME: claim (figures)" or
 * "FAIL KIND NAME: claim: expected X got Y tol Z", and counts; the command ends with
 * "N passed, N failed". Every check uses a fixed seed, so a run is reproducible. Checks run in
 * child processes with a time limit (check_child.c) on fenced buffers (check_guard.c), so a
 * plugin that crashes, exits, hangs or writes out of bounds fails a check and the summary
 * still prints.
 */
#ifndef CTRAIN_HOST_CHECK_H
#define CTRAIN_HOST_CHECK_H

#include "config/config.h"
#include "plugin/hostapi.h"
#include "plugin/registry.h"

#include <ctrain/ctrain.h>

#define CHECK_MAX_SETS 64
#define CHECK_SEED     20240520u /* the fixed seed of every check */

typedef struct check_report check_report; /* what a check's child process hands back */

typedef struct host_check {
    host_registry     *reg;
    const host_plugin *plugin;              /* the plugin under test */
    const char      *sets[CHECK_MAX_SETS]; /* "key=value" for the plugin's own section */
    int32_t          n_sets;
    int32_t          passed, failed;
    char             label[96];           /* "loss ce": starts every line */
    double           timeout_s;           /* a check's time limit (--timeout) */
    int32_t          stop;                /* the checks after this one cannot run */
    check_report    *report;              /* in a check's child: its counts for the parent */
} host_check;

#define CHECK_TIMEOUT_S 60.0 /* a check's default time limit, in seconds */

/* ---- isolation (check_child.c) ------------------------------------------------------------ */

/* A check: prints its verdicts through c; may write up to out_size bytes of results into out. */
typedef void (*check_body)(host_check *c, void *ctx, void *out);

/* Run body(c, ctx, out) in a forked child with the time limit c->timeout_s. Its verdicts count
 * as if it ran here, and the out_size bytes it left in `out` (at most 1 MiB) come back. When the
 * child dies (a signal, exit() inside the plugin, any other end) or runs out of time, a FAIL
 * line "<label>: <what>: the plugin crashed: SIGSEGV (Segmentation fault) in loss x (FILE):
 * forward_backward: it wrote past the end of dlogits ..." names the plugin call in progress and
 * how it ended; a death inside create() and a time-out set c->stop (every later check would
 * begin with the same create(), or wait its time out too).
 * Needs calls_share() to have run. Returns 1 when the body returned, else 0. */
int check_in_child(host_check *c, const char *what, check_body body, void *ctx, void *out,
                   size_t out_size);

/* Count a verdict (check_verdict does). */
void check_count(host_check *c, int ok);
/* From inside a body: the checks after this one cannot run (sets c->stop in the parent). */
void check_stop(host_check *c);

/* ---- fenced buffers (check_guard.c) ------------------------------------------------------- */

/* A zero-filled buffer of `bytes` bytes, 64-byte aligned, between two guard pages, with a fence
 * pattern on both sides; `name` ("dlogits") is what messages call it; a const one is a
 * plugin's input it must not write. Host memory, which is device memory of device cpu. NULL
 * when out of memory or when 64 are alive. Free with check_buf_free. */
void *check_buf_alloc(const char *name, size_t bytes, int is_const);
void check_buf_free(void *p);
/* Before a plugin call: remember the bytes of const buffer p (NULL: of every const buffer; only
 * when no other thread uses fenced buffers meanwhile). */
void check_buf_seal(const void *p);
/* After it: 1 when p's fences (NULL: every buffer's) and, for a const one, its bytes are as
 * they were; else 0 and `why` names the buffer and what `call` did ("forward_backward wrote
 * past the end of dlogits ..."). */
int check_buf_verify(const void *p, const char *call, char *why, size_t cap);
/* Async-signal-safe: which buffer's guard holds `addr` ("it wrote (or read) past the end of
 * dlogits: byte 32 after its end is a guard page"), into buf[n..cap); n unchanged when none. */
size_t check_buf_where(const void *addr, char *buf, size_t n, size_t cap);

/* Print "ok   <label>: <claim>" and count a pass when ok, else "FAIL <label>: <claim>" and
 * count a failure. Returns ok. */
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
int check_verdict(host_check *c, int ok, const char *fmt, ...);

/* "note <label>: ..." — information, not counted (e.g. checks a kind does not have yet). */
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
void check_note(host_check *c, const char *fmt, ...);

/* A new configuration from `ini` (INI text the check writes, may be NULL), then the --set
 * keys put into [section] with origin "--set", then [section] validated against the plugin's
 * schema (host keys in `skip` exempt, NULL-terminated, may be NULL), defaults filled.
 * *out is the caller's (config_free). */
int32_t check_config(host_check *c, const char *ini, const char *section, const char *const *skip,
                     host_config **out, ct_error *err);

/* An open plugin instance with its ct_host (the host-side context its api calls receive). */
typedef struct check_instance {
    const host_plugin *plugin;
    void            *self;
    ct_host          host;
} check_instance;

/* Create an instance of `p` for [section] of cfg: args filled as rank.c fills them (api,
 * host, section, rank, world, seed CHECK_SEED) plus the given device / comm / comm_world. */
int32_t check_create(check_instance *inst, const host_plugin *p, const host_config *cfg,
                     const char *section, int32_t rank, int32_t world, ct_device_ref dev,
                     ct_comm_ref comm, void *comm_world, ct_error *err);
void check_destroy(check_instance *inst);

/* The device plugin `cpu` from the search path, created from [device] of cfg (which must have
 * been validated against its schema: check_device_section). */
int32_t check_device_open(host_check *c, const host_config *cfg, int32_t rank, check_instance *inst,
                          ct_device_ref *ref, ct_error *err);
/* Validate [device] of cfg against device cpu's schema (fills its defaults). */
int32_t check_device_section(host_check *c, host_config *cfg, ct_error *err);

/* Deterministic uniform in [-1, 1) from (seed, i). */
double check_urand(uint64_t seed, uint64_t i);

/* The per-kind checks: they print and count through c; a set-up failure is a FAIL line. */
void check_loss(host_check *c);
/* The loss term under test on an author's batch: logits (N,V) f32 and targets (N) (negative:
 * ignored; each below V, else CT_ERR_INVALID naming the row), on device cpu exactly as a step
 * calls it (row stats from the device, grad_scale 1, n_counted the rows with a target). *value
 * the term's value, grad (N,V) d(value)/d(logits). Runs in this process (a crash is reported
 * by the command's fatal-signal handler). */
int32_t check_loss_apply(host_check *c, const float *logits, const int32_t *targets, int64_t N,
                         int64_t V, double *value, float *grad, ct_error *err);
void check_precision(host_check *c);
void check_strategy(host_check *c);
void check_model(host_check *c);
void check_device(host_check *c);
void check_comm(host_check *c);

#endif /* CTRAIN_HOST_CHECK_H */
