/* check_precision.c — check-plugin's checks of a precision policy: policy() gives dtypes the
 * host and the built-in strategies can hold; 50 create/destroy cycles; a master other than f32
 * through a checkpoint (check_master_round_trip); the loss-scale protocol; and, when the plugin
 * provides custom reductions (ct_precision_vtable reduce_scatter / all_reduce), each hook run by
 * real rank threads of the threads comm engine at N = 1, 2, 3 and 8 ranks (each rank with its
 * own device, comm and precision instance, as rank.c makes them) in the declared reduce dtype,
 * against an fp64 sum. Every element has one rank contributing a large distinctive value, and
 * every rank is that rank for some elements, so a dropped contribution cannot hide.
 *
 * Tolerance per element: 2N units of roundoff of the reduce dtype times sum_r |x_r| (bf16: u =
 * 2^-8, so N * 2^-7; f32: u = 2^-24, so N * 2^-23): the N-1 roundings of a ring, one per
 * contribution on its way to the wire (premultiplying policies) and one on the way out, each at
 * most one unit in the last place (2u) under stochastic rounding.
 * The world-1 checks run in one child process and each world size's in another (check_child.c);
 * the hooks' buffers are fenced (check_guard.c), so a write past one is named.
 * Not for: the comm engines' own arithmetic (tests/unit/test_comm_threads.c).
 * Shape legend: N ranks, n elements of a result.
 */
#include "check/check.h"

#include "plugin/calls.h"
#include "plugin/contract.h"

#include <ctrain/numerics.h>
#include <ctrain/precision_kit.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum { MAXN = 8, RS_N = 97, AR_N = 301, CYCLES = 50 };

static const int32_t worlds[] = {1, 2, 3, 8};

typedef enum { RS = 0, AR = 1, AR_INPLACE = 2, N_CALLS = 3 } call_kind;
static const char *const call_names[] = {"reduce_scatter hook", "all_reduce hook",
                                         "all_reduce hook in place"};

typedef struct prec_world prec_world;

typedef struct rank_slot {
    prec_world    *w;
    int32_t        rank;
    check_instance dev, comm, prec;
    ct_device_ref  devref;
    ct_comm_ref    commref;
    double        *result[N_CALLS]; /* (n) host copies of what the hooks returned, as double */
    int32_t        send_changed[N_CALLS]; /* an out-of-place hook wrote into its const send */
    int32_t        rc;
    ct_error       err;
} rank_slot;

struct prec_world {
    host_check                  *c;
    const host_config           *cfg;
    const host_plugin           *threads;
    const ct_precision_vtable *pv;
    int32_t                    n, dtype; /* dtype: the wire (send) dtype, reduce_dtype */
    int32_t                    result;   /* recv's dtype: the policy's result_dtype (ABI 1.2) */
    void                      *world;
    rank_slot                  slots[MAXN];
};

/* Rank r's contribution to element i of a result: rank i % N gives a large distinctive value
 * (64..128), the others +-(0.5..1); rounded to the reduce dtype. */
static double contribution(int32_t dtype, int32_t N, int32_t r, uint64_t i, int call) {
    double u = 0.5 * (check_urand(CHECK_SEED + 10 + (uint64_t)call, i * MAXN + (uint64_t)r) + 1);
    double s = ct_hash64(CHECK_SEED + 20 + (uint64_t)call, i * MAXN + (uint64_t)r) & 1 ? -1 : 1;
    double x = (r == (int32_t)(i % (uint64_t)N) ? 64.0 * (1.0 + u) : 0.5 * (1.0 + u)) * s;
    return dtype == CT_DTYPE_BF16  ? ct_round_bf16((float)x)
           : dtype == CT_DTYPE_F16 ? ct_round_f16((float)x)
                                   : (double)(float)x;
}

