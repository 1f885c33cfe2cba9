/* test_strategies.c — the sharding strategies ddp, no_shard and full_shard against independent
 * references: f64 means of the ranks' gradients, FSDP1's divide factors at the edges of bf16's
 * range, bf16 all-gathers of f32 masters, and the per-rank memory of full_shard for N = 1..8.
 * N ranks run as threads over comm_threads.so with one device_cpu.so per rank. Not for: the
 * collective engines' own arithmetic (test_comm_threads.c).
 */
#include "ct_test.h"
#include "harness.h"

#include <ctrain/ctrain.h>
#include <ctrain/numerics.h>
#include <ctrain/strategy_kit.h>

#include <float.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define MAX_RANKS 8
#define MAX_UNITS 4
#define BF16_MAX 3.3895313892515355e38 /* (2 - 2^-7) * 2^127 */

/* [comm.threads] is the threads engine's section (the harness's comm_local reads [comm]) */
static const char *const INI_BASE = "[device]\nthreads = 1\n[comm.threads]\ntimeout_s = 30\n";

static ct_precision_policy policy(int32_t param, int32_t reduce, int32_t accum) {
    ct_precision_policy p = {.struct_size = sizeof p, .param_dtype = param,
                             .reduce_dtype = reduce, .master_dtype = CT_DTYPE_F32,
                             .grad_accum_dtype = accum, .buffer_dtype = param};
    return p;
}

/* ---- a world of N rank threads ------------------------------------------------------------ */

typedef struct world_case world_case;

typedef struct rank_ctx {
    int32_t                   rank, world;
    ct_device_ref             dev;
    ct_comm_ref               comm;
    const ct_strategy_vtable *svt;
    void                     *strat;
    world_case               *wc;
    int32_t                   rc;
    ct_error                  err;
} rank_ctx;

/* The local gradient of rank r for element i of unit u at step `step` (before rounding to the
 * gradient dtype). */
typedef double (*grad_fn)(const world_case *wc, int32_t step, int32_t rank, uint32_t u,
                          uint64_t i);

struct world_case {
    const char                *so;        /* strategy plugin file */
    const char                *ini;       /* extra INI text ([strategy] keys) */
    int32_t                    N, steps, micro;
    ct_precision_policy        pol;
    uint32_t                   n_units;
    uint64_t                   numel[MAX_UNITS];
    grad_fn                    grad;
    void                    *(*body)(void *); /* rank thread; NULL: rank_main */
    double                     value;     /* for constant gradients */
    const ct_precision_vtable *precision; /* optional hooks */
    void                      *precision_self;
    /* results of the last step: per rank and unit, the f32 grad shard placed at its offset in
     * a padded-length array (NaN where the rank owns nothing) */
    double                    *got[MAX_RANKS][MAX_UNITS];
    uint64_t                   padded[MAX_UNITS];
    uint64_t                   mem[MAX_RANKS][3];
    int32_t                    replicated;
    const char                *expect_error; /* a rank failing with this text is no failure */
    int32_t                    got_expected; /* ... and it did */
};

static double grad_random(const world_case *wc, int32_t step, int32_t r, uint32_t u, uint64_t i) {
    (void)wc;
    uint64_t seed = ct_hash64((uint64_t)step * 1000003u + (uint64_t)r * 101u + u, 42);
    return 2.0 * ct_uniform01(seed, i) - 1.0;
}

static double grad_const(const world_case *wc, int32_t step, int32_t r, uint32_t u, uint64_t i) {
    (void)step, (void)r, (void)u, (void)i;
    return wc->value;
}

/* Near bf16's largest value, slightly different on every rank. */
static double grad_huge(const world_case *wc, int32_t step, int32_t r, uint32_t u, uint64_t i) {
    (void)step, (void)u;
    return wc->value * (1.0 - 0.01 * r - 0.001 * (double)(i % 7));
}

/* The value as the rank's gradient buffer holds it. */
static double as_grad_dtype(const world_case *wc, double g) {
    return wc->pol.grad_accum_dtype == CT_DTYPE_BF16 ? ct_round_bf16((float)g) : (float)g;
}

#define RANK_TRY(call)                                                                    \
    do {                                                                                  \
        if ((rc->rc = (call)) != CT_OK) goto out_fail;                                    \
    } while (0)

/* Add `micro`-th micro-batch's share of the local gradient of unit u into the unit's buffer:
 * f32 buffers get each micro-batch's 1/micro part through axpy; bf16 buffers get the whole
 * value at once (copy), so the buffer holds exactly as_grad_dtype(g). */
static int32_t add_grad(rank_ctx *rc, int32_t step, int32_t m, uint32_t u, void *grads,
                        ct_error *err) {
    world_case *wc = rc->wc;
    uint64_t n = wc->numel[u];
    if (wc->pol.grad_accum_dtype == CT_DTYPE_BF16) {
        if (m != wc->micro - 1) return CT_OK;
        uint16_t *h = calloc(n ? n : 1, sizeof *h);
        for (uint64_t i = 0; i < n; i++)
            h[i] = ct_bf16_from_f32((float)wc->grad(wc, step, rc->rank, u, i));
        int32_t r = rc->dev.vt->copy(rc->dev.self, grads, h, n * 2, CT_COPY_H2D, err);
        free(h);
        return r;
    }
    float *h = calloc(n ? n : 1, sizeof *h);
    float *d = rc->dev.vt->alloc(rc->dev.self, (n ? n : 1) * sizeof(float), err);
    for (uint64_t i = 0; i < n; i++) h[i] = (float)wc->grad(wc, step, rc->rank, u, i);
    int32_t r = d ? rc->dev.vt->copy(rc->dev.self, d, h, n * sizeof(float), CT_COPY_H2D, err)
                  : CT_ERR_NOMEM;
    /* micro-batches add g/micro each: exact for micro a power of two */
    if (r == CT_OK) r = rc->dev.vt->axpy(rc->dev.self, grads, 1.0f / (float)wc->micro, d,
                                         CT_DTYPE_F32, n, err);
    rc->dev.vt->free_mem(rc->dev.self, d);
    free(h);
    return r;
}

