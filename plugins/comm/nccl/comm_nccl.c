/* comm_nccl.c — the `nccl` comm plugin: collectives between GPUs with NCCL, one rank per
 * process. Launched as several processes (the host's ct_create_args.world_size > 1: mpirun,
 * srun --mpi=pmix; or OMPI_COMM_WORLD_SIZE set) the ranks come from MPI, which also carries the
 * ncclUniqueId from rank 0 to the others. Launched torchrun-style (RANK, WORLD_SIZE,
 * MASTER_ADDR, MASTER_PORT: the host answers get_string("comm", "master_addr")) the rank and
 * world are the launcher's and the id goes over a TCP rendezvous on MASTER_ADDR:MASTER_PORT
 * (rendezvous.h), without MPI. Started alone it is a world of one, without MPI.
 * Not for: CPU memory (comm local, threads, mpi) or several ranks in one process.
 *
 * Streams: collectives run on this instance's own stream, ordered after the work already queued
 * on the device's compute stream (an event recorded there, waited on here). A call with req ==
 * NULL returns when the collective is complete; with req it returns at once and wait() polls
 * the request's event. Arithmetic: NCCL's (ring or tree, its choice): bf16 sums round each
 * partial sum to bf16.
 *
 * A dead or failed peer is an error on every rank within [comm] timeout_s, never a hang:
 * - the communicator is non-blocking (ncclConfig_t.blocking = 0), so no NCCL call waits inside
 *   NCCL: init, each enqueue (whose lazy connection set-up would block on a dead peer) and
 *   finalize return ncclInProgress and are watched like a collective;
 * - every wait looks at the awaited work, ncclCommGetAsyncError (a peer's connection broke),
 *   the control channel and the clock (the decisions: nccl_watch.h); any verdict but "done"
 *   aborts the communicator (ncclCommAbort) so this rank's later calls fail at once;
 * - the control channel (under mpirun only; torchrun-style launches have none, so a peer's
 *   abort reaches the others as NCCL's broken connection or their timeout): a second MPI communicator with a receive posted at
 *   create; abort(why) sends "why" to every other rank there, as comm mpi does, so a rank that
 *   fails outside the collectives stops the others at once with its reason.
 * After a failure destroy skips ncclCommDestroy, the stream wait and MPI_Finalize (each could
 * hang on the dead peer); mpirun then ends the job as failed.
 */
#include <ctrain/ctrain.h>

#include "nccl_watch.h"
#include "rendezvous.h"

#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NCCL_MAX_REQ 64   /* asynchronous requests in flight per instance */
#define TAG_ABORT    7302 /* the control channel's only tag */
#define WHY_MAX      400  /* bytes of an abort message */

typedef struct nccl_req {
    cudaEvent_t done;   /* recorded on the comm stream after the collective */
    int         in_use;
} nccl_req;

