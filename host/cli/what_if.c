/* what_if.c — `ctrain what-if RUN_DIR|CHECKPOINT --world-sizes N,... [options]`: from a
 * checkpoint, its configuration and its data, the output head's gradient of the run's next
 * step(s) as each of N would-be ranks would hold it, reduced at each world size with each
 * order and policy as the threads engine and the precision plugins would (whatif_replay.h),
 * and reported with the reduction-error probe's figures (host/run/probe.c) beside the
 * predictive model's (whatif_model.h); with --rows K for a sample of the head's rows
 * (whatif_rows.c), each figure with its standard error; with --lr the same errors as AdamW
 * would turn them into changes of the logits per 1000 steps, and where z-loss's pull would
 * balance them. A user asks it before booking a cluster.
 * This file is the command: its options, the strata, the report and --per-row. Not for: the
 * whole replay (whatif/whatif_cells.c), the run and its forward (whatif_run.c), the arithmetic
 * of gradients (whatif_grad.c), of reductions (whatif_replay.c) or of the estimators
 * (whatif_sample.c). */
#include "whatif/whatif.h"

#include "base/printable.h"
#include "base/cmdout.h"
#include "cli/commands.h"
#include "io/outfile.h"
#include "whatif/whatif_grad.h"
#include "whatif/whatif_model.h"
#include "whatif/whatif_scan.h"

#include "../plugins/comm/threads/tuner.h"

#include <ctrain/numerics.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WHATIF_MAX_WORLD 65536

#define WHATIF_USAGE                                                                           \
    "usage: ctrain what-if RUN_DIR|CHECKPOINT_DIR --world-sizes N[,N...]\n"                    \
    "           [--algo ring,dbtree,hier,tree,nvls,nvls_tree,nccl] [--gpus-per-node G]\n"     \
    "           [--channels K] [--split nccl|even] [--proto simple|ll|ll128]\n"              \
    "           [--gpu a100|h100|h200] [--nccl-version 2.18|2.19|2.20|2.30] [--no-nvswitch]\n" \
    "           [--bucket-bytes B | --fsdp-units open_lm-125m|open_lm-1b]\n"                \
    "           [--policies pure_bf16,bf16_fp32acc,bf16_sr,amp] [--batches K]\n"               \
    "           [--global-batch SEQS] [--per-row FILE [--force]]\n"                            \
    "           [--rows K [--stratify batch|freq|uniform] [--sample-seed S]]\n"                      \
    "           [--lr LR [--zloss-coef C]] [--scan global|per-rank] [--per-batch]\n"            \
    "Replays the output head's gradient reduction of the checkpoint's next step(s) at each\n"  \
    "world size, order and policy, and prints the probe's figures (relative error, bias,\n"    \
    "logit push per step) beside the model's prediction, under a legend ('#' lines).\n"      \
    "Defaults: --algo ring,\n"             \
    "--gpus-per-node 0 (one node), --channels 1, every policy, --batches 1, the run's global\n" \
    "batch. Orders as [comm] algo of the threads engine (dbtree: NCCL's tree; tree: heap;\n"  \
    "nccl: what the model of NCCL's tuner picks for the buffer that holds the head on --gpu\n" \
    "nodes of --gpus-per-node GPUs, printed once per world size), cut as NCCL cuts one\n"    \
    "all-reduce (--split nccl, the default) or evenly (--split even, earlier versions).\n"   \
    "The all-reduce that holds the head: --bucket-bytes B (a DDP bucket of B bytes, the head\n" \
    "at its start) or --fsdp-units MODEL (FSDP NO_SHARD: the root unit of open_lm's wrapping\n" \
    "of MODEL, which holds embedding, final norm and head; the layout is printed); default\n"  \
    "the head alone. NCCL's pick (--nccl-version: whose tuner, default 2.30) is made for that\n" \
    "buffer and printed with the fastest other algorithm; a pick that wins by less than 10%\n" \
    "is 'fragile', and the other algorithm is replayed beside it.\n"                        \
    "--rows K replays K of the head's rows with the batch streamed, and prints each figure's\n" \
    "standard error (se) beside it; the rows are stratified by the token's count in the\n"   \
    "replayed batches (batch, the default) or in the train split (freq), or uniform. --lr LR\n" \
    "adds what AdamW at that learning rate makes of the errors: the mean logit's and the\n"    \
    "mean log-sum-exp's change per 1000 steps, the lse excess at which z-loss (coef\n"        \
    "--zloss-coef, default 1e-4) pulls as hard as the rounding pushes, and the mean logit's\n" \
    "change once it does; with --batches K >= 2 also under AdamW's running second moment\n"  \
    "(the mean of g^2 over the K batches). With --batches K >= 2 every figure has its\n"     \
    "standard error between batches (se_b) and, with --rows, the combined one (se_all =\n"    \
    "sqrt(se^2 + se_b^2)); --per-batch prints each batch's figures. --scan per-rank keeps\n"  \
    "the tokens per rank of the first world size (its global batch: --global-batch) at every\n" \
    "world size, the global batch growing as N; --scan global (the default) keeps the global\n" \
    "batch. With two or more world sizes the exponent of N is fitted to each figure.\n"

/* --force: --per-row may replace an existing file or write inside a run's folder. */
static int per_row_force;

static int usage_error(const char *fmt, const char *a, const char *b) {
    return order_args_usage("what-if", WHATIF_USAGE, fmt, a, b);
}

static int parse_int(const char *flag, const char *v, int64_t lo, int64_t hi, int64_t *out) {
    return order_args_int("what-if", flag, v, lo, hi, out);
}

