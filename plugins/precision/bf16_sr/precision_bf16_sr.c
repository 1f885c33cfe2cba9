/* precision_bf16_sr.c — the `bf16_sr` research policy: pure_bf16's dtypes and a bf16 ring
 * reduction in which every hop's partial sum is rounded to bf16 stochastically instead of to
 * nearest. N-1 roundings per element, each unbiased, so the sum's expectation is the exact sum
 * (round-to-nearest instead drops addends smaller than half an ulp of the partial sum every
 * time).
 *
 * Two paths (key `path`): where the comm engine offers ABI 1.5's all_reduce_sr /
 * reduce_scatter_sr (threads), it runs them, so the stochastic rounding happens at every
 * combine of the engine's own order ([comm] algo, channels, gpus_per_node) in one pass over
 * shared memory; elsewhere (mpi, local, or path = send_recv) the plugin runs its own ring over
 * the comm's send/recv, in the order of NCCL's ring on one channel (the threads engine's flat
 * ring with its default split): loops of N chunks of 2 MiB, the last loop's chunks ceil(rem/N)
 * rounded up to 16 bytes; the partial sum of chunk c is born at rank c+1 (its own value,
 * unrounded), each next rank adds its value in f32 and rounds, rank c adds last. With [comm]
 * algo = ring, channels = 1 and split = nccl (the defaults) the two paths give the same bits
 * (tests/unit/test_research_precision.c).
 * Not for: GPUs (the hop's arithmetic runs on the CPU; ct_bf16_add_sr is CT_HD, ready for a
 * CUDA kernel) or f32 wires (other dtypes go to the comm's own collective).
 *
 * Random bits: ct_bf16_add_sr (numerics.h) with stream = ct_hash64(seed, call), where seed =
 * [run] seed mixed with the key seed_offset and call counts this instance's reductions (every
 * rank calls them in the same order, so ranks agree); element is the index into the full send
 * buffer and k = 1..N-1 the hop. A fixed seed reproduces a run bit for bit; a resumed run
 * restarts the call counter, so its bits differ from the uninterrupted run's (statistically
 * the same).
 *
 * Shape legend: N ranks, n = count.
 */
#include <ctrain/ctrain.h>
#include <ctrain/numerics.h>
#include <ctrain/precision_kit.h>

#include <stdlib.h>
#include <string.h>

#define SR_TAG 0x5352 /* "SR": the tag of every ring message of this plugin */

typedef struct sr_precision {
    int32_t  grad_accum_dtype; /* CT_DTYPE_BF16 (as FSDP) or CT_DTYPE_F32 */
    int32_t  send_recv_only;   /* path = send_recv: never the engine's _sr collectives */
    uint64_t seed;             /* [run] seed mixed with seed_offset */
    uint64_t calls;            /* reductions done so far (the per-call counter) */
    uint16_t *out, *in;        /* (chunk) host scratch: the partial sum sent / received */
    uint64_t  cap;             /* capacity of out and in, in elements */
} sr_precision;


static void *sr_create(const ct_create_args *args, ct_error *err) {
    int32_t accum;
    int64_t offset = 0;
    const char *path = NULL;
    if (ct_pkit_get_grad_accum(args, &accum, err) != CT_OK ||
        args->api->get_int(args->host, args->section, "seed_offset", &offset, err) != CT_OK ||
        args->api->get_string(args->host, args->section, "path", &path, err) != CT_OK)
        return NULL;
    if (args->device.vt && args->device.type != CT_DEVICE_CPU)
        return ct_error_set(err, CT_ERR_UNSUPPORTED, "precision bf16_sr: the stochastic ring "
                            "runs on the CPU only ---> use [device] type = cpu, or precision "
                            "bf16_fp32acc / pure_bf16 on GPUs"),
               NULL;
    sr_precision *self = calloc(1, sizeof *self);
    if (!self) return ct_error_set(err, CT_ERR_NOMEM, "precision bf16_sr: out of memory"), NULL;
    self->grad_accum_dtype = accum;
    self->send_recv_only = strcmp(path, "send_recv") == 0;
    self->seed = ct_hash64(args->seed, 0x5352000000000000ull ^ (uint64_t)offset);
    return self;
}

