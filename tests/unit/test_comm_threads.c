/* test_comm_threads.c — the threads comm engine (plugins/comm/threads) run with real rank
 * threads: bf16/f32 sums in every order (ring, ring with channels over a node layout, NCCL's
 * double binary tree, the hierarchical ring, the heap tree), cut by the even split, equal a
 * sequential emulation written here bit for bit, error against an fp64 sum grows with the world size, copies are
 * exact, abort / timeout / mismatched calls end every rank's call with an error naming the
 * failed rank.
 * Not for: the mpi engine (tests/cli/test_mpi.sh).
 */
#include "ct_test.h"
#include "harness.h"
#include "threads_world.h"

#include <ctrain/numerics.h>

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The emulations of this file cut a collective as earlier versions did (split = even: equal
 * contiguous parts and chunks, one loop), so every world here adds `split = even` to an ini
 * that does not name a split; NCCL's own split (the default) is checked in test_nccl_split.c. */
static int open_even(world_run *w, int32_t n, const char *ini) {
    char even[512];
    if (!strstr(ini, "split") && !strncmp(ini, "[comm]\n", 7) &&
        snprintf(even, sizeof even, "[comm]\nsplit = even\n%s", ini + 7) < (int)sizeof even)
        ini = even;
    return world_open(w, n, ini);
}
/* ---------------------------------------------------------------------------------------
 * independent references: bf16 rounding through frexp/rint in double, the orders written out
 * ------------------------------------------------------------------------------------- */

/* x rounded to 8 significant bits, nearest even, as bf16 does (finite inputs, no overflow). */
static double ref_round_bf16(double x) {
    if (x == 0 || !isfinite(x)) return x;
    int e;
    frexp(x, &e);                         /* x = m * 2^e, 0.5 <= |m| < 1 */
    double ulp = ldexp(1.0, e - 8);
    if (ulp < ldexp(1.0, -133)) ulp = ldexp(1.0, -133); /* subnormal spacing */
    return rint(x / ulp) * ulp;           /* rint: ties to even in the default mode */
}

static uint16_t ref_bf16_bits(double x) { /* x already a bf16 value */
    float f = (float)x;
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (uint16_t)(u >> 16);
}

static double ref_bf16_value(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint64_t rng_next(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

static double rng_uniform(uint64_t *s) { return (double)rng_next(s) / 2147483648.0; }

/* A bf16 value of mixed sign and magnitude (2^-6 .. 2^5), so sums round often. */
static uint16_t random_bf16(uint64_t *s) {
    double v = (rng_uniform(s) - 0.5) * ldexp(1.0, (int)(rng_next(s) % 12) - 6);
    return ref_bf16_bits(ref_round_bf16(v));
}

/* The ring chunk of element i when count elements are split over n ranks. */
static int32_t ref_chunk_of(uint64_t i, uint64_t count, int32_t n) {
    for (int32_t c = 0; c < n; c++)
        if (i >= count * (uint64_t)c / (uint64_t)n && i < count * (uint64_t)(c + 1) / (uint64_t)n)
            return c;
    return -1;
}

/* Sequential bf16 adds in ring order for chunk c: start with rank c+1's value, add ranks
 * c+2, ..., c, rounding after each add. vals[r] is rank r's contribution. */
static double ref_ring_bf16(const double *vals, int32_t n, int32_t c) {
    double acc = vals[(c + 1) % n];
    for (int32_t k = 1; k < n; k++) acc = ref_round_bf16(acc + vals[(c + 1 + k) % n]);
    return acc;
}

static double ref_ring_f32(const double *vals, int32_t n, int32_t c) {
    float acc = (float)vals[(c + 1) % n];
    for (int32_t k = 1; k < n; k++) acc = acc + (float)vals[(c + 1 + k) % n];
    return acc;
}

/* Heap-ordered binary tree: node r = x_r + tree(2r+1) + tree(2r+2), rounding each add. */
static double ref_tree_bf16(const double *vals, int32_t n, int32_t r) {
    double acc = vals[r];
    for (int32_t ch = 2 * r + 1; ch <= 2 * r + 2 && ch < n; ch++)
        acc = ref_round_bf16(acc + ref_tree_bf16(vals, n, ch));
    return acc;
}

/* ---------------------------------------------------------------------------------------
 * bf16 all-reduce / reduce-scatter vs the emulation
 * ------------------------------------------------------------------------------------- */

typedef struct reduce_case {
    uint64_t   count;     /* per-call count */
    uint16_t **send;      /* (n) rank buffers */
    uint16_t **recv;      /* (n) */
    int32_t    in_place;  /* all_reduce with recv == send */
    int32_t    dtype;
} reduce_case;

static void job_all_reduce(rank_job *job) {
    reduce_case *rc = job->arg;
    void *recv = rc->in_place ? (void *)rc->send[job->rank] : (void *)rc->recv[job->rank];
    job_note(job, job->w->vt->all_reduce(job_comm(job), rc->send[job->rank], recv, rc->count,
                                         rc->dtype, CT_REDUCE_SUM, NULL, &job->err));
}

static void job_reduce_scatter(rank_job *job) {
    reduce_case *rc = job->arg;
    job_note(job, job->w->vt->reduce_scatter(job_comm(job), rc->send[job->rank],
                                             rc->recv[job->rank], rc->count, rc->dtype,
                                             CT_REDUCE_SUM, NULL, &job->err));
}

/* Fill n rank buffers of len bf16 values; returns 0 on allocation failure. */
static int make_buffers(reduce_case *c, int32_t n, uint64_t send_len, uint64_t recv_len,
                        uint64_t seed) {
    c->send = calloc((size_t)n, sizeof *c->send);
    c->recv = calloc((size_t)n, sizeof *c->recv);
    if (!c->send || !c->recv) return 0;
    uint64_t s = seed;
    for (int32_t r = 0; r < n; r++) {
        c->send[r] = malloc((send_len + 1) * sizeof(uint16_t));
        c->recv[r] = malloc((recv_len + 1) * sizeof(uint16_t));
        if (!c->send[r] || !c->recv[r]) return 0;
        for (uint64_t i = 0; i < send_len; i++) c->send[r][i] = random_bf16(&s);
        for (uint64_t i = 0; i < recv_len; i++) c->recv[r][i] = 0xffff;
    }
    return 1;
}

static void free_buffers(reduce_case *c, int32_t n) {
    for (int32_t r = 0; c->send && r < n; r++) free(c->send[r]);
    for (int32_t r = 0; c->recv && r < n; r++) free(c->recv[r]);
    free(c->send);
    free(c->recv);
}

/* All-reduce of bf16 over n ranks (count elements, optionally in place): every rank's result
 * equals the ring emulation bit for bit. Returns how many elements differ from a sum rounded
 * only once at the end (to show the data exercises the per-hop rounding). */
static int check_ring_all_reduce_bf16(int32_t n, uint64_t count, int32_t in_place,
                                      uint64_t seed) {
    world_run w;
    reduce_case c = {.count = count, .in_place = in_place, .dtype = CT_DTYPE_BF16};
    int differs_from_once = 0;
    rank_job *jobs = calloc((size_t)n, sizeof *jobs);
    double *expect = calloc(count + 1, sizeof *expect);
    double vals[MAX_RANKS];
    if (!jobs || !expect || !make_buffers(&c, n, count, count, seed)) {
        ct_test_fail(__FILE__, __LINE__, "out of memory");
        goto out_free;
    }
    for (uint64_t i = 0; i < count; i++) {
        double exact = 0;
        for (int32_t r = 0; r < n; r++) exact += vals[r] = ref_bf16_value(c.send[r][i]);
        expect[i] = ref_ring_bf16(vals, n, ref_chunk_of(i, count, n));
        differs_from_once += expect[i] != ref_round_bf16(exact);
    }
    if (!open_even(&w, n, "[comm]\nalgo = ring\ntimeout_s = 20\n")) goto out_close;
    world_run_all(&w, job_all_reduce, &c, jobs);
    check_all_ok(jobs, n);
    int bad = 0;
    for (int32_t r = 0; r < n && bad < 3; r++) {
        const uint16_t *got = in_place ? c.send[r] : c.recv[r];
        for (uint64_t i = 0; i < count && bad < 3; i++) {
            if (got[i] == ref_bf16_bits(expect[i])) continue;
            bad++;
            ct_test_fail(__FILE__, __LINE__, "N=%d count=%llu%s rank %d element %llu: expected "
                         "%.9g (0x%04x), got %.9g (0x%04x)", (int)n, (unsigned long long)count,
                         in_place ? " in place" : "", (int)r, (unsigned long long)i, expect[i],
                         ref_bf16_bits(expect[i]), ref_bf16_value(got[i]), got[i]);
        }
    }
out_close:
    world_close(&w);
out_free:
    free_buffers(&c, n);
    free(jobs);
    free(expect);
    return differs_from_once;
}

CT_TEST(threads_ring_all_reduce_bf16_equals_sequential_ring_emulation_bit_for_bit) {
    static const int32_t sizes[] = {2, 3, 4, 8, 64};
    int differs = 0;
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        int32_t n = sizes[k];
        differs += check_ring_all_reduce_bf16(n, (uint64_t)(7 * n + 3), 0, 11 + (uint64_t)n);
        differs += check_ring_all_reduce_bf16(n, 5, 0, 99 + (uint64_t)n); /* fewer than N */
    }
    differs += check_ring_all_reduce_bf16(8, 1000, 1, 7); /* in place, several blocks */
    /* the data must make per-hop rounding visible, or the test proves little */
    CT_CHECK_MSG(differs > 50, "only %d elements differ from a once-rounded sum", differs);
}

static void check_ring_reduce_scatter_bf16(int32_t n, uint64_t count, uint64_t seed) {
    world_run w;
    reduce_case c = {.count = count, .dtype = CT_DTYPE_BF16};
    rank_job *jobs = calloc((size_t)n, sizeof *jobs);
    double vals[MAX_RANKS];
    if (!jobs || !make_buffers(&c, n, count * (uint64_t)n, count, seed)) {
        ct_test_fail(__FILE__, __LINE__, "out of memory");
        goto out_free;
    }
    if (!open_even(&w, n, "[comm]\nalgo = ring\ntimeout_s = 20\n")) goto out_close;
    world_run_all(&w, job_reduce_scatter, &c, jobs);
    check_all_ok(jobs, n);
    int bad = 0;
    for (int32_t r = 0; r < n && bad < 3; r++) {
        for (uint64_t i = 0; i < count && bad < 3; i++) {
            for (int32_t q = 0; q < n; q++)
                vals[q] = ref_bf16_value(c.send[q][(uint64_t)r * count + i]);
            double e = ref_ring_bf16(vals, n, r); /* chunk r ends at its owner, rank r */
            if (c.recv[r][i] == ref_bf16_bits(e)) continue;
            bad++;
            ct_test_fail(__FILE__, __LINE__, "N=%d count=%llu rank %d element %llu: expected "
                         "%.9g, got %.9g", (int)n, (unsigned long long)count, (int)r,
                         (unsigned long long)i, e, ref_bf16_value(c.recv[r][i]));
        }
    }
out_close:
    world_close(&w);
out_free:
    free_buffers(&c, n);
    free(jobs);
}

CT_TEST(threads_ring_reduce_scatter_bf16_equals_sequential_ring_emulation_bit_for_bit) {
    static const int32_t sizes[] = {2, 3, 4, 8, 64};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        check_ring_reduce_scatter_bf16(sizes[k], 13, 5 + (uint64_t)k);
        check_ring_reduce_scatter_bf16(sizes[k], 1, 50 + (uint64_t)k);
    }
    check_ring_reduce_scatter_bf16(5, 700, 3); /* several blocks of the engine's loop */
}

