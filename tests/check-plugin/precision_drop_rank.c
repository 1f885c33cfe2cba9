/* precision_drop_rank.c — a deliberately wrong precision policy for
 * tests/cli/test_check_plugin.sh: pure_bf16's dtypes with reduction hooks that leave out the
 * last rank's contribution (it sends zeros), which `ctrain check-plugin` must name. With
 * -DWRONG_WRITES_SEND the sums are right but computed in place in the caller's const send
 * buffer (an all-reduce over it, then a copy of the result), which the strategy still reads.
 * Built only by the test (cc -shared -fPIC -fvisibility=hidden -Wl,-z,defs -Isdk/include).
 */
#include <ctrain/ctrain.h>

#include <stdint.h>
#include <stdlib.h>

typedef struct drop {
    ct_device_ref dev;
    void         *scratch; /* (cap) bf16 */
    uint64_t      cap;
} drop;

static void *d_create(const ct_create_args *a, ct_error *err) {
    (void)a;
    drop *self = calloc(1, sizeof *self);
    if (!self) ct_error_set(err, CT_ERR_NOMEM, "out of memory");
    return self;
}

static void d_destroy(void *p) {
    drop *self = p;
    if (self && self->dev.vt) self->dev.vt->free_mem(self->dev.self, self->scratch);
    free(self);
}

static int32_t d_policy(void *p, ct_precision_policy *out, ct_error *err) {
    (void)p;
    (void)err;
    out->param_dtype = CT_DTYPE_BF16;
    out->reduce_dtype = CT_DTYPE_BF16;
    out->master_dtype = CT_DTYPE_F32;
    out->grad_accum_dtype = CT_DTYPE_BF16;
    out->buffer_dtype = CT_DTYPE_BF16;
    return CT_OK;
}

#if defined(WRONG_WRITES_SEND)
#define D_NAME "writes_send"
/* The bug: send is the caller's (const); the sum is made in it. n elements to all-reduce, the
 * `count` at `offset` of them are this rank's result. */
static int32_t in_send(ct_comm_ref comm, ct_device_ref dev, const void *send, void *recv,
                       uint64_t n, uint64_t offset, uint64_t count, int32_t dtype, ct_error *err) {
    void *mine = (void *)(uintptr_t)send;
    int32_t rc = comm.vt->all_reduce(comm.self, mine, mine, n, dtype, CT_REDUCE_SUM, NULL, err);
    size_t es = ct_dtype_size(dtype);
    if (rc == CT_OK && recv != mine)
        rc = dev.vt->copy(dev.self, recv, (char *)mine + offset * es, count * es, CT_COPY_D2D, err);
    return rc;
}

static int32_t d_reduce_scatter(void *p, ct_comm_ref comm, ct_device_ref dev, const void *send,
                                void *recv, uint64_t count, int32_t dtype, ct_error *err) {
    (void)p;
    uint64_t N = (uint64_t)comm.world_size;
    return in_send(comm, dev, send, recv, N * count, (uint64_t)comm.rank * count, count, dtype,
                   err);
}

static int32_t d_all_reduce(void *p, ct_comm_ref comm, ct_device_ref dev, const void *send,
                            void *recv, uint64_t count, int32_t dtype, ct_error *err) {
    (void)p;
    return in_send(comm, dev, send, recv, count, 0, count, dtype, err);
}
#else
#define D_NAME "drop_last_rank"
/* The n elements this rank sends: its own, or zeros on the last rank (the bug). */
static const void *contribution(drop *self, ct_comm_ref comm, ct_device_ref dev, const void *send,
                                uint64_t n, int32_t dtype, ct_error *err) {
    if (comm.world_size == 1 || comm.rank != comm.world_size - 1) return send;
    uint64_t bytes = n * ct_dtype_size(dtype);
    if (bytes > self->cap) {
        if (self->dev.vt) self->dev.vt->free_mem(self->dev.self, self->scratch);
        self->dev = dev;
        self->scratch = dev.vt->alloc(dev.self, bytes, err);
        self->cap = self->scratch ? bytes : 0;
        if (!self->scratch) return NULL;
    }
    return dev.vt->zero(dev.self, self->scratch, bytes, err) == CT_OK ? self->scratch : NULL;
}

static int32_t d_reduce_scatter(void *p, ct_comm_ref comm, ct_device_ref dev, const void *send,
                                void *recv, uint64_t count, int32_t dtype, ct_error *err) {
    const void *mine = contribution(p, comm, dev, send, count * (uint64_t)comm.world_size, dtype,
                                    err);
    if (!mine) return err->code;
    return comm.vt->reduce_scatter(comm.self, mine, recv, count, dtype, CT_REDUCE_SUM, NULL, err);
}

static int32_t d_all_reduce(void *p, ct_comm_ref comm, ct_device_ref dev, const void *send,
                            void *recv, uint64_t count, int32_t dtype, ct_error *err) {
    const void *mine = contribution(p, comm, dev, send, count, dtype, err);
    if (!mine) return err->code;
    return comm.vt->all_reduce(comm.self, mine, recv, count, dtype, CT_REDUCE_SUM, NULL, err);
}

#endif

static const ct_param_spec d_params[] = {CT_PARAM_END};
static const ct_precision_vtable d_vtable = {
    .struct_size = sizeof(ct_precision_vtable), .create = d_create, .destroy = d_destroy,
    .policy = d_policy, .reduce_scatter = d_reduce_scatter, .all_reduce = d_all_reduce,
};
static const ct_plugin_desc d_desc = {
    .struct_size = sizeof(ct_plugin_desc), .abi_major = CT_ABI_MAJOR, .abi_minor = CT_ABI_MINOR,
    .kind = CT_KIND_PRECISION, .name = D_NAME, .version = "0.0.1",
    .summary = "deliberately wrong bf16 reduction: the last rank's gradient is left out",
    .params = d_params, .param_struct_size = sizeof(ct_param_spec), .devices = CT_DEVICE_CPU,
    .vtable = &d_vtable,
};
CT_EXPORT const ct_plugin_desc *ctrain_plugin_v1(void) { return &d_desc; }
