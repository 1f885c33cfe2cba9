/* reduce_cmd.c — `ctrain reduce`: the threads engine as a command, for anyone who wants to know
 * what NCCL does to their numbers. The input file holds N rank buffers back to back; the output
 * is one rank's all-reduce result (every rank's is checked to be the same bits) or every rank's
 * reduce-scatter shard in rank order, computed by the engine's own orders and split
 * (plugins/comm/threads: orders.c, tuner.c, reduce.c, built into the host) part by part, so
 * memory is bounded by the part, not the file; or, with --policy, by a precision plugin's
 * reduction hook run by real rank threads of the threads engine, as `ctrain train` loads it.
 * Not for: the orders themselves (orders.c) or what-if's gradients (whatif/whatif_grad.c).
 *
 * Shape legend: N ranks, n elements per rank buffer, P elements per rank in a part.
 */
#include "base/cmdout.h"
#include "base/printable.h"
#include "base/thread_start.h"
#include "check/check.h"
#include "cli/commands.h"
#include "io/files.h"
#include "whatif/order_args.h"
#include "io/outfile.h"

#include "../plugins/comm/threads/reduce.h"
#include "../plugins/comm/threads/tuner.h"

#include <ctrain/numerics.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define REDUCE_MAX_WORLD 65536     /* the engine path; --policy runs threads: 1024 */
#define REDUCE_POLICY_MAX_WORLD 1024
#define REDUCE_PART_BYTES (64u << 20) /* N ranks' inputs of one part, at most */
#define REDUCE_MAX_SETS 32

#define REDUCE_USAGE                                                                           \
    "usage: ctrain reduce --world-size N --in FILE --out FILE [--force]\n"                      \
    "           [--op all_reduce|reduce_scatter] [--dtype bf16|f16|f32]\n"                      \
    "           [--algo ring|tree|dbtree|hier|nvls|nvls_tree|nccl] [--channels K]\n"           \
    "           [--gpus-per-node G] [--split nccl|even] [--proto simple|ll|ll128]\n"           \
    "           [--gpu a100|h100|h200] [--nccl-version 2.18|2.19|2.20|2.30]\n"             \
    "           [--no-nvswitch] [--avg]\n"                                                     \
    "           [--policy NAME [--set key=value]... [--bucket ELEMS]] [--part ELEMS] [--stats]\n" \
    "FILE holds N rank buffers back to back (rank-major, little-endian raw elements; each\n"   \
    "rank's element count is the file size / N / element size). all_reduce writes one rank's\n" \
    "result (every rank is checked to hold the same bits), reduce_scatter every rank's shard\n" \
    "in rank order (each rank's buffer must split into N shards). The reduction is the\n"       \
    "threads engine's ([comm] keys of the same names; defaults: ring, 1 channel, one node,\n"   \
    "NCCL's split, simple); --algo nccl takes what the model of NCCL's tuner picks for the\n"   \
    "size on --gpu nodes of --gpus-per-node GPUs (--nccl-version: whose tuner, default\n"   \
    "2.30). --avg: ncclAvg (each input times the dtype's 1/N first) instead of a sum.\n"     \
    "--policy runs that precision plugin's reduction hook\n"                                  \
    "(bf16_sr, bf16_fp32acc, ...; its keys by --set) on N rank threads, in buckets of\n"      \
    "--bucket elements per rank (default: the whole buffer when it fits 64 MiB), each one\n"   \
    "collective. Without --policy the file is one collective, read in parts of --part\n"      \
    "elements per rank (default: 64 MiB of all ranks' input): memory, not bits. --stats\n"    \
    "prints the error against the exact (f64) sum or mean.\n"

typedef struct reduce_opts {
    const char  *in, *out, *policy;
    const char  *sets[REDUCE_MAX_SETS];
    int32_t      n_sets;
    int64_t      N, part, bucket;
    int32_t      all_reduce, dtype, avg, stats;
    order_config oc;
} reduce_opts;

/* --force: --out may replace an existing file or write inside a run's folder. */
static int reduce_force;

static int usage_error(const char *fmt, const char *a, const char *b) {
    return order_args_usage("reduce", REDUCE_USAGE, fmt, a, b);
}

static int parse_int(const char *flag, const char *v, int64_t lo, int64_t hi, int64_t *out) {
    return order_args_int("reduce", flag, v, lo, hi, out);
}

