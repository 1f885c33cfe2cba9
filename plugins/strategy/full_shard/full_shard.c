/* full_shard.c — strategy `full_shard`: PyTorch FSDP1's FULL_SHARD. Each rank owns 1/N of every
 * unit's padded flat buffer: the master shard (f32, or bf16 for a bf16-master policy; the
 * optimizer updates only it) and its compute copy in param_dtype (the master itself when the
 * dtypes agree). acquire() all-gathers the compute shards into a gathered buffer before a unit's
 * forward and again before its backward; release() frees it when the last hold goes. The local
 * gradient (unsharded, grad_accum_dtype) lives from the unit's first backward of a step until its
 * reduce-scatter is done: cast to reduce_dtype, divided by FSDP1's pre-divide factor f, SUM
 * reduce-scattered, divided by N/f, cast to f32 (key grad_divide: or SUM then / N, or FSDP2's
 * ncclAvg in the collective). Not for: replicated strategies (ddp, no_shard).
 * Semantics, limits and choices: docs/strategies.md.
 */
#include <ctrain/ctrain.h>
#include <ctrain/strategy_kit.h>

#include <assert.h>
#include <stdlib.h>

/* Legend: N ranks, r this rank; P a unit's padded length; S = P/N its shard length; the shard
 * of rank r covers elements [r*S, r*S + S) of the unit's flat buffer. */

#define FS_WHO "strategy full_shard" /* starts every error message */

enum { FS_PREFETCH_NONE = 0, FS_PREFETCH_PRE = 1, FS_PREFETCH_POST = 2 };
#define FS_GATHER_LIMIT 2 /* units held at once with limit_all_gathers */

typedef struct fs_unit {
    uint64_t    numel;       /* elements before padding */
    uint64_t    padded;      /* P */
    uint64_t    shard_n;     /* S */
    uint64_t    offset;      /* r*S */
    ct_skit_params params;    /* (S) master shard (master_dtype) and its param_dtype compute shard */
    void       *gathered;    /* (P) param_dtype, while gathered; NULL otherwise */
    ct_request *gather_req;  /* a prefetch all-gather into `gathered` still in flight */
    int32_t     holds;       /* acquire() minus release() calls */
    void       *grad_local;  /* (P) grad_accum_dtype, from first grad_buffer() to the reduce */
    void       *grad_wire;   /* (P) reduce_dtype send buffer; aliases grad_local if same dtype */
    void       *rs_out;      /* (S) result dtype (ct_skit_result_dtype: reduce_dtype unless the
                                precision hook hands back f32): this rank's reduce-scatter sum */
    float      *grad_out;    /* (S) f32 mean gradient of the shard; aliases rs_out for f32 */
    ct_request *req;         /* the in-flight reduce-scatter of this step */
    int32_t     reduce_started;
} fs_unit;

typedef struct full_shard {
    const ct_host_api  *api;
    ct_host            *host;
    ct_device_ref       dev;
    ct_skit_reducer      reducer;
    int32_t             world, rank;
    ct_skit_grad_divide divide;             /* grad_divide: divisors and the op */
    int32_t             limit_all_gathers;
    int32_t             reshard_after_forward;
    int32_t             prefetch;           /* FS_PREFETCH_* */
    ct_precision_policy policy;
    uint32_t            n_units;
    fs_unit            *units;              /* (n_units), host memory */
    /* backward order, for prefetch: this step's (being recorded) and the last complete one */
    uint32_t           *bwd_now, *bwd_last;
    uint32_t            n_bwd_now, n_bwd_last;
    /* bytes of the transient buffers, now and at their peak, for memory() */
    uint64_t            gathered_now, gathered_peak, grads_now, grads_peak;
} full_shard;

static void *fs_create(const ct_create_args *a, ct_error *err) {
    if (ct_skit_check_engines(a, FS_WHO, err)) return NULL;
    full_shard *s = calloc(1, sizeof *s);
    if (!s) return ct_error_set(err, CT_ERR_NOMEM, FS_WHO ": out of memory"), NULL;
    const char *prefetch = NULL;
    if (a->api->get_bool(a->host, a->section, "limit_all_gathers", &s->limit_all_gathers, err) ||
        a->api->get_bool(a->host, a->section, "reshard_after_forward",
                         &s->reshard_after_forward, err) ||
        a->api->get_string(a->host, a->section, "backward_prefetch", &prefetch, err) ||
        ct_skit_get_divide(a, FS_WHO, ct_skit_world_size(a->comm), &s->divide, err)) {
        free(s);
        return NULL;
    }
    s->prefetch = strcmp(prefetch, "backward_pre") == 0    ? FS_PREFETCH_PRE
                  : strcmp(prefetch, "backward_post") == 0 ? FS_PREFETCH_POST
                                                           : FS_PREFETCH_NONE;
    s->api = a->api;
    s->host = a->host;
    s->dev = a->device;
    s->reducer.comm = a->comm;
    s->reducer.device = a->device;
    s->world = ct_skit_world_size(a->comm);
    s->rank = ct_skit_rank(a->comm);
    return s;
}

