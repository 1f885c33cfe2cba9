/* whatif.c — `ctrain what-if RUN_DIR|CHECKPOINT --world-sizes N,... [options]`: from a
 * checkpoint, its configuration and its data, the output head's gradient of the run's next
 * step(s) as each of N would-be ranks would hold it, reduced at each world size with each
 * order and policy as the threads engine and the precision plugins would (whatif_replay.h),
 * and reported with the reduction-error probe's figures (host/run/probe.c) beside the predictive
 * model's (whatif_model.h). A user asks it before booking a cluster.
 * Not for: the arithmetic of gradients (whatif_grad.c) or of reductions (whatif_replay.c).
 *
 * Memory: the model forward of one sequence, the batch's hidden states (tokens x C floats),
 * and per world size N a part of the vocabulary of vc rows with N * vc * C <= WHATIF_PART
 * elements: N bf16 local gradients plus each replay's pre-divided copy (<= 6 bytes per
 * element and replay), i.e. about (2 + 4 * algos * policies) * WHATIF_PART bytes however large
 * N is, plus 3 doubles per vocabulary row and replay for --per-row. */
#include "run/checkpoint.h"
#include "base/cmdout.h"
#include "cli/commands.h"
#include "base/init.h"
#include "run/rank.h"
#include "run/sample.h"
#include "io/outfile.h"
#include "whatif/whatif_grad.h"
#include "whatif/whatif_model.h"
#include "whatif/order_args.h"
#include "whatif/whatif_replay.h"
#include "plugin/wiring.h"

#include "../plugins/comm/threads/tuner.h"

#include <ctrain/numerics.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WHATIF_PART (1u << 20)   /* elements of N local gradients per part (see above) */
#define WHATIF_MAX_WORLD 65536
#define WHATIF_MAX_LIST 16

#define WHATIF_USAGE                                                                           \
    "usage: ctrain what-if RUN_DIR|CHECKPOINT_DIR --world-sizes N[,N...]\n"                    \
    "           [--algo ring,dbtree,hier,tree,nvls,nvls_tree,nccl] [--gpus-per-node G]\n"     \
    "           [--channels K] [--split nccl|even] [--proto simple|ll|ll128]\n"              \
    "           [--gpu a100|h100|h200] [--no-nvswitch]\n"                                    \
    "           [--policies pure_bf16,bf16_fp32acc,bf16_sr,amp] [--batches K]\n"               \
    "           [--global-batch SEQS] [--per-row FILE]\n"                                      \
    "Replays the output head's gradient reduction of the checkpoint's next step(s) at each\n"  \
    "world size, order and policy, and prints the probe's figures (relative error, bias,\n"    \
    "logit push per step) beside the model's prediction. Defaults: --algo ring,\n"             \
    "--gpus-per-node 0 (one node), --channels 1, every policy, --batches 1, the run's global\n" \
    "batch. Orders as [comm] algo of the threads engine (dbtree: NCCL's tree; tree: heap;\n"  \
    "nccl: what the model of NCCL's tuner picks for the head's size on --gpu nodes of\n"      \
    "--gpus-per-node GPUs, printed once per world size), cut as NCCL cuts one all-reduce\n"   \
    "(--split nccl, the default) or evenly (--split even, earlier versions).\n"

typedef struct whatif_opts {
    const char *path, *per_row;
    int32_t     worlds[WHATIF_MAX_LIST], n_worlds;
    int32_t     algos[REDUCE_N_ALGOS], n_algos;
    int32_t     policies[WHATIF_N_POLICIES], n_policies;
    int64_t     batches, global_batch;
    order_config oc;             /* the order options (algo: each of algos) */
} whatif_opts;

