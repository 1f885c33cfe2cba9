/* loss_kit.h — header-only helpers for writing a loss plugin: which rows count (mask_ignored),
 * a regulariser term's state (the keys coef and mask_ignored, the metric sink, its CUDA
 * companion) with create and destroy, the refusal of a CUDA batch by a cpu-only build, and the
 * dispatch of a CUDA batch to a companion that returns the term's sum. loss_kit_cuda.cuh is
 * its device half (the companion's scratch, reductions and errors). The built-in ce, zloss and
 * logitreg use it; a third-party term gets the same keys, loading and messages by including
 * it. Not part of the ABI: nothing here crosses the plugin boundary, and it keeps no state.
 *
 * A term of the form value = coef * (1/n) * sum over counted rows of f(row):
 *   static void *my_create(const ct_create_args *a, ct_error *e) {
 *       return ct_lkit_term_create(a, "loss my", e);          // reads coef, mask_ignored
 *   }
 *   static int32_t my_forward_backward(void *p, const ct_loss_batch *b, ct_loss_result *out,
 *                                      ct_error *err) {
 *       ct_lkit_term *self = p;
 *       const int64_t rows = ct_lkit_rows(self, b);
 *       out->value = 0.0;
 *       if (rows <= 0) return CT_OK;
 *       const double n = (double)rows;
 *       const float g = (float)(self->coef * b->grad_scale / n);
 *       static const char *const names[2] = {"my_cuda_run", "my_cuda_free"};
 *       if (b->device.type == CT_DEVICE_CUDA)
 *           return ct_lkit_term_cuda(self, b, "loss_my_cuda.so", names, n, g, "loss/my/f", out,
 *                                    err);
 *       double sum = ...;  // f over rows i with ct_lkit_row_counts(self->mask_ignored, t[i])
 *       if (!ct_lkit_term_value(self, b, sum, n, "loss/my/f", out)) return CT_OK;
 *       ...                // add g * df/dz into b->dlogits for the same rows
 *   }
 *   vtable: .create = my_create, .destroy = ct_lkit_term_destroy,
 *           .forward_backward = my_forward_backward,
 *           .forward_backward_rows = my_forward_backward  // rows are independent (ABI 1.3)
 *
 * Companions (sdk/include/ctrain/companion.h) are opened only when the plugin is compiled with
 * CT_HAVE_CUDA (ctrain's plugin.mk sets it when nvcc builds the companion); without it a CUDA
 * batch gets ct_lkit_cpu_only's error. The header also compiles as C++ (a .cu includes it
 * through loss_kit_cuda.cuh). `who` arguments start error messages and name the plugin:
 * "loss zloss". Shape legend: N rows (B*T positions), V vocabulary.
 */
#ifndef CTRAIN_LOSS_KIT_H
#define CTRAIN_LOSS_KIT_H

#include <ctrain/ctrain.h>
#include <ctrain/numerics.h>

#include <stdlib.h>

#ifdef CT_HAVE_CUDA
#include <ctrain/companion.h>
#endif

/* --- rows ------------------------------------------------------------------------------- */

/* 1 when a row with this target enters the term: every row when mask_ignored is 0, else only
 * rows with target >= 0 (a negative target marks an ignored position). CPU and CUDA alike. */
CT_HD int ct_lkit_row_counts(int32_t mask_ignored, int32_t target) {
    return !mask_ignored || target >= 0;
}

/* A CUDA batch on a build without CUDA: CT_ERR_UNSUPPORTED naming the INI section. */
static inline int32_t ct_lkit_cpu_only(const char *who, const char *section, ct_error *err) {
    return ct_error_set(err, CT_ERR_UNSUPPORTED, "%s: logits on a CUDA device; this build of "
                        "[%s] runs on cpu only ---> rebuild with nvcc, or use [device] type = "
                        "cpu", who, section);
}

/* --- the CUDA companion of a term ------------------------------------------------------- */

/* The interface of a term's companion (companion.h): bump when ct_lkit_sum_fn changes. The
 * structure both sides read is ct_loss_batch. */
#define CT_LKIT_CUDA_INTERFACE 1

/* A companion's device scratch (defined in loss_kit_cuda.cuh); opaque to the plugin. */
typedef struct ct_lkit_cuda ct_lkit_cuda;

/* The companion's run entry: *sum = the term's sum over counted rows (before coef and the
 * mean), read back; when with_grad and b->dlogits, adds g * d(row term)/dz into b->dlogits for
 * counted rows (g already holds coef, grad_scale and the mean's 1/n), queued on the device's
 * stream. mask_ignored as ct_lkit_row_counts. *state is allocated on first use (grown with N). */
typedef int32_t (*ct_lkit_sum_fn)(ct_lkit_cuda **state, const ct_loss_batch *b,
                                  int32_t mask_ignored, float g, int32_t with_grad, double *sum,
                                  ct_error *err);

/* The companion's entries as the plugin holds them after opening it: run and free (of the
 * scratch; NULL is a no-op). NULL until the first CUDA batch. */
typedef struct ct_lkit_cuda_fns {
    ct_lkit_sum_fn run;
    void (*free)(ct_lkit_cuda *state);
} ct_lkit_cuda_fns;

#ifdef CT_HAVE_CUDA
/* Resolve cu on the first CUDA batch (cu->run NULL): opens `file` ("loss_zloss_cuda.so") from
 * the plugin's cuda/ subfolder and resolves names[0] (run) and names[1] (free). A later call
 * returns at once. Errors as ct_companion_load (cu stays NULL then). */
