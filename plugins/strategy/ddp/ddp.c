/* ddp.c — strategy `ddp`: PyTorch DistributedDataParallel. Every rank holds every unit's
 * master (f32, or bf16 for a bf16-master policy), its compute copy (param_dtype) and a local
 * gradient (grad_accum_dtype). As units finish backward (last micro-batch) their gradients
 * are packed, in completion order — reverse unit order — into one bucket storage, divided
 * by N in the wire dtype, and each full bucket of `bucket_mb` MiB is SUM all-reduced at once
 * (asynchronous where the comm allows); the last partial bucket goes at finish_backward. Not
 * for: FSDP's divide factors (no_shard) or sharding (full_shard). Semantics and the choice
 * of wire dtype: docs/strategies.md.
 */
#include <ctrain/ctrain.h>
#include <ctrain/strategy_kit.h>

#include <assert.h>
#include <stdlib.h>

/* Legend: N ranks; P a unit's padded length; W the bucket storage, sum of P over units. */

#define DDP_WHO "strategy ddp" /* starts every error message */

typedef struct ddp_unit {
    ct_skit_replica r;    /* numel, P, master, compute copy, grad_local (P each), holds */
    float   *grad_out;   /* (P) f32 mean when the wire dtype is not f32, else NULL (the
                            unit's segment of the bucket storage is the result) */
    uint64_t seg;        /* this step: element offset of the unit's segment in the storage */
    int32_t  packed;     /* 1 once this step's gradient went into the bucket storage */
} ddp_unit;

typedef struct ddp {
    const ct_host_api  *api;
    ct_host            *host;
    ct_device_ref       dev;
    ct_skit_reducer      reducer;
    int32_t             world;
    double              bucket_mb;
    int32_t             wire_from_policy; /* key reduce_dtype = policy */
    ct_skit_grad_divide divide;           /* grad_divide: pre N and SUM, or AVG */
    ct_precision_policy policy;
    int32_t             wire_dtype;  /* grad_accum_dtype, or policy.reduce_dtype */
    uint32_t            n_units;
    ddp_unit           *units;       /* (n_units), host memory */
    void               *storage;     /* (W) wire_dtype: the buckets, back to back */
    uint64_t            storage_n;   /* W */
    uint64_t            bucket_n;    /* elements per full bucket */
    uint64_t            cursor;      /* this step: elements packed so far */
    uint64_t            bucket_start;/* this step: first element not yet handed to a collective */
    ct_request        **reqs;        /* (max_reqs) in-flight bucket all-reduces */
    uint32_t            n_reqs, max_reqs;
} ddp;

static void *ddp_create(const ct_create_args *a, ct_error *err) {
    if (ct_skit_check_engines(a, DDP_WHO, err)) return NULL;
    ddp *s = calloc(1, sizeof *s);
    if (!s) return ct_error_set(err, CT_ERR_NOMEM, DDP_WHO ": out of memory"), NULL;
    const char *wire = NULL;
    if (a->api->get_float(a->host, a->section, "bucket_mb", &s->bucket_mb, err) ||
        a->api->get_string(a->host, a->section, "reduce_dtype", &wire, err) ||
        ct_skit_get_divide(a, DDP_WHO, ct_skit_world_size(a->comm), &s->divide, err)) {
        free(s);
        return NULL;
    }
    s->wire_from_policy = strcmp(wire, "policy") == 0;
    s->api = a->api;
    s->host = a->host;
    s->dev = a->device;
    s->reducer.comm = a->comm;
    s->reducer.device = a->device;
    s->world = ct_skit_world_size(a->comm);
    return s;
}

static void ddp_destroy(void *p) {
    ddp *s = p;
    if (!s) return;
    ct_error ignored = {.struct_size = sizeof ignored};
    for (uint32_t i = 0; i < s->n_reqs; i++) ct_skit_wait(s->reducer.comm, &s->reqs[i], &ignored);
    for (uint32_t u = 0; u < s->n_units; u++) {
        ddp_unit *x = &s->units[u];
        s->dev.vt->free_mem(s->dev.self, x->grad_out);
        ct_skit_replica_free(s->dev, &x->r);
    }
    if (s->storage) s->dev.vt->free_mem(s->dev.self, s->storage);
    free(s->reqs);
    free(s->units);
    free(s);
}

