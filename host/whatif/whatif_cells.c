/* whatif_cells.c — the cells of `ctrain what-if` (one world size, order and policy each):
 * their order, their prediction, and the whole replay (every row of the head) of the run's
 * next batches; the sampled replay is whatif_rows.c, the command cli/what_if.c.
 *
 * Memory of the whole replay: the batch's hidden states and logits (tokens x (C + V) floats),
 * and per world size N a part of the vocabulary of vc rows with N * vc * C <= WHATIF_PART
 * elements: N bf16 local gradients plus each replay's pre-divided copy (<= 6 bytes per
 * element and replay), i.e. about (2 + 4 * algos * policies) * WHATIF_PART bytes however large
 * N is, plus 8 doubles per vocabulary row and replay for the figures (and 8 more for
 * --per-row). */
#include "whatif/whatif.h"

#include "whatif/whatif_grad.h"
#include "whatif/whatif_model.h"

#include <ctrain/numerics.h>
#include <stdlib.h>
#include <time.h>

#define WHATIF_PART (1u << 20) /* elements of N local gradients per part (see above) */

order_config whatif_order_of(const whatif_opts *o, int32_t algo) {
    order_config oc = o->oc;
    oc.algo = algo;
    return oc;
}

double whatif_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void whatif_cells_batch(const whatif_opts *o, whatif_cell *cells, int32_t n_cells,
                        const whatif_strata *s, int64_t V, int64_t b) {
    for (int32_t i = 0; i < n_cells; i++) {
        whatif_cell *cl = &cells[i];
        whatif_est_batch(&cl->est, s, V, o->zcoef, b, o->batches, WHATIF_EST_SAME);
        for (int64_t k = 0; cl->row_y && k < s->K * WHATIF_N_Y; k++) cl->row_y[k] += cl->est.y[k];
    }
}

void whatif_cells_window_add(whatif_cell *cl, int64_t b, int64_t i, const double *p,
                             const double *e, const double *m, const double *hbar) {
    if (cl->wb) whatif_window_add(&cl->win, cl->wb, b, i, p, e, m, hbar);
}

void whatif_cells_window(const whatif_opts *o, whatif_cell *cells, int32_t n_cells,
                         const whatif_strata *s, int64_t V, double eps) {
    for (int32_t i = 0; i < n_cells; i++) {
        whatif_cell *cl = &cells[i];
        if (!cl->wb) continue;
        for (int64_t b = 0; b < o->batches; b++) {
            whatif_window_rows(&cl->win, cl->wb, b, eps, cl->est.y);
            whatif_est_batch(&cl->est, s, V, o->zcoef, b, o->batches, WHATIF_EST_WINDOW);
        }
    }
}

int32_t whatif_cell_replay_open(const whatif_opts *o, whatif_cell *cl, uint64_t head,
                                uint64_t max_part, ct_error *err) {
    order_config oc = whatif_order_of(o, cl->algo);
    uint64_t buffer = head, base = 0;
    char why[256];
    if (whatif_buffer_of(o->bucket_bytes, o->fsdp, head, cl->policy == WHATIF_AMP ? 4 : 2,
                         &buffer, &base, why, sizeof why) != 0)
        return ct_error_set(err, CT_ERR_INVALID, "what-if: %s", why);
    int32_t rc = whatif_replay_open(&cl->rp, &oc, cl->N, head, max_part, cl->policy, err);
    if (rc == CT_OK && (buffer != head || base)) whatif_replay_set_buffer(&cl->rp, buffer, base);
    return rc;
}

/* The order a cell's all-reduce of a head of count elements runs (algo = nccl: the tuner
 * model's pick for the buffer that holds it, in the policy's reduce dtype). */
static int32_t resolved_algo(const whatif_opts *o, const whatif_cell *cl, uint64_t count) {
    if (cl->algo != REDUCE_NCCL) return cl->algo;
    order_config oc = whatif_order_of(o, cl->algo);
    char why[256];
    uint32_t es = cl->policy == WHATIF_AMP ? 4 : 2;
    uint64_t buffer = count, base = 0;
    if (order_check(&oc, cl->N, why, sizeof why) != 0 ||
        whatif_buffer_of(o->bucket_bytes, o->fsdp, count, es, &buffer, &base, why, sizeof why))
        return REDUCE_RING;
    order_plan plan;
    order_plan_make(&plan, &oc, cl->N, ORDER_ALL_REDUCE, buffer, es, 1, 0);
    return plan.oc.algo;
}

double whatif_cell_prediction(const whatif_opts *o, const whatif_cell *cl, int64_t V,
                              uint64_t count, double tokens_per_rank, double hbar2,
                              const double *q) {
    whatif_model_in mi = {cl->N, resolved_algo(o, cl, count), o->oc.gpus_per_node, cl->policy,
                          V, tokens_per_rank, hbar2, q};
    return whatif_model_push(&mi);
}