static const char *const op_names[] = {"reduce_scatter", "all_reduce", NULL};
static const char *const dtype_names[] = {"bf16", "f32", "f16", NULL};
static const int32_t dtype_codes[] = {CT_DTYPE_BF16, CT_DTYPE_F32, CT_DTYPE_F16};
static int parse_args(int argc, char **argv, reduce_opts *o) {
    memset(o, 0, sizeof *o);
    o->oc = order_config_default(REDUCE_RING);
    o->all_reduce = 1, o->dtype = CT_DTYPE_BF16;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fprintf(cmdout(), "%s", REDUCE_USAGE);
            return -1;
        }
        if (!strcmp(a, "--avg")) { o->avg = 1; continue; }
        if (!strcmp(a, "--force")) { reduce_force = 1; continue; }
        if (!strcmp(a, "--stats")) { o->stats = 1; continue; }
        int takes = 0, r = order_args_option("reduce", a, i + 1 < argc ? argv[i + 1] : NULL,
                                             &o->oc, &takes);
        if (r >= 0) {
            if (r) return r;
            i += takes;
            continue;
        }
        static const char *const valued[] = {"--world-size", "--in", "--out", "--op", "--dtype",
                                             "--algo", "--policy", "--set", "--part", "--bucket",
                                             NULL};
        int known = 0;
        for (int k = 0; valued[k]; k++) known |= !strcmp(a, valued[k]);
        if (!known) return usage_error("unknown argument '%s'%s", a, "");
        if (i + 1 >= argc) return usage_error("%s needs a value%s", a, "");
        const char *v = argv[++i];
        int bad = 0, dt = 0;
        if (!strcmp(a, "--world-size")) bad = parse_int(a, v, 1, REDUCE_MAX_WORLD, &o->N);
        else if (!strcmp(a, "--in")) o->in = v;
        else if (!strcmp(a, "--out")) o->out = v;
        else if (!strcmp(a, "--policy")) o->policy = v;
        else if (!strcmp(a, "--op")) bad = order_args_choice("reduce", a, v, op_names, &o->all_reduce);
        else if (!strcmp(a, "--dtype")) {
            bad = order_args_choice("reduce", a, v, dtype_names, &dt);
            o->dtype = dtype_codes[dt];
        } else if (!strcmp(a, "--algo")) bad = order_args_choice("reduce", a, v, order_args_algos, &o->oc.algo);
        else if (!strcmp(a, "--part")) bad = parse_int(a, v, 1, 1ll << 40, &o->part);
        else if (!strcmp(a, "--bucket")) bad = parse_int(a, v, 1, 1ll << 40, &o->bucket);
        else if (o->n_sets == REDUCE_MAX_SETS) return usage_error("more than %s --set%s", "32", "");
        else o->sets[o->n_sets++] = v;
        if (bad) return bad;
    }
    if (!o->N) return usage_error("--world-size is required%s%s", "", "");
    if (!o->in || !o->out) return usage_error("--in and --out are required%s%s", "", "");
    if (!o->policy && (o->n_sets || o->bucket))
        return usage_error("--set and --bucket go with --policy%s%s", "", "");
    if (o->policy && o->part)
        return usage_error("--part is for the engine's one collective; with --policy the "
                           "buckets (--bucket) are the parts%s%s", "", "");
    if (o->policy && o->avg)
        return usage_error("--avg with --policy: a precision plugin's hook sums ---> drop one%s%s",
                           "", "");
    if (o->policy && o->N > REDUCE_POLICY_MAX_WORLD)
        return usage_error("--policy runs the threads engine, up to %s ranks%s", "1024", "");
    char why[256];
    if (order_check(&o->oc, (int32_t)o->N, why, sizeof why) != 0) {
        fprintf(stderr, "ctrain reduce: --world-size %lld: %s\n", (long long)o->N, why);
        return 2;
    }
    if (o->avg && (o->oc.algo == REDUCE_NVLS || o->oc.algo == REDUCE_NVLS_TREE))
        return usage_error("--avg with --algo %s: NCCL's NVLS does not reduce ncclAvg ---> use "
                           "--algo nccl, ring or dbtree%s", order_args_algos[o->oc.algo], "");
    return 0;
}

/* ---- the input ------------------------------------------------------------------------- */

typedef struct reduce_in {
    int      fd;
    uint64_t n;     /* elements per rank buffer */
    uint64_t block; /* reduce_scatter: elements per shard (n / N) */
} reduce_in;

/* Open FILE, check that its size fits N buffers (and N shards each), refuse --out naming it. */
static int32_t open_input(const reduce_opts *o, reduce_in *in, ct_error *err) {
    struct stat st;
    int32_t rc = open_regular(o->in, "reduce input", "give a regular file of N rank buffers",
                              &in->fd, &st, err);
    if (rc != CT_OK) return rc;
    struct stat ost;
    if (stat(o->out, &ost) == 0 && ost.st_dev == st.st_dev && ost.st_ino == st.st_ino)
        return ct_error_set(err, CT_ERR_INVALID, "--out %s is the input file ---> write the "
                            "result to another file", o->out);
    uint64_t size = (uint64_t)st.st_size, es = ct_dtype_size(o->dtype), N = (uint64_t)o->N;
    if (size == 0)
        return ct_error_set(err, CT_ERR_INVALID, "reduce input %s is empty ---> give N rank "
                            "buffers back to back", o->in);
    if (size % (N * es) != 0)
        return ct_error_set(err, CT_ERR_INVALID, "reduce input %s is %llu bytes, not a whole "
                            "number of %llu ranks x %s elements (%llu bytes): %llu %% %llu = "
                            "%llu bytes left over ---> check --world-size and --dtype",
                            o->in, (unsigned long long)size, (unsigned long long)N,
                            ct_dtype_name(o->dtype), (unsigned long long)(N * es),
                            (unsigned long long)size, (unsigned long long)(N * es),
                            (unsigned long long)(size % (N * es)));
    in->n = size / (N * es);
    if (!o->all_reduce && in->n % N != 0)
        return ct_error_set(err, CT_ERR_INVALID, "reduce_scatter: each rank's buffer of %s has "
                            "%llu elements, which do not split into %llu shards (%llu %% %llu = "
                            "%llu) ---> pad each rank's buffer to a multiple of %llu elements",
                            o->in, (unsigned long long)in->n, (unsigned long long)N,
                            (unsigned long long)in->n, (unsigned long long)N,
                            (unsigned long long)(in->n % N), (unsigned long long)N);
    in->block = o->all_reduce ? in->n : in->n / N;
    return CT_OK;
}

