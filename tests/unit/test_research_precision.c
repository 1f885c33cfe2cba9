/* test_research_precision.c — the research precision policies' reduction hooks
 * (plugins/precision/bf16_fp32acc, bf16_sr, bf16_avg) run by real rank threads of the threads
 * comm engine: fp32acc equals an f32 sum of the bf16 contributions bit for bit, the stochastic
 * ring is unbiased where round-to-nearest is not and reproducible for a fixed seed, avg is
 * pure_bf16 for power-of-two worlds and NCCL's premultiply otherwise.
 * Not for: the comm engine's own arithmetic (test_comm_threads.c) or whole training runs.
 */
#include "ct_test.h"
#include "harness.h"

#include <ctrain/precision_kit.h>

#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define MAX_RANKS 8

/* ---------------------------------------------------------------------------------------
 * independent references: bf16 <-> double by bit layout and frexp/rint, sums written out
 * ------------------------------------------------------------------------------------- */

static double bf16_value(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* x (a normal number or 0) rounded to 8 significant bits, ties to even (rint's default). */
static double ref_round_bf16(double x) {
    if (x == 0) return x;
    int e;
    double m = frexp(x, &e); /* x = m 2^e, 0.5 <= |m| < 1 */
    return ldexp(rint(ldexp(m, 8)), e - 8);
}

static uint16_t bf16_bits(double x) { /* x must be bf16-representable */
    float f = (float)x;
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (uint16_t)(u >> 16);
}

/* A pseudo-random bf16 of mixed magnitude: +-[1,2) * 2^[-spread/2, spread/2). */
static uint16_t random_bf16_spread(uint64_t *state, int spread) {
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    double u1 = (double)(*state >> 11) / 9007199254740992.0;
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    double u2 = (double)(*state >> 11) / 9007199254740992.0;
    double x = (1.0 + u1) * ldexp(1.0, (int)floor(u2 * spread) - spread / 2);
    if (*state >> 63) x = -x;
    return bf16_bits(ref_round_bf16(x));
}

static uint16_t random_bf16(uint64_t *state) { return random_bf16_spread(state, 12); }

/* ---------------------------------------------------------------------------------------
 * a world of N rank threads: comm_threads instances + one precision instance per rank
 * ------------------------------------------------------------------------------------- */

typedef struct pworld {
    ct_harness                *h;
    const ct_comm_vtable      *cvt;
    void                      *world;
    void                      *comm[MAX_RANKS];
    const ct_precision_vtable *pvt;
    void                      *prec[MAX_RANKS];
    ct_device_ref              dev;
    int32_t                    n;
} pworld;

/* Open a world of n ranks with precision plugin `so` configured by `precision_ini` (the body of
 * the [precision] section) over the threads engine configured by `threads_ini` (the body of its
 * section, [threads]: [comm] belongs to the harness's comm_local). 0 on failure (the test has
 * failed). */
static int pworld_open_with(pworld *w, int32_t n, const char *so, const char *threads_ini,
                            const char *precision_ini) {
    memset(w, 0, sizeof *w);
    w->n = n;
    char ini[512];
    snprintf(ini, sizeof ini, "[threads]\n%s\ntimeout_s = 30\n[precision]\n%s\n", threads_ini,
             precision_ini);
    w->h = harness_new(ini);
    if (!w->h) return 0;
    ct_error err = {.struct_size = sizeof err};
    ct_harness_plugin cp, pp;
    if (harness_create(w->h, "comm_threads.so", "threads", &cp, &err) != CT_OK ||
        harness_create(w->h, so, "precision", &pp, &err) != CT_OK) { /* validates the sections */
        ct_test_fail(__FILE__, __LINE__, "%s: %s", so, err.message);
        return 0;
    }
    w->cvt = cp.vt;
    w->pvt = pp.vt;
    w->dev = harness_device(w->h);
    ct_create_args a0 = harness_args_rank(w->h, "threads", 0, n);
    if (!(w->world = w->cvt->world_create(n, &a0, &err))) goto out_fail;
    for (int32_t r = 0; r < n; r++) {
        ct_create_args a = harness_args_rank(w->h, "threads", r, n);
        a.comm_world = w->world;
        if (!(w->comm[r] = w->cvt->create(&a, &err))) goto out_fail;
        ct_create_args pa = harness_args_rank(w->h, "precision", r, n);
        pa.device = w->dev;
        if (!(w->prec[r] = w->pvt->create(&pa, &err))) goto out_fail;
    }
    return 1;
out_fail:
    ct_test_fail(__FILE__, __LINE__, "world of %d with %s: %s", (int)n, so, err.message);
    return 0;
}

/* The same with the threads engine's flat ring (algo = ring, one channel). */
static int pworld_open(pworld *w, int32_t n, const char *so, const char *precision_ini) {
    return pworld_open_with(w, n, so, "algo = ring", precision_ini);
}

static void pworld_close(pworld *w) {
    for (int32_t r = 0; r < w->n; r++) {
        if (w->prec[r]) w->pvt->destroy(w->prec[r]);
        if (w->comm[r]) w->cvt->destroy(w->comm[r]);
    }
    if (w->world) w->cvt->world_destroy(w->world);
    harness_free(w->h);
}

/* What every rank does in one round: a hook or the comm's native collective, SUM, bf16. */
typedef enum call_kind {
    HOOK_REDUCE_SCATTER   = 0,
    HOOK_ALL_REDUCE       = 1,
    NATIVE_REDUCE_SCATTER = 2,
    NATIVE_ALL_REDUCE     = 3,
} call_kind;

typedef struct round_job {
    pworld   *w;
    int32_t   rank, kind;
    uint64_t  count;   /* the collective's count (per-rank result for reduce_scatter) */
    uint16_t *send;    /* (N*count) for reduce_scatter, (count) for all_reduce */
    uint16_t *recv;    /* (count); == send for an in-place all_reduce */
    int32_t   rc;
    ct_error  err;
} round_job;

static void *round_thread(void *p) {
    round_job *j = p;
    pworld *w = j->w;
    ct_comm_ref comm = {w->cvt, w->comm[j->rank], j->rank, w->n};
    void *ps = w->prec[j->rank];
    switch (j->kind) {
    case HOOK_REDUCE_SCATTER:
        j->rc = w->pvt->reduce_scatter(ps, comm, w->dev, j->send, j->recv, j->count,
                                       CT_DTYPE_BF16, &j->err);
        break;
    case HOOK_ALL_REDUCE:
        j->rc = w->pvt->all_reduce(ps, comm, w->dev, j->send, j->recv, j->count, CT_DTYPE_BF16,
                                   &j->err);
        break;
    case NATIVE_REDUCE_SCATTER:
        j->rc = w->cvt->reduce_scatter(comm.self, j->send, j->recv, j->count, CT_DTYPE_BF16,
                                       CT_REDUCE_SUM, NULL, &j->err);
        break;
    default:
        j->rc = w->cvt->all_reduce(comm.self, j->send, j->recv, j->count, CT_DTYPE_BF16,
                                   CT_REDUCE_SUM, NULL, &j->err);
        break;
    }
    return NULL;
}

/* Run one round on every rank: send[r] / recv[r] are rank r's buffers. 1 when all succeeded. */
static int run_round(pworld *w, int32_t kind, uint64_t count, uint16_t **send, uint16_t **recv) {
    pthread_t tid[MAX_RANKS];
    round_job jobs[MAX_RANKS];
    for (int32_t r = 0; r < w->n; r++) {
        jobs[r] = (round_job){.w = w, .rank = r, .kind = kind, .count = count, .send = send[r],
                              .recv = recv[r], .err = {.struct_size = sizeof(ct_error)}};
        pthread_create(&tid[r], NULL, round_thread, &jobs[r]);
    }
    for (int32_t r = 0; r < w->n; r++) pthread_join(tid[r], NULL);
    int ok = 1;
    for (int32_t r = 0; r < w->n; r++) {
        CT_CHECK_MSG(jobs[r].rc == CT_OK, "rank %d (call %d) returned %d: %s", (int)r, (int)kind,
                     (int)jobs[r].rc, jobs[r].err.message);
        ok = ok && jobs[r].rc == CT_OK;
    }
    return ok;
}

/* N buffers of n bf16 each (zeroed); free with free_bufs. */
static void alloc_bufs(uint16_t **b, int32_t N, uint64_t n) {
    for (int32_t r = 0; r < N; r++) b[r] = calloc(n ? n : 1, sizeof(uint16_t));
}
static void free_bufs(uint16_t **b, int32_t N) {
    for (int32_t r = 0; r < N; r++) free(b[r]);
}

/* ---------------------------------------------------------------------------------------
 * bf16_fp32acc
 * ------------------------------------------------------------------------------------- */

/* bf16( ((x_0 + x_1) + x_2) + ... in f32, rank order ) of element i of every rank's buffer;
 * reversed: the same sum from rank N-1 down (for the data's sensitivity to the order). */
static double f32_rank_order_sum_dir(uint16_t **x, int32_t N, uint64_t i, int reversed) {
    float acc = 0.0f;
    for (int32_t k = 0; k < N; k++) acc += (float)bf16_value(x[reversed ? N - 1 - k : k][i]);
    return ref_round_bf16(acc);
}

static double f32_rank_order_sum(uint16_t **x, int32_t N, uint64_t i) {
    return f32_rank_order_sum_dir(x, N, i, 0);
}

CT_TEST(bf16_fp32acc_reduce_scatter_equals_f32_sum_of_bf16_contributions_n4) {
    pworld w;
    const int32_t N = 4;
    const uint64_t count = 777;
    if (!pworld_open(&w, N, "precision_bf16_fp32acc.so", "")) goto out_close;
    uint16_t *send[MAX_RANKS], *recv[MAX_RANKS], *native[MAX_RANKS];
    alloc_bufs(send, N, N * count);
    alloc_bufs(recv, N, count);
    alloc_bufs(native, N, count);
    uint64_t st = 42; /* magnitudes 2^-20 .. 2^20: f32 sums of them round, so order matters */
    for (int32_t r = 0; r < N; r++)
        for (uint64_t i = 0; i < N * count; i++) send[r][i] = random_bf16_spread(&st, 40);
    if (run_round(&w, HOOK_REDUCE_SCATTER, count, send, recv) &&
        run_round(&w, NATIVE_REDUCE_SCATTER, count, send, native)) {
        int64_t bad = 0, ring_differs = 0, order_matters = 0;
        for (int32_t c = 0; c < N; c++)
            for (uint64_t j = 0; j < count; j++) {
                uint16_t want = bf16_bits(f32_rank_order_sum(send, N, (uint64_t)c * count + j));
                order_matters +=
                    want != bf16_bits(f32_rank_order_sum_dir(send, N, (uint64_t)c * count + j, 1));
                if (recv[c][j] != want && bad++ < 3)
                    CT_CHECK_MSG(0, "rank %d element %llu: expected %a, got %a", (int)c,
                                 (unsigned long long)j, bf16_value(want), bf16_value(recv[c][j]));
                ring_differs += native[c][j] != want;
            }
        CT_CHECK_INT(bad, 0);
        /* The data must be able to tell the two sums apart, or the check above proves little. */
        CT_CHECK_MSG(order_matters > 0, "no element's f32 sum depends on the rank order");
        CT_CHECK_MSG(ring_differs > (int64_t)(N * count) / 20,
                     "only %lld of %llu elements differ between the bf16 ring and the f32 sum",
                     (long long)ring_differs, (unsigned long long)(N * count));
    }
    free_bufs(send, N);
    free_bufs(recv, N);
    free_bufs(native, N);
out_close:
    pworld_close(&w);
}

CT_TEST(bf16_fp32acc_all_reduce_in_place_equals_f32_sum_on_every_rank_uneven_count) {
    pworld w;
    const int32_t N = 4;
    const uint64_t count = 1001; /* not a multiple of N: the padded path */
    if (!pworld_open(&w, N, "precision_bf16_fp32acc.so", "grad_accum_dtype = f32")) goto out_close;
    uint16_t *buf[MAX_RANKS], *orig[MAX_RANKS];
    alloc_bufs(buf, N, count);
    alloc_bufs(orig, N, count);
    uint64_t st = 7;
    for (int32_t r = 0; r < N; r++)
        for (uint64_t i = 0; i < count; i++) orig[r][i] = buf[r][i] = random_bf16_spread(&st, 40);
    if (run_round(&w, HOOK_ALL_REDUCE, count, buf, buf)) {
        int64_t bad = 0;
        for (uint64_t i = 0; i < count; i++) {
            uint16_t want = bf16_bits(f32_rank_order_sum(orig, N, i));
            for (int32_t r = 0; r < N; r++) bad += buf[r][i] != want;
        }
        CT_CHECK_INT(bad, 0);
    }
    free_bufs(buf, N);
    free_bufs(orig, N);
out_close:
    pworld_close(&w);
}

/* ---------------------------------------------------------------------------------------
 * bf16_sr
 * ------------------------------------------------------------------------------------- */

/* Rank 0 holds 1.0, the others 2^-10 (a quarter of an ulp of 1.0 in bf16): a ring rounding to
 * nearest stays at 1.0 whatever the order; the exact sum is 1 + (N-1) 2^-10. */
static void swamped_data(uint16_t **x, int32_t N, uint64_t n) {
    for (int32_t r = 0; r < N; r++)
        for (uint64_t i = 0; i < n; i++) x[r][i] = bf16_bits(r == 0 ? 1.0 : ldexp(1.0, -10));
}

/* Mean of n bf16 values over N buffers (n each). */
static double mean_of(uint16_t **x, int32_t N, uint64_t n) {
    double s = 0;
    for (int32_t r = 0; r < N; r++)
        for (uint64_t i = 0; i < n; i++) s += bf16_value(x[r][i]);
    return s / ((double)N * (double)n);
}

CT_TEST(bf16_sr_reduce_scatter_is_unbiased_where_round_to_nearest_is_biased) {
    pworld w;
    const int32_t N = 4;
    const uint64_t count = 8192;
    if (!pworld_open(&w, N, "precision_bf16_sr.so", "seed_offset = 0")) goto out_close;
    uint16_t *send[MAX_RANKS], *recv[MAX_RANKS], *native[MAX_RANKS];
    alloc_bufs(send, N, N * count);
    alloc_bufs(recv, N, count);
    alloc_bufs(native, N, count);
    swamped_data(send, N, N * count);
    double exact = 1.0 + (N - 1) * ldexp(1.0, -10);
    if (run_round(&w, NATIVE_REDUCE_SCATTER, count, send, native) &&
        run_round(&w, HOOK_REDUCE_SCATTER, count, send, recv)) {
        CT_CHECK_CLOSE(mean_of(native, N, count), 1.0, 0, 0); /* RN: biased by -3*2^-10 */
        /* Each of the N-1 hops adds variance <= (ulp/2)^2 = 2^-16: 5 standard errors. */
        double tol = 5.0 * sqrt((N - 1) * ldexp(1.0, -16) / (double)(N * count));
        CT_CHECK_CLOSE(mean_of(recv, N, count), exact, 0, tol);
        int64_t out_of_range = 0;
        double ulp = ldexp(1.0, -7), sum_k = 0, sum_k2 = 0;
        for (int32_t r = 0; r < N; r++)
            for (uint64_t i = 0; i < count; i++) {
                double k = (bf16_value(recv[r][i]) - 1.0) / ulp; /* ulps above 1, 0..N-1 */
                out_of_range += k < 0 || k > N - 1 || k != floor(k);
                sum_k += k;
                sum_k2 += k * k;
            }
        CT_CHECK_INT(out_of_range, 0);
        /* Independent hops: each rounds up with p = 1/8 (2^-10 is 1/8 ulp), so k is
         * Binomial(N-1, 1/8); bits shared between hops would triple the variance. */
        double m = (double)N * (double)count, mk = sum_k / m, var = sum_k2 / m - mk * mk;
        CT_CHECK_CLOSE(var, (N - 1) * (1.0 / 8) * (7.0 / 8), 0.15, 0);
    }
    free_bufs(send, N);
    free_bufs(recv, N);
    free_bufs(native, N);
out_close:
    pworld_close(&w);
}

CT_TEST(bf16_sr_all_reduce_is_unbiased_and_identical_on_every_rank_n3) {
    pworld w;
    const int32_t N = 3; /* odd: the ring's even/odd send order wraps around */
    const uint64_t count = 20001;
    if (!pworld_open(&w, N, "precision_bf16_sr.so", "")) goto out_close;
    uint16_t *send[MAX_RANKS], *recv[MAX_RANKS];
    alloc_bufs(send, N, count);
    alloc_bufs(recv, N, count);
    swamped_data(send, N, count);
    double exact = 1.0 + (N - 1) * ldexp(1.0, -10);
    if (run_round(&w, HOOK_ALL_REDUCE, count, send, recv)) {
        double tol = 5.0 * sqrt((N - 1) * ldexp(1.0, -16) / (double)count);
        CT_CHECK_CLOSE(mean_of(recv, 1, count), exact, 0, tol);
        int64_t differ = 0;
        for (int32_t r = 1; r < N; r++) differ += memcmp(recv[r], recv[0], count * 2) != 0;
        CT_CHECK_INT(differ, 0);
    }
    free_bufs(send, N);
    free_bufs(recv, N);
out_close:
    pworld_close(&w);
}

/* Small integers: every partial sum is a bf16 value, so stochastic rounding has nothing to
 * round and the ring must return the exact sums — checks chunking, order and addressing,
 * including empty chunks (count < N) and uneven ones. */
CT_TEST(bf16_sr_ring_returns_exact_sums_when_they_are_representable) {
    const int32_t worlds[] = {2, 3, 4};
    const uint64_t counts[] = {1, 2, 13, 300};
    for (int wi = 0; wi < 3; wi++) {
        pworld w;
        int32_t N = worlds[wi];
        if (!pworld_open(&w, N, "precision_bf16_sr.so", "seed_offset = 5")) {
            pworld_close(&w);
            return;
        }
        for (int ci = 0; ci < 4; ci++) {
            uint64_t n = counts[ci];
            uint16_t *send[MAX_RANKS], *recv[MAX_RANKS];
            alloc_bufs(send, N, N * n);
            alloc_bufs(recv, N, N * n);
            for (int32_t r = 0; r < N; r++)
                for (uint64_t i = 0; i < N * n; i++)
                    send[r][i] = bf16_bits((double)((int64_t)((i * 7 + (uint64_t)r * 3) % 17) - 8));
            int64_t bad = 0;
            if (run_round(&w, HOOK_REDUCE_SCATTER, n, send, recv)) {
                for (int32_t c = 0; c < N; c++)
                    for (uint64_t j = 0; j < n; j++) {
                        double want = 0;
                        for (int32_t r = 0; r < N; r++) want += bf16_value(send[r][c * n + j]);
                        bad += bf16_value(recv[c][j]) != want;
                    }
            }
            if (run_round(&w, HOOK_ALL_REDUCE, n, send, recv)) { /* n < N: empty chunks */
                for (uint64_t i = 0; i < n; i++) {
                    double want = 0;
                    for (int32_t r = 0; r < N; r++) want += bf16_value(send[r][i]);
                    for (int32_t r = 0; r < N; r++) bad += bf16_value(recv[r][i]) != want;
                }
            }
            CT_CHECK_MSG(bad == 0, "N=%d count=%llu: %lld wrong sums", (int)N,
                         (unsigned long long)n, (long long)bad);
            free_bufs(send, N);
            free_bufs(recv, N);
        }
        pworld_close(&w);
    }
}

/* N buffers of n random bf16 values (a fixed stream per n), in swamped_data's shape. */
static void random_data(uint16_t **x, int32_t N, uint64_t n) {
    uint64_t state = 12345 + n;
    for (int32_t r = 0; r < N; r++)
        for (uint64_t i = 0; i < n; i++) x[r][i] = random_bf16(&state);
}

/* One round of the bf16_sr hook `kind` over N ranks of data made by `fill` (count per call) by
 * fresh instances on [threads] `threads_ini` with [precision] `precision_ini`; out[r] gets rank
 * r's result (count elements). */
static int sr_round(int32_t N, const char *threads_ini, const char *precision_ini, int32_t kind,
                    uint64_t count, void (*fill)(uint16_t **, int32_t, uint64_t),
                    uint16_t **out) {
    pworld w;
    int ok = 0;
    if (pworld_open_with(&w, N, "precision_bf16_sr.so", threads_ini, precision_ini)) {
        uint64_t len = kind == HOOK_REDUCE_SCATTER ? (uint64_t)N * count : count;
        uint16_t *send[MAX_RANKS];
        alloc_bufs(send, N, len);
        fill(send, N, len);
        ok = run_round(&w, kind, count, send, out);
        free_bufs(send, N);
    }
    pworld_close(&w);
    return ok;
}

/* One reduce-scatter of the swamped data over 4 ranks on the flat ring. */
static int sr_once(const char *precision_ini, uint64_t count, uint16_t **out) {
    return sr_round(4, "algo = ring", precision_ini, HOOK_REDUCE_SCATTER, count, swamped_data,
                    out);
}

CT_TEST(bf16_sr_is_reproducible_for_a_fixed_seed_and_changes_with_seed_offset) {
    const int32_t N = 4;
    const uint64_t count = 4096;
    uint16_t *a[MAX_RANKS], *b[MAX_RANKS], *c[MAX_RANKS];
    alloc_bufs(a, N, count);
    alloc_bufs(b, N, count);
    alloc_bufs(c, N, count);
    if (sr_once("seed_offset = 3", count, a) && sr_once("seed_offset = 3", count, b) &&
        sr_once("seed_offset = 4", count, c)) {
        int64_t same_diff = 0, other_diff = 0;
        for (int32_t r = 0; r < N; r++)
            for (uint64_t i = 0; i < count; i++) {
                same_diff += a[r][i] != b[r][i];
                other_diff += a[r][i] != c[r][i];
            }
        CT_CHECK_INT(same_diff, 0);
        /* Two independent draws differ in about half the elements here; 10% is a safe floor. */
        CT_CHECK_MSG(other_diff > (int64_t)(N * count) / 10,
                     "seed_offset 3 and 4 differ in only %lld of %llu elements",
                     (long long)other_diff, (unsigned long long)(N * count));
    }
    free_bufs(a, N);
    free_bufs(b, N);
    free_bufs(c, N);
}

/* The two paths of bf16_sr: the engine's all_reduce_sr / reduce_scatter_sr (path = auto on the
 * threads engine) and the plugin's own ring over send/recv (path = send_recv) give the same bits
 * on the flat ring; on another order (algo = tree) auto follows the engine's order, so some
 * results differ — which shows auto really took the engine's path. */
CT_TEST(bf16_sr_engine_path_equals_the_send_recv_ring_bit_for_bit_and_follows_the_order) {
    static const int32_t worlds[] = {2, 3, 5, 8};
    static const uint64_t counts[] = {1, 7, 300, 1001};
    int64_t tree_differs = 0;
    for (int wi = 0; wi < 4; wi++)
        for (int ci = 0; ci < 4; ci++)
            for (int32_t kind = HOOK_REDUCE_SCATTER; kind <= HOOK_ALL_REDUCE; kind++) {
                int32_t N = worlds[wi];
                uint64_t n = counts[ci];
                uint16_t *a[MAX_RANKS], *b[MAX_RANKS], *t[MAX_RANKS];
                alloc_bufs(a, N, n);
                alloc_bufs(b, N, n);
                alloc_bufs(t, N, n);
                if (sr_round(N, "algo = ring", "path = auto", kind, n, random_data, a) &&
                    sr_round(N, "algo = ring", "path = send_recv", kind, n, random_data, b) &&
                    sr_round(N, "algo = tree", "path = auto", kind, n, random_data, t)) {
                    int64_t differ = 0;
                    for (int32_t r = 0; r < N; r++) {
                        differ += memcmp(a[r], b[r], n * sizeof(uint16_t)) != 0;
                        for (uint64_t i = 0; i < n; i++) tree_differs += t[r][i] != b[r][i];
                    }
                    CT_CHECK_MSG(differ == 0, "N=%d count=%llu %s: %lld ranks differ between "
                                 "path auto and send_recv", (int)N, (unsigned long long)n,
                                 kind == HOOK_ALL_REDUCE ? "all_reduce" : "reduce_scatter",
                                 (long long)differ);
                }
                free_bufs(a, N);
                free_bufs(b, N);
                free_bufs(t, N);
            }
    CT_CHECK_MSG(tree_differs > 100, "algo = tree changed only %lld results: is path = auto "
                 "using the engine?", (long long)tree_differs);
}

/* A comm built before ABI 1.5 has a vtable that ends before all_reduce_sr: the kit must not
 * read past it (the policy then runs its own ring). */
CT_TEST(precision_kit_finds_no_sr_collective_in_a_comm_vtable_of_abi_1_4) {
    ct_comm_vtable vt;
    memset(&vt, 0xff, sizeof vt); /* "set" everywhere, as garbage past the end would look */
    vt.struct_size = (uint32_t)offsetof(ct_comm_vtable, all_reduce_sr);
    ct_comm_ref comm = {&vt, NULL, 0, 2};
    CT_CHECK(ct_pkit_comm_sr(comm, 1) == NULL);
    CT_CHECK(ct_pkit_comm_sr(comm, 0) == NULL);
    vt.struct_size = sizeof vt;
    vt.all_reduce_sr = NULL;
    CT_CHECK(ct_pkit_comm_sr(comm, 1) == NULL);
    CT_CHECK(ct_pkit_comm_sr(comm, 0) != NULL);
}

/* ---------------------------------------------------------------------------------------
 * bf16_avg
 * ------------------------------------------------------------------------------------- */

CT_TEST(bf16_avg_gives_pure_bf16_bits_for_a_power_of_two_world) {
    pworld w;
    const int32_t N = 4;
    const uint64_t count = 500;
    if (!pworld_open(&w, N, "precision_bf16_avg.so", "")) goto out_close;
    uint16_t *send[MAX_RANKS], *recv[MAX_RANKS], *native[MAX_RANKS];
    alloc_bufs(send, N, N * count);
    alloc_bufs(recv, N, N * count);
    alloc_bufs(native, N, N * count);
    uint64_t st = 99;
    for (int32_t r = 0; r < N; r++)
        for (uint64_t i = 0; i < N * count; i++) send[r][i] = random_bf16(&st);
    if (run_round(&w, HOOK_REDUCE_SCATTER, count, send, recv) &&
        run_round(&w, NATIVE_REDUCE_SCATTER, count, send, native)) {
        int64_t bad = 0;
        for (int32_t r = 0; r < N; r++) bad += memcmp(recv[r], native[r], count * 2) != 0;
        CT_CHECK_INT(bad, 0);
    }
    if (run_round(&w, HOOK_ALL_REDUCE, N * count, send, recv) &&
        run_round(&w, NATIVE_ALL_REDUCE, N * count, send, native)) {
        int64_t bad = 0;
        for (int32_t r = 0; r < N; r++) bad += memcmp(recv[r], native[r], N * count * 2) != 0;
        CT_CHECK_INT(bad, 0);
    }
    free_bufs(send, N);
    free_bufs(recv, N);
    free_bufs(native, N);
out_close:
    pworld_close(&w);
}

CT_TEST(bf16_avg_premultiplies_by_bf16_of_one_over_n_in_a_world_of_three) {
    pworld w;
    const int32_t N = 3;
    const uint64_t count = 400;
    if (!pworld_open(&w, N, "precision_bf16_avg.so", "")) goto out_close;
    uint16_t *send[MAX_RANKS], *recv[MAX_RANKS];
    alloc_bufs(send, N, N * count);
    alloc_bufs(recv, N, count);
    uint64_t st = 5;
    for (int32_t r = 0; r < N; r++)
        for (uint64_t i = 0; i < N * count; i++) send[r][i] = random_bf16(&st);
    double w13 = ref_round_bf16(1.0 / 3.0); /* 0.333984375 */
    CT_CHECK_CLOSE(w13, 0.333984375, 0, 0);
    if (run_round(&w, HOOK_REDUCE_SCATTER, count, send, recv)) {
        int64_t bad = 0;
        for (int32_t c = 0; c < N; c++)
            for (uint64_t j = 0; j < count; j++) {
                uint64_t i = (uint64_t)c * count + j;
                /* NCCL's ring: born at rank c+1, then c+2, ..., c; each add rounded to bf16. */
                double acc = ref_round_bf16(bf16_value(send[(c + 1) % N][i]) * w13);
                for (int32_t k = 2; k <= N; k++) {
                    double x = ref_round_bf16(bf16_value(send[(c + k) % N][i]) * w13);
                    acc = ref_round_bf16((float)acc + (float)x);
                }
                double want = ref_round_bf16(acc * N); /* scaled back to the SUM contract */
                if (bf16_value(recv[c][j]) != want && bad++ < 3)
                    CT_CHECK_MSG(0, "rank %d element %llu: expected %a, got %a", (int)c,
                                 (unsigned long long)j, want, bf16_value(recv[c][j]));
            }
        CT_CHECK_INT(bad, 0);
    }
    free_bufs(send, N);
    free_bufs(recv, N);
out_close:
    pworld_close(&w);
}

/* ---------------------------------------------------------------------------------------
 * the policies themselves
 * ------------------------------------------------------------------------------------- */

CT_TEST(research_precision_policies_are_bf16_compute_bf16_wire_f32_master) {
    const char *sos[] = {"precision_bf16_fp32acc.so", "precision_bf16_sr.so",
                         "precision_bf16_avg.so"};
    for (int i = 0; i < 3; i++) {
        ct_harness *h = harness_new("[precision]\ngrad_accum_dtype = f32\n");
        if (!h) return;
        ct_harness_plugin p;
        ct_error err = {.struct_size = sizeof err};
        if (harness_create(h, sos[i], "precision", &p, &err) != CT_OK) {
            ct_test_fail(__FILE__, __LINE__, "%s: %s", sos[i], err.message);
        } else {
            const ct_precision_vtable *vt = p.vt;
            ct_precision_policy pol = {.struct_size = sizeof pol};
            CT_CHECK_INT(vt->policy(p.self, &pol, &err), CT_OK);
            CT_CHECK_INT(pol.param_dtype, CT_DTYPE_BF16);
            CT_CHECK_INT(pol.reduce_dtype, CT_DTYPE_BF16);
            CT_CHECK_INT(pol.master_dtype, CT_DTYPE_F32);
            CT_CHECK_INT(pol.grad_accum_dtype, CT_DTYPE_F32);
            CT_CHECK(vt->reduce_scatter != NULL && vt->all_reduce != NULL);
        }
        harness_free(h);
    }
}
