/* loss_fault.c — the `fault` loss term, a test-only plugin that makes one rank fail in a chosen
 * way at a chosen step (or in create), so the tests can check what ctrain does when a plugin
 * errs, returns a non-finite loss, hangs, crashes, ends the process, writes where it must not
 * or prints to stdout. Built by the Makefile into build/tests/plugins/ (never installed, never
 * in build/plugins). Not for: training (it adds nothing to the loss).
 *
 * Use:   [loss]        plugins = ce, /abs/path/build/tests/plugins/loss_fault.so
 *                      (or plugins = ce, fault with CTRAIN_PLUGIN_PATH=build/tests/plugins)
 *        [loss.fault]  mode = error    ; what to do (below)
 *                      rank = 1        ; the rank it fires on
 *                      step = 3        ; the training step it fires at (1 = the first)
 *                      in = create     ; forward_backward (default) or create
 *                      status = 3      ; mode = exit: the status passed to exit()
 *
 * Steps are counted by the term itself: every training call (dlogits != NULL) is one
 * micro-batch, and [data] grad_accum micro-batches make a step (1 when the configuration has
 * no [data], as in check-plugin), so the first micro-batch of step S is training call
 * (S-1)*grad_accum + 1; evaluation calls (dlogits NULL) do not count. The count starts at the
 * process's first step: after --resume, step 1 is the first step run. With in = create the
 * fault fires in create() of that rank instead. Everywhere else (and with mode = none) the term
 * is 0 and adds no gradient, so its presence does not change the loss.
 *
 * Modes, on that rank at that step (or in its create):
 *   error        return CT_ERR_INVALID "loss fault: injected error on rank R at step S"
 *   nan          return the value NaN (the host must stop the run naming the term and the step)
 *   hang         never return (sleeps in a loop; only the end of the process stops it)
 *   crash        raise SIGSEGV in the rank's thread (as a bad memory access would)
 *   exit         call exit(status)
 *   abort        call abort()
 *   overrun      write 4 KiB past the end of dlogits (create: nothing to overrun, an error)
 *   overrun64    write 64 bytes past the end of dlogits
 *   write_logits write into the const logits (adds 1 to the first one)
 *   thread_crash start a thread that raises SIGSEGV, and wait for it
 *   stdout       print a line to stdout (and go on as mode none)
 *   inf_grad     value 0, but +Inf added to the first element of dlogits (device cpu: host
 *                memory): that rank's gradient overflows (a loss-scaling policy skips the step)
 * A crash in the library's constructor, at dlopen, is asked for with the environment variable
 * CTRAIN_TEST_FAULT_CONSTRUCTOR = crash | hang | exit | stdout (tests of `plugins`/`inspect`).
 */
#include <ctrain/ctrain.h>

#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef enum fault_mode {
    FAULT_NONE, FAULT_ERROR, FAULT_NAN, FAULT_HANG, FAULT_CRASH, FAULT_EXIT, FAULT_ABORT,
    FAULT_OVERRUN, FAULT_OVERRUN64, FAULT_WRITE_LOGITS, FAULT_THREAD_CRASH, FAULT_STDOUT,
    FAULT_INF_GRAD
} fault_mode;

typedef struct fault_term {
    fault_mode         mode;
    int64_t            rank, step, grad_accum, status;
    int32_t            my_rank, in_create;
    int64_t            calls; /* training calls so far */
    const ct_host_api *api;
    ct_host           *host;
} fault_term;

static const char *const mode_choices[] = {"none", "error", "nan", "hang", "crash", "exit",
                                           "abort", "overrun", "overrun64", "write_logits",
                                           "thread_crash", "stdout", "inf_grad", NULL};
static const char *const in_choices[] = {"forward_backward", "create", NULL};

static void nap_forever(void) {
    for (;;) {
        struct timespec nap = {1, 0};
        nanosleep(&nap, NULL);
    }
}

