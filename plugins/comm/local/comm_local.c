/* comm_local.c — the `local` comm plugin: a world of one rank (rank 0, world size 1).
 * Every collective of one rank is a copy of send into recv (a reduction over one rank is the
 * identity), done with the rank's device plugin so it works on any device. Calls complete
 * before they return; a request handle, when asked for, is already done. Nothing leaves the
 * rank, so the traffic metric "comm/bytes_per_rank" it reports is 0 (the key is still logged,
 * so a 1-rank run's metrics.jsonl has the same columns as a many-rank one).
 * Not for: more than one rank (use comm threads, mpi or nccl).
 */
#include <ctrain/ctrain.h>

#include <stdlib.h>

typedef struct local_comm {
    ct_device_ref device; /* copies go through the device (D2D) */
    int           done;   /* the address of this is the request every async call returns */
    const ct_host_api *api;  /* for the traffic metric; NULL: not reported */
    ct_host           *host;
} local_comm;

/* ---------------------------------------------------------------------------------------
 * create / destroy
 * ------------------------------------------------------------------------------------- */

static void *local_create(const ct_create_args *args, ct_error *err) {
    if (args->world_size > 1)
        return ct_error_set(err, CT_ERR_INVALID,
                            "comm local: world_size %d requested but local is one rank ---> use "
                            "[comm] plugin = threads (one process) or mpi",
                            (int)args->world_size),
               NULL;
    local_comm *self = calloc(1, sizeof *self);
    if (!self) return ct_error_set(err, CT_ERR_NOMEM, "comm local: out of memory"), NULL;
    self->device = args->device;
    self->api = args->api;
    self->host = args->host;
    return self;
}

static void local_destroy(void *self) { free(self); }

static int32_t local_rank(void *self) {
    (void)self;
    return 0;
}

static int32_t local_world_size(void *self) {
    (void)self;
    return 1;
}

/* ---------------------------------------------------------------------------------------
 * helpers: argument checks and the one copy every collective is
 * ------------------------------------------------------------------------------------- */

static int32_t check_dtype(int32_t dtype, const char *what, ct_error *err) {
    if (ct_dtype_size(dtype)) return CT_OK;
    return ct_error_set(err, CT_ERR_INVALID, "comm local: %s with unknown dtype %d", what,
                        (int)dtype);
}

/* Every op over one rank is a copy: AVG's premultiplier is the dtype's 1/1 = 1 (floating
 * dtypes only, as in every engine). */
static int32_t check_op(int32_t op, int32_t dtype, const char *what, ct_error *err) {
    if (op == CT_REDUCE_SUM || op == CT_REDUCE_MAX || op == CT_REDUCE_MIN) return CT_OK;
    if (op == CT_REDUCE_AVG && (dtype == CT_DTYPE_F32 || dtype == CT_DTYPE_BF16 ||
                                dtype == CT_DTYPE_F64))
        return CT_OK;
    return ct_error_set(err, op == CT_REDUCE_AVG ? CT_ERR_UNSUPPORTED : CT_ERR_INVALID,
                        "comm local: %s with reduce op %d over %s ---> use CT_REDUCE_SUM, _MAX "
                        "or _MIN, or _AVG over f32, bf16 or f64", what, (int)op,
                        ct_dtype_name(dtype));
}

/* The traffic of a collective in a world of one: (N-1)/N * n = 0 bytes. */
static void report_bytes(const local_comm *self) {
    if (self->api && self->api->metric)
        self->api->metric(self->host, "comm/bytes_per_rank", 0.0, CT_METRIC_SUM);
}

/* recv = send (count elements of dtype), device to device; then mark req done. */
static int32_t copy_through(local_comm *self, const void *send, void *recv, uint64_t count,
                            int32_t dtype, ct_request **req, ct_error *err) {
    uint64_t bytes = count * ct_dtype_size(dtype);
    report_bytes(self);
    if (req) *req = (ct_request *)&self->done;
    if (send == recv || bytes == 0) return CT_OK;
    if (self->device.vt && self->device.vt->copy)
        return self->device.vt->copy(self->device.self, recv, send, bytes, CT_COPY_D2D, err);
    memmove(recv, send, (size_t)bytes); /* no device given: host memory */
    return CT_OK;
}

/* ---------------------------------------------------------------------------------------
 * collectives of one rank
 * ------------------------------------------------------------------------------------- */