static int usage_error(const char *fmt, const char *a, const char *b) {
    fprintf(stderr, "ctrain what-if: ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, "\n%s", WHATIF_USAGE);
    return 2;
}

static int parse_int(const char *flag, const char *v, int64_t lo, int64_t hi, int64_t *out) {
    return order_args_int("what-if", flag, v, lo, hi, out);
}

/* "a,b,c" into items (each parsed by kind: 'w' world size, 'a' algo, 'p' policy). */
static int parse_list(const char *flag, const char *v, char kind, int32_t *out, int32_t *n,
                      int32_t cap) {
    char buf[512];
    if (snprintf(buf, sizeof buf, "%s", v) >= (int)sizeof buf || !buf[0])
        return usage_error("%s '%s' is empty or too long", flag, v);
    *n = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (*n == cap) return usage_error("%s: more than the %s items it takes", flag,
                                          kind == 'w' ? "16" : kind == 'a' ? "7" : "4");
        int64_t x;
        if (kind == 'w') {
            if (parse_int(flag, tok, 1, WHATIF_MAX_WORLD, &x)) return 2;
        } else if ((x = kind == 'a' ? whatif_algo_parse(tok) : whatif_policy_parse(tok)) < 0) {
            return usage_error(kind == 'a' ? "%s: unknown algo '%s' ---> ring, dbtree, hier, "
                                             "tree, nvls, nvls_tree or nccl"
                                           : "%s: unknown policy '%s' ---> pure_bf16, "
                                             "bf16_fp32acc, bf16_sr or amp", flag, tok);
        }
        for (int32_t i = 0; i < *n; i++)
            if (out[i] == (int32_t)x) return usage_error("%s names '%s' twice", flag, tok);
        out[(*n)++] = (int32_t)x;
    }
    return 0;
}

/* The threads engine's order config of algo under the options. */
static order_config order_of(const whatif_opts *o, int32_t algo) {
    order_config oc = o->oc;
    oc.algo = algo;
    return oc;
}

static int parse_args(int argc, char **argv, whatif_opts *o) {
    memset(o, 0, sizeof *o);
    o->algos[0] = REDUCE_RING, o->n_algos = 1;
    for (int32_t p = 0; p < WHATIF_N_POLICIES; p++) o->policies[p] = p;
    o->n_policies = WHATIF_N_POLICIES;
    o->batches = 1;
    o->oc = order_config_default(REDUCE_RING);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fprintf(cmdout(), "%s", WHATIF_USAGE);
            return -1;
        }
        if (a[0] != '-') {
            if (o->path) return usage_error("a second folder '%s'%s ---> give one", a, "");
            o->path = a;
            continue;
        }
        int takes = 0, r = order_args_option("what-if", a, i + 1 < argc ? argv[i + 1] : NULL,
                                             &o->oc, &takes);
        if (r >= 0) {
            if (r) return r;
            i += takes;
            continue;
        }
        static const char *const valued[] = {"--world-sizes", "--algo", "--policies",
                                             "--batches", "--global-batch", "--per-row", NULL};
        int known = 0;
        for (int k = 0; valued[k]; k++) known |= !strcmp(a, valued[k]);
        if (!known) return usage_error("unknown option '%s'%s", a, "");
        if (i + 1 >= argc) return usage_error("%s needs a value%s", a, "");
        const char *v = argv[++i];
        int bad = 0;
        if (!strcmp(a, "--world-sizes")) bad = parse_list(a, v, 'w', o->worlds, &o->n_worlds, WHATIF_MAX_LIST);
        else if (!strcmp(a, "--algo"))
            bad = parse_list(a, v, 'a', o->algos, &o->n_algos, REDUCE_N_ALGOS);
        else if (!strcmp(a, "--policies"))
            bad = parse_list(a, v, 'p', o->policies, &o->n_policies, WHATIF_N_POLICIES);
        else if (!strcmp(a, "--batches")) bad = parse_int(a, v, 1, 1000000, &o->batches);
        else if (!strcmp(a, "--global-batch")) bad = parse_int(a, v, 1, 1 << 24, &o->global_batch);
        else o->per_row = v;
        if (bad) return bad;
    }
    if (!o->path) return usage_error("no run or checkpoint folder given%s%s", "", "");
    if (!o->n_worlds) return usage_error("--world-sizes is required%s%s", "", "");
    /* every order must fit every world size: say which pair does not */
    for (int32_t i = 0; i < o->n_worlds; i++)
        for (int32_t j = 0; j < o->n_algos; j++) {
            order_config oc = order_of(o, o->algos[j]);
            char why[256];
            if (order_check(&oc, o->worlds[i], why, sizeof why) != 0) {
                fprintf(stderr, "ctrain what-if: --world-sizes %d with --gpus-per-node %lld: %s\n",
                        (int)o->worlds[i], (long long)o->oc.gpus_per_node, why);
                return 2;
            }
        }
    return 0;
}