static void sr_destroy(void *p) {
    sr_precision *self = p;
    if (!self) return;
    free(self->out);
    free(self->in);
    free(self);
}

static int32_t sr_policy(void *p, ct_precision_policy *out, ct_error *err) {
    sr_precision *self = p;
    (void)err;
    ct_pkit_policy(out, CT_DTYPE_BF16, CT_DTYPE_BF16, self->grad_accum_dtype);
    return CT_OK;
}

/* ---------------------------------------------------------------------------------------
 * the ring
 * ------------------------------------------------------------------------------------- */

static int32_t ensure_scratch(sr_precision *self, uint64_t n, ct_error *err) {
    if (n <= self->cap) return CT_OK;
    free(self->out);
    free(self->in);
    self->cap = 0;
    self->out = malloc((n ? n : 1) * sizeof *self->out);
    self->in = malloc((n ? n : 1) * sizeof *self->in);
    if (!self->out || !self->in)
        return ct_error_set(err, CT_ERR_NOMEM, "precision bf16_sr: cannot allocate 2 x %llu "
                            "elements of ring scratch", (unsigned long long)n);
    self->cap = n;
    return CT_OK;
}

/* Send `sn` elements to the next rank and receive `rn` from the previous one. Even ranks send
 * first, odd ranks receive first, so a blocking (rendezvous) send cannot deadlock the ring. */
static int32_t ring_exchange(ct_comm_ref comm, const uint16_t *out, uint64_t sn, uint16_t *in,
                             uint64_t rn, ct_error *err) {
    int32_t N = comm.world_size, r = comm.rank;
    int32_t next = (r + 1) % N, prev = (r + N - 1) % N, rc;
    if (r % 2 == 0) {
        rc = comm.vt->send(comm.self, out, sn, CT_DTYPE_BF16, next, SR_TAG, err);
        if (rc == CT_OK) rc = comm.vt->recv(comm.self, in, rn, CT_DTYPE_BF16, prev, SR_TAG, err);
    } else {
        rc = comm.vt->recv(comm.self, in, rn, CT_DTYPE_BF16, prev, SR_TAG, err);
        if (rc == CT_OK) rc = comm.vt->send(comm.self, out, sn, CT_DTYPE_BF16, next, SR_TAG, err);
    }
    return rc;
}

/* Where the ring's chunks lie: chunk c of a window is [begin(c), begin(c+1)) with begin(c) =
 * base + min(c * chunk, limit). reduce_scatter: one window of N blocks of `count`. all_reduce:
 * NCCL's ring on one channel (the threads engine's default split): loops of N chunks of
 * SR_NCCL_CHUNK elements (2 MiB of bf16), and in the last, partial loop of rem elements chunks
 * of ceil(rem / N) rounded up to a multiple of 8 (16 bytes). */
#define SR_NCCL_CHUNK 1048576ull
typedef struct sr_window {
    uint64_t base, chunk, limit;
} sr_window;

static uint64_t chunk_begin(const sr_window *w, int32_t c) {
    uint64_t at = (uint64_t)c * w->chunk;
    return w->base + (at < w->limit ? at : w->limit);
}

/* Loop l's window of an all-reduce of count elements over N ranks. */
static sr_window loop_window(uint64_t count, int32_t N, uint64_t l) {
    uint64_t loop = SR_NCCL_CHUNK * (uint64_t)N, off = l * loop, rem = count - off;
    uint64_t cc = SR_NCCL_CHUNK;
    if (rem < loop) cc = ((rem + (uint64_t)N - 1) / (uint64_t)N + 7) / 8 * 8;
    return (sr_window){off, cc, rem < loop ? rem : loop};
}

