/* comm_nccl.c — the `nccl` comm plugin: collectives between GPUs with NCCL, one rank per
 * process. Launched as several processes (the host's ct_create_args.world_size > 1: mpirun,
 * srun --mpi=pmix; or OMPI_COMM_WORLD_SIZE set) the ranks come from MPI, which also carries the
 * ncclUniqueId from rank 0 to the others; started alone it is a world of one, without MPI.
 * Not for: CPU memory (comm local, threads, mpi) or several ranks in one process.
 *
 * Streams: collectives run on this instance's own stream, ordered after the work already queued
 * on the device's compute stream (an event recorded there, waited on here). A call with req ==
 * NULL returns when the collective is complete; with req it returns at once and wait() polls
 * the request's event. Polling also reads ncclCommGetAsyncError and gives up after
 * [comm] timeout_s, aborting the communicator, so a dead peer is an error, not a hang.
 * Arithmetic: NCCL's (ring or tree, its choice): bf16 sums round each partial sum to bf16.
 */
#include <ctrain/ctrain.h>

#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NCCL_MAX_REQ 64 /* asynchronous requests in flight per instance */

typedef struct nccl_req {
    cudaEvent_t done;   /* recorded on the comm stream after the collective */
    int         in_use;
} nccl_req;

typedef struct nccl_comm {
    const ct_host_api *api;
    ct_host           *host;
    int32_t            rank, world;
    int                mpi_inited;  /* 1: this instance called MPI_Init and finalizes */
    ncclComm_t         comm;        /* NULL after abort */
    cudaStream_t       stream;      /* the comm stream */
    cudaStream_t       compute;     /* the device's compute stream (not owned) */
    cudaEvent_t        after_compute; /* recorded on compute, waited on by the comm stream */
    cudaEvent_t        sync_done;     /* completion of a call made without a request */
    int32_t           *d_flag;      /* one device int for barrier */
    double             timeout_s;
    char               failed[256]; /* why the communicator is unusable; "" while healthy */
    nccl_req           reqs[NCCL_MAX_REQ];
} nccl_comm;

/* ---------------------------------------------------------------------------------------
 * errors
 * ------------------------------------------------------------------------------------- */

static int32_t nccl_fail(ct_error *err, const char *what, ncclResult_t r) {
    return ct_error_set(err, CT_ERR_COMM, "comm nccl: %s failed: %s ---> rerun with "
                        "NCCL_DEBUG=WARN to see why", what, ncclGetErrorString(r));
}

static int32_t cuda_fail(ct_error *err, const char *what, cudaError_t e) {
    return ct_error_set(err, CT_ERR_DEVICE, "comm nccl: %s failed: %s ---> check nvidia-smi",
                        what, cudaGetErrorString(e));
}

#define NCCL_TRY(call, what)                                        \
    do {                                                            \
        ncclResult_t r_ = (call);                                   \
        if (r_ != ncclSuccess) return nccl_fail(err, (what), r_);   \
    } while (0)

#define CUDA_TRY(call, what)                                        \
    do {                                                            \
        cudaError_t e_ = (call);                                    \
        if (e_ != cudaSuccess) return cuda_fail(err, (what), e_);   \
    } while (0)

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---------------------------------------------------------------------------------------
 * create / destroy
 * ------------------------------------------------------------------------------------- */

/* Rank, world size and the shared unique id: from MPI when launched as several processes
 * (launched_world > 1, the launcher's world the host passes in ct_create_args) or under
 * mpirun, else a world of one. */