/* --- transient buffers: gathered parameters and unsharded gradients ---------------------- */

static uint64_t gathered_bytes(const full_shard *s, const fs_unit *x) {
    return x->padded * ct_dtype_size(s->policy.param_dtype);
}

static int32_t gather_alloc(full_shard *s, uint32_t u, ct_error *err) {
    fs_unit *x = &s->units[u];
    assert(!x->gathered);
    if (!(x->gathered = ct_skit_alloc_unit(s->dev, x->padded, s->policy.param_dtype, FS_WHO, u,
                                          "gathered parameters", err)))
        return err->code;
    s->gathered_now += gathered_bytes(s, x);
    if (s->gathered_now > s->gathered_peak) s->gathered_peak = s->gathered_now;
    return CT_OK;
}

/* Free the gathered buffer (waiting for a prefetch that is still filling it). */
static int32_t gather_free(full_shard *s, fs_unit *x, ct_error *err) {
    int32_t rc = ct_skit_wait(s->reducer.comm, &x->gather_req, err);
    if (!x->gathered) return rc;
    s->dev.vt->free_mem(s->dev.self, x->gathered);
    x->gathered = NULL;
    s->gathered_now -= gathered_bytes(s, x);
    return rc;
}

static uint64_t unsharded_grad_bytes(const full_shard *s, const fs_unit *x) {
    uint64_t b = x->padded * ct_dtype_size(s->policy.grad_accum_dtype);
    if (s->policy.reduce_dtype != s->policy.grad_accum_dtype)
        b += x->padded * ct_dtype_size(s->policy.reduce_dtype);
    return b;
}

static int32_t grads_alloc(full_shard *s, uint32_t u, ct_error *err) {
    fs_unit *x = &s->units[u];
    if (!(x->grad_local = ct_skit_alloc_unit(s->dev, x->padded, s->policy.grad_accum_dtype, FS_WHO,
                                            u, "unsharded gradient", err)))
        return err->code;
    x->grad_wire = x->grad_local;
    if (s->policy.reduce_dtype != s->policy.grad_accum_dtype) {
        if (!(x->grad_wire = ct_skit_alloc_unit(s->dev, x->padded, s->policy.reduce_dtype, FS_WHO,
                                               u, "reduce buffer", err))) {
            s->dev.vt->free_mem(s->dev.self, x->grad_local);
            x->grad_local = NULL;
            return err->code;
        }
    }
    s->grads_now += unsharded_grad_bytes(s, x);
    if (s->grads_now > s->grads_peak) s->grads_peak = s->grads_now;
    return CT_OK;
}

static void grads_free(full_shard *s, fs_unit *x) {
    if (!x->grad_local) return;
    if (x->grad_wire != x->grad_local) s->dev.vt->free_mem(s->dev.self, x->grad_wire);
    s->dev.vt->free_mem(s->dev.self, x->grad_local);
    x->grad_local = x->grad_wire = NULL;
    s->grads_now -= unsharded_grad_bytes(s, x);
}

static void fs_destroy(void *p) {
    full_shard *s = p;
    if (!s) return;
    for (uint32_t u = 0; u < s->n_units; u++) {
        fs_unit *x = &s->units[u];
        ct_error ignored = {.struct_size = sizeof ignored};
        ct_skit_wait(s->reducer.comm, &x->req, &ignored);
        gather_free(s, x, &ignored);
        grads_free(s, x);
        if (x->grad_out != x->rs_out) s->dev.vt->free_mem(s->dev.self, x->grad_out);
        s->dev.vt->free_mem(s->dev.self, x->rs_out);
        ct_skit_params_free(s->dev, &x->params);
    }
    free(s->bwd_now);
    free(s->bwd_last);
    free(s->units);
    free(s);
}

/* Allocate the persistent shard buffers; gathered parameters and unsharded gradients come and
 * go during the step. */
