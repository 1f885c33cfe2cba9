/* comm_mpi.c — the `mpi` comm plugin: one rank per process, started by mpirun, collectives
 * through MPI (Open MPI). f32/f64/i32 reductions use MPI's own ops; bf16 and f16 reductions
 * use user-defined ops that round to the type after every combine (the combine order is MPI's: see
 * docs/collectives.md). Buffers must be host memory (device cpu).
 * Not for: several ranks in one process (threads) or GPU buffers (nccl).
 *
 * Failure handling, decided here: a plugin may not end the process, so abort() does not call
 * MPI_Abort. Every call waits on a non-blocking MPI request while also watching a control
 * channel (a second communicator with a receive posted at create); abort() sends "why" to
 * every other rank on it. A rank whose call sees that message returns CT_ERR_COMM "rank R
 * failed: why", and so does any call that does not complete within timeout_s. After a failure
 * the world is dead: later calls fail at once and destroy() skips MPI_Finalize (it could hang
 * on the abandoned collective); mpirun then ends the job as failed, which it is. A rank that
 * crashes outright is reported by mpirun itself, which ends the job.
 *
 * Traffic: every call reports the bytes a ring would send as the metric "comm/bytes_per_rank"
 * (MPI's own algorithm is opaque: see wire_bytes; docs/benchmarks.md explains the figure).
 */
#include <ctrain/ctrain.h>
#include <ctrain/numerics.h>

#include <limits.h>
#include <mpi.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TAG_ABORT 7301  /* the control channel's only tag */
#define WHY_MAX   400   /* bytes of an abort message */

typedef struct mpi_comm {
    MPI_Comm      comm;        /* dup of MPI_COMM_WORLD for collectives and send/recv */
    MPI_Comm      ctl;         /* dup for abort messages */
    MPI_Datatype  bf16, f16;   /* 2-byte types that only the half ops accept */
    MPI_Op        half_ops[2][3]; /* [0 bf16, 1 f16][0 sum, 1 max, 2 min] */
    int           rank, size;
    int           we_initialized; /* 1: MPI_Finalize in destroy (unless the world died) */
    double        timeout_s;
    ct_device_ref device;
    uint64_t      n_calls;       /* calls so far, to name them in messages */
    const ct_host_api *api;      /* for the traffic metric; NULL: not reported */
    ct_host           *host;

    MPI_Request   ctl_req;       /* the posted receive of the control channel */
    char          ctl_buf[WHY_MAX];
    int           dead;          /* the world failed: every call returns `death` */
    char          death[512];
} mpi_comm;

struct ct_request {
    MPI_Request req;
    char        what[48];
};

/* The world is mpirun's (-np); the host's [comm] world_size key is not used by this engine. */
static const ct_param_spec mpi_params[] = {
    CT_PARAM_FLOAT("timeout_s", "600", 0.001, 1e7,
                   "longest wait for one collective or message before the run is declared "
                   "failed"),
    CT_PARAM_END,
};

/* ---------------------------------------------------------------------------------------
 * half ops (bf16, and f16 since ABI 1.7): every combine rounds to the type (f32 add, then
 * round to nearest even: the correctly rounded sum of two values of either type). Each type
 * has its own three ops, so a callback knows its type without asking MPI.
 * ------------------------------------------------------------------------------------- */

#define F16_TYPE_NAME "ctrain_f16"

static inline float half_to_f32(uint16_t h, int f16) {
    return f16 ? ct_f16_to_f32(h) : ct_bf16_to_f32(h);
}

static inline uint16_t half_add(uint16_t a, uint16_t b, int f16) {
    float s = half_to_f32(a, f16) + half_to_f32(b, f16);
    return f16 ? ct_f16_from_f32(s) : ct_bf16_from_f32(s);
}

/* max (sign = 1) or min (sign = -1); NaN propagates (a quiet NaN of the type). */
static inline uint16_t half_pick(uint16_t a, uint16_t b, int f16, int sign) {
    float x = half_to_f32(a, f16), y = half_to_f32(b, f16);
    if (x != x || y != y) return f16 ? 0x7e00 : 0x7fc0;
    return (sign > 0 ? x > y : x < y) ? a : b;
}