static int32_t to_device(rank_slot *s, void *dst, const double *x, uint64_t n) {
    size_t es = ct_dtype_size(s->w->dtype);
    void *h = malloc(n * es);
    if (!h) return ct_error_set(&s->err, CT_ERR_NOMEM, "out of memory");
    for (uint64_t i = 0; i < n; i++) {
        if (s->w->dtype == CT_DTYPE_BF16) ((uint16_t *)h)[i] = ct_bf16_from_f32((float)x[i]);
        else if (s->w->dtype == CT_DTYPE_F16) ((uint16_t *)h)[i] = ct_f16_from_f32((float)x[i]);
        else ((float *)h)[i] = (float)x[i];
    }
    int32_t rc = CALLS(s->dev.plugin, "copy",
                       s->devref.vt->copy(s->devref.self, dst, h, n * es, CT_COPY_H2D, &s->err));
    free(h);
    return rc;
}

static int32_t from_device(rank_slot *s, double *x, const void *src, uint64_t n, int32_t dtype) {
    size_t es = ct_dtype_size(dtype);
    void *h = malloc(n * es);
    if (!h) return ct_error_set(&s->err, CT_ERR_NOMEM, "out of memory");
    int32_t rc = CALLS(s->dev.plugin, "copy",
                       s->devref.vt->copy(s->devref.self, h, src, n * es, CT_COPY_D2H, &s->err));
    for (uint64_t i = 0; rc == CT_OK && i < n; i++)
        x[i] = dtype == CT_DTYPE_BF16  ? ct_bf16_to_f32(((uint16_t *)h)[i])
               : dtype == CT_DTYPE_F16 ? ct_f16_to_f32(((uint16_t *)h)[i])
                                       : ((float *)h)[i];
    free(h);
    return rc;
}

/* One rank: each provided hook once (reduce_scatter, all_reduce, all_reduce in place). */
static void *rank_main(void *arg) {
    rank_slot *s = arg;
    prec_world *w = s->w;
    const int32_t N = w->n;
    size_t es = ct_dtype_size(w->dtype), res = ct_dtype_size(w->result);
    calls_bind(1 + s->rank, s->rank); /* a fault report names the rank and the hook */
    double *x = malloc(sizeof(double) * (uint64_t)N * AR_N);
    /* fenced (check_guard.c): device cpu's memory is host memory */
    char send_name[32], recv_name[32];
    snprintf(send_name, sizeof send_name, "send (rank %d)", (int)s->rank);
    snprintf(recv_name, sizeof recv_name, "recv (rank %d)", (int)s->rank);
    void *send = check_buf_alloc(send_name, (uint64_t)N * AR_N * es, 0);
    void *recv = send ? check_buf_alloc(recv_name, (uint64_t)N * AR_N * res, 0) : NULL;
    s->rc = x && recv ? CT_OK : ct_error_set(&s->err, CT_ERR_NOMEM, "out of memory");
    for (int call = 0; call < N_CALLS && s->rc == CT_OK; call++) {
        if (call == RS && !w->pv->reduce_scatter) continue;
        if (call != RS && !w->pv->all_reduce) continue;
        if (call == AR_INPLACE && w->result != w->dtype) continue; /* not allowed then */
        /* reduce_scatter: block b of the send buffer is result element b*n + j's input */
        uint64_t n = call == RS ? RS_N : AR_N, total = call == RS ? (uint64_t)N * RS_N : AR_N;
        for (uint64_t i = 0; i < total; i++) x[i] = contribution(w->dtype, N, s->rank, i, call);
        int32_t rc = to_device(s, send, x, total);
        const host_plugin *p = w->c->plugin;
        const char *hook = call == RS ? "reduce_scatter" : "all_reduce";
        if (rc == CT_OK && call == RS)
            rc = CALLS(p, "reduce_scatter",
                       w->pv->reduce_scatter(s->prec.self, s->commref, s->devref, send, recv, n,
                                             w->dtype, &s->err));
        else if (rc == CT_OK)
            rc = CALLS(p, "all_reduce",
                       w->pv->all_reduce(s->prec.self, s->commref, s->devref, send,
                                         call == AR_INPLACE ? send : recv, n, w->dtype,
                                         &s->err));
        char why[sizeof s->err.message];
        if (rc == CT_OK && (!check_buf_verify(send, hook, why, sizeof why) ||
                            !check_buf_verify(recv, hook, why, sizeof why)))
            rc = ct_error_set(&s->err, CT_ERR_INVALID, "%s", why);
        contract_name_silent_error(rc, &s->err, p, hook);
        if (rc == CT_OK)
            rc = from_device(s, s->result[call], call == AR_INPLACE ? send : recv, n, w->result);
        /* send is const for the out-of-place calls: read it back */
        if (rc == CT_OK && call != AR_INPLACE) {
            double *back = malloc(sizeof(double) * total);
            if (!back) rc = ct_error_set(&s->err, CT_ERR_NOMEM, "out of memory");
            else if ((rc = from_device(s, back, send, total, w->dtype)) == CT_OK)
                for (uint64_t i = 0; i < total; i++)
                    if (back[i] != x[i]) s->send_changed[call] = 1;
            free(back);
        }
        s->rc = rc;
    }
    if (s->rc != CT_OK && s->commref.vt && s->commref.vt->abort)
        CALLS_VOID(w->threads, "abort", s->commref.vt->abort(s->commref.self, s->err.message));
    check_buf_free(recv);
    check_buf_free(send);
    free(x);
    calls_unbind();
    return NULL;
}

