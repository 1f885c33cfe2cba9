/* no_shard.c — strategy `no_shard`: PyTorch FSDP1's NO_SHARD. Every rank holds every unit's
 * master (f32, or bf16), its compute copy (param_dtype) and a local gradient (grad_accum_dtype); when a
 * unit's backward ends on the last micro-batch its gradient is cast to reduce_dtype, divided by
 * FSDP1's pre-divide factor f, SUM all-reduced (one collective per unit, asynchronous where the
 * comm allows), then divided by N/f and cast to f32 (key grad_divide: or SUM then / N, or
 * FSDP2's ncclAvg in the collective). Not for: bucketing (ddp) or sharding
 * (full_shard). Semantics and choices: docs/strategies.md.
 */
#include <ctrain/ctrain.h>
#include <ctrain/strategy_kit.h>

#include <stdlib.h>

/* Legend: N ranks; P a unit's padded length (ct_skit_padded_numel). */

#define NS_WHO "strategy no_shard" /* starts every error message */

typedef struct ns_unit {
    ct_skit_replica r;       /* numel, P, master, compute copy, grad_local (P each), holds */
    void       *grad_wire;  /* (P) reduce_dtype; aliases r.grad_local when the dtypes agree */
    float      *grad_out;   /* (P) f32 global mean; aliases grad_wire when reduce_dtype is f32 */
    ct_request *req;        /* the in-flight all-reduce of this step, or NULL */
    int32_t     reduce_started; /* 1 once this step's all-reduce of the unit was started */
} ns_unit;

typedef struct no_shard {
    const ct_host_api  *api;
    ct_host            *host;
    ct_device_ref       dev;
    ct_skit_reducer      reducer;
    int32_t             world;
    ct_skit_grad_divide divide;       /* grad_divide: divisors and the op */
    ct_precision_policy policy;
    uint32_t            n_units;
    ns_unit            *units;        /* (n_units), host memory */
} no_shard;

static void *ns_create(const ct_create_args *a, ct_error *err) {
    if (ct_skit_check_engines(a, NS_WHO, err)) return NULL;
    no_shard *s = calloc(1, sizeof *s);
    if (!s) return ct_error_set(err, CT_ERR_NOMEM, NS_WHO ": out of memory"), NULL;
    if (ct_skit_get_divide(a, NS_WHO, ct_skit_world_size(a->comm), &s->divide, err)) {
        free(s);
        return NULL;
    }
    s->api = a->api;
    s->host = a->host;
    s->dev = a->device;
    s->reducer.comm = a->comm;
    s->reducer.device = a->device;
    s->world = ct_skit_world_size(a->comm);
    return s;
}

static void ns_destroy(void *p) {
    no_shard *s = p;
    if (!s) return;
    for (uint32_t u = 0; u < s->n_units; u++) {
        ns_unit *x = &s->units[u];
        ct_error ignored = {.struct_size = sizeof ignored};
        ct_skit_wait(s->reducer.comm, &x->req, &ignored);
        if (x->grad_out != x->grad_wire) s->dev.vt->free_mem(s->dev.self, x->grad_out);
        if (x->grad_wire != x->r.grad_local) s->dev.vt->free_mem(s->dev.self, x->grad_wire);
        ct_skit_replica_free(s->dev, &x->r);
    }
    free(s->units);
    free(s);
}

/* Allocate every unit's buffers, aliasing the ones whose dtypes agree. */
static int32_t ns_setup(void *p, const ct_strategy_setup *setup_in, ct_error *err) {
    no_shard *s = p;
    ct_strategy_setup su;
    if (ct_skit_setup_begin(NS_WHO, s->units != NULL, setup_in, &su, &s->policy, &s->reducer, err))
        return err->code;
    if (ct_skit_check_divide(NS_WHO, &s->reducer, s->divide.op, 1, err)) return err->code;
    const ct_precision_policy *pol = &s->policy;
    s->units = calloc(su.n_units, sizeof *s->units);
    if (!s->units) return ct_error_set(err, CT_ERR_NOMEM, NS_WHO ": out of memory");
    s->n_units = su.n_units;
    for (uint32_t u = 0; u < su.n_units; u++) {
        ns_unit *x = &s->units[u];
        if (ct_skit_replica_alloc(s->dev, &x->r, su.unit_numel[u], s->world, pol, NS_WHO, u, err))
            return err->code;
        const uint64_t P = x->r.padded;
        x->grad_wire = x->r.grad_local;
        if (pol->reduce_dtype != pol->grad_accum_dtype &&
            !(x->grad_wire = ct_skit_alloc_unit(s->dev, P, pol->reduce_dtype, NS_WHO, u,
                                               "reduce buffer", err)))
            return err->code;
        x->grad_out = x->grad_wire;
        if (pol->reduce_dtype != CT_DTYPE_F32 &&
            !(x->grad_out = ct_skit_alloc_unit(s->dev, P, CT_DTYPE_F32, NS_WHO, u, "f32 gradient",
                                              err)))
            return err->code;
    }
    return CT_OK;
}