/* One training step driven as the host does: unit 0 (the root) is held from the first forward
 * stage to the last, blocks 1..U-1 are acquired around their stage; backward in reverse with
 * the root held throughout, each unit handed over when its backward is done. */
static void drive_step(rank_ctx *rc, int32_t step) {
    const ct_strategy_vtable *vt = rc->svt;
    world_case *wc = rc->wc;
    ct_error *err = &rc->err;
    const void *params;
    void *grads;
    RANK_TRY(vt->begin_step(rc->strat, err));
    for (int32_t m = 0; m < wc->micro; m++) {
        int32_t last = m == wc->micro - 1;
        RANK_TRY(vt->acquire(rc->strat, 0, CT_PHASE_FORWARD, &params, err));
        for (uint32_t u = 1; u < wc->n_units; u++) {
            RANK_TRY(vt->acquire(rc->strat, u, CT_PHASE_FORWARD, &params, err));
            RANK_TRY(vt->release(rc->strat, u, CT_PHASE_FORWARD, err));
        }
        RANK_TRY(vt->release(rc->strat, 0, CT_PHASE_FORWARD, err));
        RANK_TRY(vt->acquire(rc->strat, 0, CT_PHASE_BACKWARD, &params, err));
        for (uint32_t u = wc->n_units - 1; u >= 1; u--) {
            RANK_TRY(vt->acquire(rc->strat, u, CT_PHASE_BACKWARD, &params, err));
            RANK_TRY(vt->grad_buffer(rc->strat, u, &grads, err));
            RANK_TRY(add_grad(rc, step, m, u, grads, err));
            RANK_TRY(vt->release(rc->strat, u, CT_PHASE_BACKWARD, err));
            RANK_TRY(vt->unit_backward_done(rc->strat, u, last, err));
        }
        RANK_TRY(vt->grad_buffer(rc->strat, 0, &grads, err));
        RANK_TRY(add_grad(rc, step, m, 0, grads, err));
        RANK_TRY(vt->release(rc->strat, 0, CT_PHASE_BACKWARD, err));
        RANK_TRY(vt->unit_backward_done(rc->strat, 0, last, err));
    }
    RANK_TRY(vt->finish_backward(rc->strat, err));
    return;
out_fail:
    rc->comm.vt->abort(rc->comm.self, err->message);
}

/* Copy each unit's f32 grad shard into wc->got[rank][u] at its offset. */
static void collect(rank_ctx *rc) {
    world_case *wc = rc->wc;
    for (uint32_t u = 0; u < wc->n_units && rc->rc == CT_OK; u++) {
        ct_shard sh = {.struct_size = sizeof sh};
        if ((rc->rc = rc->svt->shard(rc->strat, u, &sh, &rc->err)) != CT_OK) return;
        float *h = calloc(sh.numel, sizeof *h);
        rc->rc = rc->dev.vt->copy(rc->dev.self, h, sh.grad, sh.numel * sizeof(float),
                                  CT_COPY_D2H, &rc->err);
        double *g = wc->got[rc->rank][u];
        for (uint64_t i = 0; i < sh.padded_numel; i++) g[i] = NAN;
        for (uint64_t i = 0; i < sh.numel; i++) g[sh.offset + i] = h[i];
        wc->padded[u] = sh.padded_numel;
        wc->replicated = sh.replicated;
        free(h);
    }
    if (rc->rc == CT_OK && rc->svt->memory)
        rc->rc = rc->svt->memory(rc->strat, &wc->mem[rc->rank][0], &wc->mem[rc->rank][1],
                                 &wc->mem[rc->rank][2], &rc->err);
}

static void *rank_main(void *p) {
    rank_ctx *rc = p;
    world_case *wc = rc->wc;
    ct_strategy_setup su = {.struct_size = sizeof su, .n_units = wc->n_units,
                            .unit_numel = wc->numel, .policy = &wc->pol,
                            .precision = wc->precision, .precision_self = wc->precision_self};
    if ((rc->rc = rc->svt->setup(rc->strat, &su, &rc->err)) != CT_OK) goto out_abort;
    for (uint32_t u = 0; u < wc->n_units; u++) { /* masters: anything; every rank the same */
        float *full = calloc(wc->numel[u] + 1, sizeof *full);
        for (uint64_t i = 0; i < wc->numel[u]; i++) full[i] = (float)i * 1e-3f;
        rc->rc = rc->svt->load_unit(rc->strat, u, full, &rc->err);
        free(full);
        if (rc->rc) goto out_abort;
    }
    for (int32_t step = 0; step < wc->steps && rc->rc == CT_OK; step++) {
        drive_step(rc, step);
        if (rc->rc == CT_OK) rc->rc = rc->svt->step_done(rc->strat, &rc->err);
    }
    if (rc->rc == CT_OK) collect(rc);
    if (rc->rc == CT_OK) return NULL;
out_abort:
    rc->comm.vt->abort(rc->comm.self, rc->err.message);
    return NULL;
}

/* Create device, comm and strategy for each of wc->N ranks (threads engine), run rank_main on
 * N threads, tear down. Returns 0 when every rank succeeded (failures are reported). */