/* dst = elements [at, at + m) of rank r's buffer (pread; a short read is an error: the file
 * changed under the command). */
static int32_t read_part(const reduce_opts *o, const reduce_in *in, int32_t r, uint64_t at,
                         uint64_t m, void *dst, ct_error *err) {
    size_t es = ct_dtype_size(o->dtype);
    uint64_t off = ((uint64_t)r * in->n + at) * es, want = m * es, got = 0;
    while (got < want) {
        ssize_t k = pread(in->fd, (char *)dst + got, (size_t)(want - got), (off_t)(off + got));
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0)
            return ct_error_set(err, CT_ERR_IO, "reduce input %s: cannot read rank %d at byte "
                                "%llu: %s ---> was the file changed while it was read?", o->in,
                                (int)r, (unsigned long long)(off + got),
                                k < 0 ? strerror(errno) : "end of file");
        got += (uint64_t)k;
    }
    return CT_OK;
}

static double value_at(const void *p, uint64_t i, int32_t dtype) {
    if (dtype == CT_DTYPE_BF16) return ct_bf16_to_f32(((const uint16_t *)p)[i]);
    if (dtype == CT_DTYPE_F16) return ct_f16_to_f32(((const uint16_t *)p)[i]);
    return ((const float *)p)[i];
}

/* ---- --stats --------------------------------------------------------------------------- */

typedef struct reduce_stats {
    double   d2, e2, worst; /* sum (got - exact)^2, sum exact^2, max |got - exact| */
    uint64_t n, equal_once; /* elements; ones equal to the exact value rounded once */
    /* non-finite values, which make every figure meaningless: counts, and the first one's
     * element (in the order the elements are added: the output's), rank and value */
    uint64_t bad_in, bad_out, first_in, first_out;
    int64_t  first_in_rank;
    double   first_in_value, first_out_value;
} reduce_stats;

/* got[i] against the exact f64 sum (or mean, --avg) of x[r][i] (N rank parts of m); the
 * parts come in the output's order, so s->n is the element's index. */
static void stats_add(reduce_stats *s, const reduce_opts *o, void *const *x, const void *got,
                      int32_t got_dtype, uint64_t m) {
    for (uint64_t i = 0; i < m; i++, s->n++) {
        double e = 0;
        int finite = 1;
        for (int64_t r = 0; r < o->N; r++) {
            double v = value_at(x[r], i, o->dtype);
            if (!isfinite(v) && finite) {
                finite = 0;
                if (!s->bad_in++)
                    s->first_in = s->n, s->first_in_rank = r, s->first_in_value = v;
            }
            e += v;
        }
        double g = value_at(got, i, got_dtype);
        if (!finite) continue;
        if (!isfinite(g)) {
            if (!s->bad_out++) s->first_out = s->n, s->first_out_value = g;
            continue;
        }
        if (o->avg) e /= (double)o->N;
        double d = g - e;
        double once = got_dtype == CT_DTYPE_BF16   ? ct_round_bf16((float)e)
                      : got_dtype == CT_DTYPE_F16 ? ct_round_f16((float)e)
                                                  : (float)e;
        s->d2 += d * d, s->e2 += e * e;
        s->equal_once += g == once;
        if (fabs(d) > s->worst) s->worst = fabs(d);
    }
}

static const char *nonfinite_name(double v) {
    return isnan(v) ? "NaN" : v > 0 ? "+Inf" : "-Inf";
}

static void stats_print(const reduce_stats *s, const reduce_opts *o, int32_t got_dtype) {
    if (s->bad_in) { /* no figure: an error against NaN or Inf is no number */
        fprintf(cmdout(), "stats: the input is not finite: rank %lld's element %llu is %s (%llu "
                "of %llu elements have a NaN or Inf on some rank) ---> no error figure; give "
                "finite inputs\n", (long long)s->first_in_rank,
                (unsigned long long)s->first_in, nonfinite_name(s->first_in_value),
                (unsigned long long)s->bad_in, (unsigned long long)s->n);
        return;
    }
    if (s->bad_out) {
        fprintf(cmdout(), "stats: the result is not finite though the input is: element %llu "
                "is %s (%llu of %llu elements; the %s overflows %s) ---> no error figure\n",
                (unsigned long long)s->first_out, nonfinite_name(s->first_out_value),
                (unsigned long long)s->bad_out, (unsigned long long)s->n,
                o->avg ? "mean" : "sum", ct_dtype_name(got_dtype));
        return;
    }
    double rms = s->n ? sqrt(s->e2 / (double)s->n) : 0;
    fprintf(cmdout(), "stats: relative error %.4g (rms of result - exact %s over rms of exact, %llu "
           "elements); largest |error| %.4g (%.4g of the rms exact value); %.2f%% of elements "
           "equal the exact %s rounded once to %s\n", s->e2 > 0 ? sqrt(s->d2 / s->e2) : 0.0,
           o->avg ? "mean" : "sum", (unsigned long long)s->n, s->worst,
           rms > 0 ? s->worst / rms : 0.0,
           s->n ? 100.0 * (double)s->equal_once / (double)s->n : 0, o->avg ? "mean" : "sum",
           ct_dtype_name(got_dtype));
}

/* ---- the engine's reduction, part by part ---------------------------------------------- */