typedef struct nccl_comm {
    const ct_host_api *api;
    ct_host           *host;
    int32_t            rank, world;
    int                mpi_inited;  /* 1: this instance called MPI_Init and finalizes */
    int                rendezvous;  /* 1: the id came over TCP (torchrun-style), no MPI */
    ncclComm_t         comm;        /* NULL after abort */
    cudaStream_t       stream;      /* the comm stream */
    cudaStream_t       compute;     /* the device's compute stream (not owned) */
    cudaEvent_t        after_compute; /* recorded on compute, waited on by the comm stream */
    cudaEvent_t        sync_done;     /* completion of a call made without a request */
    int32_t           *d_flag;      /* one device int for barrier */
    double             timeout_s;
    char               failed[512]; /* why the communicator is unusable; "" while healthy */
    nccl_req           reqs[NCCL_MAX_REQ];
    int                have_ctl;    /* 1: the control channel below exists (world > 1) */
    MPI_Comm           ctl;         /* dup of MPI_COMM_WORLD for abort messages */
    MPI_Request        ctl_req;     /* the posted receive of the control channel */
    char               ctl_buf[WHY_MAX];
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

/* Rank, world size and the shared unique id: from the launcher and the TCP rendezvous when
 * launched torchrun-style; from MPI when launched as several processes otherwise
 * (launched_world > 1, the launcher's world the host passes in ct_create_args) or under
 * mpirun; else a world of one. */
static int32_t bootstrap(nccl_comm *self, int32_t launched_rank, int32_t launched_world,
                         ncclUniqueId *id, ct_error *err) {
    const char *ws = getenv("OMPI_COMM_WORLD_SIZE");
    if ((!ws || !*ws) && launched_world <= 1) {
        self->rank = 0;
        self->world = 1;
        NCCL_TRY(ncclGetUniqueId(id), "ncclGetUniqueId");
        return CT_OK;
    }
    /* torchrun-style: the host knows MASTER_ADDR / MASTER_PORT; rank and world are the
     * launcher's (ct_create_args); rank 0's id goes to the others over TCP */
    const char *addr = NULL;
    int64_t port = 0;
    ct_error scratch = {.struct_size = sizeof scratch};
    if ((!ws || !*ws) && self->api && self->api->get_string && self->api->get_int &&
        self->api->get_string(self->host, "comm", "master_addr", &addr, &scratch) == CT_OK &&
        self->api->get_int(self->host, "comm", "master_port", &port, &scratch) == CT_OK) {
        self->rank = launched_rank;
        self->world = launched_world;
        if (self->rank == 0) NCCL_TRY(ncclGetUniqueId(id), "ncclGetUniqueId");
        char msg[768];
        if (rdv_share(addr, (int)port, self->rank, self->world, id, sizeof *id,
                      self->timeout_s, msg, sizeof msg) != 0)
            return ct_error_set(err, CT_ERR_COMM, "comm nccl: %s", msg);
        self->rendezvous = 1;
        return CT_OK;
    }
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        int provided = 0;
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
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
    /* the control channel: a receive that stays posted until a peer's abort message lands */
    if (n > 1) {
        if (MPI_Comm_dup(MPI_COMM_WORLD, &self->ctl) != MPI_SUCCESS)
            return ct_error_set(err, CT_ERR_COMM, "comm nccl: MPI_Comm_dup (control channel) "
                                "failed ---> check the OpenMPI install");
        if (MPI_Irecv(self->ctl_buf, WHY_MAX, MPI_CHAR, MPI_ANY_SOURCE, TAG_ABORT, self->ctl,
                      &self->ctl_req) != MPI_SUCCESS) {
            MPI_Comm_free(&self->ctl);
            return ct_error_set(err, CT_ERR_COMM, "comm nccl: MPI_Irecv (control channel) "
                                "failed ---> check the OpenMPI install");
        }
        self->have_ctl = 1;
    }
    return CT_OK;
}

/* ---------------------------------------------------------------------------------------
 * failure: the control channel, aborting, waiting with a deadline
 * ------------------------------------------------------------------------------------- */

/* 1 when another rank's abort message has arrived; *from gets its rank. */
static int peer_failed(nccl_comm *self, int *from) {
    if (!self->have_ctl) return 0;
    int flag = 0;
    MPI_Status st;
    if (MPI_Test(&self->ctl_req, &flag, &st) != MPI_SUCCESS || !flag) return 0;
    self->ctl_buf[WHY_MAX - 1] = 0;
    self->have_ctl = 0; /* the receive is consumed: the world is dead from here on */
    *from = st.MPI_SOURCE;
    return 1;
}

/* Make the communicator unusable with the reason every later call reports (the first cause
 * wins); ncclCommAbort ends this rank's NCCL kernels and its connections to the peers. */
static void mark_failed(nccl_comm *self, const char *why) {
    if (!self->failed[0]) snprintf(self->failed, sizeof self->failed, "%s", why);
    if (self->comm) ncclCommAbort(self->comm);
    self->comm = NULL;
}

/* Wait for `ev` (NULL: for the communicator to leave ncclInProgress after a non-blocking NCCL
 * call) while watching NCCL's error state, the control channel and timeout_s (nw_look). Any
 * outcome but done aborts the communicator and returns CT_ERR_COMM naming the cause. */
static int32_t watch(nccl_comm *self, cudaEvent_t ev, const char *what, ct_error *err) {
    if (!self->comm) return ct_error_set(err, CT_ERR_COMM, "comm nccl: rank %d: the "
                                         "communicator is unusable (%s) ---> see the first "
                                         "error in the log", self->rank,
                                         self->failed[0] ? self->failed : "aborted");
    const double t0 = now_s();
    for (uint64_t looks = 0;; looks++) {
        ncclResult_t async = ncclSuccess;
        ncclResult_t qr = ncclCommGetAsyncError(self->comm, &async);
        if (qr != ncclSuccess) async = qr;
        int done;
        if (ev) {
            cudaError_t e = cudaEventQuery(ev);
            if (e != cudaSuccess && e != cudaErrorNotReady) {
                char why[256];
                snprintf(why, sizeof why, "%s: %s", what, cudaGetErrorString(e));
                mark_failed(self, why);
                return cuda_fail(err, what, e);
            }
            done = e == cudaSuccess;
        } else {
            done = async == ncclSuccess;
        }
        int from = -1;
        int peer = !done && peer_failed(self, &from);
        nw_verdict v = nw_look(done, peer, async != ncclSuccess && async != ncclInProgress, t0,
                               now_s(), self->timeout_s);
        char why[512];
        switch (v) {
        case NW_WAIT: break;
        case NW_DONE: return CT_OK;
        case NW_PEER_FAILED:
            snprintf(why, sizeof why, "rank %d failed: %s", from, self->ctl_buf);
            mark_failed(self, why);
            return ct_error_set(err, CT_ERR_COMM, "comm nccl: rank %d failed: %s ---> the "
                                "cause is in that rank's log; this rank (%d) stopped in %s "
                                "because of it", from, self->ctl_buf, self->rank, what);
        case NW_NCCL_ERROR:
            snprintf(why, sizeof why, "%s: %s", what, ncclGetErrorString(async));
            mark_failed(self, why);
            return ct_error_set(err, CT_ERR_COMM, "comm nccl: rank %d: %s failed: %s ---> a "
                                "peer rank failed or the network broke; see the other ranks' "
                                "logs (NCCL_DEBUG=WARN shows NCCL's view)", self->rank, what,
                                ncclGetErrorString(async));
        case NW_TIMED_OUT:
            snprintf(why, sizeof why, "%s timed out after %.0f s", what, self->timeout_s);
            mark_failed(self, why);
            return ct_error_set(err, CT_ERR_COMM, "comm nccl: rank %d: %s did not complete in "
                                "%.0f s ---> a peer rank is stuck or dead; raise [comm] "
                                "timeout_s only if a step really takes that long",
                                self->rank, what, self->timeout_s);
        }
        long nap = nw_nap_ns(looks);
        if (nap > 0) {
            struct timespec ts = {0, nap};
            nanosleep(&ts, NULL);
        }
    }
}

/* The result of a non-blocking NCCL call: success; ncclInProgress, then watched until NCCL
 * is done with it; else an error that aborts the communicator. */
static int32_t nccl_call(nccl_comm *self, ncclResult_t r, const char *what, ct_error *err) {
    if (r == ncclSuccess) return CT_OK;
    if (r == ncclInProgress) return watch(self, NULL, what, err);
    char why[256];
    snprintf(why, sizeof why, "%s: %s", what, ncclGetErrorString(r));
    mark_failed(self, why);
    return nccl_fail(err, what, r);
}

/* Return from the calling function unless the non-blocking NCCL call succeeds (nccl_call);
 * needs `self` and `err` in scope. */
#define NCCL_CALL(call, what)                                          \
    do {                                                               \
        int32_t rc_ = nccl_call(self, (call), (what), err);            \
        if (rc_ != CT_OK) return rc_;                                  \
    } while (0)

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
    if (bootstrap(self, args->rank, args->world_size, &id, err) != CT_OK) goto out_free_self;
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
    /* non-blocking: init returns at once and is watched (a peer that never joins is a
     * timeout, not a hang) */
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclResult_t r = ncclCommInitRankConfig(&self->comm, self->world, id, self->rank, &cfg);
    if (r != ncclSuccess && r != ncclInProgress) {
        if (self->comm) ncclCommAbort(self->comm);
        self->comm = NULL;
        snprintf(self->failed, sizeof self->failed, "ncclCommInitRankConfig failed");
        nccl_fail(err, "ncclCommInitRankConfig", r);
        goto out_destroy;
    }
    if (nccl_call(self, r, "ncclCommInitRank", err) != CT_OK) goto out_destroy;
    if (self->api && self->api->log) {
        int v = 0;
        ncclGetVersion(&v);
        char msg[128];
        snprintf(msg, sizeof msg, "comm nccl: rank %d of %d, NCCL %d.%d.%d%s", self->rank,
                 self->world, v / 10000, v / 100 % 100, v % 100,
                 self->world <= 1 ? "" : self->rendezvous ? ", unique id over TCP "
                 "(MASTER_ADDR:MASTER_PORT)" : ", unique id over MPI");
        self->api->log(self->host, CT_LOG_INFO, msg);
    }
    return self;

out_destroy:
    nccl_destroy(self);
    return NULL;
out_free_self:
    if (self->have_ctl) {
        MPI_Cancel(&self->ctl_req);
        MPI_Wait(&self->ctl_req, MPI_STATUS_IGNORE);
        MPI_Comm_free(&self->ctl);
    }
    if (self->mpi_inited) MPI_Finalize();
    free(self);
    return NULL;
}

