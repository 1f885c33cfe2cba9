/* strategy_no_divide.c — a deliberately wrong strategy for tests/cli/test_check_plugin.sh: DDP
 * reduced to its core (every unit replicated, one synchronous SUM all-reduce per unit, f32
 * only) that forgets to divide the sum by the number of ranks, which `ctrain check-plugin`
 * must name. With -DWRONG_SHARD_FLAG it divides correctly but reports its replicated units as
 * sharded (ct_shard.replicated = 0), so a global norm counts every element once per rank.
 * Built only by the test (cc -shared -fPIC -fvisibility=hidden -Wl,-z,defs -Isdk/include).
 */
#include <ctrain/ctrain.h>
#include <ctrain/strategy_kit.h>

#include <stdlib.h>

#define WHO "strategy no_divide"

typedef struct nd {
    ct_device_ref       dev;
    ct_comm_ref         comm;
    ct_precision_policy pol;
    uint32_t            n;
    ct_skit_replica     *u; /* (n) */
} nd;

static void *nd_create(const ct_create_args *a, ct_error *err) {
    if (ct_skit_check_engines(a, WHO, err)) return NULL;
    nd *s = calloc(1, sizeof *s);
    if (!s) return ct_error_set(err, CT_ERR_NOMEM, WHO ": out of memory"), NULL;
    s->dev = a->device;
    s->comm = a->comm;
    return s;
}

static void nd_destroy(void *p) {
    nd *s = p;
    for (uint32_t i = 0; s && i < s->n; i++) ct_skit_replica_free(s->dev, &s->u[i]);
    if (s) free(s->u);
    free(s);
}

static int32_t nd_setup(void *p, const ct_strategy_setup *su, ct_error *err) {
    nd *s = p;
    ct_skit_copy_struct(&s->pol, su->policy, sizeof s->pol);
    if (s->pol.param_dtype != CT_DTYPE_F32 || s->pol.grad_accum_dtype != CT_DTYPE_F32 ||
        s->pol.reduce_dtype != CT_DTYPE_F32)
        return ct_error_set(err, CT_ERR_UNSUPPORTED, WHO ": f32 only ---> [precision] fp32");
    if (!(s->u = calloc(su->n_units, sizeof *s->u)))
        return ct_error_set(err, CT_ERR_NOMEM, WHO ": out of memory");
    s->n = su->n_units;
    for (uint32_t i = 0; i < s->n; i++)
        if (ct_skit_replica_alloc(s->dev, &s->u[i], su->unit_numel[i], ct_skit_world_size(s->comm),
                                 &s->pol, WHO, i, err))
            return err->code;
    return CT_OK;
}

static int32_t nd_load_unit(void *p, uint32_t u, const float *full, ct_error *err) {
    nd *s = p;
    return ct_skit_replica_load(s->dev, &s->u[u], CT_DTYPE_F32, full, err);
}

static int32_t nd_save_unit(void *p, uint32_t u, float *full, ct_error *err) {
    nd *s = p;
    return ct_skit_replica_save(s->dev, &s->u[u], full, err);
}

static int32_t nd_acquire(void *p, uint32_t u, int32_t phase, const void **params,
                          ct_error *err) {
    (void)phase;
    (void)err;
    ct_skit_replica_acquire(&((nd *)p)->u[u], params);
    return CT_OK;
}

static int32_t nd_release(void *p, uint32_t u, int32_t phase, ct_error *err) {
    (void)phase;
    return ct_skit_replica_release(WHO, u, &((nd *)p)->u[u], err);
}

static int32_t nd_grad_buffer(void *p, uint32_t u, void **grads, ct_error *err) {
    (void)err;
    *grads = ((nd *)p)->u[u].grad_local;
    return CT_OK;
}

static int32_t nd_begin_step(void *p, ct_error *err) {
    nd *s = p;
    for (uint32_t i = 0; i < s->n; i++)
        if (ct_skit_replica_zero_grad(s->dev, &s->u[i], CT_DTYPE_F32, err)) return err->code;
    return CT_OK;
}

/* The bug: the SUM over ranks is kept as it is; ddp divides it by N. */
static int32_t nd_unit_backward_done(void *p, uint32_t u, int32_t last, ct_error *err) {
    nd *s = p;
    if (!last) return CT_OK;
    ct_skit_replica *x = &s->u[u];
    int32_t rc = s->comm.vt->all_reduce(s->comm.self, x->grad_local, x->grad_local, x->padded,
                                        CT_DTYPE_F32, CT_REDUCE_SUM, NULL, err);
#if defined(WRONG_SHARD_FLAG)
    if (rc == CT_OK)
        rc = ct_skit_divide(s->dev, x->grad_local, CT_DTYPE_F32, x->padded,
                           (double)ct_skit_world_size(s->comm), err);
#endif
    return rc;
}

#if defined(WRONG_SHARD_FLAG)
#define ND_NAME "wrong_shard_flag"
#define ND_REPLICATED 0
#else
#define ND_NAME "no_divide"
#define ND_REPLICATED 1
#endif

static int32_t nd_finish_backward(void *p, ct_error *err) {
    (void)p;
    (void)err;
    return CT_OK;
}

static int32_t nd_shard(void *p, uint32_t u, ct_shard *out, ct_error *err) {
    (void)err;
    ct_skit_replica *x = &((nd *)p)->u[u];
    ct_shard sh = {.struct_size = sizeof sh, .master = x->params.master, .grad = x->grad_local,
                   .numel = x->padded, .offset = 0, .padded_numel = x->padded, .replicated = ND_REPLICATED};
    ct_skit_put_shard(out, &sh);
    return CT_OK;
}

static int32_t nd_step_done(void *p, ct_error *err) {
    (void)p;
    (void)err;
    return CT_OK; /* f32: the compute copy is the master */
}

static const ct_param_spec nd_params[] = {CT_PARAM_END};
static const ct_strategy_vtable nd_vtable = {
    .struct_size = sizeof(ct_strategy_vtable), .create = nd_create, .destroy = nd_destroy,
    .setup = nd_setup, .load_unit = nd_load_unit, .save_unit = nd_save_unit,
    .acquire = nd_acquire, .release = nd_release, .grad_buffer = nd_grad_buffer,
    .begin_step = nd_begin_step, .unit_backward_done = nd_unit_backward_done,
    .finish_backward = nd_finish_backward, .shard = nd_shard, .step_done = nd_step_done,
};
static const ct_plugin_desc nd_desc = {
    .struct_size = sizeof(ct_plugin_desc), .abi_major = CT_ABI_MAJOR, .abi_minor = CT_ABI_MINOR,
    .kind = CT_KIND_STRATEGY, .name = ND_NAME, .version = "0.0.1",
    .summary = "deliberately wrong ddp: the gradient sum is not divided by the ranks",
    .params = nd_params, .param_struct_size = sizeof(ct_param_spec), .devices = CT_DEVICE_CPU,
    .vtable = &nd_vtable,
};
CT_EXPORT const ct_plugin_desc *ctrain_plugin_v1(void) { return &nd_desc; }