/* *out = v when it is a whole finite number in (0, hi]. */
static int parse_positive(const char *flag, const char *v, double hi, double *out) {
    char *end = NULL;
    errno = 0;
    double x = strtod(v, &end);
    if (!v[0] || *end || errno || !(x > 0) || !(x <= hi)) {
        fprintf(stderr, "ctrain what-if: %s '%s' is not a number in (0, %g] ---> see `ctrain "
                "what-if --help`\n", flag, v, hi);
        return 2;
    }
    *out = x;
    return 0;
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

const char *const whatif_stratify_names[] = {"uniform", "batch", "freq", NULL};
const char *const whatif_scan_names[] = {"global", "per-rank", NULL};

/* The x4 bin of a count: 0 for 0, else 1 + floor(log4(count)), at most `cap`. */
static int32_t bin4(uint64_t count, int32_t cap) {
    int32_t b = count ? 1 + (63 - __builtin_clzll(count)) / 2 : 0;
    return b < cap ? b : cap;
}

/* key[v] and mass[v] of the sample's strata (whatif_strata_sample): count is the train
 * split's, bc the replayed batches' (n_tok tokens each), corpus its total. */
static void stratum_keys(int32_t how, int64_t V, const uint64_t *count, const uint64_t *bc,
                         double corpus, double n_tok, int32_t *key, double *mass) {
    for (int64_t v = 0; v < V; v++) {
        /* a row's figures grow about in proportion to its count plus one (rows never seen
         * still hold every token's push-down terms): the mass of the allocation */
        double expect = corpus > 0 ? ((double)count[v] + 1.0) / corpus * n_tok : 1.0;
        if (how == WHATIF_STRAT_FREQ) key[v] = bin4(count[v], 31), mass[v] = expect;
        else key[v] = bin4(bc[v], 31), mass[v] = (double)bc[v] + 1.0;
    }
}

static int parse_args(int argc, char **argv, whatif_opts *o) {
    memset(o, 0, sizeof *o);
    o->algos[0] = REDUCE_RING, o->n_algos = 1;
    for (int32_t p = 0; p < WHATIF_N_POLICIES; p++) o->policies[p] = p;
    o->n_policies = WHATIF_N_POLICIES;
    o->batches = 1;
    o->stratify = WHATIF_STRAT_BATCH;
    o->sample_seed = 1;
    o->zcoef = 1e-4;
    o->oc = order_config_default(REDUCE_RING);
    int seen_stratify = 0, seen_seed = 0, seen_zcoef = 0;
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
        if (!strcmp(a, "--force")) {
            per_row_force = 1;
            continue;
        }
        if (!strcmp(a, "--per-batch")) {
            o->per_batch = 1;
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
                                             "--batches", "--global-batch", "--per-row",
                                             "--rows", "--stratify", "--sample-seed", "--lr",
                                             "--zloss-coef", "--bucket-bytes", "--fsdp-units",
                                             "--scan", NULL};
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
        else if (!strcmp(a, "--rows")) bad = parse_int(a, v, 2, INT32_MAX, &o->rows);
        else if (!strcmp(a, "--stratify"))
            bad = order_args_choice("what-if", a, v, whatif_stratify_names, &o->stratify), seen_stratify = 1;
        else if (!strcmp(a, "--sample-seed"))
            bad = parse_int(a, v, 0, INT64_MAX, &o->sample_seed), seen_seed = 1;
        else if (!strcmp(a, "--lr")) bad = parse_positive(a, v, 1e3, &o->lr);
        else if (!strcmp(a, "--zloss-coef")) bad = parse_positive(a, v, 1e3, &o->zcoef), seen_zcoef = 1;
        else if (!strcmp(a, "--scan")) bad = order_args_choice("what-if", a, v, whatif_scan_names, &o->scan);
        else if (!strcmp(a, "--bucket-bytes")) {
            int64_t b = 0;
            bad = parse_int(a, v, 1, (int64_t)1 << 50, &b);
            o->bucket_bytes = (uint64_t)b;
        } else if (!strcmp(a, "--fsdp-units")) {
            if (!(o->fsdp = whatif_fsdp_find(v)))
                return usage_error("--fsdp-units: unknown model '%s' ---> %s", v,
                                   whatif_fsdp_names());
        }
        else o->per_row = v;
        if (bad) return bad;
    }
    if (!o->path) return usage_error("no run or checkpoint folder given%s%s", "", "");
    if (!o->n_worlds) return usage_error("--world-sizes is required%s%s", "", "");
    if (o->per_row) { /* refused before the replay, not after it */
        ct_error err = {.struct_size = sizeof err};
        if (outfile_check(o->per_row, OUTFILE_USER | (per_row_force ? OUTFILE_FORCE : 0), &err) !=
            CT_OK) {
            print_message_line(stderr, "ctrain what-if: --per-row: ", err.message);
            return 2;
        }
    }
    if ((seen_stratify || seen_seed) && !o->rows)
        return usage_error("%s without --rows%s ---> give --rows K to sample K rows",
                           seen_stratify ? "--stratify" : "--sample-seed", "");
    if (o->per_batch && o->batches < 2)
        return usage_error("--per-batch without --batches 2 or more%s%s ---> give --batches K "
                           "with K >= 2", "", "");
    if (o->scan == WHATIF_SCAN_PER_RANK) {
        if (!o->global_batch)
            return usage_error("--scan per-rank without --global-batch%s%s ---> give the global "
                               "batch of the first world size", "", "");
        for (int32_t i = 0; i < o->n_worlds; i++)
            if ((o->global_batch * o->worlds[i]) % o->worlds[0]) {
                char w[32];
                snprintf(w, sizeof w, "%d", (int)o->worlds[i]);
                return usage_error("--scan per-rank: world size %s takes --global-batch x %s / "
                                   "the first world size sequences, not a whole number ---> "
                                   "world sizes that are multiples of the first", w, w);
            }
    }
    if (o->bucket_bytes && o->fsdp)
        return usage_error("--bucket-bytes with --fsdp-units%s%s ---> the head is in a DDP bucket "
                           "or in an FSDP unit: give one", "", "");
    if (seen_zcoef && !o->lr)
        return usage_error("--zloss-coef without --lr%s%s ---> the balance is AdamW's: give --lr", "", "");
    /* every order must fit every world size: say which pair does not */
    for (int32_t i = 0; i < o->n_worlds; i++)
        for (int32_t j = 0; j < o->n_algos; j++) {
            order_config oc = whatif_order_of(o, o->algos[j]);
            char why[256];
            if (order_check(&oc, o->worlds[i], why, sizeof why) != 0) {
                fprintf(stderr, "ctrain what-if: --world-sizes %d with --gpus-per-node %lld: %s\n",
                        (int)o->worlds[i], (long long)o->oc.gpus_per_node, why);
                return 2;
            }
        }
    return 0;
}