/* The reduce-scatter phase of a ring over the window w of `send` (host memory, bf16): after
 * it, self->out holds the final sum of chunk `rank`. At step s (0 .. N-2) rank r sends the
 * partial of chunk (r-1-s) mod N and receives the partial of chunk (r-2-s) mod N, to which it
 * adds its own value (hop s+1). */
static int32_t ring_reduce(sr_precision *self, ct_comm_ref comm, const uint16_t *send,
                           const sr_window *w, uint64_t stream, ct_error *err) {
    int32_t N = comm.world_size, r = comm.rank;
#define CHUNK(c) ((((c) % N) + N) % N)
    int32_t c0 = CHUNK(r - 1);
    uint64_t b0 = chunk_begin(w, c0), e0 = chunk_begin(w, c0 + 1);
    memcpy(self->out, send + b0, (size_t)(e0 - b0) * sizeof *self->out);
    uint64_t out_n = e0 - b0;
    for (int32_t s = 0; s <= N - 2; s++) {
        int32_t c = CHUNK(r - 2 - s);
        uint64_t b = chunk_begin(w, c), e = chunk_begin(w, c + 1);
        int32_t rc = ring_exchange(comm, self->out, out_n, self->in, e - b, err);
        if (rc != CT_OK) return rc;
        for (uint64_t j = 0; j < e - b; j++)
            self->out[j] = ct_bf16_add_sr(self->in[j], send[b + j], stream, b + j, s + 1, N);
        out_n = e - b;
    }
#undef CHUNK
    return CT_OK;
}

/* The device must be the CPU's: the ring reads and writes the buffers directly. */
static int32_t check_device(ct_device_ref device, ct_error *err) {
    if (device.vt && device.type != CT_DEVICE_CPU)
        return ct_error_set(err, CT_ERR_UNSUPPORTED, "precision bf16_sr: buffers on a non-CPU "
                            "device ---> use [device] type = cpu");
    if (device.vt && device.vt->synchronize) return device.vt->synchronize(device.self, err);
    return CT_OK;
}

/* The engine's stochastic-rounding collective, or NULL: not offered, or path = send_recv. */
static ct_pkit_sr_fn engine_sr(const sr_precision *self, ct_comm_ref comm, int all_reduce) {
    return self->send_recv_only ? NULL : ct_pkit_comm_sr(comm, all_reduce);
}

/* SUM reduce-scatter: send (N*n) bf16, recv (n) bf16 = chunk `rank`, by the stochastic ring. */
static int32_t sr_reduce_scatter(void *p, ct_comm_ref comm, ct_device_ref device,
                                 const void *send, void *recv, uint64_t count, int32_t dtype,
                                 ct_error *err) {
    sr_precision *self = p;
    int32_t N = comm.world_size;
    if (dtype != CT_DTYPE_BF16 || N == 1)
        return ct_pkit_comm_reduce_scatter(comm, send, recv, count, dtype, err);
    uint64_t stream = ct_hash64(self->seed, self->calls++);
    int32_t rc = check_device(device, err);
    ct_pkit_sr_fn engine = engine_sr(self, comm, 0);
    if (engine) return rc == CT_OK ? engine(comm.self, send, recv, count, dtype, stream, err) : rc;
    sr_window w = {0, count, (uint64_t)N * count};
    if (rc == CT_OK) rc = ensure_scratch(self, count, err);
    if (rc == CT_OK) rc = ring_reduce(self, comm, send, &w, stream, err);
    if (rc == CT_OK) memcpy(recv, self->out, (size_t)count * sizeof *self->out);
    return rc;
}