typedef struct reduce_bufs {
    void      **x;      /* (N) each rank's part of the input, P elements */
    void      **y;      /* (N) all_reduce: each rank's copy of the result, P elements */
    const void **srcs;  /* (N) */
    void      **dsts;   /* (N) */
    order_step *prog;   /* (order_max_steps(N)) */
    double     *scratch;
} reduce_bufs;

static void bufs_free(reduce_bufs *b, int64_t N) {
    for (int64_t r = 0; b->x && r < N; r++) free(b->x[r]);
    for (int64_t r = 0; b->y && r < N; r++) free(b->y[r]);
    free(b->x), free(b->y), free(b->srcs), free(b->dsts), free(b->prog), free(b->scratch);
}

static int32_t bufs_alloc(reduce_bufs *b, int64_t N, uint64_t P, int32_t dtype, int copies,
                          ct_error *err) {
    size_t es = ct_dtype_size(dtype);
    memset(b, 0, sizeof *b);
    b->x = calloc((size_t)N, sizeof *b->x);
    b->y = calloc((size_t)N, sizeof *b->y);
    b->srcs = calloc((size_t)N, sizeof *b->srcs);
    b->dsts = calloc((size_t)N, sizeof *b->dsts);
    b->prog = malloc((size_t)order_max_steps((int32_t)N) * sizeof *b->prog);
    b->scratch = malloc(REDUCE_SCRATCH * sizeof *b->scratch);
    int ok = b->x && b->y && b->srcs && b->dsts && b->prog && b->scratch;
    for (int64_t r = 0; ok && r < N; r++) {
        ok = (b->x[r] = malloc(P * es)) != NULL;
        if (ok && (copies || r == 0)) ok = (b->y[r] = malloc(P * es)) != NULL;
    }
    return ok ? CT_OK : ct_error_set(err, CT_ERR_NOMEM, "out of memory for %lld ranks x %llu "
                                     "elements per part", (long long)N, (unsigned long long)P);
}

/* What the plan is, in one or two lines. */
static void describe_plan(const reduce_opts *o, const order_plan *p) {
    fprintf(cmdout(), "reduce: %s, %s split, %s, %d of %d channel%s, %d per node:", order_args_algos[p->oc.algo],
           order_args_splits[p->oc.split], order_args_protos[p->oc.proto], (int)p->n_parts,
           (int)p->oc.channels, p->oc.channels == 1 ? "" : "s", (int)p->oc.gpus_per_node);
    for (int32_t k = 0; k < p->n_parts && k < 4; k++)
        fprintf(cmdout(), " [%llu, %llu)", (unsigned long long)p->part[k], (unsigned long long)p->part[k + 1]);
    if (p->n_parts > 4) fprintf(cmdout(), " ...");
    if (p->chunk)
        fprintf(cmdout(), "; ring chunks of %llu elements, %lld loop%s in channel 0",
               (unsigned long long)p->chunk, (long long)order_loops(p, 0),
               order_loops(p, 0) == 1 ? "" : "s");
    fprintf(cmdout(), "\n");
    if (o->oc.algo == REDUCE_NCCL) {
        tuner_query q = {p->kind, p->count * p->esize * (p->kind == ORDER_ALL_REDUCE ? 1 : (uint64_t)o->N),
                         (int32_t)o->N, o->oc.gpus_per_node, o->oc.gpu, o->oc.nvswitch,
                         o->dtype == CT_DTYPE_BF16 || o->dtype == CT_DTYPE_F16 ||
                             o->dtype == CT_DTYPE_F32, o->avg, o->oc.nccl_version};
        tuner_pick pk;
        char line[512];
        tuner_choose(&q, &pk);
        tuner_describe(&q, &pk, line, sizeof line);
        fprintf(cmdout(), "reduce: %s\n", line);
    }
}

/* The plan of the one collective (kind, count elements: the buffer, or one shard), said on
 * stdout; *P the elements per rank read at a time (--part, or 64 MiB of all ranks' input) and
 * the buffers of a part (all-reduce: every rank's copy of the result). */
static int32_t engine_begin(const reduce_opts *o, int32_t kind, uint64_t count, order_plan *plan,
                            uint64_t *P, reduce_bufs *b, ct_error *err) {
    size_t es = ct_dtype_size(o->dtype);
    order_plan_make(plan, &o->oc, (int32_t)o->N, kind, count, (uint32_t)es, 1, o->avg);
    describe_plan(o, plan);
    *P = o->part ? (uint64_t)o->part : REDUCE_PART_BYTES / ((uint64_t)o->N * es) + 1;
    if (*P > count) *P = count;
    return bufs_alloc(b, o->N, *P, o->dtype, kind == ORDER_ALL_REDUCE, err);
}

/* All-reduce: parts of P elements of the buffer; each part's units as the engine's plan cuts
 * the whole buffer, their result stored into every rank's copy (as the engine does), the
 * copies compared, rank 0's written. */
