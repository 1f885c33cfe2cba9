/* no_shard.c — strategy `no_shard`: PyTorch FSDP1's NO_SHARD. Every rank holds every unit's
 * f32 master, its compute copy (param_dtype) and a local gradient (grad_accum_dtype); when a
 * unit's backward ends on the last micro-batch its gradient is cast to reduce_dtype, divided by
 * FSDP1's pre-divide factor f, SUM all-reduced (one collective per unit, asynchronous where the
 * comm allows), then divided by N/f and cast to f32. Not for: bucketing (ddp) or sharding
 * (full_shard). Semantics and choices: docs/strategies.md.
 */
#include <ctrain/ctrain.h>
#include <ctrain/strategy_kit.h>

#include <stdlib.h>

/* Legend: N ranks; P a unit's padded length (ct_kit_padded_numel). */

typedef struct ns_unit {
    uint64_t    numel;      /* elements before padding */
    uint64_t    padded;     /* P */
    float      *master;     /* (P) f32 master weights, owned */
    void       *compute;    /* (P) param_dtype; aliases master when param_dtype is f32 */
    void       *grad_local; /* (P) grad_accum_dtype: backward stages add into it */
    void       *grad_wire;  /* (P) reduce_dtype; aliases grad_local when the dtypes agree */
    float      *grad_out;   /* (P) f32 global mean; aliases grad_wire when reduce_dtype is f32 */
    ct_request *req;        /* the in-flight all-reduce of this step, or NULL */
    int32_t     reduce_started; /* 1 once this step's all-reduce of the unit was started */
    int32_t     holds;      /* acquire() minus release() calls */
} ns_unit;

typedef struct no_shard {
    const ct_host_api  *api;
    ct_host            *host;
    ct_device_ref       dev;
    ct_kit_reducer      reducer;
    int32_t             world;
    int32_t             pre;          /* FSDP1 divide factors: pre * post == world */
    double              post;
    ct_precision_policy policy;
    uint32_t            n_units;
    ns_unit            *units;        /* (n_units), host memory */
} no_shard;

static void *ns_create(const ct_create_args *a, ct_error *err) {
    if (!a->device.vt || !a->comm.vt)
        return ct_error_set(err, CT_ERR_INVALID, "strategy no_shard: created without a device"
                            " or comm engine ---> HINT: the host creates device and comm first"),
               NULL;
    no_shard *s = calloc(1, sizeof *s);
    if (!s) return ct_error_set(err, CT_ERR_NOMEM, "strategy no_shard: out of memory"), NULL;
    s->api = a->api;
    s->host = a->host;
    s->dev = a->device;
    s->reducer.comm = a->comm;
    s->reducer.device = a->device;
    s->world = a->comm.world_size > 0 ? a->comm.world_size : a->comm.vt->world_size(a->comm.self);
    s->pre = ct_kit_predivide_factor(s->world);
    s->post = ct_kit_postdivide_factor(s->world);
    return s;
}

static void ns_destroy(void *p) {
    no_shard *s = p;
    if (!s) return;
    for (uint32_t u = 0; u < s->n_units; u++) {
        ns_unit *x = &s->units[u];
        ct_error ignored = {.struct_size = sizeof ignored};
        ct_kit_wait(s->reducer.comm, &x->req, &ignored);
        if (x->grad_out != x->grad_wire) s->dev.vt->free_mem(s->dev.self, x->grad_out);
        if (x->grad_wire != x->grad_local) s->dev.vt->free_mem(s->dev.self, x->grad_wire);
        s->dev.vt->free_mem(s->dev.self, x->grad_local);
        if (x->compute != (void *)x->master) s->dev.vt->free_mem(s->dev.self, x->compute);
        s->dev.vt->free_mem(s->dev.self, x->master);
    }
    free(s->units);
    free(s);
}

