/* param_norms.c — per-tensor gradient norms (see param_norms.h). */
#include "run/param_norms.h"

#include "base/init.h"
#include "run/optim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int32_t param_norms_grad(host_rank *r, host_metric_table *out, ct_error *err) {
    const ct_model_desc *d = &r->mdesc;
    uint32_t n = 0;
    for (uint32_t u = 0; u < d->n_units; u++) n += d->units[u].n_tensors;
    if (out->n + (int32_t)n > HOST_METRICS_MAX - 64) /* room for the log line's other figures */
        return ct_error_set(err, CT_ERR_INVALID, "[run] log_param_norms: %u tensors do not fit "
                            "the %d metrics of a log line (with 64 others) ---> set log_param_norms = false for "
                            "this model", n, HOST_METRICS_MAX);
    double *sums = calloc(2 * (size_t)n + 1, sizeof *sums); /* sharded, then replicated */
    if (!sums) return ct_error_set(err, CT_ERR_NOMEM, "out of memory");
    int32_t rc = CT_OK;
    uint32_t i = 0;
    for (uint32_t u = 0; rc == CT_OK && u < d->n_units; u++) {
        ct_shard sh = {.struct_size = sizeof sh};
        if ((rc = RANK_STRATEGY(r, shard, u, &sh, err)) != CT_OK) break;
        for (uint32_t k = 0; rc == CT_OK && k < d->units[u].n_tensors; k++, i++) {
            uint64_t t0 = init_tensor_offset(d, u, k), t1 = t0 + ct_tensor_numel(init_tensor(d, u, k));
            uint64_t a = t0 > sh.offset ? t0 : sh.offset;
            uint64_t b = t1 < sh.offset + sh.numel ? t1 : sh.offset + sh.numel;
            double s = 0;
            if (a < b)
                rc = RANK_DEV(r, sumsq, sh.grad + (a - sh.offset), CT_DTYPE_F32,
                              b - a, &s, err);
            sums[(sh.replicated ? n : 0) + i] = s;
        }
    }
    /* every rank reaches the reduction, even after a local failure, so none waits forever */
    int32_t rc2 = optim_allreduce_f64(r, sums, n, CT_REDUCE_SUM, err);
    if (rc == CT_OK) rc = rc2;
    i = 0;
    for (uint32_t u = 0; rc == CT_OK && u < d->n_units; u++)
        for (uint32_t k = 0; k < d->units[u].n_tensors; k++, i++) {
            char name[HOST_METRIC_NAME_MAX];
            snprintf(name, sizeof name, "grad_norm/%s", init_tensor(d, u, k)->name);
            metrics_add(out, name, sqrt(sums[i] + sums[n + i]), CT_METRIC_MEAN);
        }
    free(sums);
    return rc;
}