static int32_t engine_all_reduce(const reduce_opts *o, const reduce_in *in, outfile *out,
                                 reduce_stats *st, ct_error *err) {
    int32_t N = (int32_t)o->N, dt = o->dtype;
    size_t es = ct_dtype_size(dt);
    order_plan plan;
    uint64_t P;
    reduce_bufs b;
    int32_t rc = engine_begin(o, ORDER_ALL_REDUCE, in->n, &plan, &P, &b, err);
    uint64_t differ = 0;
    for (uint64_t first = 0; rc == CT_OK && first < in->n; first += P) {
        uint64_t m = in->n - first < P ? in->n - first : P;
        for (int32_t r = 0; rc == CT_OK && r < N; r++) rc = read_part(o, in, r, first, m, b.x[r], err);
        for (uint64_t lo = first; rc == CT_OK && lo < first + m;) {
            uint64_t ub, ue;
            int32_t steps = order_unit_at(&plan, lo, &ub, &ue, b.prog);
            uint64_t hi = ue < first + m ? ue : first + m, off = lo - first;
            for (int32_t r = 0; r < N; r++) {
                b.srcs[r] = (const char *)b.x[r] + off * es;
                b.dsts[r] = (char *)b.y[r] + off * es;
            }
            reduce_arith ar = {dt, o->avg ? CT_REDUCE_AVG : CT_REDUCE_SUM, N, NULL};
            reduce_run(b.srcs, b.prog, steps, b.dsts, N, hi - lo, &ar, b.scratch);
            lo = hi;
        }
        for (int32_t r = 1; rc == CT_OK && r < N; r++)
            for (uint64_t i = 0; i < m; i++)
                differ += memcmp((char *)b.y[r] + i * es, (char *)b.y[0] + i * es, es) != 0;
        if (rc == CT_OK) outfile_write(out, b.y[0], (size_t)(m * es));
        if (rc == CT_OK && o->stats) stats_add(st, o, b.x, b.y[0], dt, m);
    }
    bufs_free(&b, N);
    if (rc == CT_OK && differ)
        return ct_error_set(err, CT_ERR_INTERNAL, "the ranks' results differ in %llu elements "
                            "(an engine bug) ---> report it", (unsigned long long)differ);
    if (rc == CT_OK) fprintf(cmdout(), "reduce: all %d ranks hold the same bits\n", (int)N);
    return rc;
}

/* Reduce-scatter: shard by shard in rank order, parts of P elements of a shard; each part's
 * pieces by the channel parts of the plan (a ring per channel ending at the shard's owner). */
static int32_t engine_reduce_scatter(const reduce_opts *o, const reduce_in *in, outfile *out,
                                     reduce_stats *st, ct_error *err) {
    int32_t N = (int32_t)o->N, dt = o->dtype;
    size_t es = ct_dtype_size(dt);
    order_plan plan;
    uint64_t P;
    reduce_bufs b;
    int32_t rc = engine_begin(o, ORDER_REDUCE_SCATTER, in->block, &plan, &P, &b, err);
    for (int32_t owner = 0; rc == CT_OK && owner < N; owner++)
        for (uint64_t first = 0; rc == CT_OK && first < in->block; first += P) {
            uint64_t m = in->block - first < P ? in->block - first : P;
            uint64_t base = (uint64_t)owner * in->block + first;
            for (int32_t r = 0; rc == CT_OK && r < N; r++)
                rc = read_part(o, in, r, base, m, b.x[r], err);
            for (int32_t k = 0; rc == CT_OK && k < plan.n_parts; k++) {
                uint64_t pb, pe;
                int32_t steps = order_rs_part(&plan, k, owner, &pb, &pe, b.prog);
                uint64_t lo = pb > first ? pb : first, hi = pe < first + m ? pe : first + m;
                if (!steps || lo >= hi) continue;
                for (int32_t r = 0; r < N; r++) b.srcs[r] = (const char *)b.x[r] + (lo - first) * es;
                void *dst = (char *)b.y[0] + (lo - first) * es;
                reduce_arith ar = {dt, o->avg ? CT_REDUCE_AVG : CT_REDUCE_SUM, N, NULL};
                reduce_run(b.srcs, b.prog, steps, &dst, 1, hi - lo, &ar, b.scratch);
            }
            if (rc == CT_OK) outfile_write(out, b.y[0], (size_t)(m * es));
            if (rc == CT_OK && o->stats) stats_add(st, o, b.x, b.y[0], dt, m);
        }
    bufs_free(&b, N);
    return rc;
}

/* ---- --policy: the precision plugin's hook on rank threads of the threads engine -------- */

typedef struct policy_rank {
    struct policy_world *w;
    int32_t             rank;
    check_instance      dev, comm, prec;
    ct_device_ref       devref;
    ct_comm_ref         commref;
    void               *send, *recv; /* device buffers of the part */
    int32_t             rc;
    ct_error            err;
} policy_rank;

typedef struct policy_world {
    const reduce_opts          *o;
    host_config                *cfg;
    host_registry              *reg;
    const host_plugin          *threads, *prec;
    const ct_precision_vtable *pv;
    int32_t                    result; /* the policy's result dtype */
    void                      *world;
    policy_rank               *ranks;  /* (N) */
    void                     **x;      /* (N) host: this part of each rank's send */
    void                     **y;      /* (N) host: each rank's recv of this part */
    uint64_t                   m;      /* elements per rank of this part (all_reduce) or shard */
} policy_world;

/* A configuration for the policy world: [device], [comm] with the order's keys, [precision]
 * with its plugin and the --set keys, each validated against its plugin's schema. */