static int32_t fs_setup(void *p, const ct_strategy_setup *setup_in, ct_error *err) {
    full_shard *s = p;
    ct_strategy_setup su;
    if (ct_skit_setup_begin(FS_WHO, s->units != NULL, setup_in, &su, &s->policy, &s->reducer,
                           err))
        return err->code;
    if (ct_skit_check_divide(FS_WHO, &s->reducer, s->divide.op, 0, err)) return err->code;
    const ct_precision_policy *pol = &s->policy;
    s->units = calloc(su.n_units, sizeof *s->units);
    s->bwd_now = calloc(su.n_units, sizeof *s->bwd_now);
    s->bwd_last = calloc(su.n_units, sizeof *s->bwd_last);
    if (!s->units || !s->bwd_now || !s->bwd_last)
        return ct_error_set(err, CT_ERR_NOMEM, FS_WHO ": out of memory");
    s->n_units = su.n_units;
    for (uint32_t u = 0; u < su.n_units; u++) {
        fs_unit *x = &s->units[u];
        x->numel = su.unit_numel[u];
        x->padded = ct_skit_padded_numel(x->numel, s->world);
        x->shard_n = x->padded / (uint64_t)s->world;
        x->offset = (uint64_t)s->rank * x->shard_n;
        if (ct_skit_params_alloc_dt(s->dev, &x->params, x->shard_n, pol->param_dtype,
                                   pol->master_dtype, FS_WHO, u, 1, err))
            return err->code;
        const int32_t result_dt = ct_skit_result_dtype(&s->reducer, pol, 0);
        if (!(x->rs_out = ct_skit_alloc_unit(s->dev, x->shard_n, result_dt, FS_WHO, u,
                                            "gradient shard", err)))
            return err->code;
        x->grad_out = x->rs_out;
        if (result_dt != CT_DTYPE_F32 &&
            !(x->grad_out = ct_skit_alloc_unit(s->dev, x->shard_n, CT_DTYPE_F32, FS_WHO, u,
                                              "f32 gradient shard", err)))
            return err->code;
    }
    return CT_OK;
}

static int32_t check_unit(const full_shard *s, uint32_t u, ct_error *err) {
    return ct_skit_check_unit(FS_WHO, s->units != NULL, u, s->n_units, err);
}

/* Compute shard = master shard cast to param_dtype (nothing when they alias). */
static int32_t refresh_compute(full_shard *s, fs_unit *x, ct_error *err) {
    return ct_skit_params_refresh(s->dev, &x->params, x->shard_n, s->policy.param_dtype, err);
}

/* Keep elements [r*S, r*S + S) of the full unpadded copy; the padding stays zero. */
static int32_t fs_load_unit(void *p, uint32_t u, const float *full, ct_error *err) {
    full_shard *s = p;
    if (check_unit(s, u, err)) return err->code;
    fs_unit *x = &s->units[u];
    if (x->holds)
        return ct_error_set(err, CT_ERR_INVALID, FS_WHO ": load_unit of unit %u while it is"
                            " acquired", u);
    int32_t rc = gather_free(s, x, err); /* a kept gather holds the old values */
    if (!rc) rc = ct_skit_params_zero(s->dev, &x->params, x->shard_n, err);
    if (rc) return rc;
    if (x->offset < x->numel) { /* rounded to a bf16 master's dtype */
        uint64_t n = x->numel - x->offset < x->shard_n ? x->numel - x->offset : x->shard_n;
        rc = ct_skit_params_put(s->dev, &x->params, 0, full + x->offset, n, err);
    }
    return rc ? rc : refresh_compute(s, x, err);
}

/* Collective: all-gather the master shards in their dtype, keep the unpadded prefix as f32 (a
 * bf16 master widened exactly). */
static int32_t fs_save_unit(void *p, uint32_t u, float *full, ct_error *err) {
    full_shard *s = p;
    if (check_unit(s, u, err)) return err->code;
    fs_unit *x = &s->units[u];
    const int32_t mdt = ct_skit_master_dtype(&x->params);
    void *all = ct_skit_alloc(s->dev, x->padded, mdt, FS_WHO ": save_unit gather buffer", err);
    if (!all) return err->code;
    int32_t rc = s->reducer.comm.vt->all_gather(s->reducer.comm.self, x->params.master, all,
                                                x->shard_n, mdt, NULL, err);
    if (!rc) rc = ct_skit_to_host_f32(s->dev, full, all, mdt, x->numel, err);
    s->dev.vt->free_mem(s->dev.self, all);
    return rc;
}