static int32_t ddp_setup(void *p, const ct_strategy_setup *setup_in, ct_error *err) {
    ddp *s = p;
    ct_strategy_setup su;
    if (ct_skit_setup_begin(DDP_WHO, s->units != NULL, setup_in, &su, &s->policy, &s->reducer,
                           err))
        return err->code;
    const ct_precision_policy *pol = &s->policy;
    s->wire_dtype = s->wire_from_policy ? pol->reduce_dtype : pol->grad_accum_dtype;
    if (ct_skit_check_divide(DDP_WHO, &s->reducer, s->divide.op, 1, err)) return err->code;
    if (ct_skit_result_dtype(&s->reducer, pol, 1) != pol->reduce_dtype)
        return ct_error_set(err, CT_ERR_UNSUPPORTED, DDP_WHO ": the precision plugin hands "
                            "back its sums in %s, but ddp all-reduces its buckets in place "
                            "---> use strategy no_shard or full_shard with this policy, or set "
                            "the policy's result back to its reduce dtype",
                            ct_dtype_name(pol->result_dtype));
    s->units = calloc(su.n_units, sizeof *s->units);
    if (!s->units) return ct_error_set(err, CT_ERR_NOMEM, DDP_WHO ": out of memory");
    s->n_units = su.n_units;
    for (uint32_t u = 0; u < su.n_units; u++) {
        ddp_unit *x = &s->units[u];
        if (ct_skit_replica_alloc(s->dev, &x->r, su.unit_numel[u], s->world, pol, DDP_WHO, u, err))
            return err->code;
        s->storage_n += x->r.padded;
        if (s->wire_dtype != CT_DTYPE_F32 &&
            !(x->grad_out = ct_skit_alloc_unit(s->dev, x->r.padded, CT_DTYPE_F32, DDP_WHO, u,
                                              "f32 gradient", err)))
            return err->code;
    }
    if (!(s->storage = ct_skit_alloc(s->dev, s->storage_n, s->wire_dtype,
                                    DDP_WHO ": bucket storage", err)))
        return err->code;
    double n = s->bucket_mb * 1024.0 * 1024.0 / (double)ct_dtype_size(s->wire_dtype);
    s->bucket_n = n < 1.0 ? 1 : n > (double)s->storage_n ? s->storage_n : (uint64_t)n;
    s->max_reqs = (uint32_t)(s->storage_n / s->bucket_n + 1);
    s->reqs = calloc(s->max_reqs, sizeof *s->reqs);
    if (!s->reqs) return ct_error_set(err, CT_ERR_NOMEM, DDP_WHO ": out of memory");
    return CT_OK;
}

static int32_t check_unit(const ddp *s, uint32_t u, ct_error *err) {
    return ct_skit_check_unit(DDP_WHO, s->units != NULL, u, s->n_units, err);
}

static void *storage_at(const ddp *s, uint64_t element) {
    return (char *)s->storage + element * ct_dtype_size(s->wire_dtype);
}

static int32_t ddp_load_unit(void *p, uint32_t u, const float *full, ct_error *err) {
    ddp *s = p;
    if (check_unit(s, u, err)) return err->code;
    return ct_skit_replica_load(s->dev, &s->units[u].r, s->policy.param_dtype, full, err);
}

static int32_t ddp_save_unit(void *p, uint32_t u, float *full, ct_error *err) {
    ddp *s = p;
    if (check_unit(s, u, err)) return err->code;
    return ct_skit_replica_save(s->dev, &s->units[u].r, full, err);
}

/* Replicated: the compute copy is always there; acquire/release only count, to catch a host
 * whose calls do not pair up. */
static int32_t ddp_acquire(void *p, uint32_t u, int32_t phase, const void **params,
                           ct_error *err) {
    ddp *s = p;
    if (check_unit(s, u, err)) return err->code;
    ct_skit_replica_acquire(&s->units[u].r, params);
    return CT_OK;
}