/* ---------------------------------------------------------------------------------------
 * f32 in ring order, tree order, f64 / i32 sums, max / min
 * ------------------------------------------------------------------------------------- */

typedef struct typed_case {
    uint64_t count;
    int32_t  dtype, op;
    void    *send[MAX_RANKS];
    void    *recv[MAX_RANKS];
} typed_case;

static void job_typed_all_reduce(rank_job *job) {
    typed_case *t = job->arg;
    job_note(job, job->w->vt->all_reduce(job_comm(job), t->send[job->rank], t->recv[job->rank],
                                         t->count, t->dtype, t->op, NULL, &job->err));
}

CT_TEST(threads_ring_all_reduce_f32_adds_in_ring_order) {
    enum { N = 6, COUNT = 301 };
    static float send[N][COUNT], recv[N][COUNT];
    typed_case t = {.count = COUNT, .dtype = CT_DTYPE_F32, .op = CT_REDUCE_SUM};
    uint64_t s = 42;
    for (int r = 0; r < N; r++) {
        for (int i = 0; i < COUNT; i++) /* magnitudes 2^-12 .. 2^12: f32 order matters */
            send[r][i] = (float)((rng_uniform(&s) - 0.3) * ldexp(1.0, (int)(rng_next(&s) % 25) - 12));
        t.send[r] = send[r];
        t.recv[r] = recv[r];
    }
    world_run w;
    rank_job jobs[N];
    if (open_even(&w, N, "[comm]\nalgo = ring\n")) {
        world_run_all(&w, job_typed_all_reduce, &t, jobs);
        check_all_ok(jobs, N);
        int bad = 0, order_matters = 0;
        for (int i = 0; i < COUNT; i++) {
            double vals[N];
            float forward = 0;
            for (int r = 0; r < N; r++) forward += (float)(vals[r] = send[r][i]);
            double e = ref_ring_f32(vals, N, ref_chunk_of((uint64_t)i, COUNT, N));
            order_matters += (float)e != forward;
            for (int r = 0; r < N && bad < 3; r++)
                if (recv[r][i] != (float)e) {
                    bad++;
                    CT_CHECK_CLOSE(recv[r][i], e, 0, 0);
                }
        }
        CT_CHECK_MSG(order_matters > 5, "only %d elements depend on the order", order_matters);
    }
    world_close(&w);
}

static void job_tree_bf16(rank_job *job) { job_typed_all_reduce(job); }

CT_TEST(threads_tree_all_reduce_bf16_equals_heap_tree_emulation_and_differs_from_ring) {
    enum { N = 8, COUNT = 500 };
    static uint16_t send[N][COUNT], recv[N][COUNT];
    typed_case t = {.count = COUNT, .dtype = CT_DTYPE_BF16, .op = CT_REDUCE_SUM};
    uint64_t s = 77;
    for (int r = 0; r < N; r++) {
        for (int i = 0; i < COUNT; i++) send[r][i] = random_bf16(&s);
        t.send[r] = send[r];
        t.recv[r] = recv[r];
    }
    world_run w;
    rank_job jobs[N];
    if (open_even(&w, N, "[comm]\nalgo = tree\n")) {
        world_run_all(&w, job_tree_bf16, &t, jobs);
        check_all_ok(jobs, N);
        int bad = 0, differs_from_ring = 0;
        for (int i = 0; i < COUNT; i++) {
            double vals[N];
            for (int r = 0; r < N; r++) vals[r] = ref_bf16_value(send[r][i]);
            double e = ref_tree_bf16(vals, N, 0);
            differs_from_ring += e != ref_ring_bf16(vals, N, ref_chunk_of((uint64_t)i, COUNT, N));
            for (int r = 0; r < N && bad < 3; r++)
                if (recv[r][i] != ref_bf16_bits(e)) {
                    bad++;
                    CT_CHECK_CLOSE(ref_bf16_value(recv[r][i]), e, 0, 0);
                }
        }
        CT_CHECK_MSG(differs_from_ring > 20, "tree equals ring on all but %d elements",
                     differs_from_ring);
    }
    world_close(&w);
}