static int32_t check_dtype(const char *what, int32_t dtype, ct_error *err) {
    if (dtype == CT_DTYPE_F32 || dtype == CT_DTYPE_BF16) return CT_OK;
    return ct_error_set(err, CT_ERR_UNSUPPORTED, "strategy no_shard: %s %s is not supported"
                        " ---> HINT: use a precision policy with f32 or bf16", what,
                        ct_dtype_name(dtype));
}

/* Allocate every unit's buffers, aliasing the ones whose dtypes agree. */
static int32_t ns_setup(void *p, const ct_strategy_setup *setup_in, ct_error *err) {
    no_shard *s = p;
    ct_strategy_setup su;
    ct_kit_copy_struct(&su, setup_in, sizeof su);
    if (s->units)
        return ct_error_set(err, CT_ERR_INVALID, "strategy no_shard: setup() called twice");
    if (su.n_units == 0 || !su.unit_numel || !su.policy)
        return ct_error_set(err, CT_ERR_INVALID, "strategy no_shard: setup without units or"
                            " precision policy");
    ct_kit_copy_struct(&s->policy, su.policy, sizeof s->policy);
    const ct_precision_policy *pol = &s->policy;
    if (pol->master_dtype != CT_DTYPE_F32)
        return ct_error_set(err, CT_ERR_UNSUPPORTED, "strategy no_shard: master dtype %s; only"
                            " f32 master weights are supported", ct_dtype_name(pol->master_dtype));
    if (check_dtype("param dtype", pol->param_dtype, err) ||
        check_dtype("reduce dtype", pol->reduce_dtype, err) ||
        check_dtype("grad accumulation dtype", pol->grad_accum_dtype, err))
        return err->code;
    s->reducer.precision = su.precision;
    s->reducer.precision_self = su.precision_self;

    s->units = calloc(su.n_units, sizeof *s->units);
    if (!s->units) return ct_error_set(err, CT_ERR_NOMEM, "strategy no_shard: out of memory");
    s->n_units = su.n_units;
    for (uint32_t u = 0; u < su.n_units; u++) {
        ns_unit *x = &s->units[u];
        char what[64];
        x->numel = su.unit_numel[u];
        x->padded = ct_kit_padded_numel(x->numel, s->world);
        snprintf(what, sizeof what, "strategy no_shard: unit %u master", u);
        if (!(x->master = ct_kit_alloc(s->dev, x->padded, CT_DTYPE_F32, what, err)))
            return err->code;
        x->compute = x->master;
        if (pol->param_dtype != CT_DTYPE_F32) {
            snprintf(what, sizeof what, "strategy no_shard: unit %u compute copy", u);
            if (!(x->compute = ct_kit_alloc(s->dev, x->padded, pol->param_dtype, what, err)))
                return err->code;
        }
        snprintf(what, sizeof what, "strategy no_shard: unit %u gradient", u);
        if (!(x->grad_local = ct_kit_alloc(s->dev, x->padded, pol->grad_accum_dtype, what, err)))
            return err->code;
        x->grad_wire = x->grad_local;
        if (pol->reduce_dtype != pol->grad_accum_dtype) {
            snprintf(what, sizeof what, "strategy no_shard: unit %u reduce buffer", u);
            if (!(x->grad_wire = ct_kit_alloc(s->dev, x->padded, pol->reduce_dtype, what, err)))
                return err->code;
        }
        x->grad_out = x->grad_wire;
        if (pol->reduce_dtype != CT_DTYPE_F32) {
            snprintf(what, sizeof what, "strategy no_shard: unit %u f32 gradient", u);
            if (!(x->grad_out = ct_kit_alloc(s->dev, x->padded, CT_DTYPE_F32, what, err)))
                return err->code;
        }
    }
    return CT_OK;
}

static int32_t check_unit(const no_shard *s, uint32_t u, ct_error *err) {
    if (!s->units)
        return ct_error_set(err, CT_ERR_INVALID, "strategy no_shard: used before setup()");
    if (u >= s->n_units)
        return ct_error_set(err, CT_ERR_INVALID, "strategy no_shard: unit %u out of range"
                            " (the model has %u units)", u, s->n_units);
    return CT_OK;
}