/* --- gathering ---------------------------------------------------------------------------- */

static uint32_t units_held(const full_shard *s) {
    uint32_t n = 0;
    for (uint32_t u = 0; u < s->n_units; u++) n += s->units[u].holds > 0;
    return n;
}

/* All-gather unit u's compute shards into a new gathered buffer; asynchronous (prefetch) when
 * async != 0 and the comm can wait. */
static int32_t gather(full_shard *s, uint32_t u, int32_t async, ct_error *err) {
    fs_unit *x = &s->units[u];
    int32_t rc = gather_alloc(s, u, err);
    if (rc) return rc;
    const ct_comm_ref c = s->reducer.comm;
    ct_request **req = async && c.vt->wait ? &x->gather_req : NULL;
    rc = c.vt->all_gather(c.self, x->params.compute, x->gathered, x->shard_n,
                          s->policy.param_dtype, req, err);
    if (rc) gather_free(s, x, NULL);
    return rc;
}

/* Start gathering the unit that followed u in the last step's backward, if it is not there
 * yet and no other prefetch is in flight (at most one gather runs ahead of the compute). */
static int32_t prefetch_after(full_shard *s, uint32_t u, ct_error *err) {
    uint32_t i = 0;
    while (i < s->n_bwd_last && s->bwd_last[i] != u) i++;
    if (i + 1 >= s->n_bwd_last) return CT_OK;
    uint32_t next = s->bwd_last[i + 1];
    if (s->units[next].gathered) return CT_OK;
    for (uint32_t v = 0; v < s->n_units; v++)
        if (s->units[v].gather_req) return CT_OK;
    if (s->limit_all_gathers && units_held(s) > FS_GATHER_LIMIT) return CT_OK;
    return gather(s, next, 1, err);
}

static int32_t fs_acquire(void *p, uint32_t u, int32_t phase, const void **params,
                          ct_error *err) {
    full_shard *s = p;
    if (check_unit(s, u, err)) return err->code;
    fs_unit *x = &s->units[u];
    if (x->holds == 0 && s->limit_all_gathers && units_held(s) >= FS_GATHER_LIMIT) {
        char held[160] = "";
        size_t n = 0;
        for (uint32_t v = 0; v < s->n_units && n + 16 < sizeof held; v++)
            if (s->units[v].holds)
                n += (size_t)snprintf(held + n, sizeof held - n, "%s%u", n ? ", " : "", v);
        return ct_error_set(err, CT_ERR_INVALID, FS_WHO ": acquire of unit %u while"
                            " units %s are held: limit_all_gathers allows %d at once ---> HINT:"
                            " release a unit first, or set [strategy] limit_all_gathers = false",
                            u, held, FS_GATHER_LIMIT);
    }
    int32_t rc = CT_OK;
    if (!x->gathered) rc = gather(s, u, 0, err);
    else rc = ct_skit_wait(s->reducer.comm, &x->gather_req, err); /* prefetched or kept */
    if (rc) return rc;
    x->holds++;
    *params = x->gathered;
    if (phase == CT_PHASE_BACKWARD && x->holds == 1) {
        if (s->n_bwd_now < s->n_units) s->bwd_now[s->n_bwd_now++] = u;
        if (s->prefetch == FS_PREFETCH_PRE) rc = prefetch_after(s, u, err);
    }
    return rc;
}

/* The last hold frees the gathered buffer, except after forward with reshard_after_forward =
 * false (FSDP's SHARD_GRAD_OP behaviour): then it stays until the backward release. */
static int32_t fs_release(void *p, uint32_t u, int32_t phase, ct_error *err) {
    full_shard *s = p;
    if (check_unit(s, u, err)) return err->code;
    fs_unit *x = &s->units[u];
    if (x->holds == 0) return ct_skit_error_not_acquired(FS_WHO, u, err);
    if (--x->holds > 0) return CT_OK;
    int32_t rc = CT_OK;
    if (phase == CT_PHASE_BACKWARD || s->reshard_after_forward) rc = gather_free(s, x, err);
    if (!rc && phase == CT_PHASE_BACKWARD && s->prefetch == FS_PREFETCH_POST)
        rc = prefetch_after(s, u, err);
    return rc;
}

/* --- gradients ---------------------------------------------------------------------------- */

/* The unsharded gradient exists from the first call of a step until the unit's reduction is
 * done (FSDP frees it after the reduce-scatter); don't keep the pointer across steps. */