/* SUM all-reduce: send, recv (n) bf16, may be the same buffer. Loop by loop (NCCL's ring
 * on one channel), the stochastic ring reduce-scatter, then a ring all-gather: at step s rank r
 * forwards chunk (r-s) mod N and receives chunk (r-1-s) mod N, so every rank gets the bits of
 * the rank that reduced each chunk. send and recv may alias: a loop reads only its own window
 * of send, and writes recv only inside that window after the last read. */
static int32_t sr_all_reduce(void *p, ct_comm_ref comm, ct_device_ref device, const void *send,
                             void *recv, uint64_t count, int32_t dtype, ct_error *err) {
    sr_precision *self = p;
    int32_t N = comm.world_size, r = comm.rank;
    if (dtype != CT_DTYPE_BF16 || N == 1)
        return ct_pkit_comm_all_reduce(comm, send, recv, count, dtype, err);
    uint64_t stream = ct_hash64(self->seed, self->calls++);
    uint64_t max_chunk = count < SR_NCCL_CHUNK ? count / (uint64_t)N + 8 : SR_NCCL_CHUNK;
    int32_t rc = check_device(device, err);
    ct_pkit_sr_fn engine = engine_sr(self, comm, 1);
    if (engine) return rc == CT_OK ? engine(comm.self, send, recv, count, dtype, stream, err) : rc;
    if (rc == CT_OK) rc = ensure_scratch(self, max_chunk, err);
    uint16_t *dst = recv;
    for (uint64_t l = 0; rc == CT_OK && l * SR_NCCL_CHUNK * (uint64_t)N < count; l++) {
        sr_window w = loop_window(count, N, l);
        rc = ring_reduce(self, comm, send, &w, stream, err);
        if (rc != CT_OK) break;
        /* this window of send is no longer read: recv may alias it from here on */
        uint64_t b = chunk_begin(&w, r), e = chunk_begin(&w, r + 1);
        memcpy(dst + b, self->out, (size_t)(e - b) * sizeof *dst);
        for (int32_t s = 0; s <= N - 2 && rc == CT_OK; s++) {
            int32_t cs = ((r - s) % N + N) % N, cr = ((r - 1 - s) % N + N) % N;
            uint64_t sb = chunk_begin(&w, cs), se = chunk_begin(&w, cs + 1);
            uint64_t rb = chunk_begin(&w, cr), re = chunk_begin(&w, cr + 1);
            memcpy(self->out, dst + sb, (size_t)(se - sb) * sizeof *dst);
            rc = ring_exchange(comm, self->out, se - sb, dst + rb, re - rb, err);
        }
    }
    return rc;
}

static const char *const path_choices[] = {"auto", "send_recv", NULL};

static const ct_param_spec sr_params[] = {
    CT_PKIT_PARAM_GRAD_ACCUM,
    CT_PARAM_ENUM("path", "auto", path_choices,
                  "auto: the comm engine's stochastic-rounding collectives where it has them "
                  "(threads: one pass in the engine's own order), else this plugin's ring over "
                  "send/recv; send_recv: always the ring (the same bits as threads with algo "
                  "ring, channels 1)"),
    CT_PARAM_INT("seed_offset", "0", -9.0e18, 9.0e18,
                 "mixed with [run] seed into the rounding's random stream: change it to draw "
                 "other roundings with the same data order"),
    CT_PARAM_END,
};

static const ct_precision_vtable sr_vtable = {
    .struct_size    = sizeof(ct_precision_vtable),
    .create         = sr_create,
    .destroy        = sr_destroy,
    .policy         = sr_policy,
    .reduce_scatter = sr_reduce_scatter,
    .all_reduce     = sr_all_reduce,
};

CT_DEFINE_PLUGIN(
    .kind              = CT_KIND_PRECISION,
    .name              = "bf16_sr",
    .version           = "1.1.0",
    .summary           = "pure bf16 with a bf16 reduction whose every combine rounds "
                         "stochastically (unbiased sum)",
    .params            = sr_params,
    .devices           = CT_DEVICE_CPU,
    .vtable            = &sr_vtable,)