/* Compute copy = master cast to param_dtype (nothing when they alias). */
static int32_t refresh_compute(no_shard *s, ns_unit *x, ct_error *err) {
    return ct_kit_convert(s->dev, x->compute, s->policy.param_dtype, x->master, CT_DTYPE_F32,
                          x->padded, err);
}

static int32_t ns_load_unit(void *p, uint32_t u, const float *full, ct_error *err) {
    no_shard *s = p;
    if (check_unit(s, u, err)) return err->code;
    ns_unit *x = &s->units[u];
    int32_t rc = s->dev.vt->copy(s->dev.self, x->master, full, x->numel * sizeof(float),
                                 CT_COPY_H2D, err);
    return rc ? rc : refresh_compute(s, x, err);
}

static int32_t ns_save_unit(void *p, uint32_t u, float *full, ct_error *err) {
    no_shard *s = p;
    if (check_unit(s, u, err)) return err->code;
    ns_unit *x = &s->units[u];
    return s->dev.vt->copy(s->dev.self, full, x->master, x->numel * sizeof(float), CT_COPY_D2H,
                           err);
}

/* Replicated: the compute copy is always there; acquire/release only count, to catch a host
 * whose calls do not pair up. */
static int32_t ns_acquire(void *p, uint32_t u, int32_t phase, const void **params,
                          ct_error *err) {
    no_shard *s = p;
    if (check_unit(s, u, err)) return err->code;
    s->units[u].holds++;
    *params = s->units[u].compute;
    return CT_OK;
}

static int32_t ns_release(void *p, uint32_t u, int32_t phase, ct_error *err) {
    no_shard *s = p;
    if (check_unit(s, u, err)) return err->code;
    if (s->units[u].holds == 0)
        return ct_error_set(err, CT_ERR_INTERNAL, "strategy no_shard: release of unit %u that"
                            " is not acquired", u);
    s->units[u].holds--;
    return CT_OK;
}

static int32_t ns_grad_buffer(void *p, uint32_t u, void **grads, ct_error *err) {
    no_shard *s = p;
    if (check_unit(s, u, err)) return err->code;
    *grads = s->units[u].grad_local;
    return CT_OK;
}