static int32_t ddp_release(void *p, uint32_t u, int32_t phase, ct_error *err) {
    ddp *s = p;
    if (check_unit(s, u, err)) return err->code;
    return ct_skit_replica_release(DDP_WHO, u, &s->units[u].r, err);
}

static int32_t ddp_grad_buffer(void *p, uint32_t u, void **grads, ct_error *err) {
    ddp *s = p;
    if (check_unit(s, u, err)) return err->code;
    *grads = s->units[u].r.grad_local;
    return CT_OK;
}

static int32_t ddp_begin_step(void *p, ct_error *err) {
    ddp *s = p;
    if (!s->units) return check_unit(s, 0, err);
    if (s->n_reqs)
        return ct_error_set(err, CT_ERR_INTERNAL, DDP_WHO ": begin_step while %u bucket"
                            " reductions are in flight ---> HINT: call finish_backward first",
                            s->n_reqs);
    s->cursor = s->bucket_start = 0;
    for (uint32_t u = 0; u < s->n_units; u++) {
        ddp_unit *x = &s->units[u];
        x->packed = 0;
        int32_t rc = ct_skit_replica_zero_grad(s->dev, &x->r, s->policy.grad_accum_dtype, err);
        if (rc) return rc;
    }
    return CT_OK;
}

/* Hand storage[bucket_start, bucket_start + n) to a SUM all-reduce (in place). */
static int32_t launch_bucket(ddp *s, uint64_t n, ct_error *err) {
    assert(n > 0 && s->bucket_start + n <= s->cursor);
    if (s->n_reqs == s->max_reqs)
        return ct_error_set(err, CT_ERR_INTERNAL, DDP_WHO ": more buckets than planned");
    void *b = storage_at(s, s->bucket_start);
    int32_t rc = ct_skit_all_reduce_op(&s->reducer, s->divide.op, b, b, n, s->wire_dtype,
                                      &s->reqs[s->n_reqs], err);
    if (rc) return rc;
    s->n_reqs++;
    s->bucket_start += n;
    return CT_OK;
}

/* Last micro-batch: pack the unit's gradient into the next free part of the bucket storage
 * (cast to the wire dtype when it differs), divide by N there, and all-reduce every bucket
 * that is now full. */
static int32_t ddp_unit_backward_done(void *p, uint32_t u, int32_t last, ct_error *err) {
    ddp *s = p;
    if (check_unit(s, u, err)) return err->code;
    if (!last) return CT_OK;
    ddp_unit *x = &s->units[u];
    if (x->packed) return ct_skit_error_reduced_twice(DDP_WHO, u, err);
    x->seg = s->cursor;
    int32_t rc = ct_skit_convert_and_divide(s->dev, storage_at(s, x->seg), s->wire_dtype,
                                           x->r.grad_local, s->policy.grad_accum_dtype,
                                           x->r.padded, s->divide.pre, err);
    if (rc) return rc;
    x->packed = 1;
    s->cursor += x->r.padded;
    while (s->cursor - s->bucket_start >= s->bucket_n)
        if ((rc = launch_bucket(s, s->bucket_n, err))) return rc;
    return CT_OK;
}

/* All-reduce the last partial bucket, wait for all of them, cast the segments to f32. */
static int32_t ddp_finish_backward(void *p, ct_error *err) {
    ddp *s = p;
    if (!s->units) return check_unit(s, 0, err);
    int32_t rc = CT_OK;
    for (uint32_t u = 0; u < s->n_units && !rc; u++)
        if (!s->units[u].packed)
            rc = ct_skit_error_never_reduced(DDP_WHO, u, err);
    if (!rc && s->cursor > s->bucket_start) rc = launch_bucket(s, s->cursor - s->bucket_start, err);
    for (uint32_t i = 0; i < s->n_reqs; i++) {
        ct_error werr = {.struct_size = sizeof werr};
        int32_t w = ct_skit_wait(s->reducer.comm, &s->reqs[i], &werr);
        if (w && !rc) {
            rc = w;
            if (err) *err = werr;
        }
    }
    s->n_reqs = 0;
    for (uint32_t u = 0; u < s->n_units && !rc; u++) {
        ddp_unit *x = &s->units[u];
        if (x->grad_out)
            rc = ct_skit_convert(s->dev, x->grad_out, CT_DTYPE_F32, storage_at(s, x->seg),
                                s->wire_dtype, x->r.padded, err);
    }
    return rc;
}