static int run_world(world_case *wc) {
    char ini[1024];
    snprintf(ini, sizeof ini, "%s[strategy]\n%s", INI_BASE, wc->ini ? wc->ini : "");
    ct_harness *h = harness_new(ini);
    if (!h) return 1;
    int failed = 0;
    ct_error err = {.struct_size = sizeof err};
    ct_harness_plugin probe;
    /* validate [device], [comm] and [strategy] (defaults filled) through the real host code */
    if (!harness_device(h).vt ||
        harness_create(h, "comm_threads.so", "comm.threads", &probe, &err) != CT_OK ||
        harness_create(h, wc->so, "strategy", &probe, &err) != CT_OK) {
        ct_test_fail(__FILE__, __LINE__, "%s: %s", wc->so, err.message);
        harness_free(h);
        return 1;
    }
    const ct_plugin_desc *dd = harness_load("device_cpu.so");
    const ct_plugin_desc *cd = harness_load("comm_threads.so");
    const ct_plugin_desc *sd = harness_load(wc->so);
    const ct_device_vtable *dvt = dd->vtable;
    const ct_comm_vtable *cvt = cd->vtable;
    const ct_strategy_vtable *svt = sd->vtable;
    rank_ctx rcs[MAX_RANKS];
    memset(rcs, 0, sizeof rcs);
    ct_create_args wa = harness_args_rank(h, "comm.threads", 0, wc->N);
    void *world = cvt->world_create(wc->N, &wa, &err);
    if (!world) {
        ct_test_fail(__FILE__, __LINE__, "comm threads world: %s", err.message);
        harness_free(h);
        return 1;
    }
    int32_t made = 0;
    for (int32_t r = 0; r < wc->N; r++, made++) {
        rank_ctx *rc = &rcs[r];
        rc->rank = r;
        rc->world = wc->N;
        rc->wc = wc;
        rc->svt = svt;
        rc->err.struct_size = sizeof rc->err;
        ct_create_args a = harness_args_rank(h, "device", r, wc->N);
        a.device.vt = NULL;
        a.device.self = NULL;
        rc->dev.vt = dvt;
        rc->dev.type = CT_DEVICE_CPU;
        if (!(rc->dev.self = dvt->create(&a, &err))) break;
        a = harness_args_rank(h, "comm.threads", r, wc->N);
        a.device = rc->dev;
        a.comm_world = world;
        rc->comm = (ct_comm_ref){.vt = cvt, .rank = r, .world_size = wc->N};
        if (!(rc->comm.self = cvt->create(&a, &err))) {
            dvt->destroy(rc->dev.self);
            break;
        }
        a = harness_args_rank(h, "strategy", r, wc->N);
        a.device = rc->dev;
        a.comm = rc->comm;
        if (!(rc->strat = svt->create(&a, &err))) {
            cvt->destroy(rc->comm.self);
            dvt->destroy(rc->dev.self);
            break;
        }
    }
    if (made < wc->N) {
        ct_test_fail(__FILE__, __LINE__, "creating rank %d: %s", made, err.message);
        failed = 1;
    } else {
        pthread_t th[MAX_RANKS];
        for (int32_t r = 0; r < wc->N; r++)
            pthread_create(&th[r], NULL, wc->body ? wc->body : rank_main, &rcs[r]);
        for (int32_t r = 0; r < wc->N; r++) pthread_join(th[r], NULL);
        for (int32_t r = 0; r < wc->N; r++)
            if (rcs[r].rc != CT_OK) {
                if (wc->expect_error && strstr(rcs[r].err.message, wc->expect_error))
                    wc->got_expected = 1;
                else
                    ct_test_fail(__FILE__, __LINE__, "%s N=%d rank %d: %s", wc->so, wc->N, r,
                                 rcs[r].err.message);
                failed = 1;
            }
    }
    for (int32_t r = made - 1; r >= 0; r--) {
        svt->destroy(rcs[r].strat);
        cvt->destroy(rcs[r].comm.self);
        dvt->destroy(rcs[r].dev.self);
    }
    cvt->world_destroy(world);
    harness_free(h);
    return failed;
}

static void case_alloc(world_case *wc) {
    for (int32_t r = 0; r < wc->N; r++)
        for (uint32_t u = 0; u < wc->n_units; u++)
            wc->got[r][u] = calloc(ct_skit_padded_numel(wc->numel[u], wc->N), sizeof(double));
}

static void case_free(world_case *wc) {
    for (int32_t r = 0; r < MAX_RANKS; r++)
        for (uint32_t u = 0; u < MAX_UNITS; u++) {
            free(wc->got[r][u]);
            wc->got[r][u] = NULL;
        }
}

/* Every element of every unit: exactly the owning ranks (all of them when replicated, one
 * otherwise) hold a value; it is within tol(expected, i) of `expected`; padding is 0. Returns
 * the number of mismatches (the first few are reported). */
typedef double (*expect_fn)(const world_case *wc, uint32_t u, uint64_t i, double *tol);

static int check_result(world_case *wc, expect_fn expect, const char *what) {
    int bad = 0;
    for (uint32_t u = 0; u < wc->n_units; u++) {
        uint64_t P = wc->padded[u];
        CT_CHECK_INT(P, ct_skit_padded_numel(wc->numel[u], wc->N));
        for (uint64_t i = 0; i < P; i++) {
            double tol = 0, e = i < wc->numel[u] ? expect(wc, u, i, &tol) : 0.0;
            int owners = 0;
            for (int32_t r = 0; r < wc->N; r++) {
                double g = wc->got[r][u][i];
                if (isnan(g)) continue;
                owners++;
                if (!(fabs(g - e) <= tol) && bad++ < 5)
                    ct_test_fail(__FILE__, __LINE__, "%s %s N=%d unit %u [%llu] rank %d: expected"
                                 " %.9g, got %.9g (tolerance %.3g)", what, wc->so, wc->N, u,
                                 (unsigned long long)i, r, e, g, tol);
            }
            int want = wc->replicated ? wc->N : 1;
            if (owners != want && bad++ < 5)
                ct_test_fail(__FILE__, __LINE__, "%s %s N=%d unit %u [%llu]: %d ranks hold it,"
                             " expected %d", what, wc->so, wc->N, u, (unsigned long long)i,
                             owners, want);
        }
    }
    return bad;
}

/* ---- 1. f32: the reduced gradient is the mean of the ranks' gradients ---------------------- */

/* f64 mean of the ranks' f32 gradients of the last step. Tolerance: the engine sums N f32
 * values (each already divided by a power of two, exact) with N-1 roundings of relative size
 * 2^-24 each, plus one rounding for the final divide by N/f or the scale in ddp, so
 * |err| <= (N+1) * 2^-24 * sum_r |g_r| / N; we allow twice that. */
static double expect_mean(const world_case *wc, uint32_t u, uint64_t i, double *tol) {
    double sum = 0, abs_sum = 0;
    for (int32_t r = 0; r < wc->N; r++) {
        double g = as_grad_dtype(wc, wc->grad(wc, wc->steps - 1, r, u, i));
        sum += g;
        abs_sum += fabs(g);
    }
    *tol = 2.0 * (wc->N + 1) * ldexp(1.0, -24) * abs_sum / wc->N + 1e-30;
    return sum / wc->N;
}