static int32_t write_per_row(const char *path, const whatif_cell *cells, int32_t n_cells,
                             const whatif_strata *s, const uint64_t *count, int64_t batches,
                             ct_error *err) {
    outfile o;
    int32_t rc = outfile_open_as(&o, path, OUTFILE_USER | (per_row_force ? OUTFILE_FORCE : 0), err);
    FILE *f = rc == CT_OK ? outfile_stream(&o, err) : NULL;
    if (!f) {
        if (rc == CT_OK) outfile_abort(&o);
        return err->code;
    }
    uint64_t total = 0;
    for (int64_t v = 0; v < s->V; v++) total += count[v];
    fprintf(f, "# ctrain what-if --per-row: per vocabulary row%s, means over %lld batch(es): "
            "bias = sum_c (p - e) / sum_c |e| of the reduced head gradient row, push = its own "
            "logit's change per SGD step of rate 1 (-(p - e) . hbar); count = the token's "
            "occurrences as a target in the train split (freq = count / %llu); weight = the rows "
            "each stands for (--rows: N_h / n_h of its stratum; 1 for the whole head)\n",
            s->K < s->V ? " of the sample" : "", (long long)batches, (unsigned long long)total);
    fprintf(f, "world_size\talgo\tpolicy\trow\tcount\tfreq\tbias\tpush\tweight\n");
    for (int32_t i = 0; i < n_cells; i++)
        for (int64_t k = 0; k < s->K; k++) {
            const whatif_cell *cl = &cells[i];
            const double *y = cl->row_y + k * WHATIF_N_Y;
            int64_t v = s->row[k];
            fprintf(f, "%d\t%s\t%s\t%lld\t%llu\t%.6g\t%.6g\t%.6g\t%.6g\n", (int)cl->N,
                    whatif_algo_name(cl->algo), whatif_policy_name(cl->policy), (long long)v,
                    (unsigned long long)count[v], total ? (double)count[v] / (double)total : 0.0,
                    y[WHATIF_Y_EA] > 0 ? y[WHATIF_Y_DS] / y[WHATIF_Y_EA] : 0.0,
                    y[WHATIF_Y_PUSH] / (double)batches, whatif_strata_weight(s, k));
        }
    return outfile_commit(&o, err);
}

/* The reduce dtypes the policies use: [0] bf16 (every policy but amp), [1] f32 (amp). */
static void dtypes_of(const whatif_opts *o, int32_t use[2]) {
    use[0] = use[1] = 0;
    for (int32_t p = 0; p < o->n_policies; p++) use[o->policies[p] == WHATIF_AMP] = 1;
}

static int has_algo(const whatif_opts *o, int32_t algo) {
    for (int32_t a = 0; a < o->n_algos; a++)
        if (o->algos[a] == algo) return 1;
    return 0;
}

/* The buffer that holds the head (head elements) in each used dtype must hold it; with algo =
 * nccl, the tuner model's pick for it at each world size ([i][0] bf16, [i][1] f32), and where
 * a pick is fragile the rival's order is added to the replayed algos. */
static int32_t make_picks(whatif_opts *o, uint64_t head, whatif_pick picks[][2], ct_error *err) {
    int32_t use[2];
    dtypes_of(o, use);
    for (int32_t d = 0; d < 2; d++) {
        uint64_t count, base;
        char why[256];
        if (use[d] && whatif_buffer_of(o->bucket_bytes, o->fsdp, head, d ? 4 : 2, &count,
                                       &base, why, sizeof why))
            return ct_error_set(err, CT_ERR_INVALID, "what-if: %s", why);
    }
    memset(picks, 0, sizeof(whatif_pick) * 2 * (size_t)o->n_worlds);
    if (!has_algo(o, REDUCE_NCCL)) return CT_OK;
    for (int32_t i = 0; i < o->n_worlds; i++)
        for (int32_t d = 0; d < 2; d++) {
            order_config oc = whatif_order_of(o, REDUCE_NCCL);
            char why[256];
            uint64_t count, base;
            if (!use[d] || order_check(&oc, o->worlds[i], why, sizeof why) != 0) continue;
            whatif_buffer_of(o->bucket_bytes, o->fsdp, head, d ? 4 : 2, &count, &base, why,
                             sizeof why);
            tuner_query q = {ORDER_ALL_REDUCE, count * (d ? 4u : 2u), o->worlds[i],
                             oc.gpus_per_node, oc.gpu, oc.nvswitch, 1, 0, oc.nccl_version};
            whatif_pick_of(&q, &picks[i][d]);
            int32_t r = picks[i][d].rival >= 0 ? whatif_engine_algo(picks[i][d].rival) : -1;
            order_config rc = whatif_order_of(o, r);
            if (picks[i][d].fragile && r >= 0 && !has_algo(o, r) && o->n_algos < REDUCE_N_ALGOS &&
                order_check(&rc, o->worlds[i], why, sizeof why) == 0) {
                o->algos[o->n_algos++] = r;
                fprintf(cmdout(), "what-if: NCCL's pick at N = %d is fragile: replaying %s beside "
                        "it\n", (int)o->worlds[i], whatif_algo_name(r));
            }
        }
    return CT_OK;
}