/* MPI user functions: inout[i] = in[i] op inout[i] (op 0 sum, 1 max, -1 min). */
static void half_op(void *in, void *inout, int len, int f16, int op) {
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < len; i++)
        b[i] = op == 0 ? half_add(a[i], b[i], f16) : half_pick(a[i], b[i], f16, op);
}
static void bf16_sum_fn(void *in, void *inout, int *len, MPI_Datatype *dt) { (void)dt; half_op(in, inout, *len, 0, 0); }
static void bf16_max_fn(void *in, void *inout, int *len, MPI_Datatype *dt) { (void)dt; half_op(in, inout, *len, 0, 1); }
static void bf16_min_fn(void *in, void *inout, int *len, MPI_Datatype *dt) { (void)dt; half_op(in, inout, *len, 0, -1); }
static void f16_sum_fn(void *in, void *inout, int *len, MPI_Datatype *dt) { (void)dt; half_op(in, inout, *len, 1, 0); }
static void f16_max_fn(void *in, void *inout, int *len, MPI_Datatype *dt) { (void)dt; half_op(in, inout, *len, 1, 1); }
static void f16_min_fn(void *in, void *inout, int *len, MPI_Datatype *dt) { (void)dt; half_op(in, inout, *len, 1, -1); }

/* ---------------------------------------------------------------------------------------
 * errors
 * ------------------------------------------------------------------------------------- */

static int32_t mpi_error(int rc, const char *what, ct_error *err) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "code %d", rc);
    return ct_error_set(err, CT_ERR_COMM, "comm mpi: %s failed: %s", what, text);
}

/* Mark the world dead with the message every later call returns (the first cause wins). */
__attribute__((format(printf, 2, 3))) static void die(mpi_comm *self, const char *fmt, ...) {
    if (self->dead) return;
    self->dead = 1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(self->death, sizeof self->death, fmt, ap);
    va_end(ap);
}

static int32_t dead_error(const mpi_comm *self, ct_error *err) {
    return ct_error_set(err, CT_ERR_COMM, "%s", self->death);
}