static int32_t local_all_reduce(void *p, const void *send, void *recv, uint64_t count,
                                int32_t dtype, int32_t op, ct_request **req, ct_error *err) {
    int32_t rc = check_dtype(dtype, "all_reduce", err);
    if (rc == CT_OK) rc = check_op(op, dtype, "all_reduce", err);
    if (rc != CT_OK) return rc;
    return copy_through(p, send, recv, count, dtype, req, err);
}

static int32_t local_reduce_scatter(void *p, const void *send, void *recv, uint64_t count,
                                    int32_t dtype, int32_t op, ct_request **req,
                                    ct_error *err) {
    int32_t rc = check_dtype(dtype, "reduce_scatter", err);
    if (rc == CT_OK) rc = check_op(op, dtype, "reduce_scatter", err);
    if (rc != CT_OK) return rc;
    return copy_through(p, send, recv, count, dtype, req, err); /* world_size*count == count */
}

static int32_t local_all_gather(void *p, const void *send, void *recv, uint64_t count,
                                int32_t dtype, ct_request **req, ct_error *err) {
    if (check_dtype(dtype, "all_gather", err)) return CT_ERR_INVALID;
    return copy_through(p, send, recv, count, dtype, req, err);
}

static int32_t local_all_to_all(void *p, const void *send, void *recv, uint64_t count,
                                int32_t dtype, ct_request **req, ct_error *err) {
    if (check_dtype(dtype, "all_to_all", err)) return CT_ERR_INVALID;
    return copy_through(p, send, recv, count, dtype, req, err);
}

static int32_t local_broadcast(void *p, void *buf, uint64_t count, int32_t dtype, int32_t root,
                               ct_error *err) {
    (void)buf;
    (void)count;
    if (check_dtype(dtype, "broadcast", err)) return CT_ERR_INVALID;
    if (root != 0)
        return ct_error_set(err, CT_ERR_INVALID, "comm local: broadcast from root %d, but the "
                            "only rank is 0", (int)root);
    report_bytes(p);
    return CT_OK; /* the root's buffer is every rank's buffer */
}

static int32_t local_barrier(void *p, ct_error *err) {
    (void)p;
    (void)err;
    return CT_OK;
}

static int32_t local_send(void *p, const void *buf, uint64_t count, int32_t dtype, int32_t peer,
                          int32_t tag, ct_error *err) {
    (void)p, (void)buf, (void)count, (void)dtype, (void)tag;
    return ct_error_set(err, CT_ERR_INVALID, "comm local: send to rank %d in a world of one "
                        "rank (a rank cannot send to itself) ---> use comm threads or mpi for "
                        "point-to-point", (int)peer);
}

static int32_t local_recv(void *p, void *buf, uint64_t count, int32_t dtype, int32_t peer,
                          int32_t tag, ct_error *err) {
    (void)p, (void)buf, (void)count, (void)dtype, (void)tag;
    return ct_error_set(err, CT_ERR_INVALID, "comm local: recv from rank %d in a world of one "
                        "rank (a rank cannot receive from itself) ---> use comm threads or mpi "
                        "for point-to-point", (int)peer);
}

static int32_t local_wait(void *p, ct_request *req, ct_error *err) {
    local_comm *self = p;
    if (req && req != (ct_request *)&self->done)
        return ct_error_set(err, CT_ERR_INVALID, "comm local: wait on a request this instance "
                            "did not issue");
    return CT_OK;
}

static void local_abort(void *p, const char *why) {
    (void)p;
    (void)why; /* no other rank to tell */
}

/* ---------------------------------------------------------------------------------------
 * descriptor
 * ------------------------------------------------------------------------------------- */

static const ct_param_spec local_params[] = {
    CT_PARAM_END,
};

static const ct_comm_vtable local_vtable = {
    .struct_size    = sizeof(ct_comm_vtable),
    .world_create   = NULL, /* the world is this process's one rank */
    .world_destroy  = NULL,
    .create         = local_create,
    .destroy        = local_destroy,
    .rank           = local_rank,
    .world_size     = local_world_size,
    .all_reduce     = local_all_reduce,
    .reduce_scatter = local_reduce_scatter,
    .all_gather     = local_all_gather,
    .all_to_all     = local_all_to_all,
    .broadcast      = local_broadcast,
    .barrier        = local_barrier,
    .send           = local_send,
    .recv           = local_recv,
    .wait           = local_wait,
    .abort          = local_abort,
};

CT_DEFINE_PLUGIN(
    .kind    = CT_KIND_COMM,
    .name    = "local",
    .version = "1.0.0",
    .summary = "one rank: every collective is a copy",
    .params  = local_params,
    .devices = CT_DEVICE_CPU | CT_DEVICE_CUDA,
    .vtable  = &local_vtable)