CT_TEST(threads_all_reduce_f64_i32_sums_and_bf16_f32_max_min_are_exact) {
    enum { N = 5, COUNT = 37 };
    static double sd[N][COUNT], rd[N][COUNT];
    static int32_t si[N][COUNT], ri[N][COUNT];
    static uint16_t sb[N][COUNT], rb[N][COUNT];
    static float sf[N][COUNT], rf[N][COUNT];
    uint64_t s = 5;
    for (int r = 0; r < N; r++)
        for (int i = 0; i < COUNT; i++) {
            sd[r][i] = (double)(int)(rng_next(&s) % 2001) - 1000.0; /* integers: exact sums */
            si[r][i] = (int32_t)(rng_next(&s) % 2000001) - 1000000;
            sb[r][i] = random_bf16(&s);
            sf[r][i] = (float)(rng_uniform(&s) - 0.5);
        }
    si[1][0] = 2147483647; /* wraps: 2^31-1 + others, as int32 adds modulo 2^32 do */
    world_run w;
    rank_job jobs[N];
    if (open_even(&w, N, "[comm]\n")) {
        typed_case t = {.count = COUNT};
        struct { int32_t dtype, op; } runs[] = {
            {CT_DTYPE_F64, CT_REDUCE_SUM}, {CT_DTYPE_I32, CT_REDUCE_SUM},
            {CT_DTYPE_BF16, CT_REDUCE_MAX}, {CT_DTYPE_F32, CT_REDUCE_MIN},
        };
        for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
            t.dtype = runs[k].dtype;
            t.op = runs[k].op;
            for (int r = 0; r < N; r++) {
                t.send[r] = t.dtype == CT_DTYPE_F64 ? (void *)sd[r] : t.dtype == CT_DTYPE_I32 ?
                            (void *)si[r] : t.dtype == CT_DTYPE_BF16 ? (void *)sb[r] : (void *)sf[r];
                t.recv[r] = t.dtype == CT_DTYPE_F64 ? (void *)rd[r] : t.dtype == CT_DTYPE_I32 ?
                            (void *)ri[r] : t.dtype == CT_DTYPE_BF16 ? (void *)rb[r] : (void *)rf[r];
            }
            world_run_all(&w, job_typed_all_reduce, &t, jobs);
            check_all_ok(jobs, N);
        }
        for (int i = 0; i < COUNT; i++) {
            double dsum = 0, bmax = -INFINITY, fmin = INFINITY;
            uint32_t isum = 0;
            for (int r = 0; r < N; r++) {
                dsum += sd[r][i];
                isum += (uint32_t)si[r][i];
                bmax = fmax(bmax, ref_bf16_value(sb[r][i]));
                fmin = fmin < sf[r][i] ? fmin : sf[r][i];
            }
            for (int r = 0; r < N; r++) {
                CT_CHECK_CLOSE(rd[r][i], dsum, 0, 0);
                CT_CHECK_INT((uint32_t)ri[r][i], isum);
                CT_CHECK_CLOSE(ref_bf16_value(rb[r][i]), bmax, 0, 0);
                CT_CHECK_CLOSE(rf[r][i], fmin, 0, 0);
            }
        }
    }
    world_close(&w);
}

/* ---------------------------------------------------------------------------------------
 * error growth with N (the reason this engine exists)
 * ------------------------------------------------------------------------------------- */

typedef struct growth_case {
    uint64_t  count;
    uint16_t *send[MAX_RANKS];
    uint16_t *recv[MAX_RANKS];
} growth_case;

static void job_growth(rank_job *job) {
    growth_case *g = job->arg;
    job_note(job, job->w->vt->all_reduce(job_comm(job), g->send[job->rank], g->recv[job->rank],
                                         g->count, CT_DTYPE_BF16, CT_REDUCE_SUM, NULL,
                                         &job->err));
}

/* Mean over elements of |bf16 all-reduce - fp64 sum| / fp64 sum, positive data in [0.5, 1). */
static double mean_rel_error(int32_t n, const char *ini, uint64_t seed) {
    enum { COUNT = 4096 };
    growth_case g = {.count = COUNT};
    double mean = -1;
    world_run w;
    rank_job *jobs = calloc((size_t)n, sizeof *jobs);
    uint64_t s = seed;
    for (int32_t r = 0; r < n; r++) {
        g.send[r] = malloc(COUNT * sizeof(uint16_t));
        g.recv[r] = malloc(COUNT * sizeof(uint16_t));
        if (!g.send[r] || !g.recv[r]) goto out_free;
        for (int i = 0; i < COUNT; i++)
            g.send[r][i] = ref_bf16_bits(ref_round_bf16(0.5 + 0.5 * rng_uniform(&s)));
    }
    if (!jobs || !open_even(&w, n, ini)) goto out_close;
    world_run_all(&w, job_growth, &g, jobs);
    check_all_ok(jobs, n);
    double sum_err = 0;
    for (int i = 0; i < COUNT; i++) {
        double exact = 0;
        for (int32_t r = 0; r < n; r++) exact += ref_bf16_value(g.send[r][i]);
        sum_err += fabs(ref_bf16_value(g.recv[0][i]) - exact) / exact;
    }
    mean = sum_err / COUNT;
out_close:
    world_close(&w);
out_free:
    for (int32_t r = 0; r < n; r++) {
        free(g.send[r]);
        free(g.recv[r]);
    }
    free(jobs);
    return mean;
}

CT_TEST(threads_bf16_ring_error_against_fp64_grows_with_world_size_and_tree_grows_less) {
    const char *ring = "[comm]\nalgo = ring\n", *tree = "[comm]\nalgo = tree\n";
    double e2 = mean_rel_error(2, ring, 1), e4 = mean_rel_error(4, ring, 2);
    double e32 = mean_rel_error(32, ring, 3), t32 = mean_rel_error(32, tree, 3);
    double d32 = mean_rel_error(32, "[comm]\nalgo = dbtree\ngpus_per_node = 1\n", 3);
    double h32 = mean_rel_error(32, "[comm]\nalgo = hier\ngpus_per_node = 8\n", 3);
    printf("  bf16 ring mean relative error vs fp64: N=2 %.3g, N=4 %.3g, N=32 %.3g; "
           "tree N=32 %.3g; dbtree (1 rank/node) N=32 %.3g; hier (8 ranks/node) N=32 %.3g\n",
           e2, e4, e32, t32, d32, h32);
    CT_CHECK_MSG(d32 < 0.6 * e32, "dbtree error %.3g not below 0.6 x the ring's %.3g", d32, e32);
    /* One rounding of a sum in [1, 2) costs about 2^-10 relative on average. With N=2 only the
     * final result is rounded; the ring rounds N-1 times and the partial sum errors add up. */
    CT_CHECK_MSG(e2 > 0 && e2 < 2e-3, "N=2 error %.3g is not one rounding", e2);
    CT_CHECK_MSG(e32 > 1.5 * e4, "N=32 error %.3g not above 1.5 x N=4 error %.3g", e32, e4);
    CT_CHECK_MSG(t32 < 0.5 * e32, "tree error %.3g not below half the ring's %.3g", t32, e32);
}

/* ---------------------------------------------------------------------------------------
 * copies: all_gather, all_to_all, broadcast are exact (bit patterns, NaN payloads included)
 * ------------------------------------------------------------------------------------- */

typedef struct copy_case {
    uint64_t count;
    uint16_t send[8][8 * 5];
    uint16_t recv[8][8 * 5];
    uint16_t bcast[8][5];
    int32_t  root;
} copy_case;