static void world_close(prec_world *w) {
    for (int32_t r = 0; r < w->n; r++) {
        rank_slot *s = &w->slots[r];
        check_destroy(&s->prec);
        check_destroy(&s->comm);
        check_destroy(&s->dev);
        for (int k = 0; k < N_CALLS; k++) free(s->result[k]), s->result[k] = NULL;
    }
    if (w->world)
        CALLS_VOID(w->threads, "world_destroy",
                   ((const ct_comm_vtable *)w->threads->vtable)->world_destroy(w->world));
    w->world = NULL;
}

/* A world of N ranks: threads engine, and per rank device cpu, comm threads, the policy. */
static int32_t world_open(prec_world *w, int32_t N, ct_error *err) {
    const ct_comm_vtable *cv = w->threads->vtable;
    ct_host wh;
    hostapi_init(&wh, w->cfg, 0, "threads", NULL);
    ct_create_args wa = {.struct_size = sizeof wa, .api = hostapi_table(), .host = &wh,
                         .section = "comm", .world_size = N, .seed = CHECK_SEED};
    w->n = N;
    memset(w->slots, 0, sizeof w->slots);
    if (!(w->world = CALLS(w->threads, "world_create", cv->world_create(N, &wa, err))))
        return err->code ? err->code : CT_ERR_COMM;
    for (int32_t r = 0; r < N; r++) {
        rank_slot *s = &w->slots[r];
        s->w = w;
        s->rank = r;
        s->err.struct_size = sizeof s->err;
        for (int k = 0; k < N_CALLS; k++)
            if (!(s->result[k] = calloc(AR_N, sizeof(double))))
                return ct_error_set(err, CT_ERR_NOMEM, "out of memory");
        ct_comm_ref no_comm = {0};
        int32_t rc = check_device_open(w->c, w->cfg, r, &s->dev, &s->devref, err);
        if (rc == CT_OK)
            rc = check_create(&s->comm, w->threads, w->cfg, "comm", r, N, s->devref, no_comm,
                              w->world, err);
        if (rc != CT_OK) return rc;
        s->commref = (ct_comm_ref){cv, s->comm.self, r, N};
        rc = check_create(&s->prec, w->c->plugin, w->cfg, "precision", r, N, s->devref,
                          s->commref, NULL, err);
        if (rc != CT_OK) return rc;
    }
    return CT_OK;
}