/* CTRAIN_TEST_FAULT_CONSTRUCTOR: a fault while the library is loaded (dlopen). */
__attribute__((constructor)) static void fault_constructor(void) {
    const char *what = getenv("CTRAIN_TEST_FAULT_CONSTRUCTOR");
    if (!what) return;
    if (!strcmp(what, "crash")) raise(SIGSEGV);
    if (!strcmp(what, "hang")) nap_forever();
    if (!strcmp(what, "exit")) exit(0);
    if (!strcmp(what, "stdout")) {
        printf("[fault] a constructor printing to stdout\n");
        fflush(stdout);
    }
}

static void *crashing_thread(void *arg) {
    (void)arg;
    raise(SIGSEGV); /* raise() in this thread: delivered to this thread */
    return NULL;
}

/* Do the fault of `self->mode` (not error/nan, which the caller handles); dlogits and logits
 * may be NULL (create). Returns only for the modes that go on. */
static int32_t misbehave(fault_term *self, const ct_loss_batch *b, ct_error *err) {
    switch (self->mode) {
    case FAULT_HANG: nap_forever(); break;
    case FAULT_CRASH:
        /* raised rather than a null write: a null write is undefined behaviour, which the
         * compiler may drop and `make ubsan` reports instead of crashing */
        raise(SIGSEGV);
        break;
    case FAULT_EXIT: exit((int)self->status);
    case FAULT_ABORT: abort();
    case FAULT_OVERRUN:
    case FAULT_OVERRUN64: {
        if (!b || !b->dlogits)
            return ct_error_set(err, CT_ERR_INVALID, "loss fault: mode overrun needs a training "
                                "call ---> set [loss.fault] in = forward_backward");
        volatile char *end = (volatile char *)(b->dlogits + b->n_rows * b->vocab);
        size_t n = self->mode == FAULT_OVERRUN ? 4096 : 64;
        for (size_t i = 0; i < n; i++) end[i] = (char)0x5a;
        break;
    }
    case FAULT_WRITE_LOGITS:
        if (b && b->logits) ((volatile float *)b->logits)[0] += 1.0f;
        break;
    case FAULT_THREAD_CRASH: {
        pthread_t t;
        if (pthread_create(&t, NULL, crashing_thread, NULL) == 0) pthread_join(t, NULL);
        break;
    }
    case FAULT_STDOUT:
        printf("[fault] rank %d printing to stdout from %s\n", (int)self->my_rank,
               b ? "forward_backward" : "create");
        fflush(stdout);
        break;
    default: break;
    }
    return CT_OK;
}

static void *fault_create(const ct_create_args *args, ct_error *err) {
    fault_term *self = calloc(1, sizeof *self);
    if (!self) return ct_error_set(err, CT_ERR_NOMEM, "loss fault: out of memory"), NULL;
    const char *mode = NULL;
    const ct_host_api *api = args->api;
    const char *in = NULL;
    if (!api || api->get_string(args->host, args->section, "mode", &mode, err) != CT_OK ||
        api->get_int(args->host, args->section, "rank", &self->rank, err) != CT_OK ||
        api->get_int(args->host, args->section, "step", &self->step, err) != CT_OK ||
        api->get_string(args->host, args->section, "in", &in, err) != CT_OK ||
        api->get_int(args->host, args->section, "status", &self->status, err) != CT_OK)
        goto out_free;
    ct_error no_data = {.struct_size = sizeof no_data}; /* check-plugin's config has no [data] */
    if (api->get_int(args->host, "data", "grad_accum", &self->grad_accum, &no_data) != CT_OK)
        self->grad_accum = 1;
    for (int32_t i = 0; mode_choices[i]; i++)
        if (!strcmp(mode, mode_choices[i])) self->mode = (fault_mode)i;
    self->in_create = !strcmp(in, "create");
    self->my_rank = args->rank;
    self->api = api;
    self->host = args->host;
    if (self->in_create && self->my_rank == self->rank && self->mode != FAULT_NONE) {
        if (self->mode == FAULT_ERROR) {
            ct_error_set(err, CT_ERR_INVALID, "loss fault: injected error in create on rank %d",
                         (int)self->my_rank);
            goto out_free;
        }
        if (misbehave(self, NULL, err) != CT_OK) goto out_free;
    }
    return self;
out_free:
    if (!api) ct_error_set(err, CT_ERR_INVALID, "loss fault: created without the host API");
    free(self);
    return NULL;
}