static int32_t bootstrap(nccl_comm *self, int32_t launched_world, ncclUniqueId *id,
                         ct_error *err) {
    const char *ws = getenv("OMPI_COMM_WORLD_SIZE");
    if ((!ws || !*ws) && launched_world <= 1) {
        self->rank = 0;
        self->world = 1;
        NCCL_TRY(ncclGetUniqueId(id), "ncclGetUniqueId");
        return CT_OK;
    }
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        int provided = 0;
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
            return ct_error_set(err, CT_ERR_COMM, "comm nccl: MPI_Init_thread failed under "
                                "mpirun ---> check the mpirun command line and OpenMPI install");
        self->mpi_inited = 1;
    }
    int r = 0, n = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    self->rank = r;
    self->world = n;
    if (r == 0) NCCL_TRY(ncclGetUniqueId(id), "ncclGetUniqueId");
    if (MPI_Bcast(id, (int)sizeof *id, MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS)
        return ct_error_set(err, CT_ERR_COMM, "comm nccl: MPI_Bcast of the ncclUniqueId "
                            "failed ---> a rank died during start-up; see its log");
    return CT_OK;
}

static void nccl_destroy(void *p);

static void *nccl_create(const ct_create_args *args, ct_error *err) {
    if (args->device.type != CT_DEVICE_CUDA || !args->device.vt ||
        !args->device.vt->native_stream) {
        ct_error_set(err, CT_ERR_UNSUPPORTED, "comm nccl: the rank's device is not a GPU "
                     "(NCCL moves GPU memory only) ---> use [device] type = cuda, or "
                     "[comm] plugin = mpi / threads / local for CPU runs");
        return NULL;
    }
    nccl_comm *self = calloc(1, sizeof *self);
    if (!self) {
        ct_error_set(err, CT_ERR_NOMEM, "comm nccl: out of memory");
        return NULL;
    }
    self->api = args->api;
    self->host = args->host;
    self->timeout_s = 600;
    if (args->api && args->api->get_float &&
        args->api->get_float(args->host, args->section, "timeout_s", &self->timeout_s, err) != CT_OK)
        goto out_free_self;
    self->compute = (cudaStream_t)args->device.vt->native_stream(args->device.self);
    ncclUniqueId id;
    if (bootstrap(self, args->world_size, &id, err) != CT_OK) goto out_free_self;
    cudaError_t e;
    if ((e = cudaStreamCreateWithFlags(&self->stream, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaEventCreateWithFlags(&self->after_compute, cudaEventDisableTiming)) != cudaSuccess ||
        (e = cudaEventCreateWithFlags(&self->sync_done, cudaEventDisableTiming)) != cudaSuccess ||
        (e = cudaMalloc((void **)&self->d_flag, sizeof(int32_t))) != cudaSuccess) {
        cuda_fail(err, "creating the comm stream", e);
        goto out_destroy;
    }
    for (int i = 0; i < NCCL_MAX_REQ; i++)
        if ((e = cudaEventCreateWithFlags(&self->reqs[i].done, cudaEventDisableTiming)) !=
            cudaSuccess) {
            cuda_fail(err, "cudaEventCreate", e);
            goto out_destroy;
        }
    ncclResult_t r = ncclCommInitRank(&self->comm, self->world, id, self->rank);
    if (r != ncclSuccess) {
        self->comm = NULL;
        nccl_fail(err, "ncclCommInitRank", r);
        goto out_destroy;
    }
    if (self->api && self->api->log) {
        int v = 0;
        ncclGetVersion(&v);
        char msg[128];
        snprintf(msg, sizeof msg, "comm nccl: rank %d of %d, NCCL %d.%d.%d%s", self->rank,
                 self->world, v / 10000, v / 100 % 100, v % 100,
                 self->world > 1 ? ", unique id over MPI" : "");
        self->api->log(self->host, CT_LOG_INFO, msg);
    }
    return self;

out_destroy:
    nccl_destroy(self);
    return NULL;
out_free_self:
    if (self->mpi_inited) MPI_Finalize();
    free(self);
    return NULL;
}

static void nccl_destroy(void *p) {
    nccl_comm *self = p;
    if (!self) return;
    if (self->stream) cudaStreamSynchronize(self->stream);
    if (self->comm) ncclCommDestroy(self->comm);
    for (int i = 0; i < NCCL_MAX_REQ; i++)
        if (self->reqs[i].done) cudaEventDestroy(self->reqs[i].done);
    if (self->d_flag) cudaFree(self->d_flag);
    if (self->after_compute) cudaEventDestroy(self->after_compute);
    if (self->sync_done) cudaEventDestroy(self->sync_done);
    if (self->stream) cudaStreamDestroy(self->stream);
    if (self->mpi_inited) {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!finalized) MPI_Finalize();
    }
    free(self);
}