/* Compare call `call`'s results of every rank with the fp64 sums. */
static void judge(prec_world *w, int call) {
    host_check *c = w->c;
    const int32_t N = w->n;
    const int ulog = w->result == CT_DTYPE_BF16 ? -8 : w->result == CT_DTYPE_F16 ? -11 : -24;
    const double u = ldexp(1, ulog);
    double worst = 0, w_ref = 0, w_got = 0, w_tol = 0;
    int32_t w_rank = 0, same = 1;
    uint64_t w_i = 0, n = call == RS ? RS_N : AR_N;
    for (int32_t r = 0; r < N; r++) {
        for (uint64_t j = 0; j < n; j++) {
            uint64_t i = call == RS ? (uint64_t)r * RS_N + j : j; /* the element's input index */
            double ref = 0, abs_sum = 0;
            for (int32_t k = 0; k < N; k++) {
                double x = contribution(w->dtype, N, k, i, call);
                ref += x;
                abs_sum += fabs(x);
            }
            double tol = 2.0 * N * u * abs_sum, got = w->slots[r].result[call][j];
            double ratio = isfinite(got) ? fabs(got - ref) / tol : INFINITY;
            if (!(ratio <= worst))
                worst = ratio, w_ref = ref, w_got = got, w_tol = tol, w_rank = r, w_i = i;
            if (call != RS && got != w->slots[0].result[call][j]) same = 0;
        }
    }
    if (worst <= 1) {
        check_verdict(c, 1, "%s at N=%d matches an fp64 sum (max err %.2g of tol; tol 2N x "
                      "2^%d x sum|x|)", call_names[call], (int)N, worst,
                      ulog);
    } else {
        /* whose contribution would explain it? */
        int32_t missing = -1;
        for (int32_t k = 0; k < N && N > 1; k++) {
            double x = contribution(w->dtype, N, k, w_i, call);
            if (fabs(w_got - (w_ref - x)) <= w_tol) missing = k;
        }
        char why[96] = "";
        if (missing >= 0)
            snprintf(why, sizeof why, " (rank %d's contribution is missing)", (int)missing);
        check_verdict(c, 0, "%s at N=%d matches an fp64 sum: rank %d element %llu: expected "
                      "%.9g got %.9g tol %.3g%s", call_names[call], (int)N, (int)w_rank,
                      (unsigned long long)(call == RS ? w_i % RS_N : w_i), w_ref, w_got, w_tol,
                      why);
    }
    if (call != RS)
        check_verdict(c, same, "%s at N=%d: every rank receives the same bits%s",
                      call_names[call], (int)N, same ? "" : ": ranks differ");
    if (call != AR_INPLACE) {
        int32_t changed = -1;
        for (int32_t r = 0; r < N && changed < 0; r++)
            if (w->slots[r].send_changed[call]) changed = r;
        if (changed < 0)
            check_verdict(c, 1, "%s at N=%d leaves its (const) send buffer as it was",
                          call_names[call], (int)N);
        else
            check_verdict(c, 0, "%s at N=%d leaves its (const) send buffer as it was: rank %d's "
                          "send buffer was written to", call_names[call], (int)N, (int)changed);
    }
}

static int policy_dtype_ok(int32_t d) {
    return d == CT_DTYPE_F32 || d == CT_DTYPE_BF16 || d == CT_DTYPE_F16;
}

/* What every check needs: the configuration (the plugin's section from --set, device cpu, comm
 * threads) and the threads engine. */
typedef struct prec_setup {
    host_config       *cfg;
    const host_plugin *threads;
} prec_setup;

static int setup_open(host_check *c, prec_setup *su, ct_error *err) {
    static const char *const skip[] = {"plugin", NULL};
    static const char *const comm_skip[] = {"plugin", "world_size", NULL};
    memset(su, 0, sizeof *su);
    int32_t rc = check_config(c, "[device]\nthreads = 1\n[comm]\ntimeout_s = 20\n", "precision",
                              skip, &su->cfg, err);
    if (rc == CT_OK) rc = check_device_section(c, su->cfg, err);
    if (rc == CT_OK && !(su->threads = registry_resolve(c->reg, CT_KIND_COMM, "threads", err)))
        rc = err->code ? err->code : CT_ERR_INVALID;
    if (rc == CT_OK)
        rc = config_validate_section(su->cfg, "comm", su->threads->params, sizeof(ct_param_spec),
                                     su->threads->desc.name, comm_skip, err);
    return rc == CT_OK;
}

/* What the world-1 check hands to the reduction checks. */
typedef struct prec_policy {
    ct_precision_policy pol;
    int32_t             ok;
} prec_policy;

/* The loss-scale protocol (ABI 1.7, any of its members given): loss_scale finite and > 0
 * through 40 verdicts (20 overflows, 20 clean steps) that after_reduce accepts with skip 0 or 1;
 * state_save fits CT_PRECISION_STATE_MAX and state_load of it into a fresh instance gives the
 * same loss_scale. One verdict. */