/* The run: its rank of world 1 with the checkpoint's weights, data and loss. */
typedef struct whatif_run {
    char         dir[PATH_MAX];
    int64_t      step, S, T;       /* checkpoint step; global batch S sequences of T tokens */
    int32_t      world;            /* the world size that saved the checkpoint */
    host_config *cfg;
    host_registry *reg;
    host_rank    r;
    int          rank_ok;
    param_copy   pc;
    host_loader *data;
    double       zcoef;
    int32_t      bf16;
    float       *w;                /* (V, C) the head weight as the forward used it */
} whatif_run;

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

static int32_t open_run(whatif_run *wr, const whatif_opts *o, ct_error *err) {
    int32_t rc = checkpoint_find(o->path, wr->dir, sizeof wr->dir, &wr->step, err);
    char cfg_path[PATH_MAX + 16];
    host_loader_state ls = {0};
    host_wiring w;
    int64_t B = 1, accum = 1, seed = 0;
    const char *train = NULL;
    if (rc == CT_OK) rc = checkpoint_data_position(wr->dir, &ls, &wr->world, err);
    snprintf(cfg_path, sizeof cfg_path, "%s/config.ini", wr->dir);
    if (rc == CT_OK) rc = config_load_world1(cfg_path, &wr->cfg, err);
    if (rc == CT_OK && !(wr->reg = registry_open(err))) rc = err->code;
    if (rc == CT_OK) rc = wiring_resolve(wr->cfg, wr->reg, &w, err);
    if (rc == CT_OK && (rc = rank_open_model(&wr->r, wr->cfg, &w, 1, err)) == CT_OK) wr->rank_ok = 1;
    if (rc == CT_OK) rc = checkpoint_load_weights(&wr->r, wr->dir, err);
    if (rc == CT_OK) rc = read_loss(wr, err);
    if (rc != CT_OK) return rc;
    config_get_int(wr->cfg, "data", "batch_size", &B, NULL);
    config_get_int(wr->cfg, "data", "seq_len", &wr->T, NULL);
    config_get_int(wr->cfg, "data", "grad_accum", &accum, NULL);
    config_get_int(wr->cfg, "run", "seed", &seed, NULL);
    config_get_string(wr->cfg, "data", "train", &train, NULL);
    if (accum != 1)
        return ct_error_set(err, CT_ERR_UNSUPPORTED, "%s: [data] grad_accum = %lld; what-if "
                            "replays runs of one micro-batch per step ---> replay a run with "
                            "grad_accum = 1", cfg_path, (long long)accum);
    const ct_model_vtable *mv = wr->r.model.vt;
    if (!mv || (!mv->hidden_rows && !mv->mean_hidden))
        return ct_error_set(err, CT_ERR_UNSUPPORTED, "the run's model plugin has neither "
                            "hidden_rows (ABI 1.4) nor mean_hidden (ABI 1.1), one of which "
                            "what-if needs for the head's input");
    wr->S = o->global_batch ? o->global_batch : B * wr->world;
    wr->bf16 = wr->r.policy.param_dtype == CT_DTYPE_BF16;
    wr->data = loader_open(train, "train", wr->r.V, wr->S, wr->T, 0, 1, (uint64_t)seed, err);
    if (!wr->data) return err->code;
    /* the run's next batch: the global batch its ranks read together from the saved position
     * (a different --global-batch keeps the position, so the windows start there too) */
    if ((rc = loader_set_state(wr->data, ls, err)) != CT_OK) return rc;
    if ((rc = sample_params_make(&wr->r, 1, &wr->pc, err)) != CT_OK) return rc;
    /* the head weight, from the gathered copy the forward reads */
    const ct_model_desc *d = &wr->r.mdesc;
    uint32_t hu = (uint32_t)d->head_unit, hk = (uint32_t)d->head_tensor;
    uint64_t off = init_tensor_offset(d, hu, hk), n = (uint64_t)(wr->r.V * d->d_model);
    size_t es = ct_dtype_size(wr->r.policy.param_dtype);
    void *tmp = malloc(n * es);
    wr->w = malloc(n * sizeof *wr->w);
    if (!tmp || !wr->w) rc = ct_error_set(err, CT_ERR_NOMEM, "what-if: out of memory");
    if (rc == CT_OK)
        rc = RANK_DEV(&wr->r, copy, tmp, (const char *)wr->pc.unit[hu] + off * es,
                      n * es, CT_COPY_D2H, err);
    for (uint64_t i = 0; rc == CT_OK && i < n; i++)
        wr->w[i] = es == 2 ? ct_bf16_to_f32(((uint16_t *)tmp)[i]) : ((float *)tmp)[i];
    free(tmp);
    return rc;
}