static int32_t ddp_shard(void *p, uint32_t u, ct_shard *out, ct_error *err) {
    ddp *s = p;
    if (check_unit(s, u, err)) return err->code;
    ddp_unit *x = &s->units[u];
    ct_shard sh = {
        .struct_size = sizeof sh, .master = x->r.params.master,
        .master_dtype = ct_skit_master_dtype(&x->r.params),
        .grad = x->grad_out ? x->grad_out : (float *)storage_at(s, x->seg),
        .numel = x->r.padded, .offset = 0, .padded_numel = x->r.padded, .replicated = 1,
    };
    ct_skit_put_shard(out, &sh);
    return CT_OK;
}

static int32_t ddp_step_done(void *p, ct_error *err) {
    ddp *s = p;
    if (!s->units) return check_unit(s, 0, err);
    for (uint32_t u = 0; u < s->n_units; u++) {
        ddp_unit *x = &s->units[u];
        int32_t rc = ct_skit_params_refresh(s->dev, &x->r.params, x->r.padded,
                                           s->policy.param_dtype, err);
        if (rc) return rc;
    }
    return CT_OK;
}

static int32_t ddp_memory(void *p, uint64_t *params, uint64_t *grads, uint64_t *gathered,
                          ct_error *err) {
    ddp *s = p;
    uint64_t pb = 0, gb = s->storage_n * ct_dtype_size(s->wire_dtype);
    size_t gsz = ct_dtype_size(s->policy.grad_accum_dtype);
    for (uint32_t u = 0; u < s->n_units; u++) {
        ddp_unit *x = &s->units[u];
        const uint64_t P = x->r.padded;
        pb += ct_skit_params_bytes(&x->r.params, P, s->policy.param_dtype);
        gb += P * gsz + (x->grad_out ? P * 4 : 0);
    }
    *params = pb;
    *grads = gb;
    *gathered = 0;
    return CT_OK;
}

static const char *const ddp_wire_choices[] = {"grad", "policy", NULL};
static const char *const ddp_divide_choices[] = {"pre", "avg", NULL};

static const ct_param_spec ddp_params[] = {
    CT_PARAM_FLOAT("bucket_mb", "25", 1e-6, 1e6,
                   "gradient bucket size in MiB (PyTorch DDP's bucket_cap_mb)"),
    CT_PARAM_ENUM("reduce_dtype", "grad", ddp_wire_choices,
                  "grad: all-reduce in the gradient's own dtype (grad_accum_dtype), as DDP does;"
                  " policy: cast to the policy's reduce_dtype first (like bf16_compress_hook)"),
    CT_PARAM_ENUM("grad_divide", "pre", ddp_divide_choices,
                  "how the all-reduce averages: pre (divide by N before a SUM, as DDP does) or"
                  " avg (ncclAvg in the collective)"),
    CT_PARAM_END,
};

static const ct_strategy_vtable ddp_vtable = {
    .struct_size = sizeof(ct_strategy_vtable),
    .create = ddp_create,
    .destroy = ddp_destroy,
    .setup = ddp_setup,
    .load_unit = ddp_load_unit,
    .save_unit = ddp_save_unit,
    .acquire = ddp_acquire,
    .release = ddp_release,
    .grad_buffer = ddp_grad_buffer,
    .begin_step = ddp_begin_step,
    .unit_backward_done = ddp_unit_backward_done,
    .finish_backward = ddp_finish_backward,
    .shard = ddp_shard,
    .step_done = ddp_step_done,
    .memory = ddp_memory,
};

CT_DEFINE_PLUGIN(
    .kind    = CT_KIND_STRATEGY,
    .name    = "ddp",
    .version = "1.1.0",
    .summary = "DistributedDataParallel: replicated, bucketed all-reduce dividing by N first"
               " (or averaging in the collective)",
    .params  = ddp_params,
    .devices = CT_DEVICE_CPU | CT_DEVICE_CUDA,
    .vtable  = &ddp_vtable)