static void check_loss_scale(host_check *c, prec_setup *su, prec_world *w) {
    const ct_precision_vtable *pv = c->plugin->vtable;
    void *self = w->slots[0].prec.self;
    ct_error err = {.struct_size = sizeof err};
    char why[sizeof err.message + 64] = "";
    int32_t rc = CT_OK;
    double first = pv->loss_scale ? CALLS(c->plugin, "loss_scale", pv->loss_scale(self)) : 1;
    int skips = 0;
    for (int i = 0; i < 40 && rc == CT_OK && !why[0]; i++) {
        int32_t skip = -1;
        if (pv->after_reduce) {
            rc = CALLS(c->plugin, "after_reduce", pv->after_reduce(self, i >= 20, &skip, &err));
            if (rc != CT_OK) contract_name_silent_error(rc, &err, c->plugin, "after_reduce");
            else if (skip != 0 && skip != 1)
                snprintf(why, sizeof why, "after_reduce set skip = %d (expected 0 or 1)",
                         (int)skip);
            skips += skip == 1;
        }
        double s = pv->loss_scale ? CALLS(c->plugin, "loss_scale", pv->loss_scale(self)) : 1;
        if (!why[0] && rc == CT_OK && !(isfinite(s) && s > 0))
            snprintf(why, sizeof why, "loss_scale() = %g after verdict %d (expected finite, "
                     "> 0)", s, i);
    }
    if (rc != CT_OK && !why[0]) snprintf(why, sizeof why, "%s", err.message);
    if (!why[0] && (pv->state_save || pv->state_load)) {
        unsigned char blob[CT_PRECISION_STATE_MAX];
        uint64_t size = 0;
        check_instance inst;
        if (!pv->state_save || !pv->state_load)
            snprintf(why, sizeof why, "state_save and state_load come as a pair");
        else if ((rc = CALLS(c->plugin, "state_save",
                             pv->state_save(self, blob, sizeof blob, &size, &err))) != CT_OK)
            snprintf(why, sizeof why, "state_save: %s", err.message);
        else if (size > sizeof blob)
            snprintf(why, sizeof why, "state_save wrote %llu bytes (at most %d)",
                     (unsigned long long)size, CT_PRECISION_STATE_MAX);
        else if ((rc = check_create(&inst, c->plugin, su->cfg, "precision", 0, 1,
                                    w->slots[0].devref, w->slots[0].commref, NULL, &err)) !=
                 CT_OK)
            snprintf(why, sizeof why, "create: %s", err.message);
        else {
            rc = CALLS(c->plugin, "state_load", pv->state_load(inst.self, blob, size, &err));
            double a = pv->loss_scale ? pv->loss_scale(self) : 1;
            double b = pv->loss_scale ? pv->loss_scale(inst.self) : 1;
            if (rc != CT_OK)
                snprintf(why, sizeof why, "state_load of what state_save wrote: %s", err.message);
            else if (a != b)
                snprintf(why, sizeof why, "loss_scale() after state_load is %g, saved %g", b, a);
            check_destroy(&inst);
        }
    }
    check_verdict(c, !why[0], "loss-scale protocol: scale %g at the start, finite and > 0 "
                  "through 20 overflows and 20 clean steps (%d skipped), state saved and loaded"
                  "%s%s", first, skips, why[0] ? ": " : "", why);
}

/* A low-precision master through a checkpoint (ABI 1.7, a policy whose master is not f32): MN
 * master elements in two shards of N = 2 ranks take MK steps of small updates (about 1/50 of
 * an ulp, signs mixed) written back with the policy's rule as the host does
 * (ct_pkit_master_write_bf16: element index, step and seed as in a run); the master and its
 * compensation are saved as the checkpoint stores them (widened to f32) and loaded by a fresh
 * instance of the plugin into one shard (N = 1: a reshard), rounded back as the host loads
 * them: the same bits; then MK more steps from the loaded state under the new instance's policy
 * and from the saved one under the first's give the same bits (the resume is bit for bit only
 * when every instance answers the same rule). One verdict. */
enum { MN = 1000, MK = 20 };

/* k steps from step `from` + 1 of the master w (and compensation c) under rule, in `shards`
 * equal shards (element index = the shard's offset + i, as in a unit's flat buffer). */