static int32_t nccl_rank(void *p) { return ((nccl_comm *)p)->rank; }
static int32_t nccl_world_size(void *p) { return ((nccl_comm *)p)->world; }

/* ---------------------------------------------------------------------------------------
 * the life of one collective: begin (order after compute), enqueue, finish (wait or request)
 * ------------------------------------------------------------------------------------- */

static int32_t check_healthy(nccl_comm *self, ct_error *err) {
    if (self->failed[0] || !self->comm)
        return ct_error_set(err, CT_ERR_COMM, "comm nccl: rank %d: the communicator is unusable "
                            "(%s) ---> see the first error in the log", self->rank,
                            self->failed[0] ? self->failed : "aborted");
    return CT_OK;
}

static int32_t begin(nccl_comm *self, ct_error *err) {
    int32_t rc = check_healthy(self, err);
    if (rc != CT_OK) return rc;
    CUDA_TRY(cudaEventRecord(self->after_compute, self->compute), "cudaEventRecord");
    CUDA_TRY(cudaStreamWaitEvent(self->stream, self->after_compute, 0), "cudaStreamWaitEvent");
    return CT_OK;
}

/* Poll `ev` until it completes, an asynchronous NCCL error shows up or timeout_s passes (then
 * the communicator is aborted so every later call fails at once). */
static int32_t poll_event(nccl_comm *self, cudaEvent_t ev, const char *what, ct_error *err) {
    double t0 = now_s();
    for (unsigned spins = 0;; spins++) {
        cudaError_t e = cudaEventQuery(ev);
        if (e == cudaSuccess) return CT_OK;
        if (e != cudaErrorNotReady) return cuda_fail(err, what, e);
        ncclResult_t async = ncclSuccess;
        if (ncclCommGetAsyncError(self->comm, &async) == ncclSuccess && async != ncclSuccess &&
            async != ncclInProgress) {
            snprintf(self->failed, sizeof self->failed, "%s: %s", what,
                     ncclGetErrorString(async));
            ncclCommAbort(self->comm);
            self->comm = NULL;
            return ct_error_set(err, CT_ERR_COMM, "comm nccl: rank %d: %s failed: %s ---> a "
                                "peer rank failed or the network broke; see the other ranks' "
                                "logs", self->rank, what, ncclGetErrorString(async));
        }
        if ((spins & 1023) == 1023 && now_s() - t0 > self->timeout_s) {
            snprintf(self->failed, sizeof self->failed, "%s timed out after %.0f s", what,
                     self->timeout_s);
            ncclCommAbort(self->comm);
            self->comm = NULL;
            return ct_error_set(err, CT_ERR_COMM, "comm nccl: rank %d: %s did not complete in "
                                "%.0f s ---> a peer rank is stuck or dead; raise [comm] "
                                "timeout_s only if a step really takes that long",
                                self->rank, what, self->timeout_s);
        }
        if (spins > 4096) {
            struct timespec ts = {0, 20000}; /* 20 us: long collectives don't burn a core */
            nanosleep(&ts, NULL);
        }
    }
}

/* After the enqueue: with req, hand out a request; without, wait for completion. */
static int32_t finish(nccl_comm *self, ct_request **req, const char *what, ct_error *err) {
    if (!req) {
        CUDA_TRY(cudaEventRecord(self->sync_done, self->stream), "cudaEventRecord");
        return poll_event(self, self->sync_done, what, err);
    }
    nccl_req *slot = NULL;
    for (int i = 0; i < NCCL_MAX_REQ && !slot; i++)
        if (!self->reqs[i].in_use) slot = &self->reqs[i];
    if (!slot) { /* the collective is queued; complete it so nothing is left dangling */
        CUDA_TRY(cudaStreamSynchronize(self->stream), what);
        return ct_error_set(err, CT_ERR_INTERNAL, "comm nccl: more than %d asynchronous "
                            "collectives in flight ---> wait() on earlier requests first",
                            NCCL_MAX_REQ);
    }
    CUDA_TRY(cudaEventRecord(slot->done, self->stream), "cudaEventRecord");
    slot->in_use = 1;
    *req = (ct_request *)slot;
    return CT_OK;
}