static void mean_case(const char *so, const char *ini, int32_t N) {
    world_case wc = {.so = so, .ini = ini, .N = N, .steps = 2, .micro = 2, .n_units = 3,
                     .numel = {1000, 77, 300}, .grad = grad_random,
                     .pol = policy(CT_DTYPE_F32, CT_DTYPE_F32, CT_DTYPE_F32)};
    case_alloc(&wc);
    if (run_world(&wc) == 0) {
        CT_CHECK_INT(wc.replicated, strcmp(so, "strategy_full_shard.so") != 0);
        check_result(&wc, expect_mean, "f32 mean");
    }
    case_free(&wc);
}

CT_TEST(strategy_f32_reduced_grad_is_mean_of_rank_grads) {
    static const char *const sos[] = {"strategy_ddp.so", "strategy_no_shard.so",
                                      "strategy_full_shard.so"};
    static const int32_t Ns[] = {1, 2, 4};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) mean_case(sos[i], NULL, Ns[j]);
}

CT_TEST(strategy_ddp_small_buckets_split_units_and_still_average) {
    /* 0.001 MiB = 262 f32 elements: buckets cut through units and the last one is partial */
    mean_case("strategy_ddp.so", "bucket_mb = 0.001\n", 2);
    mean_case("strategy_ddp.so", "bucket_mb = 0.001\n", 4);
}

CT_TEST(strategy_full_shard_options_keep_the_mean) {
    mean_case("strategy_full_shard.so", "backward_prefetch = backward_post\n", 4);
    mean_case("strategy_full_shard.so", "backward_prefetch = none\n"
              "reshard_after_forward = false\n", 2);
}

/* ---- 2. divide factors at the edges of bf16 ------------------------------------------------ */

static double expect_huge(const world_case *wc, uint32_t u, uint64_t i, double *tol) {
    double e = expect_mean(wc, u, i, tol);
    /* bf16: every combine and divide rounds to 8 significant bits (2^-8 relative) */
    *tol = (wc->N + 2) * ldexp(1.0, -8) * fabs(e);
    return e;
}

static world_case bf16_case(const char *so, int32_t N, grad_fn g, double value) {
    world_case wc = {.so = so, .N = N, .steps = 1, .micro = 1, .n_units = 2,
                     .numel = {200, 64}, .grad = g, .value = value,
                     .pol = policy(CT_DTYPE_BF16, CT_DTYPE_BF16, CT_DTYPE_BF16)};
    return wc;
}

CT_TEST(strategy_bf16_gradients_near_max_do_not_overflow_thanks_to_predivide) {
    static const char *const sos[] = {"strategy_no_shard.so", "strategy_full_shard.so",
                                      "strategy_ddp.so"};
    static const int32_t Ns[] = {2, 4, 8};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) {
            int32_t N = Ns[j];
            int ddp = i == 2;
            /* FSDP sums N values divided by f: fits when x < max * f / N; DDP divides by N */
            int32_t f = ddp ? N : ct_skit_predivide_factor(N);
            double x = 0.75 * BF16_MAX * f / N;
            /* the claim is only interesting if summing first would overflow */
            CT_CHECK_MSG(N * x * 0.92 > BF16_MAX, "N=%d x=%g: N*x does not overflow", N, x);
            world_case wc = bf16_case(sos[i], N, grad_huge, x);
            case_alloc(&wc);
            if (run_world(&wc) == 0) check_result(&wc, expect_huge, "bf16 near max");
            case_free(&wc);
        }
}

/* x = f * 2^-133 (f times bf16's smallest subnormal): x/f is representable, x/N = 2^-133 /
 * (N/f) rounds to 0 once N/f >= 2. FSDP divides by f, sums (exact: small multiples of 2^-133),
 * divides by N/f: exactly x. DDP divides by N first: 0, the price of its single divide. */
static double expect_exact_value(const world_case *wc, uint32_t u, uint64_t i, double *tol) {
    (void)u, (void)i;
    *tol = 0;
    return wc->value;
}

static double expect_zero(const world_case *wc, uint32_t u, uint64_t i, double *tol) {
    (void)wc, (void)u, (void)i;
    *tol = 0;
    return 0.0;
}

CT_TEST(strategy_bf16_tiny_gradients_survive_postdivide_but_not_ddp) {
    static const int32_t Ns[] = {4, 8};
    for (int j = 0; j < 2; j++) {
        int32_t N = Ns[j], f = ct_skit_predivide_factor(N);
        double x = ldexp((double)f, -133);
        CT_CHECK(N / f >= 2);
        CT_CHECK_CLOSE(ct_round_bf16((float)(x / N)), 0.0, 0, 0); /* dividing first loses it */
        CT_CHECK_CLOSE(ct_round_bf16((float)(x / f)), x / f, 0, 0);
        world_case a = bf16_case("strategy_no_shard.so", N, grad_const, x);
        world_case b = bf16_case("strategy_full_shard.so", N, grad_const, x);
        world_case c = bf16_case("strategy_ddp.so", N, grad_const, x);
        case_alloc(&a), case_alloc(&b), case_alloc(&c);
        if (run_world(&a) == 0) check_result(&a, expect_exact_value, "bf16 tiny");
        if (run_world(&b) == 0) check_result(&b, expect_exact_value, "bf16 tiny");
        if (run_world(&c) == 0) check_result(&c, expect_zero, "bf16 tiny ddp");
        case_free(&a), case_free(&b), case_free(&c);
    }
}

/* ---- 3. precision hooks replace the comm's collectives ----------------------------------- */

typedef struct hook_counts {
    int all_reduce, reduce_scatter;
    pthread_mutex_t lock;
} hook_counts;

static int32_t hook_all_reduce(void *self, ct_comm_ref comm, ct_device_ref device,
                               const void *send, void *recv, uint64_t count, int32_t dtype,
                               ct_error *err) {
    hook_counts *c = self;
    pthread_mutex_lock(&c->lock);
    c->all_reduce++;
    pthread_mutex_unlock(&c->lock);
    return comm.vt->all_reduce(comm.self, send, recv, count, dtype, CT_REDUCE_SUM, NULL, err);
}