static int32_t policy_config(policy_world *w, ct_error *err) {
    const reduce_opts *o = w->o;
    char ini[1024];
    snprintf(ini, sizeof ini, "[device]\nthreads = 1\n[comm]\nalgo = %s\nchannels = %d\n"
             "gpus_per_node = %d\nsplit = %s\nproto = %s\ngpu = %s\nnvswitch = %s\n"
             "timeout_s = 600\n[precision]\n", order_args_algos[o->oc.algo], (int)o->oc.channels,
             (int)o->oc.gpus_per_node, order_args_splits[o->oc.split], order_args_protos[o->oc.proto],
             order_args_gpus[o->oc.gpu], o->oc.nvswitch ? "true" : "false");
    if (!(w->cfg = config_new())) return ct_error_set(err, CT_ERR_NOMEM, "out of memory");
    int32_t rc = config_load_string(w->cfg, "ctrain reduce", ini, err);
    for (int32_t i = 0; rc == CT_OK && i < o->n_sets; i++) {
        const char *eq = strchr(o->sets[i], '=');
        if (!eq || eq == o->sets[i])
            return ct_error_set(err, CT_ERR_INVALID, "--set '%s' is not key=value (a key of "
                                "[precision]) ---> e.g. --set seed_offset=3", o->sets[i]);
        char key[128];
        snprintf(key, sizeof key, "%.*s", (int)(eq - o->sets[i]), o->sets[i]);
        rc = config_set(w->cfg, "precision", key, eq + 1, "--set", err);
    }
    if (rc != CT_OK) return rc;
    if (!(w->reg = registry_open(err))) return err->code;
    const host_plugin *dev = registry_resolve(w->reg, CT_KIND_DEVICE, "cpu", err);
    w->threads = dev ? registry_resolve(w->reg, CT_KIND_COMM, "threads", err) : NULL;
    w->prec = w->threads ? registry_resolve(w->reg, CT_KIND_PRECISION, o->policy, err) : NULL;
    if (!w->prec) return err->code;
    static const char *const comm_skip[] = {"plugin", "world_size", NULL};
    static const char *const skip[] = {"plugin", NULL};
    rc = config_validate_section(w->cfg, "device", dev->params, sizeof(ct_param_spec),
                                 dev->desc.name, skip, err);
    if (rc == CT_OK)
        rc = config_validate_section(w->cfg, "comm", w->threads->params, sizeof(ct_param_spec),
                                     w->threads->desc.name, comm_skip, err);
    if (rc == CT_OK)
        rc = config_validate_section(w->cfg, "precision", w->prec->params,
                                     sizeof(ct_param_spec), w->prec->desc.name, skip, err);
    if (rc != CT_OK) return rc;
    w->pv = w->prec->vtable;
    if (o->all_reduce ? !w->pv->all_reduce : !w->pv->reduce_scatter)
        return ct_error_set(err, CT_ERR_INVALID, "precision %s has no %s hook (it leaves the "
                            "reduction to the comm engine) ---> run without --policy, with "
                            "--algo as you like", o->policy,
                            o->all_reduce ? "all_reduce" : "reduce_scatter");
    return CT_OK;
}

/* The world of N ranks: device cpu, comm threads, the policy, per rank (created here, on one
 * thread, as rank.c creates them). */
static int32_t policy_open(policy_world *w, ct_error *err) {
    const reduce_opts *o = w->o;
    int32_t N = (int32_t)o->N, rc = policy_config(w, err);
    if (rc != CT_OK) return rc;
    const ct_comm_vtable *cv = w->threads->vtable;
    ct_host wh;
    hostapi_init(&wh, w->cfg, 0, "threads", NULL);
    ct_create_args wa = {.struct_size = sizeof wa, .api = hostapi_table(), .host = &wh,
                         .section = "comm", .world_size = N, .seed = CHECK_SEED};
    if (!(w->ranks = calloc((size_t)N, sizeof *w->ranks)) ||
        !(w->x = calloc((size_t)N, sizeof *w->x)) || !(w->y = calloc((size_t)N, sizeof *w->y)))
        return ct_error_set(err, CT_ERR_NOMEM, "out of memory");
    if (!(w->world = cv->world_create(N, &wa, err))) return err->code ? err->code : CT_ERR_COMM;
    host_check hc = {.reg = w->reg};
    for (int32_t r = 0; r < N; r++) {
        policy_rank *s = &w->ranks[r];
        s->w = w, s->rank = r, s->err.struct_size = sizeof s->err;
        ct_comm_ref no_comm = {0};
        rc = check_device_open(&hc, w->cfg, r, &s->dev, &s->devref, err);
        if (rc == CT_OK)
            rc = check_create(&s->comm, w->threads, w->cfg, "comm", r, N, s->devref, no_comm,
                              w->world, err);
        if (rc != CT_OK) return rc;
        s->commref = (ct_comm_ref){cv, s->comm.self, r, N};
        rc = check_create(&s->prec, w->prec, w->cfg, "precision", r, N, s->devref, s->commref,
                          NULL, err);
        if (rc != CT_OK) return rc;
    }
    ct_precision_policy pol = {.struct_size = sizeof pol};
    rc = w->pv->policy(w->ranks[0].prec.self, &pol, err);
    if (rc != CT_OK) return rc;
    if (pol.reduce_dtype != o->dtype)
        return ct_error_set(err, CT_ERR_INVALID, "precision %s reduces in %s, the input holds "
                            "%s ---> pass --dtype %s", o->policy, ct_dtype_name(pol.reduce_dtype),
                            ct_dtype_name(o->dtype), ct_dtype_name(pol.reduce_dtype));
    w->result = pol.result_dtype ? pol.result_dtype : pol.reduce_dtype;
    return CT_OK;
}