static int32_t fs_grad_buffer(void *p, uint32_t u, void **grads, ct_error *err) {
    full_shard *s = p;
    if (check_unit(s, u, err)) return err->code;
    fs_unit *x = &s->units[u];
    if (x->reduce_started)
        return ct_error_set(err, CT_ERR_INTERNAL, FS_WHO ": grad_buffer of unit %u"
                            " after its reduction started this step", u);
    if (!x->grad_local && grads_alloc(s, u, err)) return err->code;
    *grads = x->grad_local;
    return CT_OK;
}

static int32_t fs_begin_step(void *p, ct_error *err) {
    full_shard *s = p;
    if (!s->units) return check_unit(s, 0, err);
    for (uint32_t u = 0; u < s->n_units; u++) {
        fs_unit *x = &s->units[u];
        if (x->req) return ct_skit_error_in_flight(FS_WHO, u, err);
        x->reduce_started = 0;
        if (x->grad_local) { /* left over from an unfinished step */
            int32_t rc = s->dev.vt->zero(s->dev.self, x->grad_local,
                                         x->padded * ct_dtype_size(s->policy.grad_accum_dtype),
                                         err);
            if (rc) return rc;
        }
    }
    s->n_bwd_now = 0;
    return CT_OK;
}

/* Complete unit x's reduce-scatter: wait, divide by N/f in the result dtype (reduce_dtype, or
 * f32 from a precision hook that hands back f32), cast to f32, free the unsharded gradient. */
static int32_t finish_unit(full_shard *s, fs_unit *x, ct_error *err) {
    const int32_t rdt = ct_skit_result_dtype(&s->reducer, &s->policy, 0);
    int32_t rc = ct_skit_wait(s->reducer.comm, &x->req, err);
    if (!rc) rc = ct_skit_divide_to_f32(s->dev, x->grad_out, x->rs_out, rdt, x->shard_n,
                                       s->divide.post, err);
    grads_free(s, x);
    return rc;
}

/* Last micro-batch: finish the reductions still in flight (at most one runs behind the
 * compute, so at most two unsharded gradients exist besides ones the host holds), then cast
 * to reduce_dtype, divide by f and start the SUM reduce-scatter. */
static int32_t fs_unit_backward_done(void *p, uint32_t u, int32_t last, ct_error *err) {
    full_shard *s = p;
    if (check_unit(s, u, err)) return err->code;
    if (!last) return CT_OK;
    fs_unit *x = &s->units[u];
    const int32_t rdt = s->policy.reduce_dtype;
    if (x->reduce_started) return ct_skit_error_reduced_twice(FS_WHO, u, err);
    int32_t rc = CT_OK;
    for (uint32_t v = 0; v < s->n_units && !rc; v++) {
        fs_unit *y = &s->units[v];
        if (y->reduce_started && y->grad_local) rc = finish_unit(s, y, err);
    }
    if (!rc && !x->grad_local) rc = grads_alloc(s, u, err); /* no backward: zeros */
    if (!rc) rc = ct_skit_convert_and_divide(s->dev, x->grad_wire, rdt, x->grad_local,
                                            s->policy.grad_accum_dtype, x->padded,
                                            s->divide.pre, err);
    if (!rc) rc = ct_skit_reduce_scatter_op(&s->reducer, s->divide.op, x->grad_wire, x->rs_out,
                                           x->shard_n, rdt, &x->req, err);
    if (rc) return rc;
    x->reduce_started = 1;
    return CT_OK;
}

/* Finish the reductions still in flight; drop gathers nobody holds (an unused prefetch). */
static int32_t fs_finish_backward(void *p, ct_error *err) {
    full_shard *s = p;
    if (!s->units) return check_unit(s, 0, err);
    int32_t rc = CT_OK;
    for (uint32_t u = 0; u < s->n_units; u++) {
        fs_unit *x = &s->units[u];
        ct_error werr = {.struct_size = sizeof werr};
        int32_t w = CT_OK;
        if (x->reduce_started && x->grad_local) w = finish_unit(s, x, &werr);
        else if (!x->reduce_started && !rc)
            w = ct_skit_error_never_reduced(FS_WHO, u, &werr);
        if (!x->holds) {
            int32_t f = gather_free(s, x, &werr);
            if (!w) w = f;
        }
        if (w && !rc) {
            rc = w;
            if (err) *err = werr;
        }
    }
    memcpy(s->bwd_last, s->bwd_now, s->n_bwd_now * sizeof *s->bwd_now);
    s->n_bwd_last = s->n_bwd_now;
    return rc;
}