static int32_t hook_reduce_scatter(void *self, ct_comm_ref comm, ct_device_ref device,
                                   const void *send, void *recv, uint64_t count, int32_t dtype,
                                   ct_error *err) {
    hook_counts *c = self;
    pthread_mutex_lock(&c->lock);
    c->reduce_scatter++;
    pthread_mutex_unlock(&c->lock);
    return comm.vt->reduce_scatter(comm.self, send, recv, count, dtype, CT_REDUCE_SUM, NULL, err);
}

CT_TEST(strategy_uses_precision_reduction_hooks_when_given) {
    static const ct_precision_vtable hooks = {.struct_size = sizeof hooks,
                                              .reduce_scatter = hook_reduce_scatter,
                                              .all_reduce = hook_all_reduce};
    static const char *const sos[] = {"strategy_ddp.so", "strategy_no_shard.so",
                                      "strategy_full_shard.so"};
    for (int i = 0; i < 3; i++) {
        hook_counts counts = {0, 0, PTHREAD_MUTEX_INITIALIZER};
        world_case wc = {.so = sos[i], .N = 2, .steps = 1, .micro = 1, .n_units = 3,
                         .numel = {300, 100, 100}, .grad = grad_random,
                         .pol = policy(CT_DTYPE_F32, CT_DTYPE_F32, CT_DTYPE_F32),
                         .precision = &hooks, .precision_self = &counts};
        case_alloc(&wc);
        if (run_world(&wc) == 0) check_result(&wc, expect_mean, "hooks");
        case_free(&wc);
        if (i == 2) {
            CT_CHECK_INT(counts.reduce_scatter, 2 * 3); /* one per unit per rank */
            CT_CHECK_INT(counts.all_reduce, 0);
        } else if (i == 1) {
            CT_CHECK_INT(counts.all_reduce, 2 * 3);
        } else {
            CT_CHECK_MSG(counts.all_reduce >= 2, "ddp: %d hooked all-reduces", counts.all_reduce);
            CT_CHECK_INT(counts.reduce_scatter, 0);
        }
    }
}

/* Hooks that hand back f32 sums of a bf16 wire (ABI 1.2 result_dtype = f32): the bf16 send is
 * widened to f32 (exact) and reduced by the comm in f32 into recv, which is f32. */
static int32_t widen(ct_device_ref device, const void *send, uint64_t n, float **out,
                     ct_error *err) {
    *out = device.vt->alloc(device.self, n * sizeof(float), err);
    if (!*out) return err->code;
    return device.vt->cast(device.self, *out, CT_DTYPE_F32, send, CT_DTYPE_BF16, n, err);
}
static int32_t f32_result_all_reduce(void *self, ct_comm_ref comm, ct_device_ref device,
                                     const void *send, void *recv, uint64_t count, int32_t dtype,
                                     ct_error *err) {
    (void)self;
    CT_CHECK_INT(dtype, CT_DTYPE_BF16);
    CT_CHECK(send != recv); /* the contract when result_dtype differs */
    float *wide = NULL;
    int32_t rc = widen(device, send, count, &wide, err);
    if (rc == CT_OK)
        rc = comm.vt->all_reduce(comm.self, wide, recv, count, CT_DTYPE_F32, CT_REDUCE_SUM, NULL,
                                 err);
    device.vt->free_mem(device.self, wide);
    return rc;
}
static int32_t f32_result_reduce_scatter(void *self, ct_comm_ref comm, ct_device_ref device,
                                         const void *send, void *recv, uint64_t count,
                                         int32_t dtype, ct_error *err) {
    (void)self;
    CT_CHECK_INT(dtype, CT_DTYPE_BF16);
    float *wide = NULL;
    int32_t rc = widen(device, send, (uint64_t)comm.world_size * count, &wide, err);
    if (rc == CT_OK)
        rc = comm.vt->reduce_scatter(comm.self, wide, recv, count, CT_DTYPE_F32, CT_REDUCE_SUM,
                                     NULL, err);
    device.vt->free_mem(device.self, wide);
    return rc;
}

/* A pure-bf16 policy whose hooks hand back f32: no_shard and full_shard post-divide the f32
 * sums, so the gradient is the mean to f32 accuracy (expect_mean's tolerance, ~2^-23); a bf16
 * result would be off by up to 2^-9 relative. */
CT_TEST(strategy_post_divides_f32_sums_when_the_precision_hook_hands_back_f32) {
    static const ct_precision_vtable hooks = {.struct_size = sizeof hooks,
                                              .reduce_scatter = f32_result_reduce_scatter,
                                              .all_reduce = f32_result_all_reduce};
    static const char *const sos[] = {"strategy_no_shard.so", "strategy_full_shard.so"};
    for (int i = 0; i < 2; i++) {
        world_case wc = {.so = sos[i], .N = 4, .steps = 1, .micro = 1, .n_units = 2,
                         .numel = {301, 100}, .grad = grad_random,
                         .pol = policy(CT_DTYPE_BF16, CT_DTYPE_BF16, CT_DTYPE_BF16),
                         .precision = &hooks};
        wc.pol.result_dtype = CT_DTYPE_F32;
        case_alloc(&wc);
        if (run_world(&wc) == 0) check_result(&wc, expect_mean, "f32 result");
        case_free(&wc);
    }
}

/* ---- 4. ddp's wire dtype: the gradient's own, or the policy's ---------------------------- */

/* amp-like policy (f32 gradients, bf16 reduce dtype): DDP with reduce_dtype = grad keeps f32
 * (an autocast model's grads are f32), with reduce_dtype = policy it rounds to bf16 first. */
CT_TEST(strategy_ddp_reduces_in_the_gradient_dtype_unless_told_otherwise) {
    for (int policy_wire = 0; policy_wire < 2; policy_wire++) {
        world_case wc = {.so = "strategy_ddp.so", .N = 2, .steps = 1, .micro = 1, .n_units = 1,
                         .numel = {500}, .grad = grad_random,
                         .ini = policy_wire ? "reduce_dtype = policy\n" : NULL,
                         .pol = policy(CT_DTYPE_BF16, CT_DTYPE_BF16, CT_DTYPE_F32)};
        case_alloc(&wc);
        if (run_world(&wc) == 0) {
            int not_bf16 = 0;
            for (uint64_t i = 0; i < 500; i++) {
                double g = wc.got[0][0][i];
                not_bf16 += (double)ct_round_bf16((float)g) != g;
            }
            if (policy_wire) CT_CHECK_INT(not_bf16, 0);
            else {
                CT_CHECK_MSG(not_bf16 > 400, "only %d of 500 results carry f32 bits", not_bf16);
                check_result(&wc, expect_mean, "ddp f32 wire");
            }
        }
        case_free(&wc);
    }
}