static void master_steps(int32_t rule, uint16_t *w, uint16_t *c, int shards, int64_t from,
                         int k) {
    float x[MN];
    for (int64_t step = from + 1; step <= from + k; step++) {
        for (int i = 0; i < MN; i++) {
            float v = ct_bf16_to_f32(w[i]);
            double g = check_urand(CHECK_SEED + 40 + (uint64_t)step, (uint64_t)i);
            x[i] = v + (float)(g * 0.02 * fabs(v) * 0x1p-7); /* ~1/50 ulp of bf16 */
        }
        uint64_t per = MN / (uint64_t)shards;
        for (int sh = 0; sh < shards; sh++)
            ct_pkit_master_write_bf16(rule, w + sh * per, c + sh * per, x + sh * per, per,
                                      CHECK_SEED, step, 0, sh * per);
    }
}

static void check_master_round_trip(host_check *c, prec_setup *su, prec_world *w,
                                    const ct_precision_policy *pol) {
    const ct_precision_vtable *pv = c->plugin->vtable;
    ct_error err = {.struct_size = sizeof err};
    char why[sizeof err.message + 128] = "";
    uint16_t m[MN], comp[MN] = {0}, m2[MN], comp2[MN];
    float saved_m[MN], saved_c[MN];
    for (int i = 0; i < MN; i++)
        m[i] = ct_bf16_from_f32((float)(0.5 + check_urand(CHECK_SEED + 30, (uint64_t)i)));
    const int32_t rule = pol->master_update;
    master_steps(rule, m, comp, 2, 0, MK);
    int moved = 0;
    for (int i = 0; i < MN; i++) { /* what the checkpoint holds: f32, widened exactly */
        saved_m[i] = ct_bf16_to_f32(m[i]);
        saved_c[i] = ct_bf16_to_f32(comp[i]);
        moved += comp[i] != 0;
    }
    /* the resuming instance: the last of three fresh ones, each asked for its policy */
    ct_precision_policy p2 = {.struct_size = sizeof p2};
    for (int k = 0; k < 3; k++) {
        check_instance inst;
        int32_t rc = check_create(&inst, c->plugin, su->cfg, "precision", 0, 1,
                                  w->slots[0].devref, w->slots[0].commref, NULL, &err);
        if (rc != CT_OK) {
            snprintf(why, sizeof why, "create: %s", err.message);
            goto out;
        }
        memset(&p2, 0, sizeof p2);
        p2.struct_size = sizeof p2;
        rc = CALLS(c->plugin, "policy", pv->policy(inst.self, &p2, &err));
        check_destroy(&inst);
        if (rc != CT_OK) {
            snprintf(why, sizeof why, "policy() of a fresh instance: %s", err.message);
            goto out;
        }
        if (p2.master_dtype != pol->master_dtype || p2.master_update != pol->master_update) {
            snprintf(why, sizeof why, "fresh instance %d's policy says master %s update %s, the "
                     "first said %s update %s: a resumed run would write its master otherwise",
                     k + 1, ct_dtype_name(p2.master_dtype),
                     ct_pkit_master_update_name(p2.master_update),
                     ct_dtype_name(pol->master_dtype),
                     ct_pkit_master_update_name(pol->master_update));
            goto out;
        }
    }
    for (int i = 0; i < MN; i++) { /* loaded as the host loads it: rounded to nearest even */
        m2[i] = ct_bf16_from_f32(saved_m[i]);
        comp2[i] = ct_bf16_from_f32(saved_c[i]);
        if (!why[0] && (m2[i] != m[i] || comp2[i] != comp[i]))
            snprintf(why, sizeof why, "element %d: saved master 0x%04x compensation 0x%04x, "
                     "loaded 0x%04x 0x%04x", i, m[i], comp[i], m2[i], comp2[i]);
    }
    if (why[0]) goto out;
    master_steps(rule, m, comp, 2, MK, MK);
    master_steps(p2.master_update, m2, comp2, 1, MK, MK);
    for (int i = 0; i < MN && !why[0]; i++)
        if (m2[i] != m[i] || (rule == CT_MASTER_KAHAN && comp2[i] != comp[i]))
            snprintf(why, sizeof why, "after %d more steps, element %d: straight 0x%04x, "
                     "resumed at N = 1 0x%04x", MK, i, m[i], m2[i]);
out:
    check_verdict(c, !why[0], "master %s (update %s) through a checkpoint: %d steps at N = 2, "
                  "saved widened to f32, loaded by a fresh instance at N = 1 with the same bits "
                  "(%d compensation values non-zero), %d more steps equal bit for bit%s%s",
                  ct_dtype_name(pol->master_dtype), ct_pkit_master_update_name(rule), MK, moved,
                  MK, why[0] ? ": " : "", why);
}