static inline int32_t ct_lkit_cuda_load(ct_lkit_cuda_fns *cu, const char *who, const char *file,
                                        const char *const names[2], ct_error *err) {
    if (cu->run) return CT_OK;
    static const ct_companion_info want = {sizeof(ct_companion_info), CT_LKIT_CUDA_INTERFACE,
                                           sizeof(ct_loss_batch)};
    void *fn[2];
    int32_t rc = ct_companion_load(who, file, &want, names, fn, 2, err);
    if (rc != CT_OK) return rc;
    cu->run = (ct_lkit_sum_fn)fn[0];
    cu->free = (void (*)(ct_lkit_cuda *))fn[1];
    return CT_OK;
}
#endif

/* --- a regulariser term ----------------------------------------------------------------- */

/* The state of a term with the keys coef and mask_ignored (loss zloss, loss logitreg): what
 * ct_lkit_term_create returns and ct_lkit_term_destroy frees. */
typedef struct ct_lkit_term {
    const ct_host_api *api;          /* the host's services, for metrics; may be NULL */
    ct_host           *host;
    const char        *who;          /* "loss zloss": starts messages (a literal, not owned) */
    const char        *section;      /* "loss.zloss": the INI section, for messages */
    double             coef;         /* key coef: the term's weight */
    int32_t            mask_ignored; /* key mask_ignored: 1 skips rows with target < 0 */
    ct_lkit_cuda      *cuda;         /* companion scratch after the first CUDA batch; else NULL */
    ct_lkit_cuda_fns   cu;           /* companion entries after the first CUDA batch; else NULL */
    double             metric_sum;   /* the micro-batch's sum so far over its row ranges */
} ct_lkit_term;

/* A new term reading coef (float) and mask_ignored (bool) from args->section; NULL with err
 * set when out of memory or a getter fails. */
static inline void *ct_lkit_term_create(const ct_create_args *args, const char *who,
                                        ct_error *err) {
    ct_lkit_term *self = (ct_lkit_term *)calloc(1, sizeof *self);
    if (!self) return ct_error_set(err, CT_ERR_NOMEM, "%s: out of memory", who), (void *)NULL;
    self->api = args->api;
    self->host = args->host;
    self->who = who;
    self->section = args->section;
    if (args->api->get_float(args->host, args->section, "coef", &self->coef, err) != CT_OK ||
        args->api->get_bool(args->host, args->section, "mask_ignored", &self->mask_ignored,
                            err) != CT_OK) {
        free(self);
        return NULL;
    }
    return self;
}

/* Frees a term and its companion scratch; NULL is a no-op. */
static inline void ct_lkit_term_destroy(void *p) {
    ct_lkit_term *self = (ct_lkit_term *)p;
    if (self && self->cuda) self->cu.free(self->cuda); /* cuda set: cu was resolved */
    free(self);
}

/* n of the mean: the counted rows when mask_ignored, else all N rows of the micro-batch
 * (batch_rows, also in a row-range call). */
static inline int64_t ct_lkit_rows(const ct_lkit_term *self, const ct_loss_batch *b) {
    if (self->mask_ignored) return b->n_counted;
    return b->batch_rows > 0 ? b->batch_rows : b->n_rows;
}

/* out->value = coef * sum / n (sum: this call's rows; n: the micro-batch's, ct_lkit_rows), so
 * the values of a micro-batch's row ranges add up to its value. When the batch wants a gradient
 * (b->dlogits), adds sum to the micro-batch's running sum (restarted by the range at row 0),
 * reports the MEAN metric `metric` = that sum / n once, on the micro-batch's last range (a
 * whole-batch call is its own last range), and returns 1; else returns 0. */
static inline int ct_lkit_term_value(ct_lkit_term *self, const ct_loss_batch *b, double sum,
                                     double n, const char *metric, ct_loss_result *out) {
    out->value = self->coef * sum / n;
    if (!b->dlogits) return 0;
    if (b->row_begin == 0) self->metric_sum = 0.0;
    self->metric_sum += sum;
    int last = b->batch_rows <= 0 || b->row_begin + b->n_rows >= b->batch_rows;
    if (last && self->api && self->api->metric)
        self->api->metric(self->host, metric, self->metric_sum / n, CT_METRIC_MEAN);
    return 1;
}

/* A batch on a CUDA device: opens the companion `file` with entries names (run, free) on the
 * first one, runs it with the gradient factor g, then ct_lkit_term_value(sum, n, metric).
 * Without CT_HAVE_CUDA: ct_lkit_cpu_only's error. */
static inline int32_t ct_lkit_term_cuda(ct_lkit_term *self, const ct_loss_batch *b,
                                        const char *file, const char *const names[2], double n,
                                        float g, const char *metric, ct_loss_result *out,
                                        ct_error *err) {
#ifdef CT_HAVE_CUDA
    double sum = 0.0;
    int32_t rc = ct_lkit_cuda_load(&self->cu, self->who, file, names, err);
    if (rc != CT_OK) return rc;
    rc = self->cu.run(&self->cuda, b, self->mask_ignored, g, b->dlogits != NULL, &sum, err);
    if (rc != CT_OK) return rc;
    ct_lkit_term_value(self, b, sum, n, metric, out);
    return CT_OK;
#else
    (void)b, (void)file, (void)names, (void)n, (void)g, (void)metric, (void)out;
    return ct_lkit_cpu_only(self->who, self->section, err);
#endif
}

#endif /* CTRAIN_LOSS_KIT_H */