/* ---- 5. full_shard's all-gather moves param_dtype; save_unit returns the f32 masters ------- */

typedef struct gather_case {
    int32_t  N, rank;
    uint64_t numel;
    uint16_t *gathered[MAX_RANKS]; /* padded-length copies of the gathered buffer */
    float    *saved[MAX_RANKS];
    uint64_t gathered_bytes[MAX_RANKS];
} gather_case;

static float master_value(uint64_t i) { return 1.0f + (float)i / 3.0f + 1e-5f * (float)i; }

static void gather_body(rank_ctx *rc, gather_case *gc) {
    const ct_strategy_vtable *vt = rc->svt;
    ct_precision_policy pol = policy(CT_DTYPE_BF16, CT_DTYPE_F32, CT_DTYPE_F32);
    uint64_t numel = gc->numel;
    ct_strategy_setup su = {.struct_size = sizeof su, .n_units = 1, .unit_numel = &numel,
                            .policy = &pol};
    float *full = calloc(numel, sizeof *full);
    for (uint64_t i = 0; i < numel; i++) full[i] = master_value(i);
    uint64_t P = ct_skit_padded_numel(numel, rc->world);
    const void *params;
    uint64_t pb, gb;
    gc->gathered[rc->rank] = calloc(P, sizeof(uint16_t));
    gc->saved[rc->rank] = calloc(numel, sizeof(float));
    if ((rc->rc = vt->setup(rc->strat, &su, &rc->err)) ||
        (rc->rc = vt->load_unit(rc->strat, 0, full, &rc->err)) ||
        (rc->rc = vt->acquire(rc->strat, 0, CT_PHASE_FORWARD, &params, &rc->err)) ||
        (rc->rc = rc->dev.vt->copy(rc->dev.self, gc->gathered[rc->rank], params, P * 2,
                                   CT_COPY_D2H, &rc->err)) ||
        (rc->rc = vt->release(rc->strat, 0, CT_PHASE_FORWARD, &rc->err)) ||
        (rc->rc = vt->save_unit(rc->strat, 0, gc->saved[rc->rank], &rc->err)) ||
        (rc->rc = vt->memory(rc->strat, &pb, &gb, &gc->gathered_bytes[rc->rank], &rc->err)))
        rc->comm.vt->abort(rc->comm.self, rc->err.message);
    free(full);
}

static gather_case *g_gather; /* set by the test thread before run_world, read by ranks */

static void *gather_main(void *p) {
    gather_body(p, g_gather);
    return NULL;
}

static int run_world_body(world_case *wc, void *(*body)(void *));

CT_TEST(strategy_full_shard_all_gather_moves_bf16_of_the_f32_master) {
    static const int32_t Ns[] = {1, 2, 4};
    for (int j = 0; j < 3; j++) {
        gather_case gc = {.N = Ns[j], .numel = 1001};
        world_case wc = {.so = "strategy_full_shard.so", .N = Ns[j]};
        g_gather = &gc;
        if (run_world_body(&wc, gather_main) == 0) {
            uint64_t P = ct_skit_padded_numel(gc.numel, gc.N);
            for (int32_t r = 0; r < gc.N; r++) {
                int bad = 0;
                for (uint64_t i = 0; i < P; i++) {
                    uint16_t want = i < gc.numel ? ct_bf16_from_f32(master_value(i)) : 0;
                    if (gc.gathered[r][i] != want && bad++ < 3)
                        ct_test_fail(__FILE__, __LINE__, "N=%d rank %d gathered[%llu]: expected"
                                     " bf16 0x%04x, got 0x%04x", gc.N, r, (unsigned long long)i,
                                     want, gc.gathered[r][i]);
                }
                for (uint64_t i = 0; i < gc.numel; i++)
                    if (gc.saved[r][i] != master_value(i) && bad++ < 3)
                        ct_test_fail(__FILE__, __LINE__, "N=%d rank %d saved[%llu]: expected"
                                     " %.9g, got %.9g", gc.N, r, (unsigned long long)i,
                                     master_value(i), gc.saved[r][i]);
                /* the gathered buffer is P bf16 values: 2 bytes each */
                CT_CHECK_INT(gc.gathered_bytes[r], P * 2);
            }
        }
        for (int32_t r = 0; r < MAX_RANKS; r++) free(gc.gathered[r]), free(gc.saved[r]);
    }
}

/* ---- 6. memory per rank ------------------------------------------------------------------ */

CT_TEST(strategy_full_shard_memory_per_rank_shrinks_as_one_over_n) {
    static const int32_t Ns[] = {1, 2, 4, 8};
    uint64_t base[2] = {0, 0};
    printf("  memory per rank, 4 units of 100000 elements, amp policy (bf16 params, f32 reduce)\n"
           "  %-10s %4s %12s %12s %12s %12s\n", "strategy", "N", "params", "grads", "gathered",
           "total");
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < 4; j++) {
            int32_t N = Ns[j];
            world_case wc = {.so = k ? "strategy_no_shard.so" : "strategy_full_shard.so",
                             .N = N, .steps = 1, .micro = 1, .n_units = 4,
                             .numel = {100000, 100000, 100000, 100000}, .grad = grad_const,
                             .value = 1.0,
                             .pol = policy(CT_DTYPE_BF16, CT_DTYPE_F32, CT_DTYPE_F32)};
            case_alloc(&wc);
            if (run_world(&wc) == 0) {
                uint64_t *m = wc.mem[N - 1];
                printf("  %-10s %4d %12llu %12llu %12llu %12llu\n", k ? "no_shard" : "full_shard",
                       N, (unsigned long long)m[0], (unsigned long long)m[1],
                       (unsigned long long)m[2], (unsigned long long)(m[0] + m[1] + m[2]));
                if (N == 1) base[0] = m[0], base[1] = m[1];
                if (k == 0) {
                    /* params: (4 + 2) bytes per owned element; padding adds < N*64 per unit */
                    uint64_t P = ct_skit_padded_numel(100000, N);
                    CT_CHECK_INT(m[0], 4 * (P / N) * 6);
                    CT_CHECK_CLOSE((double)m[0] * N, (double)base[0], 0.01, 0);
                    /* grads: f32 shards (4 B/elem) plus the unsharded f32 gradients at their
                     * peak: one unit's reduce-scatter in flight while the next is computed */
                    CT_CHECK_INT(m[1], 4 * (P / N) * 4 + 2 * P * 4);
                    /* gathered: at most two units (root + one block) of bf16 at a time */
                    CT_CHECK_INT(m[2], 2 * P * 2);
                } else {
                    uint64_t P = ct_skit_padded_numel(100000, N);
                    CT_CHECK_INT(m[0], 4 * P * 6); /* replicated: every rank holds it all */
                }
            }
            case_free(&wc);
        }
}