static void job_copies(rank_job *job) {
    copy_case *c = job->arg;
    const ct_comm_vtable *vt = job->w->vt;
    void *self = job_comm(job);
    int32_t r = job->rank, n = job->w->n;
    job_note(job, vt->all_gather(self, c->send[r], c->recv[r], c->count, CT_DTYPE_BF16, NULL,
                                 &job->err));
    if (job->rc) return;
    for (int32_t q = 0; q < n; q++) /* check now: the all_to_all below reuses recv */
        if (memcmp(&c->recv[r][(uint64_t)q * c->count], c->send[q], c->count * 2)) {
            job->rc = CT_ERR_INTERNAL;
            snprintf(job->err.message, sizeof job->err.message, "all_gather block %d wrong",
                     (int)q);
            return;
        }
    ct_request *req = NULL;
    job_note(job, vt->all_to_all(self, c->send[r], c->recv[r], c->count, CT_DTYPE_BF16, &req,
                                 &job->err));
    job_note(job, vt->wait(self, req, &job->err));
    job_note(job, vt->broadcast(self, c->bcast[r], c->count, CT_DTYPE_BF16, c->root, &job->err));
    job_note(job, vt->barrier(self, &job->err));
}

CT_TEST(threads_all_gather_all_to_all_broadcast_copy_bits_exactly) {
    static const int32_t sizes[] = {3, 8};
    for (size_t k = 0; k < 2; k++) {
        int32_t n = sizes[k];
        static copy_case c;
        memset(&c, 0, sizeof c);
        c.count = 5;
        c.root = n - 2;
        for (int32_t r = 0; r < n; r++) {
            for (int i = 0; i < n * 5; i++) c.send[r][i] = (uint16_t)(0x1000 * r + 0x10 * i + 1);
            c.send[r][0] = (uint16_t)(0x7fc1 + r); /* NaN payloads must survive */
            for (int i = 0; i < 5; i++) c.bcast[r][i] = (uint16_t)(r * 100 + i);
        }
        world_run w;
        rank_job jobs[8];
        if (open_even(&w, n, "[comm]\n")) {
            world_run_all(&w, job_copies, &c, jobs);
            check_all_ok(jobs, n);
            for (int32_t j = 0; j < n; j++)
                for (int32_t i = 0; i < n; i++) /* block i of rank j's recv = block j of rank i */
                    for (int e = 0; e < 5; e++)
                        CT_CHECK_INT(c.recv[j][i * 5 + e], c.send[i][j * 5 + e]);
            for (int32_t r = 0; r < n; r++)
                for (int e = 0; e < 5; e++) CT_CHECK_INT(c.bcast[r][e], c.root * 100 + e);
        }
        world_close(&w);
    }
}

/* ---------------------------------------------------------------------------------------
 * stochastic rounding: all_reduce_sr / reduce_scatter_sr (ABI 1.5)
 * ------------------------------------------------------------------------------------- */

/* x (finite f32) rounded to bf16 stochastically with 16 random bits u: the dropped low half of
 * the bit pattern plus u carries into the kept half with probability (low half) / 2^16. */
static double ref_round_bf16_sr(float x, uint32_t u) {
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    uint32_t kept = bits >> 16, dropped = bits & 0xffffu;
    if (dropped + u >= 0x10000u) kept++;
    return ref_bf16_value((uint16_t)kept);
}

/* The ring of chunk c for element i (its index in the send buffer) with combine k rounded by
 * the top 16 bits of ct_hash64(stream, i*n + k), the contract in ctrain.h. */
static double ref_ring_sr(const double *vals, int32_t n, int32_t c, uint64_t stream,
                          uint64_t i) {
    double acc = vals[(c + 1) % n];
    for (int32_t k = 1; k < n; k++) {
        uint32_t u = (uint32_t)(ct_hash64(stream, i * (uint64_t)n + (uint64_t)k) >> 48);
        acc = ref_round_bf16_sr((float)acc + (float)vals[(c + 1 + k) % n], u);
    }
    return acc;
}

typedef struct sr_case {
    reduce_case c;
    uint64_t    stream;
    int32_t     all_reduce; /* 1: all_reduce_sr, 0: reduce_scatter_sr */
} sr_case;

static void job_sr(rank_job *job) {
    sr_case *sc = job->arg;
    const ct_comm_vtable *vt = job->w->vt;
    int32_t r = job->rank;
    if (sc->all_reduce)
        job_note(job, vt->all_reduce_sr(job_comm(job), sc->c.send[r], sc->c.recv[r], sc->c.count,
                                        sc->c.dtype, sc->stream, &job->err));
    else
        job_note(job, vt->reduce_scatter_sr(job_comm(job), sc->c.send[r], sc->c.recv[r],
                                            sc->c.count, sc->c.dtype, sc->stream, &job->err));
}

/* One _sr call over n ranks of random bf16 data with [comm] `ini`; sc->c.recv holds the
 * results. 0 when it could not run (the test has failed). */
static int run_sr(sr_case *sc, int32_t n, const char *ini, uint64_t count, uint64_t seed) {
    uint64_t send_len = sc->all_reduce ? count : count * (uint64_t)n;
    sc->c.count = count;
    sc->c.dtype = CT_DTYPE_BF16;
    if (!make_buffers(&sc->c, n, send_len, send_len, seed)) {
        ct_test_fail(__FILE__, __LINE__, "out of memory");
        return 0;
    }
    world_run w;
    rank_job jobs[MAX_RANKS];
    int ok = open_even(&w, n, ini);
    if (ok) {
        world_run_all(&w, job_sr, sc, jobs);
        check_all_ok(jobs, n);
        for (int32_t r = 0; r < n; r++) ok = ok && jobs[r].rc == CT_OK;
    }
    world_close(&w);
    return ok;
}

/* The ring (one channel) with stochastic rounding equals the written-out ring with the
 * contract's random bits at every hop, bit for bit, on every rank; returns how many results
 * differ from the round-to-nearest ring (the rounding must have done something). */
static int check_sr_ring(int32_t n, uint64_t count, int32_t all_reduce, uint64_t seed) {
    sr_case sc = {.stream = 0x5eed0000u + seed, .all_reduce = all_reduce};
    int differs_from_rn = 0, bad = 0;
    double vals[MAX_RANKS];
    if (run_sr(&sc, n, "[comm]\nalgo = ring\ntimeout_s = 20\n", count, seed)) {
        for (int32_t r = 0; r < n; r++) {
            for (uint64_t j = 0; j < count && bad < 3; j++) { /* count results per rank */
                uint64_t i = all_reduce ? j : (uint64_t)r * count + j; /* index into send */
                int32_t c = all_reduce ? ref_chunk_of(i, count, n) : r;
                for (int32_t q = 0; q < n; q++) vals[q] = ref_bf16_value(sc.c.send[q][i]);
                double want = ref_ring_sr(vals, n, c, sc.stream, i);
                differs_from_rn += want != ref_ring_bf16(vals, n, c);
                if (sc.c.recv[r][j] == ref_bf16_bits(want)) continue;
                bad++;
                ct_test_fail(__FILE__, __LINE__, "%s_sr N=%d count=%llu rank %d element %llu: "
                             "expected %.9g, got %.9g", all_reduce ? "all_reduce" :
                             "reduce_scatter", (int)n, (unsigned long long)count, (int)r,
                             (unsigned long long)j, want, ref_bf16_value(sc.c.recv[r][j]));
            }
        }
    }
    free_buffers(&sc.c, n);
    return differs_from_rn;
}

CT_TEST(threads_sr_ring_equals_the_written_out_stochastic_ring_bit_for_bit) {
    static const int32_t sizes[] = {2, 3, 5, 8, 33};
    int differs = 0;
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        int32_t n = sizes[k];
        for (int32_t ar = 0; ar <= 1; ar++) {
            differs += check_sr_ring(n, (uint64_t)(7 * n + 3), ar, 21 + (uint64_t)n);
            differs += check_sr_ring(n, 1, ar, 40 + (uint64_t)n); /* fewer elements than N */
        }
    }
    differs += check_sr_ring(5, 700, 1, 9); /* several blocks of the engine's loop */
    differs += check_sr_ring(3, 600, 0, 10);
    CT_CHECK_MSG(differs > 50, "only %d results differ from the round-to-nearest ring", differs);
}