/* Which buffer, in words, for the pick lines. */
static void buffer_words(const whatif_opts *o, char *buf, size_t len) {
    if (o->bucket_bytes)
        snprintf(buf, len, "the head's DDP bucket of %llu bytes",
                 (unsigned long long)o->bucket_bytes);
    else if (o->fsdp)
        snprintf(buf, len, "the root FSDP unit of %s", o->fsdp->name);
    else
        snprintf(buf, len, "the head alone");
}

/* algo = nccl: the tuner model's pick at each world size for the buffer (bf16 and, with amp,
 * f32), the fastest other algorithm beside it, and whether the pick is fragile. */
static void print_picks(const whatif_opts *o, const whatif_pick picks[][2]) {
    int32_t use[2];
    dtypes_of(o, use);
    if (o->fsdp)
        for (int32_t d = 0; d < 2; d++)
            if (use[d]) whatif_fsdp_print(cmdout(), o->fsdp, d ? 4 : 2);
    if (!has_algo(o, REDUCE_NCCL)) return;
    char where[128];
    buffer_words(o, where, sizeof where);
    for (int32_t i = 0; i < o->n_worlds; i++)
        for (int32_t d = 0; d < 2; d++) {
            const whatif_pick *w = &picks[i][d];
            if (!use[d] || !w->pick.time_us) continue;
            order_config oc = whatif_order_of(o, REDUCE_NCCL);
            char why[256], line[512];
            order_check(&oc, o->worlds[i], why, sizeof why);
            tuner_query q = {ORDER_ALL_REDUCE, w->nbytes, o->worlds[i], oc.gpus_per_node, oc.gpu,
                             oc.nvswitch, 1, 0, oc.nccl_version};
            tuner_describe(&q, &w->pick, line, sizeof line);
            fprintf(cmdout(), "what-if: N = %d, %s, %s: %s\n", (int)o->worlds[i],
                    d ? "f32" : "bf16", where, line);
            if (w->rival < 0) continue;
            fprintf(cmdout(), "what-if: N = %d, %s: %s/%s %.1f us against %s/%s %.1f us (the "
                    "fastest other algorithm): the pick wins by %.1f%%%s\n", (int)o->worlds[i],
                    d ? "f32" : "bf16", tuner_algo_name(w->pick.nccl_algo),
                    tuner_proto_name(w->pick.nccl_proto), w->pick.time_us,
                    tuner_algo_name(w->rival), tuner_proto_name(w->rival_proto), w->rival_us,
                    100.0 * w->margin,
                    w->fragile ? " -- fragile (< 10%): a cluster's measured bandwidths or "
                                 "another NCCL may pick the other; both replayed below" : "");
        }
}

/* One cell's figures on one line (the fragile picks' comparison). */
static void put_cell_figures(const whatif_opts *o, const whatif_cell *cl, const whatif_strata *s) {
    double f[WHATIF_N_F], se[WHATIF_N_F], sb[WHATIF_N_F];
    whatif_est_result(&cl->est, s, f, se, sb);
    fprintf(cmdout(), "rel_err %.4g, bias %.4g, logit_push %.4g", f[WHATIF_F_REL],
            f[WHATIF_F_BIAS], f[WHATIF_F_PUSH]);
    if (o->rows || o->batches > 1) /* the row sample's and the batches' errors together */
        fprintf(cmdout(), " (se %.2g)", sqrt(se[WHATIF_F_PUSH] * se[WHATIF_F_PUSH] +
                                            sb[WHATIF_F_PUSH] * sb[WHATIF_F_PUSH]));
    if (o->lr > 0)
        fprintf(cmdout(), ", logit/1k_steps %.4g, lse/1k_steps %.4g", 1000.0 * o->lr *
                f[WHATIF_F_AMEAN], 1000.0 * o->lr * f[WHATIF_F_ALSE]);
}

/* After the tables: each fragile pick's replay beside its rival's, per policy whose reduction
 * has an order (bf16_fp32acc's has none). */
static void print_fragile(const whatif_opts *o, const whatif_pick picks[][2],
                          const whatif_cell *cells, int32_t n_cells, const whatif_strata *s) {
    for (int32_t i = 0; i < o->n_worlds; i++)
        for (int32_t d = 0; d < 2; d++) {
            const whatif_pick *w = &picks[i][d];
            if (!w->fragile) continue;
            int32_t ra = whatif_engine_algo(w->rival);
            for (int32_t p = 0; p < o->n_policies; p++) {
                int32_t pol = o->policies[p];
                if ((pol == WHATIF_AMP) != d || pol == WHATIF_BF16_FP32ACC) continue;
                const whatif_cell *mine = NULL, *rival = NULL;
                for (int32_t c = 0; c < n_cells; c++) {
                    if (cells[c].N != o->worlds[i] || cells[c].policy != pol) continue;
                    if (cells[c].algo == REDUCE_NCCL) mine = &cells[c];
                    if (cells[c].algo == ra) rival = &cells[c];
                }
                if (!mine || !rival) continue;
                fprintf(cmdout(), "what-if: fragile pick at N = %d, %s: NCCL's %s (%.1f us): ",
                        (int)o->worlds[i], whatif_policy_name(pol),
                        tuner_algo_name(w->pick.nccl_algo), w->pick.time_us);
                put_cell_figures(o, mine, s);
                fprintf(cmdout(), "; %s (%s, %.1f us): ", whatif_algo_name(ra),
                        tuner_algo_name(w->rival), w->rival_us);
                put_cell_figures(o, rival, s);
                fputc('\n', cmdout());
            }
        }
}