static void close_run(whatif_run *wr) {
    free(wr->w);
    loader_close(wr->data);
    if (wr->rank_ok) {
        sample_params_free(&wr->r, &wr->pc);
        rank_close(&wr->r);
    }
    registry_close(wr->reg);
    config_free(wr->cfg);
}

/* h (S*T, C): each token's final hidden state, rounded to bf16 as the model stores it under
 * bf16 compute. With the model's hidden_rows (ABI 1.4): one forward per sequence. Without it
 * (an older plugin): mean_hidden averages the rows of the latest forward, so the forward of a
 * sequence's first t tokens (causal: the same rows as in the whole sequence) gives the mean of
 * h[0..t-1], and h[t-1] = t m_t - (t-1) m_{t-1} (f32 means of f64 sums: the difference is exact
 * to ~1e-7 |h|) — T(T+1)/2 forward rows per sequence instead of T. */
static int32_t hidden_states(whatif_run *wr, const int32_t *tokens, float *h, ct_error *err) {
    host_rank *r = &wr->r;
    const ct_model_vtable *mv = r->model.vt;
    int64_t C = r->mdesc.d_model, T = wr->T;
    float *m = malloc((size_t)C * sizeof *m), *logits = malloc((size_t)r->V * sizeof *logits);
    double *prev = calloc((size_t)C, sizeof *prev);
    int32_t rc = m && logits && prev ? CT_OK : ct_error_set(err, CT_ERR_NOMEM, "out of memory");
    for (int64_t s = 0; rc == CT_OK && s < wr->S; s++) {
        float *hs = h + s * T * C;
        if (mv->hidden_rows) {
            rc = sample_forward_window(r, &wr->pc, tokens + s * T, T, 1, logits, err);
            if (rc == CT_OK) rc = RANK_MODEL(r, hidden_rows, 0, T, hs, err);
            for (int64_t i = 0; rc == CT_OK && wr->bf16 && i < T * C; i++)
                hs[i] = ct_round_bf16(hs[i]);
            continue;
        }
        for (int64_t c = 0; c < C; c++) prev[c] = 0;
        for (int64_t t = 1; rc == CT_OK && t <= T; t++) {
            rc = sample_forward_window(r, &wr->pc, tokens + s * T, t, 1, logits, err);
            if (rc == CT_OK) rc = RANK_MODEL(r, mean_hidden, m, err);
            for (int64_t c = 0; rc == CT_OK && c < C; c++) {
                double sum = (double)m[c] * (double)t;
                float v = (float)(sum - prev[c]);
                hs[(t - 1) * C + c] = wr->bf16 ? ct_round_bf16(v) : v;
                prev[c] = sum;
            }
        }
    }
    free(m);
    free(logits);
    free(prev);
    return rc;
}

/* One (world size, algo, policy) replay and its sums. */
typedef struct whatif_cell {
    int32_t       N, algo, policy;
    whatif_replay rp;
    double        d2, e2, ds, ea;  /* this batch's sums (probe.c's report_errors) */
    double       *ebar;            /* (C) sum over rows of p - e */
    double        rel_err, bias, push; /* sums over batches */
    double        pred;            /* the model's prediction, summed over batches */
    double       *row_d, *row_ea, *row_push; /* (V) per-row sums over batches, --per-row */
} whatif_cell;