/* ---- 7. gather limits, reshard_after_forward, misuse ------------------------------------ */

typedef struct limit_case {
    int32_t  third_rc;     /* status of acquiring a third unit while two are held */
    uint64_t gathered_peak;
    int32_t  bad_release_rc;
} limit_case;

static limit_case *g_limit;

static void *limit_main(void *p) {
    rank_ctx *rc = p;
    const ct_strategy_vtable *vt = rc->svt;
    ct_precision_policy pol = policy(CT_DTYPE_BF16, CT_DTYPE_F32, CT_DTYPE_F32);
    uint64_t numel[3] = {640, 640, 640};
    ct_strategy_setup su = {.struct_size = sizeof su, .n_units = 3, .unit_numel = numel,
                            .policy = &pol};
    const void *p0, *p1, *p2;
    uint64_t pb, gb;
    ct_error e2 = {.struct_size = sizeof e2};
    if ((rc->rc = vt->setup(rc->strat, &su, &rc->err)) ||
        (rc->rc = vt->acquire(rc->strat, 0, CT_PHASE_FORWARD, &p0, &rc->err)) ||
        (rc->rc = vt->acquire(rc->strat, 1, CT_PHASE_FORWARD, &p1, &rc->err)))
        return NULL;
    g_limit->third_rc = vt->acquire(rc->strat, 2, CT_PHASE_FORWARD, &p2, &e2);
    if (g_limit->third_rc == CT_OK) vt->release(rc->strat, 2, CT_PHASE_FORWARD, &e2);
    else CT_CHECK_STR_CONTAINS(e2.message, "limit_all_gathers");
    if ((rc->rc = vt->release(rc->strat, 1, CT_PHASE_FORWARD, &rc->err)) ||
        (rc->rc = vt->release(rc->strat, 0, CT_PHASE_FORWARD, &rc->err)) ||
        (rc->rc = vt->acquire(rc->strat, 2, CT_PHASE_FORWARD, &p2, &rc->err)) ||
        (rc->rc = vt->release(rc->strat, 2, CT_PHASE_FORWARD, &rc->err)) ||
        (rc->rc = vt->memory(rc->strat, &pb, &gb, &g_limit->gathered_peak, &rc->err)))
        return NULL;
    g_limit->bad_release_rc = vt->release(rc->strat, 1, CT_PHASE_FORWARD, &e2);
    return NULL;
}

CT_TEST(strategy_full_shard_limit_all_gathers_and_reshard_after_forward) {
    /* 640 elements of bf16, world 1: one gathered unit is 1280 bytes */
    static const struct { const char *ini; int32_t third_ok; uint64_t peak; } cases[] = {
        {"", 0, 2 * 1280},                                   /* default: limit two */
        {"limit_all_gathers = false\n", 1, 3 * 1280},        /* three held at once */
        {"reshard_after_forward = false\n", 0, 3 * 1280},    /* kept after forward */
    };
    for (int i = 0; i < 3; i++) {
        limit_case lc = {0};
        g_limit = &lc;
        world_case wc = {.so = "strategy_full_shard.so", .ini = cases[i].ini, .N = 1};
        if (run_world_body(&wc, limit_main) == 0) {
            CT_CHECK_INT(lc.third_rc == CT_OK, cases[i].third_ok);
            CT_CHECK_INT(lc.gathered_peak, cases[i].peak);
            CT_CHECK_INT(lc.bad_release_rc, CT_ERR_INTERNAL);
        }
    }
}

/* ---- 8. grad_divide: FSDP2's AVG in the collective, SUM then divide ------------------------ */

/* grad_divide = avg at N = 3 over the threads engine's ring (one channel, NCCL's split): every
 * rank's bf16 gradient is premultiplied by bf16(1/3) = 0.333984375 and summed along the ring,
 * and nothing is divided. Written out here: full_shard's reduce-scatter of element i starts at
 * rank owner+1 and ends at the owner; no_shard's all-reduce cuts the padded unit into chunks
 * of ceil(P/3) rounded up to 8 elements (16 bytes), chunk c starting at rank c+1. */
static double expect_avg_ring(const world_case *wc, uint32_t u, uint64_t i, double *tol) {
    const int32_t N = wc->N;
    float s = ct_round_bf16((float)(1.0 / N));
    uint64_t P = ct_skit_padded_numel(wc->numel[u], N);
    int32_t first;
    if (!wc->replicated) {
        first = (int32_t)(i / (P / (uint64_t)N)) + 1; /* after the owner */
    } else {
        uint64_t cc = ((P + (uint64_t)N - 1) / (uint64_t)N + 7) / 8 * 8;
        first = (int32_t)(i / cc) + 1;
    }
    float acc = 0;
    for (int32_t k = 0; k < N; k++) {
        int32_t r = (first + k) % N;
        float p = ct_round_bf16((float)as_grad_dtype(wc, wc->grad(wc, 0, r, u, i)) * s);
        acc = k ? ct_round_bf16(acc + p) : p;
    }
    *tol = 0;
    return acc;
}