static int32_t ns_begin_step(void *p, ct_error *err) {
    no_shard *s = p;
    if (!s->units) return check_unit(s, 0, err);
    for (uint32_t u = 0; u < s->n_units; u++) {
        ns_unit *x = &s->units[u];
        if (x->req)
            return ct_error_set(err, CT_ERR_INTERNAL, "strategy no_shard: begin_step while unit"
                                " %u's reduction is in flight ---> HINT: call finish_backward"
                                " first", u);
        x->reduce_started = 0;
        int32_t rc = s->dev.vt->zero(s->dev.self, x->grad_local,
                                     x->padded * ct_dtype_size(s->policy.grad_accum_dtype), err);
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
    if (x->reduce_started)
        return ct_error_set(err, CT_ERR_INTERNAL, "strategy no_shard: unit %u reduced twice in"
                            " one step", u);
    int32_t rc = ct_kit_convert(s->dev, x->grad_wire, rdt, x->grad_local,
                                s->policy.grad_accum_dtype, x->padded, err);
    if (!rc) rc = ct_kit_divide(s->dev, x->grad_wire, rdt, x->padded, s->pre, err);
    if (!rc) rc = ct_kit_all_reduce_sum(&s->reducer, x->grad_wire, x->grad_wire, x->padded, rdt,
                                        &x->req, err);
    if (rc) return rc;
    x->reduce_started = 1;
    return CT_OK;
}

/* Wait for every unit's all-reduce, divide by N/f in reduce_dtype, cast to f32. */
static int32_t ns_finish_backward(void *p, ct_error *err) {
    no_shard *s = p;
    if (!s->units) return check_unit(s, 0, err);
    const int32_t rdt = s->policy.reduce_dtype;
    int32_t rc = CT_OK;
    for (uint32_t u = 0; u < s->n_units; u++) {
        ns_unit *x = &s->units[u];
        int32_t w = ct_kit_wait(s->reducer.comm, &x->req, err);
        if (rc) continue; /* keep waiting so no request is left behind */
        if ((rc = w)) continue;
        if (!x->reduce_started) {
            rc = ct_error_set(err, CT_ERR_INTERNAL, "strategy no_shard: unit %u's gradient was"
                              " never reduced ---> HINT: the host must call"
                              " unit_backward_done(u, last=1) for every unit", u);
            continue;
        }
        rc = ct_kit_divide(s->dev, x->grad_wire, rdt, x->padded, s->post, err);
        if (!rc) rc = ct_kit_convert(s->dev, x->grad_out, CT_DTYPE_F32, x->grad_wire, rdt,
                                     x->padded, err);
    }
    return rc;
}

static int32_t ns_shard(void *p, uint32_t u, ct_shard *out, ct_error *err) {
    no_shard *s = p;
    if (check_unit(s, u, err)) return err->code;
    ns_unit *x = &s->units[u];
    ct_shard sh = {
        .struct_size = sizeof sh, .master = x->master, .grad = x->grad_out,
        .numel = x->padded, .offset = 0, .padded_numel = x->padded, .replicated = 1,
    };
    uint32_t n = out->struct_size && out->struct_size < sizeof sh ? out->struct_size : sizeof sh;
    memcpy(out, &sh, n);
    out->struct_size = n;
    return CT_OK;
}

static int32_t ns_step_done(void *p, ct_error *err) {
    no_shard *s = p;
    if (!s->units) return check_unit(s, 0, err);
    for (uint32_t u = 0; u < s->n_units; u++) {
        int32_t rc = refresh_compute(s, &s->units[u], err);
        if (rc) return rc;
    }
    return CT_OK;
}

static int32_t ns_memory(void *p, uint64_t *params, uint64_t *grads, uint64_t *gathered,
                         ct_error *err) {
    no_shard *s = p;
    uint64_t pb = 0, gb = 0;
    size_t psz = ct_dtype_size(s->policy.param_dtype);
    size_t gsz = ct_dtype_size(s->policy.grad_accum_dtype);
    size_t rsz = ct_dtype_size(s->policy.reduce_dtype);
    for (uint32_t u = 0; u < s->n_units; u++) {
        ns_unit *x = &s->units[u];
        pb += x->padded * 4 + (x->compute != (void *)x->master ? x->padded * psz : 0);
        gb += x->padded * gsz + (x->grad_wire != x->grad_local ? x->padded * rsz : 0) +
              (x->grad_out != x->grad_wire ? x->padded * 4 : 0);
    }
    *params = pb;
    *grads = gb;
    *gathered = 0; /* nothing is gathered: the compute copy is counted in params */
    return CT_OK;
}

static const ct_param_spec ns_params[] = {CT_PARAM_END};

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

static const ct_plugin_desc ns_desc = {
    .struct_size = sizeof(ct_plugin_desc),
    .abi_major = CT_ABI_MAJOR,
    .abi_minor = CT_ABI_MINOR,
    .kind = CT_KIND_STRATEGY,
    .name = "no_shard",
    .version = "1.0.0",
    .summary = "FSDP NO_SHARD: replicated units, one all-reduce per unit with FSDP1's"
               " pre/post divide",
    .params = ns_params,
    .param_struct_size = sizeof(ct_param_spec),
    .devices = CT_DEVICE_CPU | CT_DEVICE_CUDA,
    .vtable = &ns_vtable,
};

CT_EXPORT const ct_plugin_desc *ctrain_plugin_v1(void) { return &ns_desc; }
