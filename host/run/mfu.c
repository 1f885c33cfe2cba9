/* mfu.c — model FLOPs utilisation (see mfu.h): FLOPs per token from the model's description,
 * the job's peak from [device] peak_tflops or the devices' peak_flops, the header line and the
 * per-log-line metrics. MFU = tokens/s (all ranks) x FLOPs per token / (sum of the ranks'
 * peaks), i.e. achieved / (peak per device x devices) on a homogeneous job.
 * Not for: timing the steps (train.c) or measuring a device (device plugins). */
#include "run/mfu.h"

#include "base/cores.h"
#include "plugin/hostapi.h"
#include "run/optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

double mfu_flops_per_token(const ct_model_desc *d, int64_t T, int32_t *from_model) {
    double fixed = d->flops_per_token_fixed, per_t = d->flops_per_token_per_t;
    int32_t given = fixed > 0 || per_t > 0;
    if (from_model) *from_model = given;
    if (!given) return 6.0 * (double)d->n_params;
    return fixed + per_t * (double)T;
}

/* "43.6 GFLOP/s" or "989 TFLOP/s" */
static void format_rate(double flops, char *buf, size_t cap) {
    if (flops >= 1e12) snprintf(buf, cap, "%.4g TFLOP/s", flops / 1e12);
    else snprintf(buf, cap, "%.4g GFLOP/s", flops / 1e9);
}

static void terminate(ct_peak *p) {
    p->source[sizeof p->source - 1] = 0;
    p->library[sizeof p->library - 1] = 0;
    p->warning[sizeof p->warning - 1] = 0;
}

static void print_header(const host_rank *r, const mfu_state *m, int32_t from_model, double key,
                         const ct_peak *dev, int32_t dev_rc, const ct_error *dev_err,
                         FILE *out) {
    const char *model = r->model.plugin ? r->model.plugin->desc.name : "?";
    const char *device = r->device.plugin ? r->device.plugin->desc.name : "?";
    char count[200], peak[800], rate[32], dev_rate[32];
    if (from_model)
        snprintf(count, sizeof count, "model %s's count %.0f + %.0f x T at T = %lld", model,
                 r->mdesc.flops_per_token_fixed, r->mdesc.flops_per_token_per_t,
                 (long long)r->T);
    else
        snprintf(count, sizeof count, "6 x n_params = 6 x %llu: model %s gives no FLOP count, "
                 "so attention is not counted", (unsigned long long)r->mdesc.n_params, model);
    format_rate(m->peak_device, rate, sizeof rate);
    format_rate(dev->flops, dev_rate, sizeof dev_rate);
    if (m->peak_total > 0 && key > 0)
        snprintf(peak, sizeof peak, "%s per rank x %d ([device] peak_tflops; device %s: %s%s%s)",
                 rate, (int)r->world, device, dev_rc == CT_OK ? dev_rate : "no figure",
                 dev_rc == CT_OK ? ", " : "", dev_rc == CT_OK ? dev->source : "");
    else if (m->peak_total > 0)
        snprintf(peak, sizeof peak, "%s per rank x %d (device %s, %s)", rate, (int)r->world,
                 device, dev->source);
    else
        snprintf(peak, sizeof peak, "unknown, MFU n/a (device %s: %s) ---> set [device] "
                 "peak_tflops", device,
                 dev_rc == CT_ERR_UNSUPPORTED || !dev_err->message[0]
                     ? "no figure for this device or dtype on some rank"
                     : dev_err->message);
    fprintf(out, "mfu: %.0f FLOPs per token (%s) | peak %s | BLAS: %s\n", m->flops_per_token,
            count, peak, dev->library[0] ? dev->library : "not named by the device");
    if (dev->warning[0]) fprintf(out, "mfu: warning: %s\n", dev->warning);
    if (strcmp(device, "cpu") == 0) { /* the threads behind the figures (cores.h) */
        int64_t set = 0;
        config_get_int(r->cfg, "device", "threads", &set, NULL);
        cores_choice c = hostapi_auto_threads(r->cfg);
        char what[256];
        cores_describe(&c, (int32_t)set, what, sizeof what);
        fprintf(out, "threads: %s; %s\n", what, cores_wait_policy());
    }
    const char *was = getenv("CTRAIN_BLAS_REEXEC"); /* blas_core.c restarted us */
    if (was)
        fprintf(out, "mfu: OpenBLAS's own choice on this CPU was its %s kernel; ctrain set "
                "OPENBLAS_CORETYPE=%s before loading it (set OPENBLAS_CORETYPE to choose)\n",
                was, getenv("OPENBLAS_CORETYPE") ? getenv("OPENBLAS_CORETYPE") : "?");
    fflush(out);
}

int32_t mfu_open(host_rank *r, mfu_state *m, FILE *out, ct_error *err) {
    memset(m, 0, sizeof *m);
    int32_t from_model = 0;
    m->flops_per_token = mfu_flops_per_token(&r->mdesc, r->T, &from_model);

    double key = 0;
    config_get_float(r->cfg, "device", "peak_tflops", &key, NULL);
    ct_peak dev;
    memset(&dev, 0, sizeof dev);
    dev.struct_size = sizeof dev;
    ct_error dev_err = {.struct_size = sizeof dev_err};
    int32_t dev_rc = CT_ERR_UNSUPPORTED;
    const ct_device_vtable *dv = r->dev.vt;
    if (dv && dv->peak_flops)
        dev_rc = RANK_DEV(r, peak_flops, r->policy.param_dtype, &dev, &dev_err);
    terminate(&dev);
    dev_err.message[sizeof dev_err.message - 1] = 0;
    if (dev_rc == CT_OK && !(isfinite(dev.flops) && dev.flops > 0)) dev_rc = CT_ERR_UNSUPPORTED;
    if (dev_rc != CT_OK) dev.flops = 0;

    /* every rank's figure: the sum is the job's peak, the minimum says whether all know one */
    double mine = key > 0 ? key * 1e12 : dev.flops;
    double sum = mine, least = mine;
    int32_t rc = optim_allreduce_f64(r, &sum, 1, CT_REDUCE_SUM, err);
    if (rc == CT_OK) rc = optim_allreduce_f64(r, &least, 1, CT_REDUCE_MIN, err);
    if (rc != CT_OK) return rc;
    if (least > 0) {
        m->peak_total = sum;
        m->peak_device = sum / (double)r->world;
    }
    if (out) print_header(r, m, from_model, key, &dev, dev_rc, &dev_err, out);
    return CT_OK;
}

void mfu_add_metrics(mfu_state *m, double tokens_per_s, host_metric_table *out) {
    double achieved = tokens_per_s * m->flops_per_token;
    if (m->logged++ == 0) {
        metrics_add(out, "flops_per_token", m->flops_per_token, CT_METRIC_MEAN);
        metrics_add(out, "peak_tflops", m->peak_device > 0 ? m->peak_device / 1e12 : NAN,
                    CT_METRIC_MEAN);
    }
    metrics_add(out, "model_tflops", achieved / 1e12, CT_METRIC_MEAN);
    metrics_add(out, "mfu", m->peak_total > 0 ? achieved / m->peak_total : NAN, CT_METRIC_MEAN);
}

void mfu_format(const mfu_state *m, double tokens_per_s, char *buf, size_t cap) {
    if (m->peak_total > 0)
        snprintf(buf, cap, "MFU %.1f%%", 100.0 * tokens_per_s * m->flops_per_token / m->peak_total);
    else
        snprintf(buf, cap, "MFU n/a");
}