static void policy_close(policy_world *w) {
    int32_t N = (int32_t)w->o->N;
    for (int32_t r = 0; w->ranks && r < N; r++) {
        policy_rank *s = &w->ranks[r];
        if (s->devref.vt) {
            s->devref.vt->free_mem(s->devref.self, s->send);
            s->devref.vt->free_mem(s->devref.self, s->recv);
        }
        check_destroy(&s->prec);
        check_destroy(&s->comm);
        check_destroy(&s->dev);
    }
    if (w->world) ((const ct_comm_vtable *)w->threads->vtable)->world_destroy(w->world);
    for (int32_t r = 0; w->x && r < N; r++) free(w->x[r]);
    for (int32_t r = 0; w->y && r < N; r++) free(w->y[r]);
    free(w->x), free(w->y), free(w->ranks);
    registry_close(w->reg);
    config_free(w->cfg);
}

/* One rank's hook call on this part: send from host x, recv back into host y. */
static void *policy_rank_main(void *arg) {
    policy_rank *s = arg;
    policy_world *w = s->w;
    const reduce_opts *o = w->o;
    int32_t N = (int32_t)o->N;
    size_t es = ct_dtype_size(o->dtype), rs = ct_dtype_size(w->result);
    uint64_t send_n = o->all_reduce ? w->m : w->m * (uint64_t)N;
    const ct_device_vtable *d = s->devref.vt;
    s->rc = d->copy(s->devref.self, s->send, w->x[s->rank], send_n * es, CT_COPY_H2D, &s->err);
    if (s->rc == CT_OK)
        s->rc = o->all_reduce
                    ? w->pv->all_reduce(s->prec.self, s->commref, s->devref, s->send, s->recv,
                                        w->m, o->dtype, &s->err)
                    : w->pv->reduce_scatter(s->prec.self, s->commref, s->devref, s->send,
                                            s->recv, w->m, o->dtype, &s->err);
    if (s->rc == CT_OK)
        s->rc = d->copy(s->devref.self, w->y[s->rank], s->recv, w->m * rs, CT_COPY_D2H, &s->err);
    if (s->rc != CT_OK && s->commref.vt->abort) s->commref.vt->abort(s->commref.self, s->err.message);
    return NULL;
}

/* --policy: buckets of --bucket elements per rank (all_reduce: of the buffer; reduce_scatter:
 * of every shard, so the bucket's collective has N shards of that size), each one collective. */