/* create, policy, destroy, 50 times, at world 1 (one child) */
static void body_policy(host_check *c, void *ctx, void *out) {
    (void)ctx;
    prec_policy *res = out;
    const ct_precision_vtable *pv = c->plugin->vtable;
    ct_error err = {.struct_size = sizeof err};
    prec_setup su;
    prec_world w;
    memset(&w, 0, sizeof w);
    if (!setup_open(c, &su, &err)) {
        check_verdict(c, 0, "set-up ([precision] from --set, device cpu, comm threads): %s",
                      err.message);
        check_stop(c);
        goto out;
    }
    w.c = c;
    w.cfg = su.cfg;
    w.threads = su.threads;
    w.pv = pv;
    if (world_open(&w, 1, &err) != CT_OK) {
        check_verdict(c, 0, "create at world 1: %s", err.message);
        check_stop(c);
        goto out_world;
    }
    ct_precision_policy pol = {.struct_size = sizeof pol};
    int32_t rc = CALLS(c->plugin, "policy", pv->policy(w.slots[0].prec.self, &pol, &err));
    if (rc != CT_OK) {
        contract_name_silent_error(rc, &err, c->plugin, "policy");
        check_verdict(c, 0, "policy(): %s", err.message);
        check_stop(c);
        goto out_world;
    }
    int ok = policy_dtype_ok(pol.param_dtype) && policy_dtype_ok(pol.reduce_dtype) &&
             ct_pkit_master_ok(&pol) && policy_dtype_ok(pol.grad_accum_dtype) &&
             (pol.buffer_dtype == 0 || policy_dtype_ok(pol.buffer_dtype));
    char rule[48] = "";
    if (pol.master_dtype != CT_DTYPE_F32)
        snprintf(rule, sizeof rule, " (update %s = %d)",
                 ct_pkit_master_update_name(pol.master_update), (int)pol.master_update);
    check_verdict(c, ok, "policy() gives valid dtypes: param %s, reduce %s, master %s%s, "
                  "grad_accum %s, buffer %s%s", ct_dtype_name(pol.param_dtype),
                  ct_dtype_name(pol.reduce_dtype), ct_dtype_name(pol.master_dtype), rule,
                  ct_dtype_name(pol.grad_accum_dtype), ct_dtype_name(pol.buffer_dtype),
                  ok ? "" : " (expected param, reduce and grad_accum f32, bf16 or f16, master f32 "
                            "or bf16 with update 0 nearest, 1 sr or 2 kahan, buffer f32, bf16, "
                            "f16 or unset)");
    int i = 0;
    for (; i < CYCLES; i++) {
        check_instance inst;
        rc = check_create(&inst, c->plugin, su.cfg, "precision", 0, 1, w.slots[0].devref,
                          w.slots[0].commref, NULL, &err);
        ct_precision_policy p2 = {.struct_size = sizeof p2};
        if (rc == CT_OK) rc = CALLS(c->plugin, "policy", pv->policy(inst.self, &p2, &err));
        if (rc != CT_OK) contract_name_silent_error(rc, &err, c->plugin, "policy");
        check_destroy(&inst);
        if (rc != CT_OK) break;
    }
    check_verdict(c, i == CYCLES, "create, policy, destroy %d times%s%s", CYCLES,
                  i == CYCLES ? "" : ": ", i == CYCLES ? "" : err.message);
    if (pv->loss_scale || pv->after_reduce || pv->state_save || pv->state_load)
        check_loss_scale(c, &su, &w);
    if (ok && pol.master_dtype != CT_DTYPE_F32) check_master_round_trip(c, &su, &w, &pol);
    res->pol = pol;
    res->ok = ok;
out_world:
    world_close(&w);
out:
    if (su.cfg) config_free(su.cfg);
}