static int32_t nccl_wait(void *p, ct_request *req, ct_error *err) {
    nccl_comm *self = p;
    nccl_req *slot = (nccl_req *)req;
    if (!slot || slot < self->reqs || slot >= self->reqs + NCCL_MAX_REQ || !slot->in_use)
        return ct_error_set(err, CT_ERR_INTERNAL, "comm nccl: wait on a request this rank "
                            "did not hand out (or already waited on)");
    slot->in_use = 0; /* released whether or not it failed */
    if (!self->comm)
        return check_healthy(self, err);
    return poll_event(self, slot->done, "an asynchronous collective", err);
}

/* ---------------------------------------------------------------------------------------
 * dtypes and ops
 * ------------------------------------------------------------------------------------- */

static int32_t nccl_dtype(int32_t dtype, ncclDataType_t *out, ct_error *err) {
    switch (dtype) {
    case CT_DTYPE_F32: *out = ncclFloat32; return CT_OK;
    case CT_DTYPE_BF16: *out = ncclBfloat16; return CT_OK;
    case CT_DTYPE_F64: *out = ncclFloat64; return CT_OK;
    case CT_DTYPE_I32: *out = ncclInt32; return CT_OK;
    default:
        return ct_error_set(err, CT_ERR_UNSUPPORTED, "comm nccl: reductions of %s are not "
                            "supported ---> use f32, bf16, f64 or i32",
                            ct_dtype_name(dtype));
    }
}

static int32_t nccl_op(int32_t op, ncclRedOp_t *out, ct_error *err) {
    switch (op) {
    case CT_REDUCE_SUM: *out = ncclSum; return CT_OK;
    case CT_REDUCE_MAX: *out = ncclMax; return CT_OK;
    case CT_REDUCE_MIN: *out = ncclMin; return CT_OK;
    default:
        return ct_error_set(err, CT_ERR_INVALID, "comm nccl: reduce op %d is not a ct_reduce_op",
                            (int)op);
    }
}

/* Bytes of count elements, for the collectives that only move data (sent as ncclUint8). */
static int32_t byte_count(int32_t dtype, uint64_t count, size_t *out, ct_error *err) {
    size_t es = ct_dtype_size(dtype);
    if (!es)
        return ct_error_set(err, CT_ERR_INVALID, "comm nccl: unknown dtype %d", (int)dtype);
    *out = (size_t)count * es;
    return CT_OK;
}

/* The start of a call that only moves data: its bytes, then begin(). */
static int32_t begin_bytes(nccl_comm *self, int32_t dtype, uint64_t count, size_t *bytes,
                           ct_error *err) {
    int32_t rc = byte_count(dtype, count, bytes, err);
    return rc != CT_OK ? rc : begin(self, err);
}

/* Point-to-point's peer must be another rank of the world: "send to rank P from rank R",
 * "recv from rank P on rank R" (to, from: the words around the two ranks). */
static int32_t check_peer(const nccl_comm *self, int32_t peer, const char *to, const char *from,
                          ct_error *err) {
    if (peer < 0 || peer >= self->world || peer == self->rank)
        return ct_error_set(err, CT_ERR_INVALID, "comm nccl: %s rank %d %s rank %d ---> peer "
                            "must be another rank of 0..%d", to, (int)peer, from,
                            (int)self->rank, (int)self->world - 1);
    return CT_OK;
}

/* ---------------------------------------------------------------------------------------
 * collectives
 * ------------------------------------------------------------------------------------- */

/* ncclAllReduce and ncclReduceScatter: the same arguments (count: recv's elements). */
typedef ncclResult_t (*nccl_reduce_fn)(const void *send, void *recv, size_t count,
                                       ncclDataType_t dt, ncclRedOp_t op, ncclComm_t comm,
                                       cudaStream_t stream);

