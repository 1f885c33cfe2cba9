/* whatif_run.c — the run `ctrain what-if` replays: the checkpoint's model, loss, data and the
 * forward of one sequence (see whatif_run.h).
 * Not for: gradients, reductions or the report (whatif_grad.c, whatif_replay.c, cli/what_if.c).
 */
#include "whatif/whatif_run.h"
#include "data/mixture.h"

#include "run/checkpoint.h"
#include "plugin/wiring.h"
#include "run/init_ckpt.h"

#include <ctrain/numerics.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The loss terms of the run: ce, and zloss with its coef; anything else is refused. */
static int32_t read_loss(whatif_run *wr, ct_error *err) {
    const char *terms = NULL;
    config_get_string(wr->cfg, "loss", "plugins", &terms, NULL);
    char buf[256];
    snprintf(buf, sizeof buf, "%s", terms ? terms : "ce");
    for (char *save = NULL, *t = strtok_r(buf, ", ", &save); t; t = strtok_r(NULL, ", ", &save)) {
        if (!strcmp(t, "ce")) continue;
        if (!strcmp(t, "zloss")) {
            wr->zcoef = 1e-4;
            config_get_float(wr->cfg, "loss.zloss", "coef", &wr->zcoef, NULL);
            continue;
        }
        return ct_error_set(err, CT_ERR_UNSUPPORTED, "%s/config.ini: [loss] plugins has '%s'; "
                            "what-if knows the gradients of ce and zloss only ---> replay a run "
                            "trained with those", wr->dir, t);
    }
    return CT_OK;
}

int32_t whatif_run_open(whatif_run *wr, const char *path, int64_t global_batch, ct_error *err) {
    memset(wr, 0, sizeof *wr);
    int32_t rc = checkpoint_find(path, wr->dir, sizeof wr->dir, &wr->step, err);
    char cfg_path[PATH_MAX + 16];
    host_loader_state ls = {0};
    host_wiring w;
    int64_t B = 1, accum = 1, seed = 0;
    const char *train = NULL;
    if (rc == CT_OK) rc = checkpoint_data_position(wr->dir, &ls, &wr->world, err);
    snprintf(cfg_path, sizeof cfg_path, "%s/config.ini", wr->dir);
    if (rc == CT_OK) rc = config_load_world1(cfg_path, &wr->cfg, err);
    if (rc == CT_OK && !(wr->reg = registry_open(err))) rc = err->code;
    if (rc == CT_OK) rc = wiring_resolve(wr->cfg, wr->reg, &w, &init_ckpt_source, err);
    if (rc == CT_OK && (rc = rank_open_model(&wr->r, wr->cfg, &w, 1, err)) == CT_OK) wr->rank_ok = 1;
    if (rc == CT_OK) rc = checkpoint_load_weights(&wr->r, wr->dir, err);
    if (rc == CT_OK) rc = read_loss(wr, err);
    if (rc != CT_OK) return rc;
    wr->eps = 1e-8;
    config_get_float(wr->cfg, "optim", "eps", &wr->eps, NULL);
    config_get_int(wr->cfg, "data", "batch_size", &B, NULL);
    config_get_int(wr->cfg, "data", "seq_len", &wr->T, NULL);
    config_get_int(wr->cfg, "data", "grad_accum", &accum, NULL);
    config_get_int(wr->cfg, "run", "seed", &seed, NULL);
    config_get_string(wr->cfg, "data", "train", &train, NULL);
    if (mixture_is_spec(train)) /* mixture.h: its windows come from several datasets */
        return ct_error_set(err, CT_ERR_UNSUPPORTED, "%s: [data] train = %s is a mixture of "
                            "datasets; what-if replays runs that read one dataset ---> replay a "
                            "run whose [data] train is one dataset's shards", cfg_path, train);
    if (accum != 1)
        return ct_error_set(err, CT_ERR_UNSUPPORTED, "%s: [data] grad_accum = %lld; what-if "
                            "replays runs of one micro-batch per step ---> replay a run with "
                            "grad_accum = 1", cfg_path, (long long)accum);
    const ct_model_vtable *mv = wr->r.model.vt;
    if (!mv || (!mv->hidden_rows && !mv->mean_hidden))
        return ct_error_set(err, CT_ERR_UNSUPPORTED, "the run's model plugin has neither "
                            "hidden_rows (ABI 1.4) nor mean_hidden (ABI 1.1), one of which "
                            "what-if needs for the head's input");
    if (wr->T > wr->r.T)
        return ct_error_set(err, CT_ERR_UNSUPPORTED, "%s: [data] seq_len = %lld is longer than "
                            "the model's context of %lld ---> replay a run whose sequences fit "
                            "its model", cfg_path, (long long)wr->T, (long long)wr->r.T);
    wr->S = global_batch ? global_batch : B * wr->world;
    wr->bf16 = wr->r.policy.param_dtype == CT_DTYPE_BF16;
    wr->data = loader_open(train, "train", wr->r.V, wr->S, wr->T, 0, 1, (uint64_t)seed, err);
    if (!wr->data) return err->code;
    /* the run's next batch: the global batch its ranks read together from the saved position
     * (a different --global-batch keeps the position, so the windows start there too) */
    if ((rc = loader_set_state(wr->data, ls, err)) != CT_OK) return rc;
    return sample_params_make(&wr->r, 1, &wr->pc, err);
}