static void nccl_destroy(void *p) {
    nccl_comm *self = p;
    if (!self) return;
    int dead = self->failed[0] != 0;
    if (!dead && self->comm) { /* flush (watched: a peer may die now too), then free */
        ct_error e = {.struct_size = sizeof e};
        /* pending collectives first, watched too (never a bare stream wait on a dead peer) */
        if (cudaEventRecord(self->sync_done, self->stream) != cudaSuccess ||
            watch(self, self->sync_done, "destroy (pending collectives)", &e) != CT_OK)
            mark_failed(self, "destroy: pending collectives did not complete");
        if (self->comm &&
            nccl_call(self, ncclCommFinalize(self->comm), "ncclCommFinalize", &e) == CT_OK &&
            self->comm)
            ncclCommDestroy(self->comm);
        dead = self->failed[0] != 0;
    }
    self->comm = NULL; /* after a failure it was aborted (mark_failed): nothing to free */
    for (int i = 0; i < NCCL_MAX_REQ; i++)
        if (self->reqs[i].done) cudaEventDestroy(self->reqs[i].done);
    if (self->d_flag) cudaFree(self->d_flag);
    if (self->after_compute) cudaEventDestroy(self->after_compute);
    if (self->sync_done) cudaEventDestroy(self->sync_done);
    if (self->stream) cudaStreamDestroy(self->stream);
    if (dead) { /* peers may be gone or stuck: MPI_Comm_free / MPI_Finalize could hang */
        free(self);
        return;
    }
    if (self->have_ctl) {
        MPI_Cancel(&self->ctl_req);
        MPI_Wait(&self->ctl_req, MPI_STATUS_IGNORE);
        MPI_Comm_free(&self->ctl);
    }
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

/* After the enqueue: with req, hand out a request; without, wait for completion. */
static int32_t finish(nccl_comm *self, ct_request **req, const char *what, ct_error *err) {
    if (!req) {
        CUDA_TRY(cudaEventRecord(self->sync_done, self->stream), "cudaEventRecord");
        return watch(self, self->sync_done, what, err);
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
    return watch(self, slot->done, "an asynchronous collective", err);
}

/* ---------------------------------------------------------------------------------------
 * dtypes and ops
 * ------------------------------------------------------------------------------------- */

static int32_t nccl_dtype(int32_t dtype, ncclDataType_t *out, ct_error *err) {
    switch (dtype) {
    case CT_DTYPE_F32: *out = ncclFloat32; return CT_OK;
    case CT_DTYPE_BF16: *out = ncclBfloat16; return CT_OK;
    case CT_DTYPE_F16: *out = ncclFloat16; return CT_OK;
    case CT_DTYPE_F64: *out = ncclFloat64; return CT_OK;
    case CT_DTYPE_I32: *out = ncclInt32; return CT_OK;
    default:
        return ct_error_set(err, CT_ERR_UNSUPPORTED, "comm nccl: reductions of %s are not "
                            "supported ---> use f32, bf16, f16, f64 or i32",
                            ct_dtype_name(dtype));
    }
}

static int32_t nccl_op(int32_t op, ncclRedOp_t *out, ct_error *err) {
    switch (op) {
    case CT_REDUCE_SUM: *out = ncclSum; return CT_OK;
    case CT_REDUCE_MAX: *out = ncclMax; return CT_OK;
    case CT_REDUCE_MIN: *out = ncclMin; return CT_OK;
    case CT_REDUCE_AVG: *out = ncclAvg; return CT_OK; /* NCCL's PreMulSum for floating types */
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
    NCCL_CALL(fn(send, recv, (size_t)count, dt, rop, self->comm, self->stream), fn_name);
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
    NCCL_CALL(ncclAllGather(send, recv, bytes, ncclUint8, self->comm, self->stream),
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
    NCCL_CALL(ncclGroupStart(), "ncclGroupStart");
    for (int32_t j = 0; j < self->world; j++) {
        ncclResult_t r1 = ncclSend((const char *)send + (size_t)j * bytes, bytes, ncclUint8, j,
                                   self->comm, self->stream);
        ncclResult_t r2 = ncclRecv((char *)recv + (size_t)j * bytes, bytes, ncclUint8, j,
                                   self->comm, self->stream);
        if (r1 != ncclSuccess || r2 != ncclSuccess) {
            ncclGroupEnd();
            return nccl_call(self, r1 != ncclSuccess ? r1 : r2, "ncclSend/ncclRecv (all_to_all)",
                             err);
        }
    }
    NCCL_CALL(ncclGroupEnd(), "ncclGroupEnd (all_to_all)");
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
    NCCL_CALL(ncclBroadcast(buf, buf, bytes, ncclUint8, root, self->comm, self->stream),
              "ncclBroadcast");
    return finish(self, NULL, "broadcast", err);
}

/* An all-reduce of one int: returns when every rank has reached it. */
static int32_t nccl_barrier(void *p, ct_error *err) {
    nccl_comm *self = p;
    int32_t rc = begin(self, err);
    if (rc != CT_OK) return rc;
    NCCL_CALL(ncclAllReduce(self->d_flag, self->d_flag, 1, ncclInt32, ncclSum, self->comm,
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
    NCCL_CALL(ncclSend(buf, bytes, ncclUint8, peer, self->comm, self->stream), "ncclSend");
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
    NCCL_CALL(ncclRecv(buf, bytes, ncclUint8, peer, self->comm, self->stream), "ncclRecv");
    return finish(self, NULL, "recv", err);
}

/* Tell every other rank why this one fails (the control channel, at most about a second),
 * then abort the communicator: this rank's pending and later calls fail at once, and the peers'
 * waits end with "rank R failed: why" (or NCCL's broken connection, or their timeout). */
static void nccl_abort(void *p, const char *why) {
    nccl_comm *self = p;
    char msg[WHY_MAX];
    snprintf(msg, sizeof msg, "%s", why && *why ? why : "(no reason given)");
    if (self->have_ctl && !self->failed[0]) {
        int n = 0, done = 0;
        MPI_Request *reqs = calloc((size_t)self->world, sizeof *reqs);
        for (int r = 0; reqs && r < self->world; r++)
            if (r != self->rank && MPI_Isend(msg, (int)strlen(msg) + 1, MPI_CHAR, r, TAG_ABORT,
                                             self->ctl, &reqs[n]) == MPI_SUCCESS)
                n++;
        double deadline = now_s() + 1.0; /* small messages go out eagerly; never wait long */
        while (n && !done && now_s() < deadline) {
            MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE);
            if (!done) {
                struct timespec ts = {0, 50000};
                nanosleep(&ts, NULL);
            }
        }
        free(reqs); /* unfinished sends stay pending; the process is about to end */
    }
    char full[WHY_MAX + 32];
    snprintf(full, sizeof full, "aborted: %s", msg);
    mark_failed(self, full);
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
    .summary = "NCCL collectives between GPUs, one rank per process (mpirun, torchrun-style or alone)",
    .params  = nccl_params,
    .devices = CT_DEVICE_CUDA,
    .vtable  = &nccl_vtable)