/* A reduction: NCCL's dtype and op, begin(), fn (named fn_name in messages), finish(). */
static int32_t reduce(nccl_comm *self, nccl_reduce_fn fn, const char *fn_name, const char *what,
                      const void *send, void *recv, uint64_t count, int32_t dtype, int32_t op,
                      ct_request **req, ct_error *err) {
    ncclDataType_t dt = ncclFloat32;
    ncclRedOp_t rop = ncclSum;
    int32_t rc;
    if ((rc = nccl_dtype(dtype, &dt, err)) != CT_OK || (rc = nccl_op(op, &rop, err)) != CT_OK ||
        (rc = begin(self, err)) != CT_OK)
        return rc;
    NCCL_TRY(fn(send, recv, (size_t)count, dt, rop, self->comm, self->stream), fn_name);
    return finish(self, req, what, err);
}

static int32_t nccl_all_reduce(void *p, const void *send, void *recv, uint64_t count,
                               int32_t dtype, int32_t op, ct_request **req, ct_error *err) {
    return reduce(p, ncclAllReduce, "ncclAllReduce", "all_reduce", send, recv, count, dtype, op,
                  req, err);
}

static int32_t nccl_reduce_scatter(void *p, const void *send, void *recv, uint64_t count,
                                   int32_t dtype, int32_t op, ct_request **req, ct_error *err) {
    return reduce(p, ncclReduceScatter, "ncclReduceScatter", "reduce_scatter", send, recv, count,
                  dtype, op, req, err);
}

static int32_t nccl_all_gather(void *p, const void *send, void *recv, uint64_t count,
                               int32_t dtype, ct_request **req, ct_error *err) {
    nccl_comm *self = p;
    size_t bytes = 0;
    int32_t rc = begin_bytes(self, dtype, count, &bytes, err);
    if (rc != CT_OK) return rc;
    NCCL_TRY(ncclAllGather(send, recv, bytes, ncclUint8, self->comm, self->stream),
             "ncclAllGather");
    return finish(self, req, "all_gather", err);
}

/* Block j of this rank's send goes to rank j; block i of recv comes from rank i. */
static int32_t nccl_all_to_all(void *p, const void *send, void *recv, uint64_t count,
                               int32_t dtype, ct_request **req, ct_error *err) {
    nccl_comm *self = p;
    size_t bytes = 0;
    int32_t rc = begin_bytes(self, dtype, count, &bytes, err);
    if (rc != CT_OK) return rc;
    NCCL_TRY(ncclGroupStart(), "ncclGroupStart");
    for (int32_t j = 0; j < self->world; j++) {
        ncclResult_t r1 = ncclSend((const char *)send + (size_t)j * bytes, bytes, ncclUint8, j,
                                   self->comm, self->stream);
        ncclResult_t r2 = ncclRecv((char *)recv + (size_t)j * bytes, bytes, ncclUint8, j,
                                   self->comm, self->stream);
        if (r1 != ncclSuccess || r2 != ncclSuccess) {
            ncclGroupEnd();
            return nccl_fail(err, "ncclSend/ncclRecv (all_to_all)", r1 != ncclSuccess ? r1 : r2);
        }
    }
    NCCL_TRY(ncclGroupEnd(), "ncclGroupEnd (all_to_all)");
    return finish(self, req, "all_to_all", err);
}

static int32_t nccl_broadcast(void *p, void *buf, uint64_t count, int32_t dtype, int32_t root,
                              ct_error *err) {
    nccl_comm *self = p;
    size_t bytes = 0;
    int32_t rc;
    if (root < 0 || root >= self->world)
        return ct_error_set(err, CT_ERR_INVALID, "comm nccl: broadcast root %d outside 0..%d",
                            (int)root, (int)self->world - 1);
    if ((rc = begin_bytes(self, dtype, count, &bytes, err)) != CT_OK) return rc;
    NCCL_TRY(ncclBroadcast(buf, buf, bytes, ncclUint8, root, self->comm, self->stream),
             "ncclBroadcast");
    return finish(self, NULL, "broadcast", err);
}