/* The reduction hooks at world N (one child per N): ctx is the prec_policy of body_policy. */
typedef struct prec_reduce {
    const prec_policy *policy;
    int32_t            n;
} prec_reduce;

static void body_reduce(host_check *c, void *ctx, void *out) {
    (void)out;
    const prec_reduce *job = ctx;
    const ct_precision_vtable *pv = c->plugin->vtable;
    const int32_t N = job->n;
    ct_error err = {.struct_size = sizeof err};
    prec_setup su;
    prec_world w;
    memset(&w, 0, sizeof w);
    if (!setup_open(c, &su, &err)) {
        check_verdict(c, 0, "set-up at N=%d: %s", (int)N, err.message);
        goto out;
    }
    w.c = c;
    w.cfg = su.cfg;
    w.threads = su.threads;
    w.pv = pv;
    w.dtype = job->policy->pol.reduce_dtype;
    w.result = job->policy->pol.result_dtype ? job->policy->pol.result_dtype : w.dtype;
    if (world_open(&w, N, &err) != CT_OK) {
        check_verdict(c, 0, "a world of %d ranks (threads engine): %s", (int)N, err.message);
        goto out_world;
    }
    pthread_t tid[MAXN];
    for (int32_t r = 0; r < N; r++) pthread_create(&tid[r], NULL, rank_main, &w.slots[r]);
    for (int32_t r = 0; r < N; r++) pthread_join(tid[r], NULL);
    const rank_slot *bad = NULL;
    for (int32_t r = 0; r < N && !bad; r++)
        if (w.slots[r].rc != CT_OK && w.slots[r].rc != CT_ERR_COMM) bad = &w.slots[r];
    for (int32_t r = 0; r < N && !bad; r++)
        if (w.slots[r].rc != CT_OK) bad = &w.slots[r];
    if (bad)
        check_verdict(c, 0, "reduction hooks at N=%d in %s: rank %d: %s", (int)N,
                      ct_dtype_name(w.dtype), (int)bad->rank, bad->err.message);
    else
        for (int call = 0; call < N_CALLS; call++)
            if (((call == RS && pv->reduce_scatter) || (call != RS && pv->all_reduce)) &&
                !(call == AR_INPLACE && w.result != w.dtype))
                judge(&w, call);
out_world:
    world_close(&w);
out:
    if (su.cfg) config_free(su.cfg);
}

void check_precision(host_check *c) {
    const ct_precision_vtable *pv = c->plugin->vtable;
    prec_policy res;
    memset(&res, 0, sizeof res);
    if (!check_in_child(c, "create, policy(), destroy at world 1", body_policy, NULL, &res,
                        sizeof res) || c->stop || !res.ok)
        return;
    const ct_precision_policy *pol = &res.pol;
    if (!pv->reduce_scatter && !pv->all_reduce) {
        check_note(c, "no reduction hooks: the strategies use the comm's own collectives in "
                   "reduce dtype %s (nothing more to check)", ct_dtype_name(pol->reduce_dtype));
        return;
    }
    if (!pv->reduce_scatter || !pv->all_reduce)
        check_note(c, "only the %s hook is provided; the other reduction uses the comm's own",
                   pv->all_reduce ? "all_reduce" : "reduce_scatter");
    int32_t result = pol->result_dtype ? pol->result_dtype : pol->reduce_dtype;
    if (result != pol->reduce_dtype)
        check_note(c, "the hooks hand back %s sums from a %s wire (result_dtype): checked "
                   "against %s's rounding; the in-place all_reduce is not allowed then",
                   ct_dtype_name(result), ct_dtype_name(pol->reduce_dtype),
                   ct_dtype_name(result));
    for (size_t k = 0; k < sizeof worlds / sizeof *worlds; k++) {
        char what[64];
        snprintf(what, sizeof what, "reduction hooks at N=%d (threads engine)", (int)worlds[k]);
        prec_reduce job = {&res, worlds[k]};
        check_in_child(c, what, body_reduce, &job, NULL, 0);
    }
}