static int32_t check_unit(const no_shard *s, uint32_t u, ct_error *err) {
    return ct_skit_check_unit(NS_WHO, s->units != NULL, u, s->n_units, err);
}

static int32_t ns_load_unit(void *p, uint32_t u, const float *full, ct_error *err) {
    no_shard *s = p;
    if (check_unit(s, u, err)) return err->code;
    return ct_skit_replica_load(s->dev, &s->units[u].r, s->policy.param_dtype, full, err);
}

static int32_t ns_save_unit(void *p, uint32_t u, float *full, ct_error *err) {
    no_shard *s = p;
    if (check_unit(s, u, err)) return err->code;
    return ct_skit_replica_save(s->dev, &s->units[u].r, full, err);
}

/* Replicated: the compute copy is always there; acquire/release only count, to catch a host
 * whose calls do not pair up. */
static int32_t ns_acquire(void *p, uint32_t u, int32_t phase, const void **params,
                          ct_error *err) {
    no_shard *s = p;
    if (check_unit(s, u, err)) return err->code;
    ct_skit_replica_acquire(&s->units[u].r, params);
    return CT_OK;
}

static int32_t ns_release(void *p, uint32_t u, int32_t phase, ct_error *err) {
    no_shard *s = p;
    if (check_unit(s, u, err)) return err->code;
    return ct_skit_replica_release(NS_WHO, u, &s->units[u].r, err);
}

static int32_t ns_grad_buffer(void *p, uint32_t u, void **grads, ct_error *err) {
    no_shard *s = p;
    if (check_unit(s, u, err)) return err->code;
    *grads = s->units[u].r.grad_local;
    return CT_OK;
}

static int32_t ns_begin_step(void *p, ct_error *err) {
    no_shard *s = p;
    if (!s->units) return check_unit(s, 0, err);
    for (uint32_t u = 0; u < s->n_units; u++) {
        ns_unit *x = &s->units[u];
        if (x->req) return ct_skit_error_in_flight(NS_WHO, u, err);
        x->reduce_started = 0;
        int32_t rc = ct_skit_replica_zero_grad(s->dev, &x->r, s->policy.grad_accum_dtype, err);
        if (rc) return rc;
    }
    return CT_OK;
}

/* Last micro-batch: cast to reduce_dtype, divide by f, start the SUM all-reduce in place. */
static int32_t ns_unit_backward_done(void *p, uint32_t u, int32_t last, ct_error *err) {
    no_shard *s = p;
    if (check_unit(s, u, err)) return err->code;
    if (!last) return CT_OK;
    ns_unit *x = &s->units[u];
    const int32_t rdt = s->policy.reduce_dtype;
    if (x->reduce_started) return ct_skit_error_reduced_twice(NS_WHO, u, err);
    int32_t rc = ct_skit_convert_and_divide(s->dev, x->grad_wire, rdt, x->r.grad_local,
                                           s->policy.grad_accum_dtype, x->r.padded,
                                           s->divide.pre, err);
    /* in place, unless the precision hook hands back f32 sums: then into grad_out */
    void *recv = ct_skit_result_dtype(&s->reducer, &s->policy, 1) == rdt ? x->grad_wire
                                                                         : (void *)x->grad_out;
    if (!rc) rc = ct_skit_all_reduce_op(&s->reducer, s->divide.op, x->grad_wire, recv,
                                       x->r.padded, rdt, &x->req, err);
    if (rc) return rc;
    x->reduce_started = 1;
    return CT_OK;
}

/* Wait for every unit's all-reduce, divide by N/f in the result dtype (reduce_dtype, or f32
 * from a precision hook that hands back f32), cast to f32. */