static int32_t policy_reduce(const reduce_opts *o, const reduce_in *in, outfile *out,
                             reduce_stats *st, int32_t *out_dtype, ct_error *err) {
    policy_world w = {.o = o};
    int32_t N = (int32_t)o->N, rc = policy_open(&w, err);
    size_t es = ct_dtype_size(o->dtype);
    uint64_t unit = o->all_reduce ? in->n : in->block;
    uint64_t P = o->bucket ? (uint64_t)o->bucket : REDUCE_PART_BYTES / ((uint64_t)N * es * 2) + 1;
    if (P > unit) P = unit;
    size_t rs = rc == CT_OK ? ct_dtype_size(w.result) : 4;
    uint64_t send_P = o->all_reduce ? P : P * (uint64_t)N;
    for (int32_t r = 0; rc == CT_OK && r < N; r++) {
        policy_rank *s = &w.ranks[r];
        s->send = s->devref.vt->alloc(s->devref.self, send_P * es, err);
        s->recv = s->send ? s->devref.vt->alloc(s->devref.self, P * rs, err) : NULL;
        w.x[r] = malloc(send_P * es);
        w.y[r] = malloc(P * rs);
        if (!s->recv || !w.x[r] || !w.y[r])
            rc = ct_error_set(err, CT_ERR_NOMEM, "out of memory for a part of %llu elements",
                              (unsigned long long)P);
    }
    if (rc == CT_OK) {
        fprintf(cmdout(), "reduce: precision %s's %s hook on %d rank threads of the threads engine (%s), "
               "buckets of %llu elements per rank%s, result in %s\n", o->policy,
               o->all_reduce ? "all_reduce" : "reduce_scatter", N, order_args_algos[o->oc.algo],
               (unsigned long long)P, P < unit ? " (each bucket one collective)" : "",
               ct_dtype_name(w.result));
        *out_dtype = w.result;
    }
    uint64_t differ = 0;
    /* reduce_scatter: the output is shard after shard; a part covers [first, first + m) of
     * every shard, so the parts' results are kept per rank until the shard is complete */
    void **shard = NULL;
    if (rc == CT_OK && !o->all_reduce) {
        shard = calloc((size_t)N, sizeof *shard);
        for (int32_t r = 0; shard && r < N && rc == CT_OK; r++)
            if (!(shard[r] = malloc(in->block * rs)))
                rc = ct_error_set(err, CT_ERR_NOMEM, "out of memory for the shards");
        if (!shard) rc = ct_error_set(err, CT_ERR_NOMEM, "out of memory");
    }
    for (uint64_t first = 0; rc == CT_OK && first < unit; first += P) {
        w.m = unit - first < P ? unit - first : P;
        for (int32_t r = 0; rc == CT_OK && r < N; r++) {
            if (o->all_reduce) {
                rc = read_part(o, in, r, first, w.m, w.x[r], err);
                continue;
            }
            for (int32_t b = 0; rc == CT_OK && b < N; b++)
                rc = read_part(o, in, r, (uint64_t)b * in->block + first, w.m,
                               (char *)w.x[r] + (uint64_t)b * w.m * es, err);
        }
        if (rc != CT_OK) break;
        pthread_t *th = malloc((size_t)N * sizeof *th);
        if (!th) {
            rc = ct_error_set(err, CT_ERR_NOMEM, "out of memory");
            break;
        }
        int32_t started = 0;
        rc = thread_start_ranks(th, N, policy_rank_main, w.ranks, sizeof *w.ranks, 0,
                                "lower --world-size", &started, err);
        /* the started ranks wait in the collective for the missing ones: aborted, they return */
        for (int32_t r = 0; rc != CT_OK && r < started; r++)
            if (w.ranks[r].commref.vt->abort)
                w.ranks[r].commref.vt->abort(w.ranks[r].commref.self, err->message);
        for (int32_t r = 0; r < started; r++) pthread_join(th[r], NULL);
        free(th);
        for (int32_t r = 0; r < N && rc == CT_OK; r++)
            if (w.ranks[r].rc != CT_OK)
                rc = ct_error_set(err, w.ranks[r].rc, "precision %s, rank %d: %s", o->policy,
                                  (int)r, w.ranks[r].err.message);
        if (rc != CT_OK) break;
        if (o->all_reduce) {
            for (int32_t r = 1; r < N; r++)
                for (uint64_t i = 0; i < w.m; i++)
                    differ += memcmp((char *)w.y[r] + i * rs, (char *)w.y[0] + i * rs, rs) != 0;
            outfile_write(out, w.y[0], (size_t)(w.m * rs));
            if (o->stats) stats_add(st, o, w.x, w.y[0], w.result, w.m);
        } else {
            for (int32_t r = 0; r < N; r++)
                memcpy((char *)shard[r] + first * rs, w.y[r], (size_t)(w.m * rs));
        }
    }
    if (rc == CT_OK && !o->all_reduce) {
        for (int32_t r = 0; r < N; r++) outfile_write(out, shard[r], (size_t)(in->block * rs));
        if (o->stats) { /* the exact sums, shard by shard, read again in parts */
            for (int32_t r = 0; rc == CT_OK && r < N; r++)
                for (uint64_t first = 0; rc == CT_OK && first < in->block; first += P) {
                    uint64_t m = in->block - first < P ? in->block - first : P;
                    for (int32_t q = 0; rc == CT_OK && q < N; q++)
                        rc = read_part(o, in, q, (uint64_t)r * in->block + first, m, w.x[q], err);
                    if (rc == CT_OK)
                        stats_add(st, o, w.x, (char *)shard[r] + first * rs, w.result, m);
                }
        }
    }
    for (int32_t r = 0; shard && r < N; r++) free(shard[r]);
    free(shard);
    policy_close(&w);
    if (rc == CT_OK && o->all_reduce) {
        if (differ)
            return ct_error_set(err, CT_ERR_INVALID, "precision %s: the ranks' all-reduce "
                                "results differ in %llu elements ---> the policy's hook does "
                                "not give every rank the same bits", o->policy,
                                (unsigned long long)differ);
        fprintf(cmdout(), "reduce: all %d ranks hold the same bits\n", (int)N);
    }
    return rc;
}

/* ---- the command ------------------------------------------------------------------------ */

int cmd_reduce(int argc, char **argv) {
    reduce_opts o;
    int status = parse_args(argc, argv, &o);
    if (status) return status < 0 ? 0 : status;
    ct_error err = {.struct_size = sizeof err};
    reduce_in in = {.fd = -1};
    outfile out = {.fd = -1};
    reduce_stats st;
    memset(&st, 0, sizeof st);
    int32_t got_dtype = o.dtype;
    int32_t rc = open_input(&o, &in, &err);
    if (rc == CT_OK)
        rc = outfile_open_as(&out, o.out, OUTFILE_USER | (reduce_force ? OUTFILE_FORCE : 0), &err);
    if (rc != CT_OK) goto out_fail;
    fprintf(cmdout(), "reduce: %s: %lld ranks x %llu %s elements; %s%s\n", o.in, (long long)o.N,
           (unsigned long long)in.n, ct_dtype_name(o.dtype),
           o.all_reduce ? "all_reduce" : "reduce_scatter", o.avg ? " (AVG: ncclAvg)" : "");
    if (o.policy) rc = policy_reduce(&o, &in, &out, &st, &got_dtype, &err);
    else if (o.all_reduce) rc = engine_all_reduce(&o, &in, &out, &st, &err);
    else rc = engine_reduce_scatter(&o, &in, &out, &st, &err);
    if (rc == CT_OK) rc = outfile_commit(&out, &err);
    if (rc != CT_OK) goto out_fail;
    fprintf(cmdout(), "reduce: wrote %s (%llu %s elements: %s)\n", o.out,
           (unsigned long long)(o.all_reduce ? in.n : in.block * (uint64_t)o.N),
           ct_dtype_name(got_dtype), o.all_reduce ? "rank 0's result" : "every rank's shard "
           "in rank order");
    if (o.stats) stats_print(&st, &o, got_dtype);
    close(in.fd);
    return 0;
out_fail:
    outfile_abort(&out);
    if (in.fd >= 0) close(in.fd);
    print_message_line(stderr, "ctrain reduce: ", err.message);
    return 1;
}