/* An all-reduce of one int: returns when every rank has reached it. */
static int32_t nccl_barrier(void *p, ct_error *err) {
    nccl_comm *self = p;
    int32_t rc = begin(self, err);
    if (rc != CT_OK) return rc;
    NCCL_TRY(ncclAllReduce(self->d_flag, self->d_flag, 1, ncclInt32, ncclSum, self->comm,
                           self->stream), "ncclAllReduce (barrier)");
    return finish(self, NULL, "barrier", err);
}

/* Blocking point-to-point. NCCL matches by peer in call order; the tag is not sent, so a
 * receiver must post its receives in the order the sender sends (as the callers do). */
static int32_t nccl_send(void *p, const void *buf, uint64_t count, int32_t dtype, int32_t peer,
                         int32_t tag, ct_error *err) {
    nccl_comm *self = p;
    size_t bytes = 0;
    int32_t rc;
    (void)tag;
    if ((rc = check_peer(self, peer, "send to", "from", err)) != CT_OK ||
        (rc = begin_bytes(self, dtype, count, &bytes, err)) != CT_OK)
        return rc;
    NCCL_TRY(ncclSend(buf, bytes, ncclUint8, peer, self->comm, self->stream), "ncclSend");
    return finish(self, NULL, "send", err);
}

static int32_t nccl_recv(void *p, void *buf, uint64_t count, int32_t dtype, int32_t peer,
                         int32_t tag, ct_error *err) {
    nccl_comm *self = p;
    size_t bytes = 0;
    int32_t rc;
    (void)tag;
    if ((rc = check_peer(self, peer, "recv from", "on", err)) != CT_OK ||
        (rc = begin_bytes(self, dtype, count, &bytes, err)) != CT_OK)
        return rc;
    NCCL_TRY(ncclRecv(buf, bytes, ncclUint8, peer, self->comm, self->stream), "ncclRecv");
    return finish(self, NULL, "recv", err);
}

/* Abort the communicator: this rank's pending and later calls fail at once; NCCL reports the
 * broken connection to the peers, whose polling then fails (or times out). */
static void nccl_abort(void *p, const char *why) {
    nccl_comm *self = p;
    if (!self->failed[0])
        snprintf(self->failed, sizeof self->failed, "aborted: %s", why ? why : "(no reason)");
    if (self->comm) ncclCommAbort(self->comm);
    self->comm = NULL;
}

/* ---------------------------------------------------------------------------------------
 * descriptor
 * ------------------------------------------------------------------------------------- */

static const ct_param_spec nccl_params[] = {
    CT_PARAM_FLOAT("timeout_s", "600", 1, 1e6,
                   "seconds a collective may take before the rank gives up and aborts"),
    CT_PARAM_END,
};

static const ct_comm_vtable nccl_vtable = {
    .struct_size    = sizeof(ct_comm_vtable),
    .world_create   = NULL,
    .world_destroy  = NULL,
    .create         = nccl_create,
    .destroy        = nccl_destroy,
    .rank           = nccl_rank,
    .world_size     = nccl_world_size,
    .all_reduce     = nccl_all_reduce,
    .reduce_scatter = nccl_reduce_scatter,
    .all_gather     = nccl_all_gather,
    .all_to_all     = nccl_all_to_all,
    .broadcast      = nccl_broadcast,
    .barrier        = nccl_barrier,
    .send           = nccl_send,
    .recv           = nccl_recv,
    .wait           = nccl_wait,
    .abort          = nccl_abort,
};

CT_DEFINE_PLUGIN(
    .kind    = CT_KIND_COMM,
    .name    = "nccl",
    .version = "1.0.0",
    .summary = "NCCL collectives between GPUs, one rank per process (mpirun or alone)",
    .params  = nccl_params,
    .devices = CT_DEVICE_CUDA,
    .vtable  = &nccl_vtable)