/* Every order ([comm] algo, channels, nodes), n = 8 ranks: rank 0 holds 1.0 and the others
 * 2^-10 (an eighth of an ulp of 1 in bf16), so round to nearest loses the small addends once
 * they meet the 1.0, while stochastic rounding keeps the mean; small integers are exact sums
 * whatever the rounding, which checks the order's addressing; all ranks get the same bits. */
CT_TEST(threads_sr_every_order_is_unbiased_exact_on_integers_and_the_same_on_every_rank) {
    static const char *const inis[] = {
        "[comm]\nalgo = ring\nchannels = 3\ngpus_per_node = 4\n",
        "[comm]\nalgo = tree\n",
        "[comm]\nalgo = dbtree\ngpus_per_node = 2\n",
        "[comm]\nalgo = hier\ngpus_per_node = 4\n",
    };
    enum { N = 8 };
    const uint64_t count = 6000;
    for (size_t o = 0; o < sizeof inis / sizeof *inis; o++) {
        sr_case sw = {.stream = 99 + o, .all_reduce = 1};
        if (!make_buffers(&sw.c, N, count, count, 2)) {
            ct_test_fail(__FILE__, __LINE__, "out of memory");
            free_buffers(&sw.c, N);
            break;
        }
        for (int32_t r = 0; r < N; r++)
            for (uint64_t i = 0; i < count; i++)
                sw.c.send[r][i] = ref_bf16_bits(r == 0 ? 1.0 : ldexp(1.0, -10));
        sw.c.count = count;
        sw.c.dtype = CT_DTYPE_BF16;
        world_run w;
        rank_job jobs[N];
        if (open_even(&w, N, inis[o])) {
            world_run_all(&w, job_sr, &sw, jobs);
            check_all_ok(jobs, N);
            double mean = 0;
            int64_t differ = 0;
            for (uint64_t i = 0; i < count; i++) mean += ref_bf16_value(sw.c.recv[0][i]);
            mean /= (double)count;
            for (int32_t r = 1; r < N; r++)
                differ += memcmp(sw.c.recv[r], sw.c.recv[0], count * sizeof(uint16_t)) != 0;
            /* N-1 roundings of variance <= (ulp of 2 / 2)^2 = 2^-14 each: 5 standard errors */
            double tol = 5.0 * sqrt((N - 1) * ldexp(1.0, -14) / (double)count);
            CT_CHECK_MSG(fabs(mean - (1.0 + (N - 1) * ldexp(1.0, -10))) < tol,
                         "%s: mean %.7f, exact %.7f, tolerance %.2g", inis[o], mean,
                         1.0 + (N - 1) * ldexp(1.0, -10), tol);
            CT_CHECK_INT(differ, 0);
            /* small integers: every partial sum is a bf16 value */
            for (int32_t r = 0; r < N; r++)
                for (uint64_t i = 0; i < count; i++)
                    sw.c.send[r][i] =
                        ref_bf16_bits((double)((int64_t)((i * 5 + (uint64_t)r) % 9) - 4));
            world_run_all(&w, job_sr, &sw, jobs);
            check_all_ok(jobs, N);
            int64_t wrong = 0;
            for (uint64_t i = 0; i < count; i++) {
                double want = 0;
                for (int32_t r = 0; r < N; r++) want += ref_bf16_value(sw.c.send[r][i]);
                for (int32_t r = 0; r < N; r++) wrong += ref_bf16_value(sw.c.recv[r][i]) != want;
            }
            CT_CHECK_MSG(wrong == 0, "%s: %lld wrong integer sums", inis[o], (long long)wrong);
        }
        world_close(&w);
        free_buffers(&sw.c, N);
    }
}

static void job_sr_f32(rank_job *job) {
    float x[4] = {1, 2, 3, 4}, y[4];
    job_note(job, job->w->vt->all_reduce_sr(job_comm(job), x, y, 4, CT_DTYPE_F32, 5, &job->err));
}

CT_TEST(threads_sr_of_another_dtype_fails_on_every_rank_saying_bf16_only) {
    enum { N = 3 };
    world_run w;
    rank_job jobs[N];
    if (open_even(&w, N, "[comm]\ntimeout_s = 20\n")) {
        world_run_all(&w, job_sr_f32, NULL, jobs);
        for (int32_t r = 0; r < N; r++) {
            CT_CHECK_INT(jobs[r].rc, CT_ERR_UNSUPPORTED);
            CT_CHECK_MSG(strstr(jobs[r].err.message, "bf16 sums only") != NULL,
                         "rank %d: %s", (int)r, jobs[r].err.message);
        }
    }
    world_close(&w);
}

/* ---------------------------------------------------------------------------------------
 * point to point, requests
 * ------------------------------------------------------------------------------------- */

static void job_ring_messages(rank_job *job) {
    int32_t *got = job->arg;
    const ct_comm_vtable *vt = job->w->vt;
    int32_t r = job->rank, n = job->w->n;
    int32_t a[2] = {r, 100 + r}, b[2] = {1000 + r, 2000 + r}, in_a[2] = {0}, in_b[2] = {0};
    /* send tag 2 first, receive tag 1 first: matching is by tag, not arrival */
    job_note(job, vt->send(job_comm(job), b, 2, CT_DTYPE_I32, (r + 1) % n, 2, &job->err));
    job_note(job, vt->send(job_comm(job), a, 2, CT_DTYPE_I32, (r + 1) % n, 1, &job->err));
    job_note(job, vt->recv(job_comm(job), in_a, 2, CT_DTYPE_I32, (r + n - 1) % n, 1, &job->err));
    job_note(job, vt->recv(job_comm(job), in_b, 2, CT_DTYPE_I32, (r + n - 1) % n, 2, &job->err));
    memcpy(&got[4 * r], in_a, sizeof in_a);
    memcpy(&got[4 * r + 2], in_b, sizeof in_b);
}

CT_TEST(threads_send_recv_match_by_peer_and_tag) {
    enum { N = 4 };
    int32_t got[4 * N] = {0};
    world_run w;
    rank_job jobs[N];
    if (open_even(&w, N, "[comm]\n")) {
        world_run_all(&w, job_ring_messages, got, jobs);
        check_all_ok(jobs, N);
        for (int r = 0; r < N; r++) {
            int from = (r + N - 1) % N;
            CT_CHECK_INT(got[4 * r], from);
            CT_CHECK_INT(got[4 * r + 1], 100 + from);
            CT_CHECK_INT(got[4 * r + 2], 1000 + from);
            CT_CHECK_INT(got[4 * r + 3], 2000 + from);
        }
    }
    world_close(&w);
}

static void job_async_twice(rank_job *job) {
    float *buf = job->arg;
    const ct_comm_vtable *vt = job->w->vt;
    ct_request *req = NULL;
    float x = (float)(job->rank + 1);
    job_note(job, vt->all_reduce(job_comm(job), &x, &buf[job->rank], 1, CT_DTYPE_F32,
                                 CT_REDUCE_SUM, &req, &job->err));
    job_note(job, vt->wait(job_comm(job), req, &job->err));
    ct_error again = {.struct_size = sizeof again};
    if (vt->wait(job_comm(job), req, &again) == CT_OK) { /* a second wait is a caller bug */
        job->rc = CT_ERR_INTERNAL;
        snprintf(job->err.message, sizeof job->err.message, "second wait succeeded");
    }
}

CT_TEST(threads_async_all_reduce_completes_by_wait_and_a_second_wait_is_an_error) {
    enum { N = 3 };
    float buf[N] = {0};
    world_run w;
    rank_job jobs[N];
    if (open_even(&w, N, "[comm]\n")) {
        world_run_all(&w, job_async_twice, buf, jobs);
        check_all_ok(jobs, N);
        for (int r = 0; r < N; r++) CT_CHECK_CLOSE(buf[r], 6.0, 0, 0);
    }
    world_close(&w);
}

/* ---------------------------------------------------------------------------------------
 * failures: abort, a missing rank, mismatched calls
 * ------------------------------------------------------------------------------------- */