/* What the table's columns mean, as '#' lines before it (a reader of the table skips lines
 * whose first field is not a number). */
static void print_legend(const whatif_opts *o) {
    fprintf(cmdout(),
            "# columns (means over %lld batch%s; p = the reduced head gradient, e = the exact "
            "sum in f64):\n"
            "#   tokens/rank  the tokens each of the N ranks holds in the replayed step\n"
            "#   rel_err      |p - e| / |e|, the reduction's relative error\n"
            "#   bias         sum(p - e) / sum|e|, its signed part (> 0: the sum comes out "
            "larger)\n"
            "#   logit_push   the change of the batch-mean logit an SGD step of rate 1 would "
            "make from the error alone (> 0: up)\n"
            "#   predicted    that push as the model of docs/logit-growth.md predicts it (0 for "
            "policies whose error has no sign)\n%s%s%s",
            (long long)o->batches, o->batches == 1 ? "" : "es",
            o->rows > 0 ? "#   se           the standard error of the figure from the --rows "
                          "sample (the rows are drawn once for all batches)\n" : "",
            o->batches > 1 ? "#   se_b         the standard error between batches: sqrt(sum_b "
                             "(f_b - mean)^2 / (B (B - 1))) over the B batches' own figures "
                             "f_b\n" : "",
            o->rows > 0 && o->batches > 1 ? "#   se_all       sqrt(se^2 + se_b^2), the two "
                                            "taken as independent\n" : "");
}

/* A figure in its column, or "-" (right-aligned to width) when it is not estimable (NAN). */
static void put_figure(int width, const char *fmt, double v) {
    fputc(' ', cmdout());
    if (isnan(v)) fprintf(cmdout(), "%*s", width, "-");
    else fprintf(cmdout(), fmt, v);
}

/* The error columns of a figure: se (--rows), se_b (--batches >= 2), se_all (both). */
static int n_error_columns(const whatif_opts *o) {
    return (o->rows > 0) + (o->batches > 1) + (o->rows > 0 && o->batches > 1);
}

/* (the AdamW tables print se even without --rows, 0 for the whole head, as they always did) */
static void put_error_headers(const whatif_opts *o, int always_se) {
    if (o->rows > 0 || always_se) fprintf(cmdout(), " %9s", "se");
    if (o->batches > 1) fprintf(cmdout(), " %9s", "se_b");
    if (o->rows > 0 && o->batches > 1) fprintf(cmdout(), " %9s", "se_all");
}

static void put_errors(const whatif_opts *o, int always_se, double se, double se_b) {
    if (o->rows > 0 || always_se) put_figure(9, "%9.2g", se);
    if (o->batches > 1) put_figure(9, "%9.2g", se_b);
    if (o->rows > 0 && o->batches > 1) put_figure(9, "%9.2g", sqrt(se * se + se_b * se_b));
}

static void say_ratios_not_estimable(void) {
    fprintf(cmdout(), "what-if: - : rel_err, bias, zloss_lse* and logit@cap are ratios of totals "
            "that a few frequent tokens' rows dominate; a uniform sample misses those rows most "
            "of the time and its standard error cannot see them (measured: 54%% of 2-SE "
            "intervals held the whole replay's rel_err) ---> --stratify batch (the default) or "
            "freq takes those rows\n");
}

/* One AdamW table: the view's figures (off 0: the same batch's g^2; WHATIF_F_WINDOW: the
 * running second moment), per 1000 steps at lr. */
static void print_adam_table(const whatif_opts *o, const whatif_cell *cells, int32_t n_cells,
                             const whatif_strata *s, int32_t off) {
    static const char *const heads[5] = {"logit/1k_steps", "lse/1k_steps", "zloss_lse*",
                                         "logit@cap/1k", "err/step"};
    fprintf(cmdout(), "%6s %-9s %-13s", "N", "algo", "policy");
    for (int32_t k = 0; k < 5; k++) {
        fprintf(cmdout(), " %14s", heads[k]);
        put_error_headers(o, 1);
    }
    fputc('\n', cmdout());
    for (int32_t i = 0; i < n_cells; i++) {
        const whatif_cell *cl = &cells[i];
        double f[WHATIF_N_F], se[WHATIF_N_F], sb[WHATIF_N_F], k1 = 1000.0 * o->lr;
        whatif_est_result(&cl->est, s, f, se, sb);
        fprintf(cmdout(), "%6d %-9s %-13s", (int)cl->N, whatif_algo_name(cl->algo),
                whatif_policy_name(cl->policy));
        for (int32_t k = 0; k < 5; k++) {
            int32_t j = WHATIF_F_AMEAN + off + k;
            double scale = k == 2 || k == 4 ? 1.0 : k1; /* lse* in nats, err/step a ratio */
            put_figure(14, "%14.4g", scale * f[j]);
            put_errors(o, 1, scale * se[j], scale * sb[j]);
        }
        fputc('\n', cmdout());
    }
}

/* The figures: without --rows or --batches as before (no error columns); with --rows each
 * figure beside its row-sample error (a ratio figure "-" from a uniform sample), with
 * --batches >= 2 beside the error between batches; with --lr the AdamW tables after. */