/* Replay every cell of world size N over the vocabulary, part by part. */
static int32_t replay_world(const whatif_batch *b, const whatif_opts *o, whatif_cell *cells,
                            int32_t n_cells, const double *hbar, uint64_t batch_seed,
                            ct_error *err) {
    int32_t per_row = o->per_row != NULL;
    int32_t N = cells[0].N;
    int64_t C = b->C, V = b->V;
    int64_t vc = (int64_t)(WHATIF_PART / ((uint64_t)N * (uint64_t)C));
    if (vc < 1) vc = 1;
    if (vc > V) vc = V;
    uint64_t part = (uint64_t)(vc * C);
    uint16_t *x = malloc((size_t)N * part * sizeof *x);
    double *acc = malloc(part * sizeof *acc), *p = malloc(part * sizeof *p),
           *e = malloc(part * sizeof *e);
    int32_t rc = x && acc && p && e ? CT_OK
                                    : ct_error_set(err, CT_ERR_NOMEM, "what-if: out of memory "
                                                   "at N = %d", (int)N);
    for (int32_t i = 0; rc == CT_OK && i < n_cells; i++) {
        whatif_cell *cl = &cells[i];
        order_config oc = order_of(o, cl->algo);
        rc = whatif_replay_open(&cl->rp, &oc, N, (uint64_t)(V * C), part, cl->policy, err);
        cl->d2 = cl->e2 = cl->ds = cl->ea = 0;
        for (int64_t c = 0; c < C; c++) cl->ebar[c] = 0;
    }
    for (int64_t v0 = 0; rc == CT_OK && v0 < V; v0 += vc) {
        int64_t n = V - v0 < vc ? V - v0 : vc;
        uint64_t m = (uint64_t)(n * C);
        whatif_grad_part(b, N, v0, n, acc, x);
        /* x is laid out per rank with stride n*C = m: what the replay expects */
        for (int32_t i = 0; i < n_cells; i++) {
            whatif_cell *cl = &cells[i];
            whatif_replay_part(&cl->rp, (uint64_t)(v0 * C), m, x,
                               ct_hash64(batch_seed, (uint64_t)N), p, e);
            for (int64_t j = 0; j < n; j++) {
                double rd = 0, rea = 0, rpush = 0;
                for (int64_t c = 0; c < C; c++) {
                    double d = p[j * C + c] - e[j * C + c];
                    cl->d2 += d * d;
                    cl->e2 += e[j * C + c] * e[j * C + c];
                    cl->ds += d;
                    cl->ea += fabs(e[j * C + c]);
                    cl->ebar[c] += d;
                    rd += d;
                    rea += fabs(e[j * C + c]);
                    rpush -= d * hbar[c];
                }
                if (per_row) {
                    cl->row_d[v0 + j] += rd;
                    cl->row_ea[v0 + j] += rea;
                    cl->row_push[v0 + j] += rpush;
                }
            }
        }
    }
    for (int32_t i = 0; i < n_cells; i++) {
        whatif_cell *cl = &cells[i];
        if (rc == CT_OK) {
            double push = 0;
            for (int64_t c = 0; c < C; c++) push -= cl->ebar[c] / (double)V * hbar[c];
            cl->rel_err += cl->e2 > 0 ? sqrt(cl->d2 / cl->e2) : 0;
            cl->bias += cl->ea > 0 ? cl->ds / cl->ea : 0;
            cl->push += push;
        }
        whatif_replay_close(&cl->rp);
    }
    free(x);
    free(acc);
    free(p);
    free(e);
    return rc;
}