static int32_t fs_shard(void *p, uint32_t u, ct_shard *out, ct_error *err) {
    full_shard *s = p;
    if (check_unit(s, u, err)) return err->code;
    fs_unit *x = &s->units[u];
    ct_shard sh = {
        .struct_size = sizeof sh, .master = x->params.master, .grad = x->grad_out,
        .numel = x->shard_n, .offset = x->offset, .padded_numel = x->padded, .replicated = 0,
        .master_dtype = ct_skit_master_dtype(&x->params),
    };
    ct_skit_put_shard(out, &sh);
    return CT_OK;
}

/* Masters changed: refresh the compute shards and drop gathers kept from before. */
static int32_t fs_step_done(void *p, ct_error *err) {
    full_shard *s = p;
    if (!s->units) return check_unit(s, 0, err);
    for (uint32_t u = 0; u < s->n_units; u++) {
        fs_unit *x = &s->units[u];
        int32_t rc = x->holds ? CT_OK : gather_free(s, x, err);
        if (!rc) rc = refresh_compute(s, x, err);
        if (rc) return rc;
    }
    return CT_OK;
}

/* params and the gradient shards are what this rank keeps; grads adds the peak of unsharded
 * gradients and gathered the peak of gathered parameters seen so far. */
static int32_t fs_memory(void *p, uint64_t *params, uint64_t *grads, uint64_t *gathered,
                         ct_error *err) {
    full_shard *s = p;
    uint64_t pb = 0, gb = 0;
    size_t rsz = ct_dtype_size(ct_skit_result_dtype(&s->reducer, &s->policy, 0));
    for (uint32_t u = 0; u < s->n_units; u++) {
        fs_unit *x = &s->units[u];
        pb += ct_skit_params_bytes(&x->params, x->shard_n, s->policy.param_dtype);
        gb += x->shard_n * rsz + (x->grad_out != x->rs_out ? x->shard_n * 4 : 0);
    }
    *params = pb;
    *grads = gb + s->grads_peak;
    *gathered = s->gathered_peak;
    return CT_OK;
}

static const char *const fs_prefetch_choices[] = {"backward_pre", "backward_post", "none", NULL};
static const char *const fs_divide_choices[] = {"fsdp1", "post", "avg", NULL};

static const ct_param_spec fs_params[] = {
    CT_PARAM_BOOL("limit_all_gathers", "true",
                  "at most two units gathered (held) at once; a third acquire is an error"),
    CT_PARAM_ENUM("backward_prefetch", "backward_pre", fs_prefetch_choices,
                  "start the next unit's all-gather during backward: before (pre) or after"
                  " (post) the current unit's gradient computation, or not at all"),
    CT_PARAM_BOOL("reshard_after_forward", "true",
                  "free gathered parameters after forward (false: keep them until backward,"
                  " FSDP's SHARD_GRAD_OP)"),
    CT_PARAM_ENUM("grad_divide", "fsdp1", fs_divide_choices,
                  "how the reduce-scatter averages: fsdp1 (divide by f before a SUM and by N/f"
                  " after, FSDP1), post (SUM, then divide by N), avg (ncclAvg in the collective,"
                  " FSDP2's default for bf16/f32)"),
    CT_PARAM_END,
};

static const ct_strategy_vtable fs_vtable = {
    .struct_size = sizeof(ct_strategy_vtable),
    .create = fs_create,
    .destroy = fs_destroy,
    .setup = fs_setup,
    .load_unit = fs_load_unit,
    .save_unit = fs_save_unit,
    .acquire = fs_acquire,
    .release = fs_release,
    .grad_buffer = fs_grad_buffer,
    .begin_step = fs_begin_step,
    .unit_backward_done = fs_unit_backward_done,
    .finish_backward = fs_finish_backward,
    .shard = fs_shard,
    .step_done = fs_step_done,
    .memory = fs_memory,
};

CT_DEFINE_PLUGIN(
    .kind = CT_KIND_STRATEGY,
    .name = "full_shard",
    .version = "1.1.0",
    .summary = "FSDP FULL_SHARD: params, grads and optimizer state sharded 1/N; all-gather in"
               " param dtype, reduce-scatter with FSDP1's pre/post divide (or FSDP2's AVG)",
    .params = fs_params,
    .devices = CT_DEVICE_CPU | CT_DEVICE_CUDA,
    .vtable = &fs_vtable,)