static void print_tables(const whatif_opts *o, const whatif_cell *cells, int32_t n_cells,
                         const whatif_strata *s, int64_t n_tok) {
    int sampled = o->rows > 0, errs = n_error_columns(o);
    double K = (double)o->batches;
    print_legend(o);
    fprintf(cmdout(), "%6s %-9s %-13s %11s", "N", "algo", "policy", "tokens/rank");
    static const char *const main_heads[3] = {"rel_err", "bias", "logit_push"};
    for (int32_t k = 0; k < 3; k++) {
        fprintf(cmdout(), " %12s", main_heads[k]);
        put_error_headers(o, 0);
    }
    fprintf(cmdout(), " %12s\n", "predicted");
    for (int32_t i = 0; i < n_cells; i++) {
        const whatif_cell *cl = &cells[i];
        double f[WHATIF_N_F], se[WHATIF_N_F], sb[WHATIF_N_F];
        whatif_est_result(&cl->est, s, f, se, sb);
        fprintf(cmdout(), "%6d %-9s %-13s %11.4g", (int)cl->N, whatif_algo_name(cl->algo),
                whatif_policy_name(cl->policy), (double)n_tok / cl->N);
        for (int32_t j = WHATIF_F_REL; j <= WHATIF_F_PUSH; j++) {
            put_figure(12, "%12.4g", f[j]);
            if (errs) put_errors(o, 0, se[j], sb[j]);
        }
        fprintf(cmdout(), " %12.4g\n", cl->pred / K);
    }
    if (o->lr > 0) {
        fprintf(cmdout(), "what-if: under AdamW at lr %g (each element's step divided by the "
                "RMS of its gradient from batch to batch, from the ranks' spread in the same "
                "batch: v = e^2 + var_e), per 1000 steps: the mean logit's and the mean "
                "log-sum-exp's change from the rounding alone; lse* = the lse excess at which "
                "z-loss (coef %g) pulls back as hard; logit@cap = the mean logit's change once "
                "z-loss holds lse there (the push less z-loss's pull on the mean logit, 2 coef "
                "lse* p per row through Adam); err/step = the RMS over the head's elements of "
                "|p - e| / RMS, the error in units of Adam's step: the view is linear in the "
                "error and holds while this is well below 1\n", o->lr, o->zcoef);
        print_adam_table(o, cells, n_cells, s, 0);
        if (o->batches > 1) {
            fprintf(cmdout(), "what-if: the same under AdamW's running second moment: v = the "
                    "mean of e^2 over the %lld batches (a token in a fraction f of the batches "
                    "gets steps ~1/sqrt(f) larger than the same batch's view gives it)\n",
                    (long long)o->batches);
            print_adam_table(o, cells, n_cells, s, WHATIF_F_WINDOW);
        }
    }
    if (sampled && !whatif_ratio_estimable(s)) say_ratios_not_estimable();
}

/* --per-batch: each batch's own figures, one line per cell and batch, first field "batch". */
static void print_per_batch(const whatif_opts *o, const whatif_cell *cells, int32_t n_cells) {
    fprintf(cmdout(), "# per batch (the figures whose mean and se_b the tables give; AdamW's per "
            "unit lr):\n# batch N algo policy b rel_err bias logit_push amean alse wmean wlse\n");
    for (int32_t i = 0; i < n_cells; i++)
        for (int64_t b = 0; b < o->batches; b++) {
            const double *f = cells[i].est.fb + b * WHATIF_N_F;
            fprintf(cmdout(), "batch %d %s %s %lld %.9g %.9g %.9g %.9g %.9g %.9g %.9g\n",
                    (int)cells[i].N, whatif_algo_name(cells[i].algo),
                    whatif_policy_name(cells[i].policy), (long long)b, f[WHATIF_F_REL],
                    f[WHATIF_F_BIAS], f[WHATIF_F_PUSH], f[WHATIF_F_AMEAN], f[WHATIF_F_ALSE],
                    f[WHATIF_F_WMEAN], f[WHATIF_F_WLSE]);
        }
}

/* One cell's figures kept for the fit across world sizes: rel_err, logit_push, and AdamW's
 * mean logit and lse (the running second moment's with --batches >= 2), each with its combined
 * error. */
#define SCAN_FIGS 4
#define SCAN_FIGS_SGD 2 /* the figures without --lr */
static const int32_t scan_fig[SCAN_FIGS] = {WHATIF_F_REL, WHATIF_F_PUSH, WHATIF_F_AMEAN,
                                            WHATIF_F_ALSE};
typedef struct scan_point {
    int32_t N, algo, policy;
    double  tpr, y[SCAN_FIGS], se[SCAN_FIGS];
} scan_point;

/* One replay of the options' world sizes (the whole of a global scan, one world size of a
 * per-rank scan) with its report; each cell's figures for the fit appended to pts at *n_pts
 * (room for REDUCE_N_ALGOS x WHATIF_N_POLICIES per world size: a fragile pick adds its rival's
 * cells). Returns 0, or 1 after printing the error. */
