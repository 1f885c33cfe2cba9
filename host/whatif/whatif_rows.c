/* whatif_rows.c — `ctrain what-if --rows K`: the replay of a sample of the head's rows at a size
 * the whole head does not fit (see whatif.h, whatif_rows_run). The batch is streamed: each
 * sequence's forward gives its tokens' hidden states and logits, and every world size's rank
 * that holds those tokens adds their dlogits of the K rows times the hidden states into its f64
 * sums, which become its bf16 local gradient when its share of the batch ends. Nothing of size
 * tokens x C or tokens x V is kept.
 * Not for: choosing the rows or estimating from them (whatif_sample.c), the whole replay and the
 * report (cli/what_if.c).
 *
 * Memory: per world size N its ranks' local gradients of the rows (N x K x C bf16) and one
 * rank's f64 sums (K x C), the softmax part of the rows (K x C f64, --lr), and one sequence's
 * logits (T x V f32); printed before the batch is read.
 */
#include "whatif/whatif.h"

#include "base/cmdout.h"
#include "whatif/whatif_grad.h"

#include <ctrain/numerics.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One world size's ranks as the tokens stream past. */
typedef struct rows_world {
    int32_t   N, cur;      /* world size; the rank holding the next token */
    int64_t   begin, end;  /* the tokens of rank cur: [begin, end) */
    uint16_t *x;           /* (K, N, C) bf16 local gradients: row i of rank n at (i N + n) C */
    double   *acc;         /* (K, C) rank cur's sums */
} rows_world;

static void world_reset(rows_world *w, int64_t n_tok, int64_t K, int64_t C) {
    w->cur = 0;
    w->begin = 0;
    w->end = whatif_share_begin(n_tok, w->N, 1);
    memset(w->acc, 0, (size_t)(K * C) * sizeof *w->acc);
}

/* Rank cur's share has ended: its sums become its bf16 local gradient; the next rank starts. */
static void world_next_rank(rows_world *w, int64_t n_tok, int64_t K, int64_t C) {
    for (int64_t i = 0; i < K; i++) {
        uint16_t *xi = w->x + ((uint64_t)i * (uint64_t)w->N + (uint64_t)w->cur) * (uint64_t)C;
        for (int64_t c = 0; c < C; c++) xi[c] = ct_bf16_from_f32((float)w->acc[i * C + c]);
    }
    memset(w->acc, 0, (size_t)(K * C) * sizeof *w->acc);
    w->cur++;
    w->begin = w->end;
    w->end = whatif_share_begin(n_tok, w->N, w->cur + 1);
}

/* Tokens [t0, t0 + n) of the batch (h (n, C), lg (n, K) their logits of the rows, lse (n),
 * targets (n)) into world w's ranks. dbuf: n x K floats. */
static void world_feed(rows_world *w, const whatif_run *wr, const whatif_strata *s, int64_t n_tok,
                       int64_t t0, int64_t n, const float *h, const float *lg, const double *lse,
                       const int32_t *targets, float *dbuf, int64_t C) {
    int64_t K = s->K;
    for (int64_t t = 0; t < n;) {
        int64_t piece = w->end - (t0 + t) < n - t ? w->end - (t0 + t) : n - t;
        double inv = 1.0 / (double)(w->end - w->begin);
        for (int64_t u = 0; u < piece; u++)
            for (int64_t i = 0; i < K; i++)
                dbuf[u * K + i] = whatif_dlogit(lg[(t + u) * K + i], lse[t + u],
                                                targets[t + u] == s->row[i], wr->zcoef, inv,
                                                wr->bf16, NULL);
        whatif_grad_accum(w->acc, K, C, dbuf, K, h + t * C, piece);
        t += piece;
        if (t0 + t == w->end) world_next_rank(w, n_tok, K, C);
    }
}