/* count[v]: how often token v is a target in the whole train split (the rarity of row v). */
static int32_t corpus_counts(whatif_run *wr, uint64_t *count, ct_error *err) {
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

static int32_t write_per_row(const char *path, const whatif_cell *cells, int32_t n_cells,
                             int64_t V, const uint64_t *count, int64_t batches, ct_error *err) {
    outfile o;
    int32_t rc = outfile_open(&o, path, err);
    FILE *f = rc == CT_OK ? outfile_stream(&o, err) : NULL;
    if (!f) {
        if (rc == CT_OK) outfile_abort(&o);
        return err->code;
    }
    uint64_t total = 0;
    for (int64_t v = 0; v < V; v++) total += count[v];
    fprintf(f, "# ctrain what-if --per-row: per vocabulary row, means over %lld batch(es): "
            "bias = sum_c (p - e) / sum_c |e| of the reduced head gradient row, push = its own "
            "logit's change per SGD step of rate 1 (-(p - e) . hbar); count = the token's "
            "occurrences as a target in the train split (freq = count / %llu)\n",
            (long long)batches, (unsigned long long)total);
    fprintf(f, "world_size\talgo\tpolicy\trow\tcount\tfreq\tbias\tpush\n");
    for (int32_t i = 0; i < n_cells; i++)
        for (int64_t v = 0; v < V; v++) {
            const whatif_cell *cl = &cells[i];
            fprintf(f, "%d\t%s\t%s\t%lld\t%llu\t%.6g\t%.6g\t%.6g\n", (int)cl->N,
                    whatif_algo_name(cl->algo), whatif_policy_name(cl->policy), (long long)v,
                    (unsigned long long)count[v], total ? (double)count[v] / (double)total : 0.0,
                    cl->row_ea[v] > 0 ? cl->row_d[v] / cl->row_ea[v] : 0.0,
                    cl->row_push[v] / (double)batches);
        }
    return outfile_commit(&o, err);
}

/* The order a cell's all-reduce of count elements runs (algo = nccl: the tuner model's pick
 * for its size in the policy's reduce dtype). */
static int32_t resolved_algo(const whatif_opts *o, const whatif_cell *cl, uint64_t count) {
    if (cl->algo != REDUCE_NCCL) return cl->algo;
    order_config oc = order_of(o, cl->algo);
    char why[256];
    if (order_check(&oc, cl->N, why, sizeof why) != 0) return REDUCE_RING;
    order_plan plan;
    order_plan_make(&plan, &oc, cl->N, ORDER_ALL_REDUCE, count,
                    cl->policy == WHATIF_AMP ? 4 : 2, 1, 0);
    return plan.oc.algo;
}

/* algo = nccl: the tuner model's pick at each world size, for the bf16 and (amp) f32 head. */
static void print_picks(const whatif_opts *o, uint64_t count) {
    int32_t nccl = 0, f32 = 0;
    for (int32_t a = 0; a < o->n_algos; a++) nccl |= o->algos[a] == REDUCE_NCCL;
    for (int32_t p = 0; p < o->n_policies; p++) f32 |= o->policies[p] == WHATIF_AMP;
    for (int32_t i = 0; nccl && i < o->n_worlds; i++)
        for (int32_t es = 2; es <= (f32 ? 4 : 2); es += 2) {
            order_config oc = order_of(o, REDUCE_NCCL);
            char why[256], line[512];
            if (order_check(&oc, o->worlds[i], why, sizeof why) != 0) continue;
            tuner_query q = {ORDER_ALL_REDUCE, count * (uint64_t)es, o->worlds[i],
                             oc.gpus_per_node, oc.gpu, oc.nvswitch, 1, 0};
            tuner_pick pk;
            tuner_choose(&q, &pk);
            tuner_describe(&q, &pk, line, sizeof line);
            fprintf(cmdout(), "what-if: N = %d, %s head: %s\n", (int)o->worlds[i], es == 2 ? "bf16" : "f32",
                   line);
        }
}

static void print_table(const whatif_opts *o, const whatif_cell *cells, int32_t n_cells,
                        int64_t n_tok) {
    fprintf(cmdout(), "%6s %-9s %-13s %11s %12s %12s %12s %12s\n", "N", "algo", "policy",
            "tokens/rank", "rel_err", "bias", "logit_push", "predicted");
    double K = (double)o->batches;
    for (int32_t i = 0; i < n_cells; i++) {
        const whatif_cell *cl = &cells[i];
        fprintf(cmdout(), "%6d %-9s %-13s %11.4g %12.4g %12.4g %12.4g %12.4g\n", (int)cl->N,
                whatif_algo_name(cl->algo), whatif_policy_name(cl->policy),
                (double)n_tok / cl->N, cl->rel_err / K, cl->bias / K, cl->push / K,
                cl->pred / K);
    }
}

int cmd_what_if(int argc, char **argv) {
    whatif_opts o;
    int status = parse_args(argc, argv, &o);
    if (status) return status < 0 ? 0 : status;
    ct_error err = {.struct_size = sizeof err};
    whatif_run wr;
    memset(&wr, 0, sizeof wr);
    status = 1;
    int32_t n_cells = o.n_worlds * o.n_algos * o.n_policies, rc;
    whatif_cell *cells = calloc((size_t)n_cells, sizeof *cells);
    int32_t *tokens = NULL, *targets = NULL;
    float *h = NULL;
    double *lse = NULL, *hbar = NULL, *q = NULL;
    uint64_t *count = NULL;
    if (!cells) {
        ct_error_set(&err, CT_ERR_NOMEM, "out of memory");
        goto out_fail;
    }
    if ((rc = open_run(&wr, &o, &err)) != CT_OK) goto out_fail;
    int64_t C = wr.r.mdesc.d_model, V = wr.r.V, n_tok = wr.S * wr.T;
    for (int32_t i = 0; i < o.n_worlds; i++)
        if (o.worlds[i] > n_tok) {
            ct_error_set(&err, CT_ERR_INVALID, "--world-sizes %d: more ranks than the global "
                         "batch's %lld tokens (%lld sequences x %lld) ---> raise --global-batch "
                         "to at least %lld sequences", (int)o.worlds[i], (long long)n_tok,
                         (long long)wr.S, (long long)wr.T,
                         (long long)((o.worlds[i] + wr.T - 1) / wr.T));
            goto out_fail;
        }
    tokens = malloc((size_t)n_tok * sizeof *tokens);
    targets = malloc((size_t)n_tok * sizeof *targets);
    h = malloc((size_t)(n_tok * C) * sizeof *h);
    lse = malloc((size_t)n_tok * sizeof *lse);
    hbar = malloc((size_t)C * sizeof *hbar);
    count = calloc((size_t)V, sizeof *count);
    q = malloc((size_t)V * sizeof *q);
    if (!tokens || !targets || !h || !lse || !hbar || !count || !q) {
        ct_error_set(&err, CT_ERR_NOMEM, "what-if: out of memory for a batch of %lld tokens",
                     (long long)n_tok);
        goto out_fail;
    }
    for (int32_t wi = 0, i = 0; wi < o.n_worlds; wi++)
        for (int32_t a = 0; a < o.n_algos; a++)
            for (int32_t p = 0; p < o.n_policies; p++, i++) {
                whatif_cell *cl = &cells[i];
                cl->N = o.worlds[wi], cl->algo = o.algos[a], cl->policy = o.policies[p];
                cl->ebar = calloc((size_t)C, sizeof *cl->ebar);
                if (o.per_row) {
                    cl->row_d = calloc((size_t)V, sizeof *cl->row_d);
                    cl->row_ea = calloc((size_t)V, sizeof *cl->row_ea);
                    cl->row_push = calloc((size_t)V, sizeof *cl->row_push);
                }
                if (!cl->ebar || (o.per_row && (!cl->row_d || !cl->row_ea || !cl->row_push))) {
                    ct_error_set(&err, CT_ERR_NOMEM, "what-if: out of memory");
                    goto out_fail;
                }
            }
    char steps[64];
    if (o.batches > 1)
        snprintf(steps, sizeof steps, "steps %lld..%lld", (long long)wr.step + 1,
                 (long long)(wr.step + o.batches));
    else
        snprintf(steps, sizeof steps, "step %lld", (long long)wr.step + 1);
    fprintf(cmdout(), "what-if: %s (step %lld, saved at N = %d); replaying the head gradient of %s\n",
            wr.dir, (long long)wr.step, (int)wr.world, steps);
    fprintf(cmdout(), "what-if: global batch %lld sequences x %lld tokens = %lld tokens%s; head %lld x %lld "
            "(V x C); %s compute, bf16 local gradients; shares: contiguous runs of tokens, split "
            "by sequences where N divides %lld, else by tokens\n", (long long)wr.S,
            (long long)wr.T, (long long)n_tok, o.global_batch ? " (--global-batch)" : "",
            (long long)V, (long long)C, wr.bf16 ? "bf16" : "f32", (long long)wr.S);
    fprintf(cmdout(), "what-if: the head's input rows %s\n",
            ((const ct_model_vtable *)wr.r.model.vt)->hidden_rows
               ? "from the model's hidden_rows (one forward per sequence)"
               : "from mean_hidden of every prefix (the model has no hidden_rows, ABI 1.4: T "
                 "forwards per sequence)");
    /* the unigram distribution of the train split: the model's q */
    if ((rc = corpus_counts(&wr, count, &err)) != CT_OK) goto out_fail;
    double total = 0, hbar2 = 0;
    for (int64_t v = 0; v < V; v++) total += (double)count[v];
    for (int64_t v = 0; v < V; v++) q[v] = total > 0 ? (double)count[v] / total : 0.0;
    whatif_batch b = {.n_tok = n_tok, .C = C, .V = V, .h = h, .w = wr.w, .target = targets,
                      .zcoef = wr.zcoef, .bf16 = wr.bf16, .lse = lse};
    for (int64_t k = 0; k < o.batches; k++) {
        if ((rc = loader_next(wr.data, tokens, targets, &err)) != CT_OK) goto out_fail;
        if ((rc = hidden_states(&wr, tokens, h, &err)) != CT_OK) goto out_fail;
        whatif_grad_lse(&b);
        double hn2 = 0;
        for (int64_t c = 0; c < C; c++) {
            double s = 0;
            for (int64_t t = 0; t < n_tok; t++) s += h[t * C + c];
            hbar[c] = s / (double)n_tok;
            hn2 += hbar[c] * hbar[c];
        }
        for (int32_t i = 0; i < n_cells; i += o.n_algos * o.n_policies) {
            rc = replay_world(&b, &o, &cells[i], o.n_algos * o.n_policies, hbar,
                              ct_hash64((uint64_t)wr.step, (uint64_t)k), &err);
            if (rc != CT_OK) goto out_fail;
        }
        hbar2 += hn2 / (double)o.batches;
        for (int32_t i = 0; i < n_cells; i++) {
            whatif_cell *cl = &cells[i];
            whatif_model_in mi = {cl->N, resolved_algo(&o, cl, (uint64_t)(V * C)),
                                  o.oc.gpus_per_node, cl->policy, V,
                                  (double)n_tok / cl->N, hn2, q};
            cl->pred += whatif_model_push(&mi);
        }
    }
    fprintf(cmdout(), "what-if: |hbar|^2 = %.6g (squared norm of the mean final hidden state, "
            "mean over the batches); orders with channels %lld, gpus_per_node %lld\n", hbar2,
            (long long)o.oc.channels, (long long)o.oc.gpus_per_node);
    if (o.per_row) {
        if ((rc = write_per_row(o.per_row, cells, n_cells, V, count, o.batches, &err)) != CT_OK)
            goto out_fail;
    }
    print_picks(&o, (uint64_t)(V * C));
    print_table(&o, cells, n_cells, n_tok);
    status = 0;
    goto out_free;
out_fail:
    fprintf(stderr, "ctrain what-if: %s\n", err.message);
out_free:
    for (int32_t i = 0; cells && i < n_cells; i++) {
        free(cells[i].ebar);
        free(cells[i].row_d);
        free(cells[i].row_ea);
        free(cells[i].row_push);
    }
    free(cells);
    free(tokens);
    free(targets);
    free(h);
    free(lse);
    free(hbar);
    free(count);
    free(q);
    close_run(&wr);
    return status;
}