static int replay_setting(whatif_opts o, scan_point *pts, int32_t *n_pts) {
    int status;
    ct_error err = {.struct_size = sizeof err};
    whatif_window_batch wb;
    memset(&wb, 0, sizeof wb);
    whatif_run wr;
    whatif_strata s;
    memset(&wr, 0, sizeof wr);
    memset(&s, 0, sizeof s);
    status = 1;
    int32_t n_group = 0, n_cells = 0, rc;
    whatif_cell *cells = NULL;
    whatif_pick picks[WHATIF_MAX_LIST][2];
    double *q = NULL, secs[3] = {0};
    uint64_t *count = NULL;
    if ((rc = whatif_run_open(&wr, o.path, o.global_batch, &err)) != CT_OK) goto out_fail;
    int64_t C = wr.r.mdesc.d_model, V = wr.r.V, n_tok = wr.S * wr.T;
    /* the buffer's pick first: a fragile one adds its rival's cells */
    if ((rc = make_picks(&o, (uint64_t)(V * C), picks, &err)) != CT_OK) goto out_fail;
    n_group = o.n_algos * o.n_policies, n_cells = o.n_worlds * n_group;
    if (!(cells = calloc((size_t)n_cells, sizeof *cells))) {
        ct_error_set(&err, CT_ERR_NOMEM, "out of memory");
        goto out_fail;
    }
    for (int32_t i = 0; i < o.n_worlds; i++)
        if (o.worlds[i] > n_tok) {
            ct_error_set(&err, CT_ERR_INVALID, "--world-sizes %d: more ranks than the global "
                         "batch's %lld tokens (%lld sequences x %lld) ---> raise --global-batch "
                         "to at least %lld sequences", (int)o.worlds[i], (long long)n_tok,
                         (long long)wr.S, (long long)wr.T,
                         (long long)((o.worlds[i] + wr.T - 1) / wr.T));
            goto out_fail;
        }
    count = calloc((size_t)V, sizeof *count);
    q = malloc((size_t)V * sizeof *q);
    if (!count || !q) {
        ct_error_set(&err, CT_ERR_NOMEM, "what-if: out of memory");
        goto out_fail;
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
    /* the unigram distribution of the train split: the model's q, and the strata's counts */
    if ((rc = whatif_run_counts(&wr, count, &err)) != CT_OK) goto out_fail;
    double total = 0, hbar2 = 0;
    for (int64_t v = 0; v < V; v++) total += (double)count[v];
    for (int64_t v = 0; v < V; v++) q[v] = total > 0 ? (double)count[v] / total : 0.0;
    if (o.rows && o.rows < V) {
        uint64_t *bc = calloc((size_t)V, sizeof *bc);
        int32_t *key = malloc((size_t)V * sizeof *key);
        double *mass = malloc((size_t)V * sizeof *mass);
        rc = bc && key && mass ? whatif_run_batch_counts(&wr, o.batches, bc, &err)
                               : ct_error_set(&err, CT_ERR_NOMEM, "out of memory");
        if (rc == CT_OK && o.stratify != WHATIF_STRAT_UNIFORM)
            stratum_keys(o.stratify, V, count, bc, total, (double)n_tok * (double)o.batches, key,
                         mass);
        if (rc == CT_OK)
            rc = whatif_strata_sample(&s, V, o.rows, o.stratify ? key : NULL,
                                      o.stratify ? mass : NULL, (uint64_t)o.sample_seed, &err);
        free(bc);
        free(key);
        free(mass);
    }    else
        rc = whatif_strata_census(&s, V, &err);
    if (rc != CT_OK) goto out_fail;
    for (int32_t wi = 0, i = 0; wi < o.n_worlds; wi++)
        for (int32_t a = 0; a < o.n_algos; a++)
            for (int32_t p = 0; p < o.n_policies; p++, i++) {
                whatif_cell *cl = &cells[i];
                cl->N = o.worlds[wi], cl->algo = o.algos[a], cl->policy = o.policies[p];
                if ((rc = whatif_est_open(&cl->est, s.K, o.batches, &err)) != CT_OK) goto out_fail;
                if (o.lr > 0 && o.batches > 1) { /* AdamW's running second moment */
                    if (!wb.mh && (rc = whatif_window_batch_open(&wb, s.K, C, o.batches, &err)) != CT_OK)
                        goto out_fail;
                    if ((rc = whatif_window_open(&cl->win, s.K, C, o.batches, &err)) != CT_OK)
                        goto out_fail;
                    cl->wb = &wb;
                }
                if (o.per_row && !(cl->row_y = calloc((size_t)(s.K * WHATIF_N_Y), sizeof *cl->row_y))) {
                    ct_error_set(&err, CT_ERR_NOMEM, "what-if: out of memory");
                    goto out_fail;
                }
            }
    double t0 = whatif_now();
    if (o.rows) {
        for (int32_t i = 0; i < n_cells; i++) {
            if ((rc = whatif_cell_replay_open(&o, &cells[i], (uint64_t)(V * C), (uint64_t)C,
                                              &err)) != CT_OK)
                goto out_fail;
        }
        rc = whatif_rows_run(&o, &wr, cells, n_cells, n_group, &s, q, &hbar2, secs, &err);
    } else {
        rc = whatif_whole_run(&o, &wr, cells, n_cells, n_group, &s, q, &hbar2, secs, &err);
    }
    if (rc != CT_OK) goto out_fail;
    whatif_cells_window(&o, cells, n_cells, &s, V, wr.eps);
    fprintf(cmdout(), "what-if: |hbar|^2 = %.6g (squared norm of the mean final hidden state, "
            "mean over the batches); orders with channels %lld, gpus_per_node %lld\n", hbar2,
            (long long)o.oc.channels, (long long)o.oc.gpus_per_node);
    if (o.rows)
        fprintf(cmdout(), "what-if: %.1f s in all: forward %.1f s, local gradients %.1f s, "
                "replays %.1f s\n", whatif_now() - t0, secs[0], secs[1], secs[2]);
    else
        fprintf(cmdout(), "what-if: %.1f s in all: forward %.1f s, local gradients and replays "
                "%.1f s\n", whatif_now() - t0, secs[0], secs[2]);
    if (o.per_row) {
        if ((rc = write_per_row(o.per_row, cells, n_cells, &s, count, o.batches, &err)) != CT_OK)
            goto out_fail;
    }
    print_picks(&o, (const whatif_pick(*)[2])picks);
    print_tables(&o, cells, n_cells, &s, n_tok);
    print_fragile(&o, (const whatif_pick(*)[2])picks, cells, n_cells, &s);
    if (o.per_batch) print_per_batch(&o, cells, n_cells);
    for (int32_t i = 0; i < n_cells; i++) {
        double f[WHATIF_N_F], se[WHATIF_N_F], sb[WHATIF_N_F];
        whatif_est_result(&cells[i].est, &s, f, se, sb);
        scan_point *pt = &pts[(*n_pts)++];
        pt->N = cells[i].N, pt->algo = cells[i].algo, pt->policy = cells[i].policy;
        pt->tpr = (double)n_tok / cells[i].N;
        for (int32_t k = 0; k < SCAN_FIGS; k++) {
            int32_t j = scan_fig[k] + (k >= SCAN_FIGS_SGD && o.batches > 1 ? WHATIF_F_WINDOW : 0);
            pt->y[k] = f[j], pt->se[k] = sqrt(se[j] * se[j] + sb[j] * sb[j]);
        }
    }
    status = 0;
    goto out_free;
out_fail:
    print_message_line(stderr, "ctrain what-if: ", err.message);
out_free:
    for (int32_t i = 0; cells && i < n_cells; i++) {
        whatif_replay_close(&cells[i].rp);
        whatif_est_close(&cells[i].est);
        whatif_window_close(&cells[i].win);
        free(cells[i].row_y);
    }
    whatif_window_batch_close(&wb);
    free(cells);
    free(count);
    free(q);
    whatif_strata_free(&s);
    whatif_run_close(&wr);
    return status;
}

/* The exponent of N of each (algo, policy) over the scan's world sizes (pts: n of them, in any
 * order; the pairs in the order they first appear). */
static void print_fits(const whatif_opts *o, const scan_point *pts, int32_t n) {
    static const char *const names[SCAN_FIGS] = {"rel_err", "logit_push", "logit/1k_steps",
                                                 "lse/1k_steps"};
    fprintf(cmdout(), "what-if: the exponent a of N in figure = c N^a over N = %d..%d at %s "
            "(least squares on ln N, ln figure, weighted by each figure's %s; a figure not "
            "above 0 is left out; AdamW's figures %s):\n", (int)o->worlds[0],
            (int)o->worlds[o->n_worlds - 1],
            o->scan == WHATIF_SCAN_PER_RANK ? "fixed tokens per rank (--scan per-rank: the "
                                              "global batch grows as N)"
                                            : "a fixed global batch (--scan global: tokens per "
                                              "rank fall as 1/N)",
            o->rows > 0 || o->batches > 1 ? "combined standard error" : "(none: unweighted)",
            o->batches > 1 ? "under the running second moment" : "under the same batch's g^2");
    int32_t nf = o->lr > 0 ? SCAN_FIGS : SCAN_FIGS_SGD;
    fprintf(cmdout(), "%-9s %-13s", "algo", "policy");
    for (int32_t k = 0; k < nf; k++) fprintf(cmdout(), " %16s %8s %4s", names[k], "se", "pts");
    fputc('\n', cmdout());
    for (int32_t g = 0; g < n; g++) {
        int seen = 0;
        for (int32_t h = 0; h < g; h++)
            seen |= pts[h].algo == pts[g].algo && pts[h].policy == pts[g].policy;
        if (seen) continue;
        fprintf(cmdout(), "%-9s %-13s", whatif_algo_name(pts[g].algo),
                whatif_policy_name(pts[g].policy));
        for (int32_t k = 0; k < nf; k++) {
            double N[WHATIF_MAX_LIST], y[WHATIF_MAX_LIST], se[WHATIF_MAX_LIST];
            int32_t m = 0;
            for (int32_t h = g; h < n && m < WHATIF_MAX_LIST; h++)
                if (pts[h].algo == pts[g].algo && pts[h].policy == pts[g].policy)
                    N[m] = pts[h].N, y[m] = pts[h].y[k], se[m] = pts[h].se[k], m++;
            whatif_fit fit = whatif_fit_power(m, N, y, se);
            put_figure(16, "%16.3f", fit.a);
            put_figure(8, "%8.2f", fit.se);
            fprintf(cmdout(), " %4d", (int)fit.used);
        }
        fputc('\n', cmdout());
    }
}

int cmd_what_if(int argc, char **argv) {
    whatif_opts o;
    int status = parse_args(argc, argv, &o);
    if (status) return status < 0 ? 0 : status;
    int32_t n_pts = 0;
    scan_point *pts = calloc((size_t)(o.n_worlds * REDUCE_N_ALGOS * WHATIF_N_POLICIES), sizeof *pts);
    if (!pts) {
        fprintf(stderr, "ctrain what-if: out of memory\n");
        return 1;
    }
    if (o.scan == WHATIF_SCAN_GLOBAL) {
        status = replay_setting(o, pts, &n_pts);
    } else { /* one replay per world size, each with its own global batch */
        for (int32_t w = 0; !status && w < o.n_worlds; w++) {
            whatif_opts one = o;
            one.worlds[0] = o.worlds[w], one.n_worlds = 1;
            one.global_batch = o.global_batch * o.worlds[w] / o.worlds[0];
            fprintf(cmdout(), "what-if: --scan per-rank: N = %d, global batch %lld sequences\n",
                    (int)one.worlds[0], (long long)one.global_batch);
            status = replay_setting(one, pts, &n_pts);
        }
    }
    if (!status && o.n_worlds > 1) print_fits(&o, pts, n_pts);
    free(pts);
    return status;
}