static void fault_destroy(void *p) { free(p); }

static void say(fault_term *self, const char *what) {
    char msg[160];
    snprintf(msg, sizeof msg, "injecting %s on rank %d at step %lld", what, (int)self->my_rank,
             (long long)self->step);
    self->api->log(self->host, CT_LOG_WARN, msg);
}

static int32_t fault_forward_backward(void *p, const ct_loss_batch *b, ct_loss_result *out,
                                      ct_error *err) {
    fault_term *self = p;
    out->value = 0.0;
    if (!b->dlogits) return CT_OK; /* evaluation: not counted, never fires */
    int64_t call = ++self->calls;
    int fires = self->mode != FAULT_NONE && !self->in_create && self->my_rank == self->rank &&
                call == (self->step - 1) * self->grad_accum + 1;
    if (!fires) return CT_OK;
    switch (self->mode) {
    case FAULT_ERROR:
        return ct_error_set(err, CT_ERR_INVALID, "loss fault: injected error on rank %d at step "
                            "%lld ([loss.fault] mode = error)", (int)self->my_rank,
                            (long long)self->step);
    case FAULT_NAN:
        say(self, "a NaN loss");
        out->value = NAN;
        return CT_OK;
    case FAULT_INF_GRAD:
        say(self, "an Inf gradient");
        b->dlogits[0] += INFINITY;
        return CT_OK;
    default:
        say(self, mode_choices[self->mode]);
        return misbehave(self, b, err);
    }
}

static const ct_param_spec fault_params[] = {
    CT_PARAM_ENUM("mode", "none", mode_choices,
                  "what to inject: none, error (an error return), nan (a NaN value), hang "
                  "(never return), crash (raise SIGSEGV), exit (exit(status)), abort, overrun "
                  "(4 KiB past dlogits), overrun64, write_logits (into the const logits), "
                  "thread_crash (a thread of its own raises SIGSEGV), stdout (print), inf_grad "
                  "(+Inf into dlogits)"),
    CT_PARAM_ENUM("in", "forward_backward", in_choices, "where: forward_backward or create"),
    CT_PARAM_INT("status", "3", 0, 255, "mode = exit: the status passed to exit()"),
    CT_PARAM_INT("rank", "0", 0, 1 << 20, "the rank that fails"),
    CT_PARAM_INT("step", "1", 1, (int64_t)1 << 40,
                 "the training step it fails at (its first micro-batch), counted from the "
                 "process's first step"),
    CT_PARAM_END,
};

static const ct_loss_vtable fault_vtable = {
    .struct_size      = sizeof(ct_loss_vtable),
    .create           = fault_create,
    .destroy          = fault_destroy,
    .forward_backward = fault_forward_backward,
};

static const ct_plugin_desc fault_desc = {
    .struct_size       = sizeof(ct_plugin_desc),
    .abi_major         = CT_ABI_MAJOR,
    .abi_minor         = CT_ABI_MINOR,
    .kind              = CT_KIND_LOSS,
    .name              = "fault",
    .version           = "1.0.0",
    .summary           = "test only: a zero term that fails one rank at one step (error, nan, "
                         "hang, crash)",
    .params            = fault_params,
    .param_struct_size = sizeof(ct_param_spec),
    .devices           = CT_DEVICE_CPU,
    .vtable            = &fault_vtable,
};

CT_EXPORT const ct_plugin_desc *ctrain_plugin_v1(void) { return &fault_desc; }