void whatif_run_close(whatif_run *wr) {
    loader_close(wr->data);
    if (wr->rank_ok) {
        sample_params_free(&wr->r, &wr->pc);
        rank_close(&wr->r);
    }
    registry_close(wr->reg);
    config_free(wr->cfg);
    memset(wr, 0, sizeof *wr);
}

/* lse[i] for `rows` rows of the model's logits buffer from row `first` on (device's row_stats). */
static int32_t row_lse(host_rank *r, int64_t first, int64_t rows, double *lse, ct_error *err) {
    float buf[64];
    int32_t rc = CT_OK;
    for (int64_t i = 0; rc == CT_OK && i < rows; i += 64) {
        int64_t k = rows - i < 64 ? rows - i : 64;
        rc = RANK_DEV(r, row_stats, r->logits + (first + i) * r->V, k, r->V, r->row_max,
                      r->row_lse, NULL, err);
        if (rc == CT_OK)
            rc = RANK_DEV(r, copy, buf, r->row_lse, (uint64_t)k * sizeof(float), CT_COPY_D2H, err);
        for (int64_t j = 0; rc == CT_OK && j < k; j++) lse[i + j] = buf[j];
    }
    return rc;
}

int32_t whatif_run_forward(whatif_run *wr, const int32_t *tokens, float *h, float *logits,
                           double *lse, ct_error *err) {
    host_rank *r = &wr->r;
    const ct_model_vtable *mv = r->model.vt;
    int64_t C = r->mdesc.d_model, T = wr->T, V = r->V;
    if (mv->hidden_rows) {
        int32_t rc = sample_forward_window(r, &wr->pc, tokens, T, 1, logits, err);
        if (rc == CT_OK) rc = RANK_MODEL(r, hidden_rows, 0, T, h, err);
        for (int64_t i = 0; rc == CT_OK && wr->bf16 && i < T * C; i++) h[i] = ct_round_bf16(h[i]);
        if (rc == CT_OK)
            rc = RANK_DEV(r, copy, logits, r->logits, (uint64_t)(T * V) * sizeof(float),
                          CT_COPY_D2H, err);
        return rc == CT_OK ? row_lse(r, 0, T, lse, err) : rc;
    }
    float *m = malloc((size_t)C * sizeof *m);
    double *prev = calloc((size_t)C, sizeof *prev);
    int32_t rc = m && prev ? CT_OK : ct_error_set(err, CT_ERR_NOMEM, "out of memory");
    for (int64_t t = 1; rc == CT_OK && t <= T; t++) {
        rc = sample_forward_window(r, &wr->pc, tokens, t, 1, logits + (t - 1) * V, err);
        if (rc == CT_OK) rc = RANK_MODEL(r, mean_hidden, m, err);
        if (rc == CT_OK) rc = row_lse(r, t - 1, 1, lse + t - 1, err);
        for (int64_t c = 0; rc == CT_OK && c < C; c++) {
            double sum = (double)m[c] * (double)t;
            float v = (float)(sum - prev[c]);
            h[(t - 1) * C + c] = wr->bf16 ? ct_round_bf16(v) : v;
            prev[c] = sum;
        }
    }
    free(m);
    free(prev);
    return rc;
}

int32_t whatif_run_counts(whatif_run *wr, uint64_t *count, ct_error *err) {
    int64_t seed = 0;
    const char *train = NULL;
    config_get_int(wr->cfg, "run", "seed", &seed, NULL);
    config_get_string(wr->cfg, "data", "train", &train, NULL);
    host_loader *l = loader_open(train, "train", wr->r.V, 1, wr->T, 0, 1, (uint64_t)seed, err);
    if (!l) return err->code;
    int32_t *in = malloc((size_t)wr->T * sizeof *in), *tg = malloc((size_t)wr->T * sizeof *tg);
    int32_t rc = in && tg ? CT_OK : ct_error_set(err, CT_ERR_NOMEM, "out of memory");
    for (int64_t k = 0; rc == CT_OK && k < loader_batches_per_epoch(l); k++) {
        rc = loader_next(l, in, tg, err);
        for (int64_t t = 0; rc == CT_OK && t < wr->T; t++) count[tg[t]]++;
    }
    free(in);
    free(tg);
    loader_close(l);
    return rc;
}

int32_t whatif_run_batch_counts(whatif_run *wr, int64_t batches, uint64_t *count, ct_error *err) {
    int64_t n = wr->S * wr->T;
    host_loader_state st = loader_get_state(wr->data);
    int32_t *in = malloc((size_t)n * sizeof *in), *tg = malloc((size_t)n * sizeof *tg);
    int32_t rc = in && tg ? CT_OK : ct_error_set(err, CT_ERR_NOMEM, "out of memory");
    for (int64_t k = 0; rc == CT_OK && k < batches; k++) {
        rc = loader_next(wr->data, in, tg, err);
        for (int64_t t = 0; rc == CT_OK && t < n; t++) count[tg[t]]++;
    }
    free(in);
    free(tg);
    return rc == CT_OK ? loader_set_state(wr->data, st, err) : rc;
}