static int32_t ns_finish_backward(void *p, ct_error *err) {
    no_shard *s = p;
    if (!s->units) return check_unit(s, 0, err);
    const int32_t rdt = ct_skit_result_dtype(&s->reducer, &s->policy, 1);
    int32_t rc = CT_OK;
    for (uint32_t u = 0; u < s->n_units; u++) {
        ns_unit *x = &s->units[u];
        int32_t w = ct_skit_wait(s->reducer.comm, &x->req, err);
        if (rc) continue; /* keep waiting so no request is left behind */
        if ((rc = w)) continue;
        if (!x->reduce_started) {
            rc = ct_skit_error_never_reduced(NS_WHO, u, err);
            continue;
        }
        void *sum = rdt == s->policy.reduce_dtype ? x->grad_wire : (void *)x->grad_out;
        rc = ct_skit_divide_to_f32(s->dev, x->grad_out, sum, rdt, x->r.padded, s->divide.post,
                                   err);
    }
    return rc;
}

static int32_t ns_shard(void *p, uint32_t u, ct_shard *out, ct_error *err) {
    no_shard *s = p;
    if (check_unit(s, u, err)) return err->code;
    ns_unit *x = &s->units[u];
    ct_shard sh = {
        .struct_size = sizeof sh, .master = x->r.params.master,
        .master_dtype = ct_skit_master_dtype(&x->r.params), .grad = x->grad_out,
        .numel = x->r.padded, .offset = 0, .padded_numel = x->r.padded, .replicated = 1,
    };
    ct_skit_put_shard(out, &sh);
    return CT_OK;
}

static int32_t ns_step_done(void *p, ct_error *err) {
    no_shard *s = p;
    if (!s->units) return check_unit(s, 0, err);
    for (uint32_t u = 0; u < s->n_units; u++) {
        ns_unit *x = &s->units[u];
        int32_t rc = ct_skit_params_refresh(s->dev, &x->r.params, x->r.padded,
                                           s->policy.param_dtype, err);
        if (rc) return rc;
    }
    return CT_OK;
}

static int32_t ns_memory(void *p, uint64_t *params, uint64_t *grads, uint64_t *gathered,
                         ct_error *err) {
    no_shard *s = p;
    uint64_t pb = 0, gb = 0;
    size_t gsz = ct_dtype_size(s->policy.grad_accum_dtype);
    size_t rsz = ct_dtype_size(s->policy.reduce_dtype);
    for (uint32_t u = 0; u < s->n_units; u++) {
        ns_unit *x = &s->units[u];
        const uint64_t P = x->r.padded;
        pb += ct_skit_params_bytes(&x->r.params, P, s->policy.param_dtype);
        gb += P * gsz + (x->grad_wire != x->r.grad_local ? P * rsz : 0) +
              (x->grad_out != x->grad_wire ? P * 4 : 0);
    }
    *params = pb;
    *grads = gb;
    *gathered = 0; /* nothing is gathered: the compute copy is counted in params */
    return CT_OK;
}

static const char *const ns_divide_choices[] = {"fsdp1", "post", "avg", NULL};

static const ct_param_spec ns_params[] = {
    CT_PARAM_ENUM("grad_divide", "fsdp1", ns_divide_choices,
                  "how the all-reduce averages: fsdp1 (divide by f before a SUM and by N/f"
                  " after, FSDP1), post (SUM, then divide by N), avg (ncclAvg in the collective,"
                  " FSDP2's default for bf16/f32)"),
    CT_PARAM_END,
};

static const ct_strategy_vtable ns_vtable = {
    .struct_size = sizeof(ct_strategy_vtable),
    .create = ns_create,
    .destroy = ns_destroy,
    .setup = ns_setup,
    .load_unit = ns_load_unit,
    .save_unit = ns_save_unit,
    .acquire = ns_acquire,
    .release = ns_release,
    .grad_buffer = ns_grad_buffer,
    .begin_step = ns_begin_step,
    .unit_backward_done = ns_unit_backward_done,
    .finish_backward = ns_finish_backward,
    .shard = ns_shard,
    .step_done = ns_step_done,
    .memory = ns_memory,
};

CT_DEFINE_PLUGIN(
    .kind = CT_KIND_STRATEGY,
    .name = "no_shard",
    .version = "1.1.0",
    .summary = "FSDP NO_SHARD: replicated units, one all-reduce per unit with FSDP1's"
               " pre/post divide (or FSDP2's AVG)",
    .params = ns_params,
    .devices = CT_DEVICE_CPU | CT_DEVICE_CUDA,
    .vtable = &ns_vtable,)