int32_t whatif_rows_run(const whatif_opts *o, whatif_run *wr, whatif_cell *cells,
                        int32_t n_cells, int32_t n_group, const whatif_strata *s,
                        const double *q, double *hbar2, double *secs, ct_error *err) {
    int64_t C = wr->r.mdesc.d_model, V = wr->r.V, T = wr->T, S = wr->S, K = s->K;
    int64_t n_tok = S * T;
    int32_t NW = o->n_worlds, adam = o->lr > 0, rc = CT_OK;
    rows_world w[WHATIF_MAX_LIST];
    memset(w, 0, sizeof w);
    double bytes = 0;
    for (int32_t j = 0; j < NW; j++) {
        w[j].N = o->worlds[j];
        bytes += (double)w[j].N * (double)(K * C) * 2.0 + (double)(K * C) * 8.0;
        w[j].x = malloc((size_t)w[j].N * (size_t)(K * C) * sizeof *w[j].x);
        w[j].acc = malloc((size_t)(K * C) * sizeof *w[j].acc);
        if (!w[j].x || !w[j].acc) rc = CT_ERR_NOMEM;
    }
    int32_t *tokens = malloc((size_t)n_tok * sizeof *tokens), *targets = malloc((size_t)n_tok * sizeof *targets);
    float *h = malloc((size_t)(T * C) * sizeof *h), *logits = malloc((size_t)(T * V) * sizeof *logits);
    float *lg = malloc((size_t)(T * K) * sizeof *lg), *dbuf = malloc((size_t)(T * K) * sizeof *dbuf);
    double *lse = malloc((size_t)T * sizeof *lse), *hbar = malloc((size_t)C * sizeof *hbar);
    double *m = adam ? malloc((size_t)(K * C) * sizeof *m) : NULL;
    double *p = malloc((size_t)C * sizeof *p), *e = malloc((size_t)C * sizeof *e);
    bytes += (double)(T * V) * 4.0 + (adam ? (double)(K * C) * 8.0 : 0.0) + (double)n_tok * 8.0;
    if (rc != CT_OK || !tokens || !targets || !h || !logits || !lg || !dbuf || !lse || !hbar ||
        (adam && !m) || !p || !e) {
        rc = ct_error_set(err, CT_ERR_NOMEM, "what-if --rows %lld: out of memory for %.0f MB "
                          "(per world size N: N x %lld rows x %lld channels of bf16) ---> fewer "
                          "--rows or world sizes", (long long)K, bytes / 1e6, (long long)K,
                          (long long)C);
        goto out;
    }
    if (K < V)
        fprintf(cmdout(), "what-if: --rows %lld of %lld (%s, %d strat%s, seed %lld): the batch "
                "streamed sequence by sequence, %.0f MB for the sampled rows' local gradients\n",
                (long long)K, (long long)V, whatif_stratify_names[o->stratify],
                (int)s->n_strata, s->n_strata == 1 ? "um" : "a", (long long)o->sample_seed,
                bytes / 1e6);
    else
        fprintf(cmdout(), "what-if: --rows %lld: every one of the %lld rows, the batch streamed "
                "sequence by sequence, %.0f MB for their local gradients\n", (long long)o->rows,
                (long long)V, bytes / 1e6);
    fflush(cmdout());
    *hbar2 = 0;
    for (int32_t j = 0; j < 3; j++) secs[j] = 0;
    for (int64_t k = 0; rc == CT_OK && k < o->batches; k++) {
        if ((rc = loader_next(wr->data, tokens, targets, err)) != CT_OK) break;
        for (int32_t j = 0; j < NW; j++) world_reset(&w[j], n_tok, K, C);
        for (int64_t c = 0; c < C; c++) hbar[c] = 0;
        if (adam) memset(m, 0, (size_t)(K * C) * sizeof *m);
        for (int64_t sq = 0; rc == CT_OK && sq < S; sq++) {
            int64_t t0 = sq * T;
            double t_a = whatif_now();
            rc = whatif_run_forward(wr, tokens + t0, h, logits, lse, err);
            double t_b = whatif_now();
            secs[0] += t_b - t_a;
            if (rc != CT_OK) break;
            for (int64_t t = 0; t < T; t++) {
                for (int64_t i = 0; i < K; i++) lg[t * K + i] = logits[t * V + s->row[i]];
                for (int64_t c = 0; c < C; c++) hbar[c] += h[t * C + c];
            }
            if (adam) { /* the rows' softmax part: sum over tokens of p h */
                for (int64_t t = 0; t < T; t++)
                    for (int64_t i = 0; i < K; i++)
                        whatif_dlogit(lg[t * K + i], lse[t], 0, 0.0, 1.0, 0, &dbuf[t * K + i]);
                whatif_grad_accum(m, K, C, dbuf, K, h, T);
            }
            for (int32_t j = 0; j < NW; j++)
                world_feed(&w[j], wr, s, n_tok, t0, T, h, lg, lse, targets + t0, dbuf, C);
            secs[1] += whatif_now() - t_b;
        }
        if (rc != CT_OK) break;
        double hn2 = 0, t_c = whatif_now();
        for (int64_t c = 0; c < C; c++) {
            hbar[c] /= (double)n_tok;
            hn2 += hbar[c] * hbar[c];
        }
        if (adam)
            for (int64_t i = 0; i < K * C; i++) m[i] /= (double)n_tok;
        uint64_t batch_seed = ct_hash64((uint64_t)wr->step, (uint64_t)k);
        for (int32_t j = 0; j < NW; j++)
            for (int32_t g = 0; g < n_group; g++) {
                whatif_cell *cl = &cells[j * n_group + g];
                for (int64_t i = 0; i < K; i++) {
                    const uint16_t *xi = w[j].x + (uint64_t)i * (uint64_t)w[j].N * (uint64_t)C;
                    whatif_replay_part(&cl->rp, (uint64_t)(s->row[i] * C), (uint64_t)C, xi,
                                       ct_hash64(batch_seed, (uint64_t)w[j].N), p, e);
                    whatif_row_figures(C, p, e, xi, C, w[j].N, adam ? m + i * C : NULL, hbar,
                                       wr->eps, cl->est.y + i * WHATIF_N_Y);
                    whatif_cells_window_add(cl, k, i, p, e, adam ? m + i * C : NULL, hbar);
                }
                cl->pred += whatif_cell_prediction(o, cl, V, (uint64_t)(V * C),
                                                  (double)n_tok / cl->N, hn2, q);
            }
        whatif_cells_batch(o, cells, n_cells, s, V, k);
        *hbar2 += hn2 / (double)o->batches;
        secs[2] += whatif_now() - t_c;
    }
out:
    for (int32_t j = 0; j < NW; j++) {
        free(w[j].x);
        free(w[j].acc);
    }
    free(tokens);
    free(targets);
    free(h);
    free(logits);
    free(lg);
    free(dbuf);
    free(lse);
    free(hbar);
    free(m);
    free(p);
    free(e);
    return rc;
}