/* 1 when another rank's abort message has arrived (then the world is dead). */
static int abort_arrived(mpi_comm *self) {
    if (self->dead) return 1;
    int flag = 0;
    MPI_Status st;
    if (MPI_Test(&self->ctl_req, &flag, &st) != MPI_SUCCESS || !flag) return 0;
    self->ctl_buf[WHY_MAX - 1] = 0;
    die(self, "comm mpi: rank %d failed: %s ---> HINT: the cause is in that rank's log; this "
              "rank stopped because of it", st.MPI_SOURCE, self->ctl_buf);
    return 1;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Wait for r while watching the control channel and the clock. Open MPI makes progress only
 * inside MPI calls, so test often at first, then yield and sleep briefly between tests. */
static int32_t finish(mpi_comm *self, MPI_Request *r, const char *what, ct_error *err) {
    double deadline = now_s() + self->timeout_s;
    for (long spins = 0;; spins++) {
        int done = 0;
        int rc = MPI_Test(r, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) {
            ct_error e = {.struct_size = sizeof e};
            mpi_error(rc, what, &e);
            die(self, "comm mpi: rank %d: %s", self->rank, e.message);
            return dead_error(self, err);
        }
        if (done) return CT_OK;
        if (abort_arrived(self)) return dead_error(self, err);
        if ((spins & 1023) == 1023 && now_s() > deadline) {
            char why[200];
            snprintf(why, sizeof why, "%s did not complete within %.3g s: a rank is hung, dead "
                     "or called the collectives in another order ---> HINT: raise [comm] "
                     "timeout_s if it is only slow", what, self->timeout_s);
            die(self, "comm mpi: rank %d: %s", self->rank, why);
            return dead_error(self, err);
        }
        if (spins < 2000) {
            sched_yield();
        } else {
            struct timespec nap = {0, 50 * 1000}; /* 50 us: keeps 2 oversubscribed cores usable */
            nanosleep(&nap, NULL);
        }
    }
}

/* ---------------------------------------------------------------------------------------
 * create / destroy
 * ------------------------------------------------------------------------------------- */

static void free_half_types(mpi_comm *self) {
    for (int t = 0; t < 2; t++)
        for (int o = 0; o < 3; o++) MPI_Op_free(&self->half_ops[t][o]);
    MPI_Type_free(&self->bf16);
    MPI_Type_free(&self->f16);
}

static void *mpi_create(const ct_create_args *args, ct_error *err) {
    if (args->device.vt && args->device.type != CT_DEVICE_CPU)
        return ct_error_set(err, CT_ERR_UNSUPPORTED, "comm mpi: needs host buffers (device "
                            "cpu) ---> use [comm] plugin = nccl for GPUs"), NULL;
    mpi_comm *self = calloc(1, sizeof *self);
    if (!self) return ct_error_set(err, CT_ERR_NOMEM, "comm mpi: out of memory"), NULL;
    self->device = args->device;
    self->api = args->api;
    self->host = args->host;
    self->timeout_s = 600;
    if (args->api && args->section &&
        args->api->get_float(args->host, args->section, "timeout_s", &self->timeout_s, err))
        goto out_free_self;

    int inited = 0, rc;
    MPI_Initialized(&inited);
    if (!inited) {
        int provided = 0;
        /* SERIALIZED: the rank thread need not be the process's main thread */
        rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
        if (rc != MPI_SUCCESS) {
            mpi_error(rc, "MPI_Init_thread (was the program started by mpirun?)", err);
            goto out_free_self;
        }
        self->we_initialized = 1;
    }
    if ((rc = MPI_Comm_dup(MPI_COMM_WORLD, &self->comm)) != MPI_SUCCESS) {
        mpi_error(rc, "MPI_Comm_dup", err);
        goto out_finalize;
    }
    if ((rc = MPI_Comm_dup(MPI_COMM_WORLD, &self->ctl)) != MPI_SUCCESS) {
        mpi_error(rc, "MPI_Comm_dup", err);
        goto out_free_comm;
    }
    MPI_Comm_set_errhandler(self->comm, MPI_ERRORS_RETURN); /* errors come back as codes */
    MPI_Comm_set_errhandler(self->ctl, MPI_ERRORS_RETURN);
    MPI_Comm_rank(self->comm, &self->rank);
    MPI_Comm_size(self->comm, &self->size);

    MPI_Type_contiguous(1, MPI_UINT16_T, &self->bf16);
    MPI_Type_commit(&self->bf16);
    MPI_Type_contiguous(1, MPI_UINT16_T, &self->f16);
    MPI_Type_set_name(self->f16, F16_TYPE_NAME);
    MPI_Type_commit(&self->f16);
    MPI_User_function *const half_fns[2][3] = {{bf16_sum_fn, bf16_max_fn, bf16_min_fn},
                                               {f16_sum_fn, f16_max_fn, f16_min_fn}};
    for (int t = 0; t < 2; t++)
        for (int o = 0; o < 3; o++) MPI_Op_create(half_fns[t][o], 1, &self->half_ops[t][o]);

    rc = MPI_Irecv(self->ctl_buf, WHY_MAX, MPI_CHAR, MPI_ANY_SOURCE, TAG_ABORT, self->ctl,
                   &self->ctl_req);
    if (rc != MPI_SUCCESS) {
        mpi_error(rc, "MPI_Irecv on the control channel", err);
        goto out_free_types;
    }
    return self;

out_free_types:
    free_half_types(self);
    MPI_Comm_free(&self->ctl);
out_free_comm:
    MPI_Comm_free(&self->comm);
out_finalize:
    if (self->we_initialized) MPI_Finalize();
out_free_self:
    free(self);
    return NULL;
}

static void mpi_destroy(void *p) {
    mpi_comm *self = p;
    if (!self) return;
    if (self->dead) { /* peers may be gone or stuck: freeing or finalizing could hang */
        free(self);
        return;
    }
    MPI_Cancel(&self->ctl_req);
    MPI_Wait(&self->ctl_req, MPI_STATUS_IGNORE);
    free_half_types(self);
    MPI_Comm_free(&self->ctl);
    MPI_Comm_free(&self->comm);
    if (self->we_initialized) MPI_Finalize();
    free(self);
}

static int32_t mpi_rank(void *p) { return ((mpi_comm *)p)->rank; }
static int32_t mpi_world_size(void *p) { return ((mpi_comm *)p)->size; }

/* ---------------------------------------------------------------------------------------
 * argument mapping
 * ------------------------------------------------------------------------------------- */

/* The MPI datatype of dtype; for a bf16 reduction the private bf16 type. */
static int32_t map_type(const mpi_comm *self, int32_t dtype, int reduce, MPI_Datatype *out,
                        ct_error *err) {
    switch (dtype) {
    case CT_DTYPE_F32: *out = MPI_FLOAT; return CT_OK;
    case CT_DTYPE_F64: *out = MPI_DOUBLE; return CT_OK;
    case CT_DTYPE_I32: *out = MPI_INT32_T; return CT_OK;
    case CT_DTYPE_U16: *out = MPI_UINT16_T; return CT_OK;
    case CT_DTYPE_BF16: *out = reduce ? self->bf16 : MPI_UINT16_T; return CT_OK;
    case CT_DTYPE_F16: *out = reduce ? self->f16 : MPI_UINT16_T; return CT_OK;
    default:
        return ct_error_set(err, CT_ERR_INVALID, "comm mpi: unknown dtype %d", (int)dtype);
    }
}

static int32_t map_op(const mpi_comm *self, int32_t dtype, int32_t op, MPI_Op *out,
                      ct_error *err) {
    int half = dtype == CT_DTYPE_BF16 || dtype == CT_DTYPE_F16;
    const MPI_Op *ops = self->half_ops[dtype == CT_DTYPE_F16];
    switch (op) {
    case CT_REDUCE_SUM: *out = half ? ops[0] : MPI_SUM; return CT_OK;
    case CT_REDUCE_MAX: *out = half ? ops[1] : MPI_MAX; return CT_OK;
    case CT_REDUCE_MIN: *out = half ? ops[2] : MPI_MIN; return CT_OK;
    case CT_REDUCE_AVG: /* a SUM of premultiplied copies (avg_copy) */
        if (half || dtype == CT_DTYPE_F32 || dtype == CT_DTYPE_F64) {
            *out = half ? ops[0] : MPI_SUM;
            return CT_OK;
        }
        return ct_error_set(err, CT_ERR_UNSUPPORTED, "comm mpi: AVG over %s ---> AVG is for "
                            "f32, bf16, f16 and f64", ct_dtype_name(dtype));
    default:
        return ct_error_set(err, CT_ERR_INVALID, "comm mpi: unknown reduce op %d ---> use "
                            "CT_REDUCE_SUM, _MAX or _MIN", (int)op);
    }
}

static int32_t check_count(uint64_t count, const char *what, ct_error *err) {
    if (count <= INT_MAX) return CT_OK;
    return ct_error_set(err, CT_ERR_UNSUPPORTED, "comm mpi: %s of %llu elements exceeds MPI's "
                        "int count ---> split the buffer", what, (unsigned long long)count);
}

/* Common start of every call: the world is alive, inputs are complete, a name for messages. */
static int32_t begin(mpi_comm *self, const char *kind, char *what, size_t what_size,
                     ct_request **req, ct_error *err) {
    if (req) *req = NULL;
    if (self->dead || abort_arrived(self)) return dead_error(self, err);
    snprintf(what, what_size, "%s #%llu", kind, (unsigned long long)++self->n_calls);
    if (self->device.vt && self->device.vt->synchronize)
        return self->device.vt->synchronize(self->device.self, err);
    return CT_OK;
}

/* Hand r to the caller as a request, or wait for it now. */
static int32_t complete(mpi_comm *self, MPI_Request r, const char *what, ct_request **req,
                        ct_error *err) {
    if (!req) return finish(self, &r, what, err);
    ct_request *h = malloc(sizeof *h);
    if (!h) { /* still correct: finish now */
        int32_t rc = finish(self, &r, what, err);
        if (rc != CT_OK) return rc;
        return ct_error_set(err, CT_ERR_NOMEM, "comm mpi: out of memory for a request");
    }
    h->req = r;
    snprintf(h->what, sizeof h->what, "%s", what);
    *req = h;
    return CT_OK;
}

/* What a call moves, for wire_bytes. */
typedef enum wire_kind {
    WIRE_ALL_REDUCE = 0, /* count elements reduced on every rank */
    WIRE_BLOCKS     = 1, /* reduce_scatter, all_gather, all_to_all: N blocks of count */
    WIRE_BROADCAST  = 2,
    WIRE_SEND       = 3,
    WIRE_NONE       = 4, /* recv and barrier: nothing reported */
} wire_kind;

/* Bytes one rank sends, counted as NCCL's ring would send them ("algorithmic bytes": Open
 * MPI picks its own algorithm per size, which this plugin cannot see), n = count * dtype size,
 * N ranks, mean over ranks:
 *   all_reduce 2(N-1)/N * n;  reduce_scatter, all_gather, all_to_all (N-1)/N * N*n;
 *   broadcast (N-1)/N * n (pipelined ring);  send n;  recv and barrier 0.
 * The same figures as the threads engine, so the two engines log the same traffic. */
static double wire_bytes(int32_t kind, uint64_t count, int32_t dtype, int32_t world_size) {
    double n = (double)count * (double)ct_dtype_size(dtype), N = world_size;
    switch (kind) {
    case WIRE_ALL_REDUCE: return 2.0 * (N - 1) / N * n;
    case WIRE_BLOCKS: return (N - 1) * n;
    case WIRE_BROADCAST: return (N - 1) / N * n;
    case WIRE_SEND: return n;
    default: return 0;
    }
}

/* Report a call's traffic: "comm/bytes_per_rank" is a SUM metric (summed over calls and over
 * ranks by the host), so each rank reports its bytes / N and the logged value is the mean over
 * ranks of the bytes each rank sent in the log interval. */
static void report_bytes(const mpi_comm *self, int32_t kind, uint64_t count, int32_t dtype) {
    if (!self->api || !self->api->metric) return;
    double b = wire_bytes(kind, count, dtype, self->size);
    self->api->metric(self->host, "comm/bytes_per_rank", b / self->size, CT_METRIC_SUM);
}

/* One call: its name for messages ("all_gather #12"), MPI's datatype and op, its request. */
typedef struct mpi_call {
    char         what[48];
    MPI_Datatype t;
    MPI_Op       o;
    MPI_Request  r;
} mpi_call;

/* The checks every data call makes, in this order: begin(), the element count MPI will see
 * (`total`: count, or count * N for the block collectives), the datatype (the private bf16
 * one when `reduce`) and, when `reduce`, the op. */
static int32_t start(mpi_comm *self, mpi_call *c, const char *kind, uint64_t total,
                     int32_t dtype, int reduce, int32_t op, ct_request **req, ct_error *err) {
    c->t = MPI_DATATYPE_NULL;
    c->o = MPI_OP_NULL;
    int32_t rc;
    if ((rc = begin(self, kind, c->what, sizeof c->what, req, err)) ||
        (rc = check_count(total, c->what, err)) || (rc = map_type(self, dtype, reduce, &c->t, err)))
        return rc;
    return reduce ? map_op(self, dtype, op, &c->o, err) : CT_OK;
}

/* After the MPI_I* call that returned mrc: its error; else the traffic reported (`wire`, of
 * count elements of dtype) and c->r handed out as a request, or waited for when req is NULL. */
static int32_t started(mpi_comm *self, mpi_call *c, int mrc, int32_t wire, uint64_t count,
                       int32_t dtype, ct_request **req, ct_error *err) {
    if (mrc != MPI_SUCCESS) return mpi_error(mrc, c->what, err);
    if (wire != WIRE_NONE) report_bytes(self, wire, count, dtype);
    return complete(self, c->r, c->what, req, err);
}

/* ---------------------------------------------------------------------------------------
 * collectives
 * ------------------------------------------------------------------------------------- */

/* CT_REDUCE_AVG (ncclAvg): a malloc'd copy of send's n elements, each multiplied by the
 * dtype's 1/N and rounded to it (numerics.h), which the SUM then reduces. Open MPI's order of
 * the sum is its own (see docs/collectives.md). NULL with err when out of memory. */
static void *avg_copy(const mpi_comm *self, const void *send, uint64_t n, int32_t dtype,
                      ct_error *err) {
    size_t es = ct_dtype_size(dtype);
    void *pre = malloc(n ? n * es : 1);
    if (!pre) return ct_error_set(err, CT_ERR_NOMEM, "comm mpi: out of memory for AVG"), NULL;
    int bf = dtype == CT_DTYPE_BF16;
    float s = ct_avg_scalar(self->size, bf);
    float s16 = ct_round_f16((float)(1.0 / (double)self->size)); /* f16: as NCCL's half */
    for (uint64_t i = 0; i < n; i++) {
        if (dtype == CT_DTYPE_F64)
            ((double *)pre)[i] = ((const double *)send)[i] * (1.0 / (double)self->size);
        else if (bf)
            ((uint16_t *)pre)[i] = ct_bf16_from_f32(
                ct_avg_premul(ct_bf16_to_f32(((const uint16_t *)send)[i]), s, 1));
        else if (dtype == CT_DTYPE_F16) /* the f32 product of two f16 values is exact */
            ((uint16_t *)pre)[i] =
                ct_f16_from_f32(ct_f16_to_f32(((const uint16_t *)send)[i]) * s16);
        else
            ((float *)pre)[i] = ct_avg_premul(((const float *)send)[i], s, 0);
    }
    return pre;
}

static int32_t mpi_all_reduce(void *p, const void *send, void *recv, uint64_t count,
                              int32_t dtype, int32_t op, ct_request **req, ct_error *err) {
    mpi_comm *self = p;
    mpi_call c;
    int32_t rc = start(self, &c, "all_reduce", count, dtype, 1, op, req, err);
    if (rc != CT_OK) return rc;
    void *pre = NULL;
    if (op == CT_REDUCE_AVG) { /* synchronous: the copy lives until the sum is done */
        if (!(pre = avg_copy(self, send, count, dtype, err))) return err->code;
        send = pre;
        req = NULL;
    }
    int mrc = MPI_Iallreduce(send == recv ? MPI_IN_PLACE : send, recv, (int)count, c.t, c.o,
                             self->comm, &c.r);
    rc = started(self, &c, mrc, WIRE_ALL_REDUCE, count, dtype, req, err);
    free(pre);
    return rc;
}

static int32_t mpi_reduce_scatter(void *p, const void *send, void *recv, uint64_t count,
                                  int32_t dtype, int32_t op, ct_request **req, ct_error *err) {
    mpi_comm *self = p;
    mpi_call c;
    int32_t rc = start(self, &c, "reduce_scatter", count * (uint64_t)self->size, dtype, 1, op,
                       req, err);
    if (rc != CT_OK) return rc;
    size_t es = ct_dtype_size(dtype);
    const char *s = send, *d = recv;
    if (count && s < d + count * es && d < s + count * (uint64_t)self->size * es)
        return ct_error_set(err, CT_ERR_INVALID, "comm mpi: %s: send and recv overlap ---> "
                            "reduce_scatter is not in place here", c.what);
    void *pre = NULL;
    if (op == CT_REDUCE_AVG) { /* synchronous: the copy lives until the sum is done */
        if (!(pre = avg_copy(self, send, count * (uint64_t)self->size, dtype, err)))
            return err->code;
        send = pre;
        req = NULL;
    }
    int mrc = MPI_Ireduce_scatter_block(send, recv, (int)count, c.t, c.o, self->comm, &c.r);
    rc = started(self, &c, mrc, WIRE_BLOCKS, count, dtype, req, err);
    free(pre);
    return rc;
}

static int32_t mpi_all_gather(void *p, const void *send, void *recv, uint64_t count,
                              int32_t dtype, ct_request **req, ct_error *err) {
    mpi_comm *self = p;
    mpi_call c;
    int32_t rc = start(self, &c, "all_gather", count * (uint64_t)self->size, dtype, 0, 0, req,
                       err);
    if (rc != CT_OK) return rc;
    size_t es = ct_dtype_size(dtype);
    int in_place = send == (const char *)recv + (uint64_t)self->rank * count * es;
    int mrc = MPI_Iallgather(in_place ? MPI_IN_PLACE : send, (int)count, c.t, recv, (int)count,
                             c.t, self->comm, &c.r);
    return started(self, &c, mrc, WIRE_BLOCKS, count, dtype, req, err);
}

static int32_t mpi_all_to_all(void *p, const void *send, void *recv, uint64_t count,
                              int32_t dtype, ct_request **req, ct_error *err) {
    mpi_comm *self = p;
    mpi_call c;
    int32_t rc = start(self, &c, "all_to_all", count * (uint64_t)self->size, dtype, 0, 0, req,
                       err);
    if (rc != CT_OK) return rc;
    int mrc = MPI_Ialltoall(send, (int)count, c.t, recv, (int)count, c.t, self->comm, &c.r);
    return started(self, &c, mrc, WIRE_BLOCKS, count, dtype, req, err);
}

static int32_t mpi_broadcast(void *p, void *buf, uint64_t count, int32_t dtype, int32_t root,
                             ct_error *err) {
    mpi_comm *self = p;
    mpi_call c;
    int32_t rc = start(self, &c, "broadcast", count, dtype, 0, 0, NULL, err);
    if (rc != CT_OK) return rc;
    if (root < 0 || root >= self->size)
        return ct_error_set(err, CT_ERR_INVALID, "comm mpi: %s: root %d is not a rank of 0..%d",
                            c.what, (int)root, self->size - 1);
    int mrc = MPI_Ibcast(buf, (int)count, c.t, root, self->comm, &c.r);
    return started(self, &c, mrc, WIRE_BROADCAST, count, dtype, NULL, err);
}

static int32_t mpi_barrier(void *p, ct_error *err) {
    mpi_comm *self = p;
    mpi_call c;
    int32_t rc = begin(self, "barrier", c.what, sizeof c.what, NULL, err);
    if (rc != CT_OK) return rc;
    int mrc = MPI_Ibarrier(self->comm, &c.r);
    return started(self, &c, mrc, WIRE_NONE, 0, CT_DTYPE_F32, NULL, err);
}

static int32_t mpi_send(void *p, const void *buf, uint64_t count, int32_t dtype, int32_t peer,
                        int32_t tag, ct_error *err) {
    mpi_comm *self = p;
    mpi_call c;
    int32_t rc = start(self, &c, "send", count, dtype, 0, 0, NULL, err);
    if (rc != CT_OK) return rc;
    int mrc = MPI_Isend(buf, (int)count, c.t, peer, tag, self->comm, &c.r);
    return started(self, &c, mrc, WIRE_SEND, count, dtype, NULL, err);
}

static int32_t mpi_recv(void *p, void *buf, uint64_t count, int32_t dtype, int32_t peer,
                        int32_t tag, ct_error *err) {
    mpi_comm *self = p;
    mpi_call c;
    int32_t rc = start(self, &c, "recv", count, dtype, 0, 0, NULL, err);
    if (rc != CT_OK) return rc;
    int mrc = MPI_Irecv(buf, (int)count, c.t, peer, tag, self->comm, &c.r);
    return started(self, &c, mrc, WIRE_NONE, count, dtype, NULL, err);
}

static int32_t mpi_wait(void *p, ct_request *req, ct_error *err) {
    mpi_comm *self = p;
    if (!req) return CT_OK; /* a failed call hands out no request */
    int32_t rc = finish(self, &req->req, req->what, err);
    free(req); /* released whether or not it failed (an abandoned MPI request stays pending) */
    return rc;
}

/* Tell every other rank why this one fails; returns within about a second. */
static void mpi_abort(void *p, const char *why) {
    mpi_comm *self = p;
    if (self->dead) return;
    char msg[WHY_MAX];
    snprintf(msg, sizeof msg, "%s", why && *why ? why : "(no reason given)");
    int n = 0;
    MPI_Request *reqs = calloc((size_t)self->size, sizeof *reqs);
    for (int r = 0; reqs && r < self->size; r++)
        if (r != self->rank &&
            MPI_Isend(msg, (int)strlen(msg) + 1, MPI_CHAR, r, TAG_ABORT, self->ctl, &reqs[n]) ==
                MPI_SUCCESS)
            n++;
    /* small messages go out eagerly; give the transport a moment, never wait long */
    double deadline = now_s() + 1.0;
    int done = 0;
    while (n && !done && now_s() < deadline) {
        MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE);
        if (!done) sched_yield();
    }
    free(reqs); /* unfinished sends stay pending; the process is about to end */
    die(self, "comm mpi: rank %d (this rank) failed: %s", self->rank, msg);
}

/* ---------------------------------------------------------------------------------------
 * descriptor
 * ------------------------------------------------------------------------------------- */

static const ct_comm_vtable mpi_vtable = {
    .struct_size = sizeof(ct_comm_vtable),
    .create = mpi_create,
    .destroy = mpi_destroy,
    .rank = mpi_rank,
    .world_size = mpi_world_size,
    .all_reduce = mpi_all_reduce,
    .reduce_scatter = mpi_reduce_scatter,
    .all_gather = mpi_all_gather,
    .all_to_all = mpi_all_to_all,
    .broadcast = mpi_broadcast,
    .barrier = mpi_barrier,
    .send = mpi_send,
    .recv = mpi_recv,
    .wait = mpi_wait,
    .abort = mpi_abort,
};

CT_DEFINE_PLUGIN(
    .kind    = CT_KIND_COMM,
    .name    = "mpi",
    .version = "1.0.0",
    .summary = "one rank per process under mpirun (Open MPI); bf16 sums round every combine",
    .params  = mpi_params,
    .devices = CT_DEVICE_CPU,
    .vtable  = &mpi_vtable)

