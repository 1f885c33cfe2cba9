/* loss_fault.c — the `fault` loss term, a test-only plugin that makes one rank fail in a chosen
 * way at a chosen step, so the tests can check what ctrain does when a rank errs, returns a
 * non-finite loss, hangs or crashes. Built by the Makefile into build/tests/plugins/
 * (never installed, never in build/plugins). Not for: training (it adds nothing to the loss).
 *
 * Use:   [loss]        plugins = ce, /abs/path/build/tests/plugins/loss_fault.so
 *                      (or plugins = ce, fault with CTRAIN_PLUGIN_PATH=build/tests/plugins)
 *        [loss.fault]  mode = error    ; none | error | nan | hang | crash
 *                      rank = 1        ; the rank it fires on
 *                      step = 3        ; the training step it fires at (1 = the first)
 *
 * Steps are counted by the term itself: every training call (dlogits != NULL) is one
 * micro-batch, and [data] grad_accum micro-batches make a step, so the first micro-batch of
 * step S is training call (S-1)*grad_accum + 1; evaluation calls (dlogits NULL) do not count.
 * The count starts at the process's first step: after --resume, step 1 is the first step run.
 * Everywhere else (and with mode = none) the term is 0 and adds no gradient, so its presence
 * does not change the loss.
 *
 * Modes, on that rank at that step:
 *   error  return CT_ERR_INVALID "loss fault: injected error on rank R at step S"
 *   nan    return the value NaN (the host must stop the run naming the term and the step)
 *   hang   never return (sleeps in a loop; only the end of the process stops it)
 *   crash  raise SIGSEGV in the rank's thread (as a bad memory access would)
 */
#include <ctrain/ctrain.h>

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef enum fault_mode { FAULT_NONE, FAULT_ERROR, FAULT_NAN, FAULT_HANG, FAULT_CRASH } fault_mode;

typedef struct fault_term {
    fault_mode         mode;
    int64_t            rank, step, grad_accum;
    int32_t            my_rank;
    int64_t            calls; /* training calls so far */
    const ct_host_api *api;
    ct_host           *host;
} fault_term;

static const char *const mode_choices[] = {"none", "error", "nan", "hang", "crash", NULL};

static void *fault_create(const ct_create_args *args, ct_error *err) {
    fault_term *self = calloc(1, sizeof *self);
    if (!self) return ct_error_set(err, CT_ERR_NOMEM, "loss fault: out of memory"), NULL;
    const char *mode = NULL;
    const ct_host_api *api = args->api;
    if (!api || api->get_string(args->host, args->section, "mode", &mode, err) != CT_OK ||
        api->get_int(args->host, args->section, "rank", &self->rank, err) != CT_OK ||
        api->get_int(args->host, args->section, "step", &self->step, err) != CT_OK)
        goto out_free;
    self->grad_accum = 1;
    if (api->get_int(args->host, "data", "grad_accum", &self->grad_accum, err) != CT_OK)
        goto out_free;
    for (int32_t i = 0; mode_choices[i]; i++)
        if (!strcmp(mode, mode_choices[i])) self->mode = (fault_mode)i;
    self->my_rank = args->rank;
    self->api = api;
    self->host = args->host;
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
    int fires = self->mode != FAULT_NONE && self->my_rank == self->rank &&
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
    case FAULT_HANG:
        say(self, "a hang");
        for (;;) {
            struct timespec nap = {1, 0};
            nanosleep(&nap, NULL);
        }
    case FAULT_CRASH: {
        /* raised rather than a null write: a null write is undefined behaviour, which the
         * compiler may drop and `make ubsan` reports instead of crashing */
        say(self, "a crash (SIGSEGV)");
        raise(SIGSEGV);
        return CT_OK; /* not reached: SIGSEGV's default action ends the process */
    }
    default: return CT_OK;
    }
}

static const ct_param_spec fault_params[] = {
    CT_PARAM_ENUM("mode", "none", mode_choices,
                  "what to inject: none, error (an error return), nan (a NaN value), hang "
                  "(never return), crash (raise SIGSEGV)"),
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