static void job_abort_rank2(rank_job *job) {
    const ct_comm_vtable *vt = job->w->vt;
    float x = 1, y = 0;
    if (job->rank == 2) {
        usleep(100 * 1000); /* let the others block in their collective first */
        vt->abort(job_comm(job), "stage block.3: out of memory");
        job_note(job, vt->barrier(job_comm(job), &job->err)); /* must fail too */
        return;
    }
    if (job->rank == 3) { /* blocked in recv from the failing rank */
        job_note(job, vt->recv(job_comm(job), &y, 1, CT_DTYPE_F32, 2, 9, &job->err));
        return;
    }
    job_note(job, vt->all_reduce(job_comm(job), &x, &y, 1, CT_DTYPE_F32, CT_REDUCE_SUM, NULL,
                                 &job->err));
}

CT_TEST(threads_abort_ends_every_blocked_call_with_an_error_naming_the_failed_rank) {
    enum { N = 5 };
    world_run w;
    rank_job jobs[N];
    if (open_even(&w, N, "[comm]\ntimeout_s = 60\n")) { /* far longer: abort must be faster */
        world_run_all(&w, job_abort_rank2, NULL, jobs);
        for (int r = 0; r < N; r++) {
            CT_CHECK_INT(jobs[r].rc, CT_ERR_COMM);
            CT_CHECK_STR_CONTAINS(jobs[r].err.message, "rank 2");
            CT_CHECK_STR_CONTAINS(jobs[r].err.message, "stage block.3: out of memory");
            CT_CHECK_MSG(jobs[r].seconds < 3.0, "rank %d took %.2f s to notice", r,
                         jobs[r].seconds);
        }
    }
    world_close(&w);
}

static void job_rank1_absent(rank_job *job) {
    float x = 1, y = 0;
    if (job->rank == 1) return; /* never joins */
    job_note(job, job->w->vt->all_reduce(job_comm(job), &x, &y, 1, CT_DTYPE_F32, CT_REDUCE_SUM,
                                         NULL, &job->err));
}

CT_TEST(threads_a_rank_that_never_joins_is_named_after_timeout_s) {
    enum { N = 3 };
    world_run w;
    rank_job jobs[N];
    if (open_even(&w, N, "[comm]\ntimeout_s = 0.3\n")) {
        world_run_all(&w, job_rank1_absent, NULL, jobs);
        for (int r = 0; r < N; r += 2) {
            CT_CHECK_INT(jobs[r].rc, CT_ERR_COMM);
            CT_CHECK_STR_CONTAINS(jobs[r].err.message, "rank 1 failed");
            CT_CHECK_STR_CONTAINS(jobs[r].err.message, "all_reduce #1");
            CT_CHECK_MSG(jobs[r].seconds < 2.0, "rank %d waited %.2f s", r, jobs[r].seconds);
        }
    }
    world_close(&w);
}

static void job_mismatch(rank_job *job) {
    const ct_comm_vtable *vt = job->w->vt;
    float x[4] = {1, 2, 3, 4}, y[4];
    if (job->rank == 1)
        job_note(job, vt->all_gather(job_comm(job), x, y, 1, CT_DTYPE_F32, NULL, &job->err));
    else
        job_note(job, vt->all_reduce(job_comm(job), x, y, 1, CT_DTYPE_F32, CT_REDUCE_SUM, NULL,
                                     &job->err));
    ct_error next = {.struct_size = sizeof next}; /* the world is out of step: all later fail */
    if (vt->barrier(job_comm(job), &next) != CT_ERR_COMM) job->rc = CT_ERR_INTERNAL;
}

CT_TEST(threads_ranks_calling_different_collectives_all_fail_naming_the_odd_rank) {
    enum { N = 4 };
    world_run w;
    rank_job jobs[N];
    if (open_even(&w, N, "[comm]\ntimeout_s = 10\n")) {
        world_run_all(&w, job_mismatch, NULL, jobs);
        for (int r = 0; r < N; r++) {
            CT_CHECK_INT(jobs[r].rc, CT_ERR_COMM);
            CT_CHECK_STR_CONTAINS(jobs[r].err.message, "rank 1 called all_gather");
        }
    }
    world_close(&w);
}

CT_TEST(threads_schema_rejects_unknown_algo_and_one_rank_needs_no_world) {
    ct_harness *h = harness_new("[comm]\nalgo = butterfly\n");
    ct_error err = {.struct_size = sizeof err};
    ct_harness_plugin p;
    CT_CHECK_INT(harness_create(h, "comm_threads.so", "comm", &p, &err), CT_ERR_INVALID);
    CT_CHECK_STR_CONTAINS(err.message, "algo");
    harness_free(h);

    h = harness_new("[comm]\n");
    err.code = CT_OK;
    if (harness_create(h, "comm_threads.so", "comm", &p, &err) == CT_OK) {
        const ct_comm_vtable *vt = p.vt;
        float x[3] = {1.5f, -2, 3}, y[3] = {0};
        CT_CHECK_INT(vt->world_size(p.self), 1);
        CT_CHECK_INT(vt->all_reduce(p.self, x, y, 3, CT_DTYPE_F32, CT_REDUCE_SUM, NULL, &err),
                     CT_OK);
        CT_CHECK_CLOSE(y[1], -2.0, 0, 0);
        /* a rank of a bigger world without world_create is a host bug, reported */
        ct_create_args a = harness_args_rank(h, "comm", 1, 4);
        CT_CHECK(vt->create(&a, &err) == NULL);
        CT_CHECK_STR_CONTAINS(err.message, "world_create");
    } else {
        ct_test_fail(__FILE__, __LINE__, "create: %s", err.message);
    }
    harness_free(h);
}

/* ---------------------------------------------------------------------------------------
 * NCCL's orders (docs/collectives.md): ring channels over a cluster layout, NCCL's tree (chain
 * per node + double binary tree across nodes), the hierarchical ring. Each emulation below is
 * written from the documented rules with plain loops over ranks, independently of orders.c
 * (the tree is built from NCCL's *parent* rule, orders.c from the children rule).
 * ------------------------------------------------------------------------------------- */

typedef struct layout {
    int32_t n, channels, g; /* g: gpus per node (resolved, divides n) */
} layout;

/* [begin, end) of piece i of n elements cut into p floor-divided pieces. */
static void ref_piece(uint64_t n, int32_t p, int32_t i, uint64_t *b, uint64_t *e) {
    *b = n * (uint64_t)i / (uint64_t)p;
    *e = n * (uint64_t)(i + 1) / (uint64_t)p;
}

/* Which piece of [0, n) cut into p pieces holds element i; *b is that piece's start. */
static int32_t ref_piece_of(uint64_t i, uint64_t n, int32_t p, uint64_t *b) {
    *b = 0;
    for (int32_t k = 0; k < p; k++) {
        uint64_t pb, pe;
        ref_piece(n, p, k, &pb, &pe);
        if (i >= pb && i < pe) {
            *b = pb;
            return k;
        }
    }
    return -1;
}

/* Ring of channel k written out: nodes in order, inside a node local ranks k, k+1, ... mod g;
 * then rotated so that index 0 is rank 0. */
static void ref_ring_of_channel(const layout *L, int32_t k, int32_t *ring) {
    int32_t tmp[MAX_RANKS], p = 0, pos0 = 0;
    for (int32_t node = 0; node < L->n / L->g; node++)
        for (int32_t j = 0; j < L->g; j++) tmp[p++] = node * L->g + (k + j) % L->g;
    for (int32_t q = 0; q < L->n; q++)
        if (tmp[q] == 0) pos0 = q;
    for (int32_t q = 0; q < L->n; q++) ring[q] = tmp[(pos0 + q) % L->n];
}

/* bf16 ring sum along ring[] from index `first` around (N-1 roundings). */
static double ref_ring_along(const double *vals, const int32_t *ring, int32_t n, int32_t first) {
    double acc = vals[ring[first % n]];
    for (int32_t q = 1; q < n; q++) acc = ref_round_bf16(acc + vals[ring[(first + q) % n]]);
    return acc;
}