CT_TEST(strategy_grad_divide_avg_is_nccl_avg_in_the_collective_bit_for_bit) {
    static const char *const sos[] = {"strategy_full_shard.so", "strategy_no_shard.so"};
    for (int i = 0; i < 2; i++) {
        world_case avg = bf16_case(sos[i], 3, grad_random, 0);
        world_case fsdp1 = bf16_case(sos[i], 3, grad_random, 0);
        avg.ini = "grad_divide = avg\n";
        case_alloc(&avg), case_alloc(&fsdp1);
        if (run_world(&avg) == 0 && run_world(&fsdp1) == 0) {
            check_result(&avg, expect_avg_ring, "avg N=3");
            /* bf16(1/3) is 0.2% above 1/3: AVG's mean is N bf16(1/N) = 1.00195 x FSDP1's */
            double ratio = 0;
            int64_t n = 0;
            for (uint32_t u = 0; u < avg.n_units; u++)
                for (uint64_t k = 0; k < avg.numel[u]; k++)
                    for (int32_t r = 0; r < 3; r++) {
                        double a = avg.got[r][u][k], f = fsdp1.got[r][u][k];
                        if (isnan(a) || fabs(f) < 0.05) continue;
                        ratio += a / f, n++;
                    }
            ratio /= (double)n;
            CT_CHECK_MSG(fabs(ratio - 3 * 0.333984375) < 5e-4, "%s: AVG / FSDP1 = %.6f over %lld"
                         " elements, expected %.6f", sos[i], ratio, (long long)n,
                         3 * 0.333984375);
        }
        case_free(&avg), case_free(&fsdp1);
    }
}

/* At N a power of two, bf16(1/N) = 1/N and every premultiply is exact: AVG, FSDP1's pre/post
 * divide, SUM-then-divide and DDP's divide first give the same bits. */
CT_TEST(strategy_grad_divide_modes_agree_bit_for_bit_at_power_of_two_n) {
    static const char *const sos[] = {"strategy_full_shard.so", "strategy_no_shard.so",
                                      "strategy_ddp.so"};
    static const char *const other[] = {"grad_divide = post\n", "grad_divide = post\n",
                                        "grad_divide = pre\n"};
    for (int i = 0; i < 3; i++) {
        world_case a = bf16_case(sos[i], 4, grad_random, 0), b = a, c = a;
        a.ini = "grad_divide = avg\n";
        b.ini = other[i];
        case_alloc(&a), case_alloc(&b), case_alloc(&c);
        if (run_world(&a) == 0 && run_world(&b) == 0 && run_world(&c) == 0) {
            int bad = 0;
            for (uint32_t u = 0; u < a.n_units; u++)
                for (uint64_t k = 0; k < a.numel[u]; k++)
                    for (int32_t r = 0; r < 4; r++) {
                        double x = a.got[r][u][k], y = b.got[r][u][k], z = c.got[r][u][k];
                        if (isnan(x) && isnan(y) && isnan(z)) continue;
                        if ((x != y || x != z) && bad++ < 3)
                            ct_test_fail(__FILE__, __LINE__, "%s unit %u [%llu] rank %d: avg "
                                         "%.9g, %s%.9g, default %.9g", sos[i], u,
                                         (unsigned long long)k, (int)r, x, other[i], y, z);
                    }
        }
        case_free(&a), case_free(&b), case_free(&c);
    }
}

/* A precision plugin that reduces through its own (summing) hook cannot average in the
 * collective: setup says so. */
CT_TEST(strategy_grad_divide_avg_refuses_a_precision_reduction_hook) {
    static const ct_precision_vtable hooks = {.struct_size = sizeof hooks,
                                              .reduce_scatter = hook_reduce_scatter,
                                              .all_reduce = hook_all_reduce};
    static const char *const sos[] = {"strategy_ddp.so", "strategy_no_shard.so",
                                      "strategy_full_shard.so"};
    for (int i = 0; i < 3; i++) {
        hook_counts counts = {0, 0, PTHREAD_MUTEX_INITIALIZER};
        world_case wc = {.so = sos[i], .ini = "grad_divide = avg\n", .N = 2, .steps = 1,
                         .micro = 1, .n_units = 1, .numel = {100}, .grad = grad_random,
                         .pol = policy(CT_DTYPE_BF16, CT_DTYPE_BF16, CT_DTYPE_BF16),
                         .precision = &hooks, .precision_self = &counts,
                         .expect_error = "grad_divide = avg averages in the comm's collective"};
        case_alloc(&wc);
        int failed = run_world(&wc);
        CT_CHECK_MSG(failed && wc.got_expected, "%s: avg with a summing hook was not refused",
                     sos[i]);
        CT_CHECK_INT(counts.all_reduce + counts.reduce_scatter, 0);
        case_free(&wc);
    }
}

/* ---- 9. the kit's arithmetic --------------------------------------------------------------- */

CT_TEST(strategy_kit_divide_factors_match_fsdp1) {
    /* worked by hand from FSDP1's loop: f = 1; while N % f == 0 and N / f > f: f *= 2 */
    static const int32_t N[] = {1, 2, 3, 4, 6, 8, 12, 16, 32, 64, 128, 256};
    static const int32_t F[] = {1, 2, 2, 2, 4, 4, 4, 4, 8, 8, 16, 16};
    for (int i = 0; i < 12; i++) {
        CT_CHECK_INT(ct_skit_predivide_factor(N[i]), F[i]);
        CT_CHECK_CLOSE(ct_skit_predivide_factor(N[i]) * ct_skit_postdivide_factor(N[i]), N[i], 0, 0);
    }
    CT_CHECK_CLOSE(ct_skit_postdivide_factor(3), 1.5, 0, 0); /* N/f in floating point, as FSDP1 */
    CT_CHECK_INT(ct_skit_padded_numel(1000, 4), 1024);
    CT_CHECK_INT(ct_skit_padded_numel(1025, 4), 1280);
    CT_CHECK_INT(ct_skit_padded_numel(0, 2), 128);
    CT_CHECK_INT(ct_skit_padded_numel(128, 2), 128);
}

/* run_world with a custom rank body instead of rank_main (wc->N ranks, [strategy] from wc). */
static int run_world_body(world_case *wc, void *(*body)(void *)) {
    wc->body = body;
    return run_world(wc);
}