/* Replay every cell of world size N over the vocabulary, part by part (the whole head). */
static int32_t replay_world(const whatif_batch *b, const whatif_opts *o, whatif_cell *cells,
                            int32_t n_cells, const double *hbar, double eps, int64_t batch,
                            uint64_t batch_seed, ct_error *err) {
    int32_t N = cells[0].N, adam = o->lr > 0;
    int64_t C = b->C, V = b->V;
    int64_t vc = (int64_t)(WHATIF_PART / ((uint64_t)N * (uint64_t)C));
    if (vc < 1) vc = 1;
    if (vc > V) vc = V;
    uint64_t part = (uint64_t)(vc * C);
    uint16_t *x = malloc((size_t)N * part * sizeof *x);
    double *acc = malloc(part * sizeof *acc), *p = malloc(part * sizeof *p),
           *e = malloc(part * sizeof *e), *m = adam ? malloc(part * sizeof *m) : NULL;
    float *dbuf = malloc((size_t)(WHATIF_GRAD_BLOCK * vc) * sizeof *dbuf);
    int32_t rc = x && acc && p && e && dbuf && (m || !adam)
                     ? CT_OK : ct_error_set(err, CT_ERR_NOMEM, "what-if: out of memory "
                                            "at N = %d", (int)N);
    for (int32_t i = 0; rc == CT_OK && i < n_cells; i++) {
        rc = whatif_cell_replay_open(o, &cells[i], (uint64_t)(V * C), part, err);
    }
    for (int64_t v0 = 0; rc == CT_OK && v0 < V; v0 += vc) {
        int64_t n = V - v0 < vc ? V - v0 : vc;
        uint64_t cnt = (uint64_t)(n * C);
        whatif_grad_part(b, N, v0, n, acc, dbuf, x);
        if (adam) whatif_grad_softmax_part(b, v0, n, m, dbuf);
        /* x is laid out per rank with stride n*C = cnt: what the replay expects */
        for (int32_t i = 0; i < n_cells; i++) {
            whatif_cell *cl = &cells[i];
            whatif_replay_part(&cl->rp, (uint64_t)(v0 * C), cnt, x, ct_hash64(batch_seed, (uint64_t)N),
                               p, e);
            for (int64_t j = 0; j < n; j++) {
                whatif_row_figures(C, p + j * C, e + j * C, x + j * C, (int64_t)cnt, N,
                                   adam ? m + j * C : NULL, hbar, eps,
                                   cl->est.y + (v0 + j) * WHATIF_N_Y);
                whatif_cells_window_add(cl, batch, v0 + j, p + j * C, e + j * C,
                                        adam ? m + j * C : NULL, hbar);
            }
        }
    }
    for (int32_t i = 0; i < n_cells; i++) whatif_replay_close(&cells[i].rp);
    free(x);
    free(acc);
    free(p);
    free(e);
    free(m);
    free(dbuf);
    return rc;
}

/* The whole replay of o->batches batches: the batch's hidden states and logits held, every
 * world size's cells replayed over the whole head. */
int32_t whatif_whole_run(const whatif_opts *o, whatif_run *wr, whatif_cell *cells,
                         int32_t n_cells, int32_t n_group, const whatif_strata *s,
                         const double *q, double *hbar2, double *secs, ct_error *err) {
    int64_t C = wr->r.mdesc.d_model, V = wr->r.V, T = wr->T, n_tok = wr->S * wr->T;
    int32_t *tokens = malloc((size_t)n_tok * sizeof *tokens), *targets = malloc((size_t)n_tok * sizeof *targets);
    float *h = malloc((size_t)(n_tok * C) * sizeof *h), *logits = malloc((size_t)(n_tok * V) * sizeof *logits);
    double *lse = malloc((size_t)n_tok * sizeof *lse), *hbar = malloc((size_t)C * sizeof *hbar);
    int32_t rc = CT_OK;
    if (!tokens || !targets || !h || !logits || !lse || !hbar) {
        rc = ct_error_set(err, CT_ERR_NOMEM, "what-if: out of memory for the hidden states and "
                          "logits of %lld tokens (%.0f MB) ---> replay a sample of the head's "
                          "rows with --rows K", (long long)n_tok,
                          (double)(n_tok * (C + V)) * 4e-6);
        goto out;
    }
    whatif_batch b = {.n_tok = n_tok, .C = C, .V = V, .h = h, .logits = logits,
                      .target = targets, .lse = lse, .zcoef = wr->zcoef, .bf16 = wr->bf16};
    *hbar2 = 0;
    for (int32_t j = 0; j < 3; j++) secs[j] = 0;
    for (int64_t k = 0; k < o->batches; k++) {
        if ((rc = loader_next(wr->data, tokens, targets, err)) != CT_OK) goto out;
        double t_a = whatif_now();
        for (int64_t sq = 0; sq < wr->S; sq++)
            if ((rc = whatif_run_forward(wr, tokens + sq * T, h + sq * T * C, logits + sq * T * V,
                                         lse + sq * T, err)) != CT_OK) goto out;
        double hn2 = 0, t_b = whatif_now();
        secs[0] += t_b - t_a;
        for (int64_t c = 0; c < C; c++) {
            double sum = 0;
            for (int64_t t = 0; t < n_tok; t++) sum += h[t * C + c];
            hbar[c] = sum / (double)n_tok;
            hn2 += hbar[c] * hbar[c];
        }
        for (int32_t i = 0; i < n_cells; i += n_group) {
            rc = replay_world(&b, o, &cells[i], n_group, hbar, wr->eps, k,
                              ct_hash64((uint64_t)wr->step, (uint64_t)k), err);
            if (rc != CT_OK) goto out;
        }
        for (int32_t i = 0; i < n_cells; i++)
            cells[i].pred += whatif_cell_prediction(o, &cells[i], V, (uint64_t)(V * C),
                                                    (double)n_tok / cells[i].N, hn2, q);
        whatif_cells_batch(o, cells, n_cells, s, V, k);
        *hbar2 += hn2 / (double)o->batches;
        secs[2] += whatif_now() - t_b; /* the local gradients and the replays, together */
    }
out:
    free(tokens);
    free(targets);
    free(h);
    free(logits);
    free(lse);
    free(hbar);
    return rc;
}