/* all_reduce, algo = ring: element i lies in channel part k, chunk u of that part. */
static double ref_channels_ring(const layout *L, const double *vals, uint64_t i, uint64_t count) {
    uint64_t cb, ub;
    int32_t k = ref_piece_of(i, count, L->channels, &cb), ring[MAX_RANKS];
    uint64_t ce = count * (uint64_t)(k + 1) / (uint64_t)L->channels;
    int32_t u = ref_piece_of(i - cb, ce - cb, L->n, &ub);
    ref_ring_of_channel(L, k, ring);
    return ref_ring_along(vals, ring, L->n, u + 1);
}

/* NCCL's binary tree over m nodes, by the parent rule: node x with lowest set bit b has
 * parent (x ^ b) | (b << 1), or x ^ b when that is out of range; node 0 is the root. Tree 1:
 * mirror (m even) or shift by one (m odd). parent[root] = -1; first[x] = 1 when x is its
 * parent's first child (smaller than the parent in the tree's own numbering). */
static void ref_btree_parents(int32_t m, int32_t t, int32_t *parent, int32_t *first) {
    for (int32_t x = 0; x < m; x++) {
        int32_t y = t == 0 ? x : (m % 2 ? (x - 1 + m) % m : m - 1 - x); /* x's btree index */
        int32_t py = -1;
        if (y != 0) {
            int32_t b = y & -y;
            py = (y ^ b) | (b << 1);
            if (py >= m) py = y ^ b;
        }
        first[x] = py >= 0 && y < py;
        parent[x] = py < 0 ? -1 : (t == 0 ? py : (m % 2 ? (py + 1) % m : m - 1 - py));
    }
}

/* value of rank r in the tree of channel k (layout L): x_r, then + each child in NCCL's down
 * order: the next rank of the node's chain, then the child node attached as first child (at
 * the chain's second rank), then the one attached as second child (at the chain's head). */
static double ref_tree_value(const layout *L, int32_t k, const double *vals, int32_t r) {
    int32_t m = L->n / L->g, half = (L->channels + 1) / 2, t = k >= half;
    int32_t rot = (k - (t ? half : 0)) % L->g, parent[MAX_RANKS], first[MAX_RANKS];
    ref_btree_parents(m, t, parent, first);
    int32_t node = r / L->g, pos = (r % L->g - rot + L->g) % L->g;
    int32_t head_local = rot, second_local = (1 % L->g + rot) % L->g;
    double acc = vals[r];
    if (pos + 1 < L->g)
        acc = ref_round_bf16(acc + ref_tree_value(L, k, vals, node * L->g + (pos + 1 + rot) % L->g));
    for (int pass = 0; pass < 2; pass++) /* first children, then second children */
        for (int32_t x = 0; x < m; x++) {
            if (parent[x] != node || first[x] != (pass == 0)) continue;
            int32_t at_local = pass == 0 ? second_local : head_local;
            if (r % L->g != at_local) continue;
            acc = ref_round_bf16(acc + ref_tree_value(L, k, vals, x * L->g + head_local));
        }
    return acc;
}

static double ref_dbtree(const layout *L, const double *vals, uint64_t i, uint64_t count) {
    uint64_t cb;
    int32_t k = ref_piece_of(i, count, L->channels, &cb), m = L->n / L->g;
    int32_t parent[MAX_RANKS], first[MAX_RANKS], half = (L->channels + 1) / 2, t = k >= half;
    ref_btree_parents(m, t, parent, first);
    int32_t root = 0;
    for (int32_t x = 0; x < m; x++)
        if (parent[x] < 0) root = x;
    return ref_tree_value(L, k, vals, root * L->g + (k - (t ? half : 0)) % L->g);
}

/* hier: part j of the channel part (g parts), chunk c of the part (m chunks): inside each node
 * a ring over local ranks j+1, j+2, ..., j; then the nodes' partials c+1, c+2, ..., c. */
static double ref_hier(const layout *L, const double *vals, uint64_t i, uint64_t count) {
    uint64_t cb, pb, ub;
    int32_t k = ref_piece_of(i, count, L->channels, &cb), m = L->n / L->g;
    uint64_t ce = count * (uint64_t)(k + 1) / (uint64_t)L->channels;
    int32_t j = ref_piece_of(i - cb, ce - cb, L->g, &pb);
    uint64_t pe = (ce - cb) * (uint64_t)(j + 1) / (uint64_t)L->g;
    int32_t c = ref_piece_of(i - cb - pb, pe - pb, m, &ub);
    double acc = 0;
    for (int32_t a = 0; a < m; a++) {
        int32_t node = (c + 1 + a) % m;
        double part = vals[node * L->g + (j + 1) % L->g];
        for (int32_t q = 1; q < L->g; q++)
            part = ref_round_bf16(part + vals[node * L->g + (j + 1 + q) % L->g]);
        acc = a ? ref_round_bf16(acc + part) : part;
    }
    return acc;
}

typedef double (*ref_order_fn)(const layout *L, const double *vals, uint64_t i, uint64_t count);

/* All-reduce of bf16 over L->n ranks with [comm] `ini`: every rank's result equals ref bit for
 * bit. *differs_ring counts elements where ref differs from the single-channel flat ring. */
static void check_order_all_reduce(const layout *L, const char *ini, ref_order_fn ref,
                                   uint64_t count, uint64_t seed, int *differs_ring) {
    world_run w;
    int32_t n = L->n;
    reduce_case c = {.count = count, .dtype = CT_DTYPE_BF16};
    rank_job *jobs = calloc((size_t)n, sizeof *jobs);
    double *expect = calloc(count + 1, sizeof *expect), vals[MAX_RANKS];
    if (!jobs || !expect || !make_buffers(&c, n, count, count, seed)) {
        ct_test_fail(__FILE__, __LINE__, "out of memory");
        goto out_free;
    }
    for (uint64_t i = 0; i < count; i++) {
        for (int32_t r = 0; r < n; r++) vals[r] = ref_bf16_value(c.send[r][i]);
        expect[i] = ref(L, vals, i, count);
        if (differs_ring) *differs_ring += expect[i] != ref_ring_bf16(vals, n, ref_chunk_of(i, count, n));
    }
    if (!open_even(&w, n, ini)) goto out_close;
    world_run_all(&w, job_all_reduce, &c, jobs);
    check_all_ok(jobs, n);
    int bad = 0;
    for (int32_t r = 0; r < n && bad < 3; r++)
        for (uint64_t i = 0; i < count && bad < 3; i++) {
            if (c.recv[r][i] == ref_bf16_bits(expect[i])) continue;
            bad++;
            ct_test_fail(__FILE__, __LINE__, "%s N=%d count=%llu rank %d element %llu: expected "
                         "%.9g (0x%04x), got %.9g (0x%04x)", ini, (int)n,
                         (unsigned long long)count, (int)r, (unsigned long long)i, expect[i],
                         ref_bf16_bits(expect[i]), ref_bf16_value(c.recv[r][i]), c.recv[r][i]);
        }
out_close:
    world_close(&w);
out_free:
    free_buffers(&c, n);
    free(jobs);
    free(expect);
}

/* (world size, gpus per node, channels) layouts: non-powers of two, one node, one rank per
 * node, odd and even node counts (tree 1 shifted or mirrored). */
static const int32_t layouts[][3] = {
    {2, 1, 1}, {3, 1, 2}, {4, 2, 2}, {5, 1, 3}, {6, 2, 2}, {6, 3, 4},  {8, 0, 3},
    {8, 4, 2}, {12, 4, 3}, {12, 1, 2}, {14, 1, 2}, {16, 4, 5}, {24, 8, 4}, {13, 1, 1},
};

static void ini_for(char *buf, size_t len, const char *algo, const int32_t *lay) {
    snprintf(buf, len, "[comm]\nalgo = %s\ngpus_per_node = %d\nchannels = %d\ntimeout_s = 20\n",
             algo, (int)lay[1], (int)lay[0 + 2]);
}

static void run_layouts(const char *algo, ref_order_fn ref, int *differs_ring) {
    for (size_t q = 0; q < sizeof layouts / sizeof layouts[0]; q++) {
        const int32_t *lay = layouts[q];
        layout L = {lay[0], lay[2], lay[1] ? lay[1] : lay[0]};
        char ini[160];
        ini_for(ini, sizeof ini, algo, lay);
        uint64_t odd = (uint64_t)(lay[0] * lay[2] * 5 + 7); /* uneven chunks in every channel */
        check_order_all_reduce(&L, ini, ref, odd, 300 + q, differs_ring);
        check_order_all_reduce(&L, ini, ref, 3, 400 + q, NULL); /* fewer elements than ranks */
    }
}

CT_TEST(threads_ring_channels_and_node_layout_equal_the_written_out_rings_bit_for_bit) {
    int differs = 0;
    run_layouts("ring", ref_channels_ring, &differs);
    /* channels and multi-node rings must change which rank starts an element somewhere */
    CT_CHECK_MSG(differs > 50, "channels/layout change only %d elements vs the flat ring",
                 differs);
}

CT_TEST(threads_ring_with_one_channel_equals_the_flat_ring_on_any_node_layout_of_one_rank) {
    /* channels = 1 is today's ring: gpus_per_node = 1 (every rank a node) and 0 (one node)
     * give the same ring 0 -> 1 -> ... -> N-1, and so the same bits */
    static const int32_t sizes[] = {3, 7, 16};
    for (size_t q = 0; q < 3; q++) {
        layout L = {sizes[q], 1, sizes[q]};
        int differs = 0;
        check_order_all_reduce(&L, "[comm]\nalgo = ring\nchannels = 1\ngpus_per_node = 1\n",
                               ref_channels_ring, (uint64_t)(9 * sizes[q] + 4), 7 + q, &differs);
        CT_CHECK_INT(differs, 0);
    }
}

CT_TEST(threads_dbtree_equals_nccl_double_binary_tree_emulation_bit_for_bit) {
    /* the emulation's trees are NCCL's pictures (src/graph/trees.cc): 14 nodes, tree 0 */
    int32_t parent[MAX_RANKS], first[MAX_RANKS];
    ref_btree_parents(14, 0, parent, first);
    static const int32_t p14[14] = {-1, 2, 4, 2, 8, 6, 4, 6, 0, 10, 12, 10, 8, 12};
    for (int x = 0; x < 14; x++) CT_CHECK_INT(parent[x], p14[x]);
    ref_btree_parents(12, 1, parent, first); /* 12 nodes, tree 1 = the mirror */
    static const int32_t p12[12] = {1, 3, 1, 11, 5, 7, 5, 3, 9, 7, 9, -1};
    for (int x = 0; x < 12; x++) CT_CHECK_INT(parent[x], p12[x]);
    ref_btree_parents(13, 1, parent, first); /* 13 nodes, tree 1 = shifted by one */
    static const int32_t p13[13] = {9, -1, 3, 5, 3, 9, 7, 5, 7, 1, 11, 0, 11};
    for (int x = 0; x < 13; x++) CT_CHECK_INT(parent[x], p13[x]);

    int differs = 0;
    run_layouts("dbtree", ref_dbtree, &differs);
    CT_CHECK_MSG(differs > 50, "dbtree equals the ring on all but %d elements", differs);
}

CT_TEST(threads_hier_equals_node_then_cluster_ring_emulation_and_is_the_flat_ring_at_one_gpu) {
    int differs = 0;
    run_layouts("hier", ref_hier, &differs);
    CT_CHECK_MSG(differs > 50, "hier equals the ring on all but %d elements", differs);
    static const int32_t sizes[] = {2, 5, 12};
    for (size_t q = 0; q < 3; q++) { /* gpus_per_node = 1: the flat ring, bit for bit */
        layout L = {sizes[q], 1, 1};
        int d = 0;
        check_order_all_reduce(&L, "[comm]\nalgo = hier\ngpus_per_node = 1\n", ref_hier,
                               (uint64_t)(11 * sizes[q] + 3), 20 + q, &d);
        CT_CHECK_INT(d, 0);
    }
}

CT_TEST(threads_reduce_scatter_with_channels_uses_each_channels_ring_ending_at_the_owner) {
    static const int32_t lays[][3] = {{6, 2, 3}, {8, 4, 2}, {5, 1, 2}, {12, 3, 4}};
    for (size_t q = 0; q < sizeof lays / sizeof lays[0]; q++) {
        layout L = {lays[q][0], lays[q][2], lays[q][1]};
        int32_t n = L.n;
        uint64_t count = (uint64_t)(3 * L.channels + 2); /* uneven channel parts */
        char ini[160];
        ini_for(ini, sizeof ini, "dbtree", lays[q]); /* NCCL's reduce-scatter is ring only */
        world_run w;
        reduce_case c = {.count = count, .dtype = CT_DTYPE_BF16};
        rank_job *jobs = calloc((size_t)n, sizeof *jobs);
        if (!jobs || !make_buffers(&c, n, count * (uint64_t)n, count, 60 + q)) {
            ct_test_fail(__FILE__, __LINE__, "out of memory");
            goto out_free;
        }
        if (!open_even(&w, n, ini)) goto out_close;
        world_run_all(&w, job_reduce_scatter, &c, jobs);
        check_all_ok(jobs, n);
        int bad = 0;
        for (int32_t o = 0; o < n && bad < 3; o++)
            for (uint64_t i = 0; i < count && bad < 3; i++) {
                double vals[MAX_RANKS];
                int32_t ring[MAX_RANKS], last = 0;
                uint64_t cb;
                for (int32_t r = 0; r < n; r++)
                    vals[r] = ref_bf16_value(c.send[r][(uint64_t)o * count + i]);
                ref_ring_of_channel(&L, ref_piece_of(i, count, L.channels, &cb), ring);
                for (int32_t p = 0; p < n; p++)
                    if (ring[p] == o) last = p;
                double e = ref_ring_along(vals, ring, n, last + 1); /* ends at the owner */
                if (c.recv[o][i] == ref_bf16_bits(e)) continue;
                bad++;
                ct_test_fail(__FILE__, __LINE__, "%s owner %d element %llu: expected %.9g, got "
                             "%.9g", ini, (int)o, (unsigned long long)i, e,
                             ref_bf16_value(c.recv[o][i]));
            }
out_close:
        world_close(&w);
out_free:
        free_buffers(&c, n);
        free(jobs);
    }
}

CT_TEST(threads_gpus_per_node_that_does_not_divide_world_size_is_an_error_naming_the_key) {
    ct_harness *h = harness_new("[comm]\ngpus_per_node = 4\n");
    ct_error err = {.struct_size = sizeof err};
    ct_harness_plugin p;
    if (harness_create(h, "comm_threads.so", "comm", &p, &err) == CT_OK) {
        const ct_comm_vtable *vt = p.vt;
        ct_create_args a = harness_args_rank(h, "comm", 0, 6);
        void *world = vt->world_create(6, &a, &err);
        CT_CHECK(world == NULL);
        CT_CHECK_STR_CONTAINS(err.message, "gpus_per_node = 4");
        CT_CHECK_STR_CONTAINS(err.message, "world_size 6");
        if (world) vt->world_destroy(world);
        world = vt->world_create(8, &a, &err); /* 2 nodes of 4: fine */
        CT_CHECK_MSG(world != NULL, "world of 8: %s", err.message);
        if (world) vt->world_destroy(world);
    } else {
        ct_test_fail(__FILE__, __LINE__, "create: %s", err.message);
    }
    harness_free(h);
    h = harness_new("[comm]\nchannels = 0\n");
    CT_CHECK_INT(harness_create(h, "comm_threads.so", "comm", &p, &err), CT_ERR_INVALID);
    CT_CHECK_STR_CONTAINS(err.message, "channels");
    harness_free(h);
}
