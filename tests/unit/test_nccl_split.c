/* test_nccl_split.c — the threads engine (plugins/comm/threads, default split = nccl) gives
 * NCCL 2.30.7's bits at any count: its ring all-reduce, ring reduce-scatter and tree all-reduce,
 * with every protocol's chunks, NVLS inside a node (the once-rounded f32 sum) and NVLS_TREE
 * across nodes, ncclAvg, and algo = nccl (the tuner model's pick, whose choices are checked
 * against sums worked out by hand from NCCL's tables). Each is compared bit for bit on every
 * rank with an emulation written here from NCCL's source, not from orders.c: enqueue.cc's
 * scheduling of one collective over channels (its traffic cells, the Lo/Mid/Hi parts and the
 * channel overflow rule), ncclCollCbdPart, calcCollChunking's chunk per protocol, and the
 * device kernels' loops simulated step by step over per-rank buffers (all_reduce.h runRing and
 * the tree, reduce_scatter.h runRing), at counts that do not divide (primes, several loops,
 * over 10 M elements), N up to 64, channels 1 to 16, 1 or 8 GPUs per node.
 * What is NCCL's in the emulation and what is assumed (the rings' and chains' rank order across
 * nodes, the switch's internal order) is said where it is written; docs/collectives.md has the
 * table. Not for: the even split of earlier versions (test_comm_threads.c).
 */
#include "ct_test.h"
#include "harness.h"
#include "threads_world.h"

#include "../../plugins/comm/threads/orders.h"
#include "../../plugins/comm/threads/tuner.h"

#include <ctrain/numerics.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------
 * enqueue.cc: one collective scheduled alone on its channels (scheduleCollTasksToPlan with a
 * single task), and ncclCollCbdPart
 * ------------------------------------------------------------------------------------- */

typedef struct ref_work {
    int32_t  lo, hi;                  /* channelLo, channelHi */
    uint64_t count_lo, count_mid, count_hi;
} ref_work;

static uint64_t ref_div_up(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

/* func_traffic: bytes on the wires per byte of the collective (all-reduce 2, reduce-scatter N),
 * ll: protocol LL (four times the traffic), task_ch: the task's nMaxChannels, comm_ch: the
 * communicator's channels (nMaxChannels of the kind). */
static void ref_schedule(uint64_t count, uint64_t elt, uint64_t func_traffic, int ll,
                         int32_t task_ch, int32_t comm_ch, ref_work *w) {
    const uint64_t min_traffic = 32 << 10;
    /* the plan: traffic and channels of the kind */
    uint64_t task_traffic = count * elt * func_traffic * (ll ? 4 : 1);
    uint64_t kind_traffic = task_traffic > min_traffic ? task_traffic : min_traffic;
    int32_t kind_ch = task_ch < comm_ch ? task_ch : comm_ch;
    uint64_t traffic_per_channel = ref_div_up(kind_traffic / (uint64_t)kind_ch, 16) * 16;
    int32_t channel_id = 0;
    uint64_t current = 0;
    /* the task */
    uint64_t per_byte = func_traffic * (ll ? 4 : 1);
    uint64_t cell_size = ref_div_up(ref_div_up(min_traffic, per_byte), 16) * 16;
    uint64_t elements_per_cell = cell_size / elt;
    uint64_t cells = ref_div_up(count * elt, cell_size);
    uint64_t traffic_per_cell = cell_size * per_byte;
    uint64_t cells_per_channel = ref_div_up(traffic_per_channel, traffic_per_cell);
    if (cells < cells_per_channel) cells_per_channel = cells;
    uint64_t cells_lo;
    if (channel_id + 1 == comm_ch) {
        cells_lo = cells;
    } else {
        cells_lo = ref_div_up(traffic_per_channel - current, traffic_per_cell);
        if (cells < cells_lo) cells_lo = cells;
    }
    int32_t n_mid = (int32_t)((cells - cells_lo) / cells_per_channel);
    uint64_t cells_hi = (cells - cells_lo) % cells_per_channel;
    int32_t n = (cells_lo != 0) + n_mid + (cells_hi != 0);
    if (comm_ch < channel_id + n) {
        n_mid = comm_ch - channel_id - 2;
        cells_per_channel = (cells - cells_lo) / (uint64_t)(n_mid + 1);
        cells_hi = cells_per_channel + (cells - cells_lo) % (uint64_t)(n_mid + 1);
    }
    if (cells_hi == 0 && n_mid != 0) {
        cells_hi = cells_per_channel;
        n_mid -= 1;
    }
    CT_CHECK_MSG(cells_lo != 0, "a collective of %llu elements left its first channel empty",
                 (unsigned long long)count);
    w->count_mid = n_mid != 0 ? cells_per_channel * elements_per_cell : 0;
    w->count_lo = cells_lo * elements_per_cell;
    w->count_hi = cells_hi * elements_per_cell;
    *(w->count_hi != 0 ? &w->count_hi : &w->count_lo) -= cells * elements_per_cell - count;
    n = (w->count_lo != 0) + n_mid + (cells_hi != 0);
    w->lo = channel_id;
    w->hi = channel_id + n - 1;
}

/* ncclCollCbdPart: the part of channel c. */
static void ref_part(const ref_work *w, int32_t c, uint64_t *off, uint64_t *n) {
    int32_t n_mid = w->hi - w->lo - 1;
    if (c == w->lo) {
        *off = 0, *n = w->count_lo;
    } else if (c == w->hi) {
        *off = w->count_lo + (uint64_t)n_mid * w->count_mid, *n = w->count_hi;
    } else {
        *off = w->count_lo + (uint64_t)(c - w->lo - 1) * w->count_mid, *n = w->count_mid;
    }
}

/* calcCollChunking (simple: the 4 MiB buffer in 8 steps, 4 steps a chunk on the ring, 1 on the
 * tree; LL: 8 lines x 512 threads x 8 steps of 16-byte lines, half of each line data; LL128:
 * 120 words x 640 threads x 8 steps, 15 of 16 words data), aligned to the protocol's grain
 * (simple 512 B, LL 16 B, LL128 32 x 8 / 16 x 15 x 8 B), then ncclCollCbdPart's chunkCount. */
static uint64_t ref_chunk_count(const char *proto, uint64_t elt) {
    uint64_t grain, chunk;
    if (!strcmp(proto, "ll")) {
        grain = 16;
        chunk = 8ull * 512 * 8 * 16 / 8 / 2;
    } else if (!strcmp(proto, "ll128")) {
        grain = 32ull * 8 / 16 * 15 * 8;
        chunk = 120ull * 640 * 8 * 8 / 8 / 16 * 15;
    } else {
        grain = 512;
        chunk = (4ull << 20) / 8 * 4;
    }
    return chunk / grain * grain / grain * (grain / elt);
}

/* topoGetAlgoInfo's channel count for a ring or tree collective of nbytes. */
static int32_t ref_task_channels(const char *proto, int ring, int32_t comm_ch, int32_t N,
                                 uint64_t nbytes) {
    uint64_t threads = !strcmp(proto, "ll128") ? 640 : 512;
    uint64_t threshold = !strcmp(proto, "simple") ? 64 : 8;
    if (ring && !strcmp(proto, "ll")) threshold *= (uint64_t)N;
    int32_t nc = comm_ch;
    while (nbytes < (uint64_t)nc * threads * threshold) {
        if (nc >= 2) nc--;
        else break;
    }
    return nc;
}

/* ---------------------------------------------------------------------------------------
 * the layout of ranks (assumed, as docs/collectives.md says: NCCL builds rings and chains from
 * its topology search; ctrain models a rail-optimised cluster) and NCCL's trees (trees.cc)
 * ------------------------------------------------------------------------------------- */

/* ring[i] = the rank at ring index i of channel c: the nodes in order, each entered at local
 * rank c mod G and left after going up its local ranks; index 0 is rank 0 (setupChannel). */
static void ref_ring(int32_t N, int32_t G, int32_t c, int32_t *ring) {
    int32_t order[1024], at = 0, zero = 0;
    for (int32_t node = 0; node < N / G; node++)
        for (int32_t j = 0; j < G; j++) order[at++] = node * G + (c + j) % G;
    for (int32_t i = 0; i < N; i++)
        if (order[i] == 0) zero = i;
    for (int32_t i = 0; i < N; i++) ring[i] = order[(zero + i) % N];
}

/* ncclGetBtree: rank's parent and children in the binary tree over n. */
static void ref_btree(int32_t n, int32_t rank, int32_t *up, int32_t *d0, int32_t *d1) {
    int32_t bit;
    for (bit = 1; bit < n; bit <<= 1)
        if (bit & rank) break;
    if (rank == 0) {
        *up = -1, *d0 = -1, *d1 = n > 1 ? bit >> 1 : -1;
        return;
    }
    *up = (rank ^ bit) | (bit << 1);
    if (*up >= n) *up = rank ^ bit;
    int32_t low = bit >> 1;
    *d0 = low == 0 ? -1 : rank - low;
    *d1 = low == 0 ? -1 : rank + low;
    while (*d1 >= n) {
        *d1 = low == 0 ? -1 : rank + low;
        low >>= 1;
    }
}

/* ncclGetDtree: tree 1 is tree 0 mirrored (n even) or shifted by one (n odd). */
static void ref_dtree(int32_t n, int32_t t, int32_t rank, int32_t *up, int32_t *d0,
                      int32_t *d1) {
    if (t == 0) return ref_btree(n, rank, up, d0, d1);
    int32_t u, a, b;
    if (n % 2 == 1) {
        ref_btree(n, (rank - 1 + n) % n, &u, &a, &b);
        *up = u < 0 ? -1 : (u + 1) % n, *d0 = a < 0 ? -1 : (a + 1) % n;
        *d1 = b < 0 ? -1 : (b + 1) % n;
    } else {
        ref_btree(n, n - 1 - rank, &u, &a, &b);
        *up = u < 0 ? -1 : n - 1 - u, *d0 = a < 0 ? -1 : n - 1 - a;
        *d1 = b < 0 ? -1 : n - 1 - b;
    }
}

/* NCCL's tree of channel c over N ranks, G per node, C channels (the first C/2 on tree 0, their
 * copies on tree 1): down[r][0..n_down[r]) in the order rank r adds them (its chain child, then
 * the head of node child 0, then of node child 1), and the root. Inside a node the chain goes
 * up the local ranks from local rank (c mod C/2) mod G (assumed, like the ring); the chain's
 * head talks to the parent node and takes node child 1, its second rank node child 0 (the
 * balanced-tree pattern). */
typedef struct ref_tree {
    int32_t down[1024][3], n_down[1024], root;
} ref_tree;

static void ref_tree_of(int32_t N, int32_t G, int32_t C, int32_t c, ref_tree *t) {
    int32_t half = (C + 1) / 2, tree = c >= half, first = (c - (tree ? half : 0)) % G;
    int32_t M = N / G;
    memset(t->n_down, 0, sizeof(int32_t) * (size_t)N);
    for (int32_t node = 0; node < M; node++) {
        int32_t chain[1024];
        for (int32_t j = 0; j < G; j++) chain[j] = node * G + (first + j) % G;
        for (int32_t j = 0; j + 1 < G; j++) t->down[chain[j]][t->n_down[chain[j]]++] = chain[j + 1];
        int32_t up, d0, d1;
        ref_dtree(M, tree, node, &up, &d0, &d1);
        int32_t take0 = chain[G > 1 ? 1 : 0], take1 = chain[0];
        if (d0 >= 0) t->down[take0][t->n_down[take0]++] = d0 * G + (first % G);
        if (d1 >= 0) t->down[take1][t->n_down[take1]++] = d1 * G + (first % G);
        if (up < 0) t->root = chain[0];
    }
}

/* ---------------------------------------------------------------------------------------
 * the data, and one combine as a GPU does it (f32 add, rounded to the element type)
 * ------------------------------------------------------------------------------------- */

typedef struct ref_case {
    int32_t  N, dtype;
    uint64_t count;       /* all-reduce: the buffer; reduce-scatter: one rank's block */
    uint64_t total;       /* elements of each rank's send */
    float   *x[MAX_RANKS]; /* (total) each rank's input as values of the dtype */
    void    *send[MAX_RANKS], *recv[MAX_RANKS];
    float   *want;        /* (total for the all-reduce, N*count for the reduce-scatter) */
    int32_t  op;          /* CT_REDUCE_SUM or CT_REDUCE_AVG */
} ref_case;

static float ref_round(double v, int32_t dtype) {
    return dtype == CT_DTYPE_BF16 ? ct_round_bf16((float)v) : (float)v;
}

static float ref_add(float a, float b, int32_t dtype) { return ref_round(a + b, dtype); }

static uint64_t rng(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

/* Values whose partial sums round differently in different orders: signs and magnitudes mixed. */
static float ref_value(uint64_t *s, int32_t dtype) {
    double u = (double)(rng(s) & 0xffffff) / 16777216.0;
    double v = (0.5 + u) * ldexp(1.0, (int)(rng(s) % 9) - 4) * ((rng(s) & 1) ? -1 : 1);
    return ref_round(v, dtype);
}

static int ref_case_open(ref_case *c, int32_t N, int32_t dtype, uint64_t count, int rs,
                         uint64_t seed) {
    memset(c, 0, sizeof *c);
    c->N = N, c->dtype = dtype, c->count = count, c->op = CT_REDUCE_SUM;
    c->total = rs ? count * (uint64_t)N : count;
    size_t es = ct_dtype_size(dtype);
    uint64_t s = seed;
    for (int32_t r = 0; r < N; r++) {
        c->x[r] = malloc((c->total + 1) * sizeof(float));
        c->send[r] = malloc((c->total + 1) * es);
        c->recv[r] = calloc(count + 1, es);
        if (!c->x[r] || !c->send[r] || !c->recv[r]) return 0;
        for (uint64_t i = 0; i < c->total; i++) {
            float v = ref_value(&s, dtype);
            c->x[r][i] = v;
            if (dtype == CT_DTYPE_BF16) ((uint16_t *)c->send[r])[i] = ct_bf16_from_f32(v);
            else ((float *)c->send[r])[i] = v;
        }
    }
    c->want = calloc(c->total + 1, sizeof(float));
    return c->want != NULL;
}

static void ref_case_close(ref_case *c) {
    for (int32_t r = 0; r < c->N; r++) free(c->x[r]), free(c->send[r]), free(c->recv[r]);
    free(c->want);
}

/* ncclAvg (PreMulSum): every input multiplied by the element type's 1/N, rounded, before the
 * sum (reduce_kernel.h: __hmul for bf16). The emulations then sum these. */
static void ref_premultiply(ref_case *c) {
    float s = ref_round(1.0 / c->N, c->dtype);
    for (int32_t r = 0; r < c->N; r++)
        for (uint64_t i = 0; i < c->total; i++) c->x[r][i] = ref_round((double)(c->x[r][i] * s), c->dtype);
    c->op = CT_REDUCE_AVG;
}

/* ---------------------------------------------------------------------------------------
 * the kernels, simulated: every rank's step on its chunk, what it sends travelling one rank on
 * ------------------------------------------------------------------------------------- */

#define REF_BLOCK 2048 /* chunk positions simulated at a time */

/* all_reduce.h runRing on one channel: the part [off, off + n) of the buffer, chunk chunk.
 * Per loop of N chunks (the last one's chunk ceil(rem / N) aligned to 16 bytes): step 0 every
 * ring position p sends its input's chunk p-1; steps j = 2 .. N-1 receive chunk p-j, add their
 * input and send it on; the next step receives chunk p, adds its input and has the result (the
 * all-gather steps after it only copy). */
static void ref_ring_all_reduce(ref_case *c, int32_t G, int32_t ch, uint64_t off, uint64_t n,
                                uint64_t chunk) {
    int32_t N = c->N, ring[1024];
    ref_ring(N, G, ch, ring);
    uint64_t loop = (uint64_t)N * chunk, align = 16 / ct_dtype_size(c->dtype);
    float *wire = malloc(sizeof(float) * (size_t)N * REF_BLOCK);
    float *next = malloc(sizeof(float) * (size_t)N * REF_BLOCK);
    for (uint64_t lo = 0; lo < n; lo += loop) {
        uint64_t rem = n - lo, cc = chunk;
        if (rem < loop) cc = ref_div_up(ref_div_up(rem, (uint64_t)N), align) * align;
        for (uint64_t j0 = 0; j0 < cc; j0 += REF_BLOCK) {
            uint64_t jn = cc - j0 < REF_BLOCK ? cc - j0 : REF_BLOCK;
            /* element of (chunk k, position j) of this loop, or -1 past its end */
#define ELT(k, j) ((uint64_t)(k) * cc + j0 + (j) < rem ? off + lo + (uint64_t)(k) * cc + j0 + (j) : UINT64_MAX)
            for (int32_t p = 0; p < N; p++) {
                int32_t k = (p + N - 1) % N;
                for (uint64_t j = 0; j < jn; j++) {
                    uint64_t e = ELT(k, j);
                    wire[(size_t)p * REF_BLOCK + j] = e == UINT64_MAX ? 0 : c->x[ring[p]][e];
                }
            }
            for (int32_t step = 2; step <= N; step++) {
                for (int32_t p = 0; p < N; p++) {
                    int32_t k = (p + N - step) % N, from = (p + N - 1) % N;
                    for (uint64_t j = 0; j < jn; j++) {
                        uint64_t e = ELT(k, j);
                        float v = e == UINT64_MAX ? 0
                                                  : ref_add(wire[(size_t)from * REF_BLOCK + j],
                                                            c->x[ring[p]][e], c->dtype);
                        next[(size_t)p * REF_BLOCK + j] = v;
                        if (step == N && e != UINT64_MAX) c->want[e] = v; /* k == p: done */
                    }
                }
                float *t = wire;
                wire = next, next = t;
            }
#undef ELT
        }
    }
    free(wire);
    free(next);
}

/* reduce_scatter.h runRing on one channel: the part [off, off + n) of every rank's block. Ring
 * position p: step 0 sends its input of the block of ringRanks[N-1] (the rank before it); steps
 * j = 2 .. N-1 receive, add their input of the block of ringRanks[N-j] and send; the last step
 * adds its own block's input and keeps the result. The chunks only pipeline this. */
static void ref_ring_reduce_scatter(ref_case *c, int32_t G, int32_t ch, uint64_t off,
                                    uint64_t n) {
    int32_t N = c->N, ring[1024];
    ref_ring(N, G, ch, ring);
    float *wire = malloc(sizeof(float) * (size_t)N * REF_BLOCK);
    float *next = malloc(sizeof(float) * (size_t)N * REF_BLOCK);
    for (uint64_t j0 = 0; j0 < n; j0 += REF_BLOCK) {
        uint64_t jn = n - j0 < REF_BLOCK ? n - j0 : REF_BLOCK;
        for (int32_t p = 0; p < N; p++) {
            uint64_t at = (uint64_t)ring[(p + N - 1) % N] * c->count + off + j0;
            for (uint64_t j = 0; j < jn; j++) wire[(size_t)p * REF_BLOCK + j] = c->x[ring[p]][at + j];
        }
        for (int32_t step = 2; step <= N; step++) {
            for (int32_t p = 0; p < N; p++) {
                int32_t dest = ring[(p + N - step) % N], from = (p + N - 1) % N;
                uint64_t at = (uint64_t)dest * c->count + off + j0;
                for (uint64_t j = 0; j < jn; j++)
                    next[(size_t)p * REF_BLOCK + j] =
                        ref_add(wire[(size_t)from * REF_BLOCK + j], c->x[ring[p]][at + j], c->dtype);
                if (step == N)
                    for (uint64_t j = 0; j < jn; j++) c->want[at + j] = next[(size_t)p * REF_BLOCK + j];
            }
            float *t = wire;
            wire = next, next = t;
        }
    }
    free(wire);
    free(next);
}

/* The tree of channel ch over the part [off, off + n): every rank's reduce step takes its own
 * input, adds what each of its down peers sent in their order (runTreeSplit), the root's value
 * goes down unchanged. Ranks are evaluated children first. */
static void ref_tree_all_reduce(ref_case *c, int32_t G, int32_t C, int32_t ch, uint64_t off,
                                uint64_t n) {
    int32_t N = c->N, order[1024], at = 0, stack[1024], top = 0;
    ref_tree *t = malloc(sizeof *t);
    ref_tree_of(N, G, C, ch, t);
    /* a post-order of the tree: reverse of a pre-order in which children come after parents */
    stack[top++] = t->root;
    while (top) {
        int32_t r = stack[--top];
        order[at++] = r;
        for (int32_t d = 0; d < t->n_down[r]; d++) stack[top++] = t->down[r][d];
    }
    CT_CHECK_MSG(at == N, "the tree of channel %d reaches %d of %d ranks", (int)ch, (int)at,
                 (int)N);
    float *val = malloc(sizeof(float) * (size_t)N);
    for (uint64_t i = off; i < off + n; i++) {
        for (int32_t q = at - 1; q >= 0; q--) {
            int32_t r = order[q];
            float v = c->x[r][i];
            for (int32_t d = 0; d < t->n_down[r]; d++) v = ref_add(v, val[t->down[r][d]], c->dtype);
            val[r] = v;
        }
        c->want[i] = val[t->root];
    }
    free(val);
    free(t);
}

/* The switch's sum of node `node` at element i: f32 accumulation of the node's G inputs in local
 * rank order (the multimem ld_reduce's own order is not published: assumed), rounded once. */
static float ref_node_sum(const ref_case *c, int32_t G, int32_t node, uint64_t i) {
    float acc = 0;
    for (int32_t j = 0; j < G; j++) acc += c->x[node * G + j][i];
    return ref_round(acc, c->dtype);
}

/* NVLS_TREE on NVLS channel ch over the part [off, off + n): the head of each node takes the
 * switch's sum, then what its children in NCCL's tree ch mod 2 over the nodes sent (connect.cc:
 * treeDown = {the switch, child 0, child 1}), the root's value goes down. */
static void ref_nvls_tree(ref_case *c, int32_t G, int32_t ch, uint64_t off, uint64_t n) {
    int32_t M = c->N / G, t = ch % 2;
    for (uint64_t i = off; i < off + n; i++) {
        float val[1024];
        int32_t root = 0;
        /* nodes deeper in the tree first: repeat until every node has its value (M small) */
        int32_t done[1024] = {0}, left = M;
        while (left) {
            for (int32_t m = 0; m < M; m++) {
                if (done[m]) continue;
                int32_t up, d0, d1;
                ref_dtree(M, t, m, &up, &d0, &d1);
                if ((d0 >= 0 && !done[d0]) || (d1 >= 0 && !done[d1])) continue;
                float v = ref_node_sum(c, G, m, i);
                if (d0 >= 0) v = ref_add(v, val[d0], c->dtype);
                if (d1 >= 0) v = ref_add(v, val[d1], c->dtype);
                val[m] = v, done[m] = 1, left--;
                if (up < 0) root = m;
            }
        }
        c->want[i] = val[root];
    }
}

/* Which kernel an emulation simulates on each channel's part. */
typedef enum { REF_RING_AR, REF_RING_RS, REF_TREE, REF_NVLS_TREE } ref_kernel;

/* NCCL's side of the collective of c: enqueue's channels for it (traffic per byte, LL, the
 * task's and the communicator's channels), each channel's part through the kernel (G per node,
 * C channels for the tree's halves, chunk elements for the ring all-reduce). */
static void ref_emulate(ref_case *c, ref_kernel kernel, int32_t G, int32_t C, uint64_t chunk,
                        uint64_t traffic, int ll, int32_t task) {
    ref_work w;
    ref_schedule(c->count, ct_dtype_size(c->dtype), traffic, ll, task, C, &w);
    for (int32_t ch = w.lo; ch <= w.hi; ch++) {
        uint64_t off, n;
        ref_part(&w, ch, &off, &n);
        switch (kernel) {
        case REF_RING_AR: ref_ring_all_reduce(c, G, ch, off, n, chunk); break;
        case REF_RING_RS: ref_ring_reduce_scatter(c, G, ch, off, n); break;
        case REF_TREE: ref_tree_all_reduce(c, G, C, ch, off, n); break;
        case REF_NVLS_TREE: ref_nvls_tree(c, G, ch, off, n); break;
        }
    }
}

/* ---------------------------------------------------------------------------------------
 * running the engine and comparing
 * ------------------------------------------------------------------------------------- */

static void job_all_reduce(rank_job *job) {
    ref_case *c = job->arg;
    job_note(job, job->w->vt->all_reduce(job_comm(job), c->send[job->rank], c->recv[job->rank],
                                         c->count, c->dtype, c->op, NULL, &job->err));
}

static void job_reduce_scatter(rank_job *job) {
    ref_case *c = job->arg;
    job_note(job, job->w->vt->reduce_scatter(job_comm(job), c->send[job->rank],
                                             c->recv[job->rank], c->count, c->dtype, c->op, NULL,
                                             &job->err));
}

static float got_at(const ref_case *c, int32_t r, uint64_t i) {
    return c->dtype == CT_DTYPE_BF16 ? ct_bf16_to_f32(((const uint16_t *)c->recv[r])[i])
                                     : ((const float *)c->recv[r])[i];
}

/* Run the collective with [comm] `ini` and compare every rank's result with c->want bit for
 * bit (all-reduce: every rank the whole buffer; reduce-scatter: rank r its block). Returns the
 * number of elements whose bits differ. */
static uint64_t run_and_compare(ref_case *c, const char *ini, int rs, const char *what) {
    world_run w;
    rank_job jobs[MAX_RANKS];
    uint64_t bad = 0;
    if (!world_open(&w, c->N, ini)) goto out;
    world_run_all(&w, rs ? job_reduce_scatter : job_all_reduce, c, jobs);
    check_all_ok(jobs, c->N);
    for (int32_t r = 0; r < c->N; r++)
        for (uint64_t i = 0; i < c->count; i++) {
            float want = c->want[rs ? (uint64_t)r * c->count + i : i], got = got_at(c, r, i);
            if (memcmp(&want, &got, sizeof want) == 0) continue;
            if (bad++ < 3)
                ct_test_fail(__FILE__, __LINE__, "%s: rank %d element %llu: NCCL's order gives "
                             "%.9g, the engine %.9g", what, (int)r, (unsigned long long)i,
                             (double)want, (double)got);
        }
    if (bad) ct_test_fail(__FILE__, __LINE__, "%s: %llu elements differ", what, (unsigned long long)bad);
out:
    world_close(&w);
    return bad;
}

/* How many elements of the all-reduce c->want differ from the ring of earlier versions (equal
 * contiguous parts per channel, equal chunks, one loop) on the same data: the split matters. */
static uint64_t differs_from_even_split(const ref_case *c, int32_t G, int32_t C) {
    uint64_t n = 0;
    int32_t N = c->N, ring[1024];
    for (int32_t k = 0; k < C; k++) {
        uint64_t pb = c->count * (uint64_t)k / (uint64_t)C, pe = c->count * (uint64_t)(k + 1) / (uint64_t)C;
        ref_ring(N, G, k, ring);
        for (uint64_t i = pb; i < pe; i++) {
            uint64_t j = i - pb, m = pe - pb;
            int32_t chunk = 0;
            while ((uint64_t)(chunk + 1) * m / (uint64_t)N <= j) chunk++;
            float v = c->x[ring[(chunk + 1) % N]][i];
            for (int32_t h = 2; h <= N; h++) v = ref_add(v, c->x[ring[(chunk + h) % N]][i], c->dtype);
            n += memcmp(&v, &c->want[i], sizeof v) != 0;
        }
    }
    return n;
}

/* A ring all-reduce case: emulate NCCL on every channel, run the engine, compare. */
static uint64_t check_ring(int32_t N, int32_t G, int32_t C, const char *proto, int32_t dtype,
                           uint64_t count, int avg, uint64_t seed) {
    ref_case c;
    uint64_t differs = 0;
    char ini[256], what[128];
    snprintf(ini, sizeof ini, "[comm]\nalgo = ring\nchannels = %d\ngpus_per_node = %d\n"
             "proto = %s\ntimeout_s = 60\n", (int)C, (int)G, proto);
    snprintf(what, sizeof what, "ring%s all-reduce N=%d G=%d C=%d %s %s count=%llu",
             avg ? " AVG" : "", (int)N, (int)G, (int)C, proto, ct_dtype_name(dtype),
             (unsigned long long)count);
    if (!ref_case_open(&c, N, dtype, count, 0, seed)) {
        ct_test_fail(__FILE__, __LINE__, "out of memory");
        goto out;
    }
    if (avg) ref_premultiply(&c);
    uint64_t elt = ct_dtype_size(dtype);
    int32_t task = ref_task_channels(proto, 1, C, N, count * elt);
    ref_emulate(&c, REF_RING_AR, G, C, ref_chunk_count(proto, elt), 2, !strcmp(proto, "ll"),
                task);
    differs = differs_from_even_split(&c, G, C);
    run_and_compare(&c, ini, 0, what);
out:
    ref_case_close(&c);
    return differs;
}

/* ---------------------------------------------------------------------------------------
 * the tests
 * ------------------------------------------------------------------------------------- */

CT_TEST(nccl_split_of_one_collective_is_enqueues_worked_by_hand) {
    /* 1,000,003 bf16 all-reduced on 2 channels: cells of 16 KiB (32 KiB of traffic at 2 bytes
     * on the wire per byte), 123 cells; 2,000,016 bytes of traffic per channel = 62 cells; so
     * channel 0 takes 62 cells = 507,904 elements and channel 1 the other 61 less the last
     * cell's 7,613 elements of padding = 492,099 (the even split: 500,001 and 500,002). */
    uint64_t part[ORDER_MAX_CHANNELS + 1];
    int32_t n = order_nccl_parts(1000003, 2, 2, 2, 2, part);
    CT_CHECK(n == 2 && part[1] == 507904 && part[2] == 1000003);
    ref_work w;
    ref_schedule(1000003, 2, 2, 0, 2, 2, &w);
    CT_CHECK(w.lo == 0 && w.hi == 1 && w.count_lo == 507904 && w.count_hi == 492099);
    /* 256,000 bytes (V = 8000, C = 16 in bf16) on 16 channels: 16 cells of 16 KiB, one a
     * channel; the first 15 take 8,192 elements, the last 5,120 (its cell's 3,072 padding) */
    n = order_nccl_parts(128000, 2, 2, 16, 16, part);
    CT_CHECK(n == 16 && part[1] == 8192 && part[15] == 15 * 8192 && part[16] == 128000);
    /* a reduce-scatter at N = 64 counts 64 bytes of traffic per byte: cells of 512 B */
    n = order_nccl_parts(100003, 2, 64, 8, 8, part);
    ref_schedule(100003, 2, 64, 0, 8, 8, &w);
    CT_CHECK(n == w.hi - w.lo + 1 && part[1] == w.count_lo);
    /* enqueue's overflow rule: when a channel's traffic (a multiple of 16 below the exact
     * share) is a whole number of cells, ceil(cells / per channel) is one channel too many; the
     * rest is then spread over the channels left. 65536 j + 1 bf16 elements on 8 channels do
     * that (8 j + 1 cells of 32 KiB traffic, j per channel). */
    for (uint64_t j = 1; j <= 4; j++) {
        ref_schedule(65536 * j + 1, 2, 2, 0, 8, 8, &w);
        n = order_nccl_parts(65536 * j + 1, 2, 2, 8, 8, part);
        CT_CHECK_MSG(n == 8 && w.hi == 7 && part[1] == w.count_lo && part[8] == 65536 * j + 1,
                     "j %d: %d parts, NCCL %d, first %llu, NCCL %llu", (int)j, (int)n,
                     (int)(w.hi + 1), (unsigned long long)part[1],
                     (unsigned long long)w.count_lo);
        for (int32_t k = 1; k < n; k++) {
            uint64_t off, len;
            ref_part(&w, k, &off, &len);
            CT_CHECK(part[k] == off && part[k + 1] - part[k] == len);
        }
    }
    static const int32_t chs[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 31, 32, 64};
    for (uint64_t count = 1000; count < 40000000; count = count * 3 + 7) {
        for (size_t q = 0; q < sizeof chs / sizeof chs[0]; q++) {
            int32_t ch = chs[q];
            ref_schedule(count, 2, 2, 0, ch, ch, &w);
            n = order_nccl_parts(count, 2, 2, ch, ch, part);
            CT_CHECK_MSG(n == w.hi - w.lo + 1 && n <= ch, "count %llu, %d channels: %d parts, "
                         "NCCL %d", (unsigned long long)count, (int)ch, (int)n,
                         (int)(w.hi - w.lo + 1));
            for (int32_t k = 0; k < n; k++) {
                uint64_t off, len;
                ref_part(&w, k, &off, &len);
                CT_CHECK_MSG(part[k] == off && part[k + 1] - part[k] == len, "count %llu, %d "
                             "channels, part %d: [%llu, %llu), NCCL [%llu, +%llu)",
                             (unsigned long long)count, (int)ch, (int)k,
                             (unsigned long long)part[k], (unsigned long long)part[k + 1],
                             (unsigned long long)off, (unsigned long long)len);
            }
        }
    }
    /* chunks: simple 2 MiB, LL 32 KiB, LL128 576,000 B; enqueue's channel count per size */
    CT_CHECK(order_ring_chunk(ORDER_PROTO_SIMPLE, 2) == 1048576 && ref_chunk_count("simple", 2) == 1048576);
    CT_CHECK(order_ring_chunk(ORDER_PROTO_LL, 2) == 16384 && ref_chunk_count("ll", 2) == 16384);
    CT_CHECK(order_ring_chunk(ORDER_PROTO_LL128, 2) == 288000 && ref_chunk_count("ll128", 2) == 288000);
    CT_CHECK(order_task_channels(REDUCE_RING, ORDER_PROTO_SIMPLE, 16, 8, 256000) == 7);
    CT_CHECK(ref_task_channels("simple", 1, 16, 8, 256000) == 7);
}

CT_TEST(nccl_ring_all_reduce_gives_nccls_bits_at_any_count) {
    uint64_t differs = 0;
    differs += check_ring(8, 8, 2, "simple", CT_DTYPE_BF16, 1000003, 0, 1);   /* the case */
    differs += check_ring(4, 4, 1, "simple", CT_DTYPE_BF16, 5000011, 0, 2);   /* 2 loops */
    differs += check_ring(2, 2, 3, "simple", CT_DTYPE_BF16, 13000027, 0, 3);  /* > 10 M, 3 loops each */
    differs += check_ring(64, 8, 8, "simple", CT_DTYPE_BF16, 200003, 0, 4);   /* 8 nodes x 8 */
    differs += check_ring(13, 1, 5, "simple", CT_DTYPE_BF16, 499979, 0, 5);   /* G = 1 */
    differs += check_ring(8, 8, 4, "simple", CT_DTYPE_BF16, 7, 0, 6);         /* tiny */
    differs += check_ring(8, 8, 8, "simple", CT_DTYPE_BF16, 131073, 0, 8);    /* overflow rule */
    differs += check_ring(2, 2, 64, "simple", CT_DTYPE_BF16, 3000017, 0, 9);  /* 64 channels */
    differs += check_ring(4, 2, 2, "simple", CT_DTYPE_F32, 3000017, 0, 7);    /* f32: 2 loops, 4-aligned */
    /* the data must make the split visible, or the test proves little */
    CT_CHECK_MSG(differs > 10000, "only %llu elements differ from the even split",
                 (unsigned long long)differs);
}

CT_TEST(nccl_ring_all_reduce_with_ll_and_ll128_chunks_gives_nccls_bits) {
    uint64_t differs = check_ring(8, 8, 3, "ll", CT_DTYPE_BF16, 1000003, 0, 11);
    differs += check_ring(8, 4, 3, "ll128", CT_DTYPE_BF16, 1000003, 0, 12);
    differs += check_ring(5, 1, 2, "ll128", CT_DTYPE_F32, 2000003, 0, 13);
    CT_CHECK_MSG(differs > 10000, "only %llu elements differ from the even split",
                 (unsigned long long)differs);
}

/* A reduce-scatter case: the channels split one rank's block by traffic N per byte. */
static void check_reduce_scatter(int32_t N, int32_t G, int32_t C, int32_t dtype, uint64_t count,
                                 uint64_t seed) {
    ref_case c;
    char ini[256], what[128];
    snprintf(ini, sizeof ini, "[comm]\nalgo = ring\nchannels = %d\ngpus_per_node = %d\n"
             "timeout_s = 60\n", (int)C, (int)G);
    snprintf(what, sizeof what, "ring reduce-scatter N=%d G=%d C=%d %s count=%llu", (int)N,
             (int)G, (int)C, ct_dtype_name(dtype), (unsigned long long)count);
    if (!ref_case_open(&c, N, dtype, count, 1, seed)) {
        ct_test_fail(__FILE__, __LINE__, "out of memory");
        goto out;
    }
    uint64_t elt = ct_dtype_size(dtype);
    int32_t task = ref_task_channels("simple", 1, C, N, count * elt * (uint64_t)N);
    ref_emulate(&c, REF_RING_RS, G, C, 0, (uint64_t)N, 0, task);
    run_and_compare(&c, ini, 1, what);
out:
    ref_case_close(&c);
}

CT_TEST(nccl_ring_reduce_scatter_gives_nccls_bits_at_any_count) {
    check_reduce_scatter(8, 8, 4, CT_DTYPE_BF16, 125003, 21);
    check_reduce_scatter(64, 8, 8, CT_DTYPE_BF16, 10007, 22);
    check_reduce_scatter(3, 1, 2, CT_DTYPE_BF16, 500009, 23);
    check_reduce_scatter(16, 8, 16, CT_DTYPE_F32, 65537, 24);
}

/* A tree all-reduce case (algo = dbtree, simple). */
static void check_tree(int32_t N, int32_t G, int32_t C, uint64_t count, uint64_t seed) {
    ref_case c;
    char ini[256], what[128];
    snprintf(ini, sizeof ini, "[comm]\nalgo = dbtree\nchannels = %d\ngpus_per_node = %d\n"
             "timeout_s = 60\n", (int)C, (int)G);
    snprintf(what, sizeof what, "tree all-reduce N=%d G=%d C=%d count=%llu", (int)N, (int)G,
             (int)C, (unsigned long long)count);
    if (!ref_case_open(&c, N, CT_DTYPE_BF16, count, 0, seed)) {
        ct_test_fail(__FILE__, __LINE__, "out of memory");
        goto out;
    }
    ref_emulate(&c, REF_TREE, G, C, 0, 2, 0, ref_task_channels("simple", 0, C, N, count * 2));
    run_and_compare(&c, ini, 0, what);
out:
    ref_case_close(&c);
}

CT_TEST(nccl_tree_all_reduce_gives_nccls_bits_at_any_count) {
    check_tree(32, 8, 8, 1000003, 31);  /* the case: 4 nodes x 8 */
    check_tree(64, 8, 16, 100003, 32);  /* 8 nodes */
    check_tree(16, 1, 2, 262147, 33);   /* one rank per node */
    check_tree(24, 8, 5, 100003, 34);   /* 3 nodes: the shifted second tree */
}

/* One node of 8 ranks, count elements (a reduce-scatter's per rank when rs): the engine with
 * [comm] ini gives the switch's sum of every element. */
static void check_node_sum(uint64_t count, int rs, uint64_t seed, const char *ini,
                           const char *what) {
    ref_case c;
    if (ref_case_open(&c, 8, CT_DTYPE_BF16, count, rs, seed)) {
        for (uint64_t i = 0; i < c.total; i++) c.want[i] = ref_node_sum(&c, 8, 0, i);
        run_and_compare(&c, ini, rs, what);
    } else {
        ct_test_fail(__FILE__, __LINE__, "out of memory");
    }
    ref_case_close(&c);
}

CT_TEST(nvls_inside_a_node_is_the_switchs_once_rounded_f32_sum) {
    ref_case c;
    if (!ref_case_open(&c, 8, CT_DTYPE_BF16, 1000003, 0, 41)) {
        ct_test_fail(__FILE__, __LINE__, "out of memory");
        goto out;
    }
    uint64_t once_differs = 0;
    for (uint64_t i = 0; i < c.count; i++) {
        c.want[i] = ref_node_sum(&c, 8, 0, i);
        double exact = 0;
        for (int32_t r = 0; r < 8; r++) exact += c.x[r][i];
        once_differs += c.want[i] != ref_round(exact, CT_DTYPE_BF16);
    }
    run_and_compare(&c, "[comm]\nalgo = nvls\nchannels = 16\ngpus_per_node = 8\n", 0,
                    "nvls all-reduce N=8 G=8");
    /* f32 holds the eight bf16 values' sum exactly nearly always: the assumed order inside the
     * switch almost never matters */
    CT_CHECK_MSG(once_differs < c.count / 1000, "%llu of %llu f32 sums are not the exact sum "
                 "rounded once", (unsigned long long)once_differs, (unsigned long long)c.count);
out:
    ref_case_close(&c);
    /* and the reduce-scatter of one node is the same sum */
    check_node_sum(100003, 1, 42, "[comm]\nalgo = nvls\nchannels = 16\ngpus_per_node = 8\n",
                   "nvls reduce-scatter N=8 G=8");
}

CT_TEST(nvls_tree_sums_each_node_in_the_switch_then_runs_nccls_tree_per_channel) {
    static const int32_t cases[][3] = {{32, 8, 16}, {64, 8, 16}, {24, 8, 4}}; /* N, G, C */
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        int32_t N = cases[k][0], G = cases[k][1], C = cases[k][2];
        ref_case c;
        char ini[256], what[128];
        snprintf(ini, sizeof ini, "[comm]\nalgo = nvls_tree\nchannels = %d\ngpus_per_node = %d\n"
                 "timeout_s = 60\n", (int)C, (int)G);
        snprintf(what, sizeof what, "nvls_tree all-reduce N=%d G=%d C=%d", (int)N, (int)G, (int)C);
        if (!ref_case_open(&c, N, CT_DTYPE_BF16, 200003, 0, 50 + k)) {
            ct_test_fail(__FILE__, __LINE__, "out of memory");
            ref_case_close(&c);
            return;
        }
        ref_emulate(&c, REF_NVLS_TREE, G, C, 0, 2, 0, C); /* NVLS takes every NVLS channel */
        run_and_compare(&c, ini, 0, what);
        ref_case_close(&c);
    }
}

CT_TEST(nccl_avg_premultiplies_every_input_by_the_dtypes_one_over_n) {
    /* N = 3 and 6: bf16(1/3) = 0.333984375 is not 1/3, so AVG is not SUM / N */
    check_ring(3, 3, 2, "simple", CT_DTYPE_BF16, 100003, 1, 61);
    check_ring(6, 6, 1, "simple", CT_DTYPE_F32, 50021, 1, 62);
    float s = ref_round(1.0 / 3, CT_DTYPE_BF16);
    CT_CHECK_MSG(s == 0.333984375f, "bf16(1/3) = %.9g", (double)s);
    /* NVLS does not reduce AVG: NCCL runs it on the ring or tree; so the engine refuses */
    ref_case c;
    world_run w;
    rank_job jobs[MAX_RANKS];
    if (ref_case_open(&c, 4, CT_DTYPE_BF16, 100, 0, 63) &&
        world_open(&w, 4, "[comm]\nalgo = nvls\ngpus_per_node = 4\n")) {
        c.op = CT_REDUCE_AVG;
        world_run_all(&w, job_all_reduce, &c, jobs);
        for (int32_t r = 0; r < 4; r++)
            CT_CHECK_MSG(jobs[r].rc == CT_ERR_UNSUPPORTED && strstr(jobs[r].err.message, "NVLS"),
                         "rank %d: rc %d: %s", (int)r, (int)jobs[r].rc, jobs[r].err.message);
        world_close(&w);
    }
    ref_case_close(&c);
}

CT_TEST(nccl_tuner_model_picks_what_nccls_tables_give_by_hand) {
    tuner_pick p;
    /* A100, 16 nodes x 8, 77,194,752 bytes (GPT-2's head in bf16). Graphs: 8 channels at
     * 24 GB/s. Ring simple: bus 8 x 24 = 192, x N/nsteps = 128/254 -> 96.76 GB/s; latency 8.4
     * + 224 x 3.4 + 30 x 14 = 1190, x 1.4 (plateau) = 1666; 1666 + 797.8 = 2463.8 us. Ring
     * LL128: min(192 x .92, 8 x 20) = 160 -> 80.63; 14 + 224 x 1.9 + 30 x 4 = 559.6; 1517.0.
     * Tree simple: min(192 x .92, 8 x 17.8) = 142.4, x .5 x .8 (correction at 2^20 x 64 B) =
     * 56.96; 8.4 + 2 x (7 x 4 + 4 x 14) = 176.4; 1531.7. Tree LL128: min(142.4 x 120/128, 8 x
     * 20) = 133.5, x .5 x .9 = 60.08; 14 + 2 x (7 x 1.25 + 4 x 8.5) = 99.5; 1384.5: the pick,
     * on 16 channels (16 x 640 x 8 B < 77 MB). */
    tuner_query q = {ORDER_ALL_REDUCE, 77194752, 128, 8, TUNER_GPU_A100, 1, 1, 0, 230};
    tuner_choose(&q, &p);
    CT_CHECK_MSG(p.nccl_algo == TUNER_TREE && p.nccl_proto == TUNER_LL128 &&
                 p.task_channels == 16 && fabs(p.time_us - 1384.5) < 0.5,
                 "A100 16x8 77 MB: %s/%s on %d, %.1f us", tuner_algo_name(p.nccl_algo),
                 tuner_proto_name(p.nccl_proto), (int)p.task_channels, p.time_us);
    CT_CHECK(fabs(p.table_us[TUNER_RING][TUNER_SIMPLE] - 2463.8) < 0.5 &&
             fabs(p.table_us[TUNER_TREE][TUNER_SIMPLE] - 1531.7) < 0.5 &&
             fabs(p.table_us[TUNER_RING][TUNER_LL128] - 1517.0) < 0.5);
    /* H100, the same: NVLS_TREE: min(45 x .85 x 7/8 x 2, 48, 45.5) = 45.5 x 8 = 364, x 128/254
     * -> 183.4 GB/s; 25 + 2 x 4 x 20.9 = 192.2; 613.0 us on the 16 NVLS channels */
    q.gpu = TUNER_GPU_H100;
    tuner_choose(&q, &p);
    CT_CHECK_MSG(p.nccl_algo == TUNER_NVLS_TREE && p.task_channels == 16 &&
                 fabs(p.time_us - 613.0) < 0.5, "H100 16x8 77 MB: %s/%s on %d, %.1f us",
                 tuner_algo_name(p.nccl_algo), tuner_proto_name(p.nccl_proto),
                 (int)p.task_channels, p.time_us);
    /* without NVSwitch, or for ncclAvg, no NVLS: tree/simple (846.5) against tree LL128 (838.9) */
    q.nvswitch = 0;
    tuner_choose(&q, &p);
    CT_CHECK_MSG(p.nccl_algo == TUNER_TREE && p.nccl_proto == TUNER_LL128, "H100 no NVSwitch: %s/%s",
                 tuner_algo_name(p.nccl_algo), tuner_proto_name(p.nccl_proto));
    /* A100, 8 nodes x 8, 256,000 bytes (the long runs' head): tree LL128 88.9 us beats tree LL
     * 95.4 and ring LL 181.1 */
    tuner_query small = {ORDER_ALL_REDUCE, 256000, 64, 8, TUNER_GPU_A100, 1, 1, 0, 230};
    tuner_choose(&small, &p);
    CT_CHECK_MSG(p.nccl_algo == TUNER_TREE && p.nccl_proto == TUNER_LL128 &&
                 fabs(p.time_us - 88.9) < 0.5, "A100 8x8 256 kB: %s/%s %.1f us",
                 tuner_algo_name(p.nccl_algo), tuner_proto_name(p.nccl_proto), p.time_us);
    /* reduce-scatter is a ring (or NVLS on one node, PAT at one rank per node) */
    tuner_query rs = {ORDER_REDUCE_SCATTER, 77194752, 128, 8, TUNER_GPU_H100, 1, 1, 0, 230};
    tuner_choose(&rs, &p);
    CT_CHECK(p.nccl_algo == TUNER_RING);
}

/* [comm] nccl_version: each version's tuning.cc (tags v2.18.1-1, v2.19.3-1, v2.20.5-1,
 * v2.30.7-1), its times worked by hand from that version's tables and formulas. */
CT_TEST(nccl_tuner_versions_give_each_tags_times_by_hand) {
    tuner_pick p;
    /* A100, 32 nodes x 8, 413,143,040 bytes (the root FSDP unit of the 1.3B model in bf16: 2 x
     * 50,432 x 2048 + 2048 elements). Ring LL128: min(8 x 24 x .92, 8 x 20) = 160, x 256/510 =
     * 80.31 GB/s -> 5144.2 us of bytes; latency 14 + (510 - S) x 1.9 + S x 4 with S, the steps
     * across the net, 2 x 32 = 64 before 2.2x (1117.4) and 2 x 31 = 62 in 2.30 (1113.2):
     * 6261.5 and 6257.3 us. Tree LL128: min(142.4 x 120/128, 160) x .5 = 66.75 (correction 1.0
     * at 2^22 x 64 B) -> 6189.4; 14 + 2 x (7 x 1.25 + 5 x 8.5) = 116.5; 6305.9 in every
     * version: the ring wins by 0.7% (0.8% in 2.30). Tree simple: 142.4 x .5 x .9 = 64.08 ->
     * 6447.3 us of bytes; latency 2.18 to 2.20: 0 + 2 x (7 x 28 + 5 x 28) = 672; 2.30: 8.4 + 2 x
     * (7 x 4 + 5 x 14) = 204.4. */
    static const struct {
        int32_t v;
        double ring_ll128, tree_ll128, tree_simple;
    } big[] = {{218, 6261.51, 6305.91, 7119.30}, {219, 6261.51, 6305.91, 7119.30},
               {220, 6261.51, 6305.91, 7119.30}, {230, 6257.31, 6305.91, 6651.70}};
    for (int i = 0; i < 4; i++) {
        tuner_query q = {ORDER_ALL_REDUCE, 413143040, 256, 8, TUNER_GPU_A100, 1, 1, 0, big[i].v};
        tuner_choose(&q, &p);
        CT_CHECK_MSG(p.nccl_algo == TUNER_RING && p.nccl_proto == TUNER_LL128 &&
                     fabs(p.table_us[TUNER_RING][TUNER_LL128] - big[i].ring_ll128) < 0.02 &&
                     fabs(p.table_us[TUNER_TREE][TUNER_LL128] - big[i].tree_ll128) < 0.02 &&
                     fabs(p.table_us[TUNER_TREE][TUNER_SIMPLE] - big[i].tree_simple) < 0.02,
                     "NCCL %d, A100 32x8 413 MB: %s/%s; ring LL128 %.1f, tree LL128 %.1f, tree "
                     "simple %.1f", (int)big[i].v, tuner_algo_name(p.nccl_algo),
                     tuner_proto_name(p.nccl_proto), p.table_us[TUNER_RING][TUNER_LL128],
                     p.table_us[TUNER_TREE][TUNER_LL128], p.table_us[TUNER_TREE][TUNER_SIMPLE]);
    }
    /* A100, one node of 8, 1,048,576 bytes. Ring LL: min(87.7 (Ampere, one node), 12 x 20 x
     * 1/4) = 60 before 2.2x, min(87.7, 240 x .5) = 87.7 in 2.30; x 8/14; latency 6.6 + 14 x
     * .6 = 15.0: 45.58 and 35.92 us (the pick in both). Tree simple: min(240 x .92, 12 x 24) x
     * .5 x .5 (correction at 2^14 x 64 B) = 55.2 -> 19.0 us of bytes; latency 2.18 to 2.20:
     * 2 x 7 x 28 = 392; 2.30: 8.4 + 2 x 7 x 4 = 64.4: 411.0 and 83.4 us. */
    static const struct {
        int32_t v;
        double ring_ll, tree_simple;
    } one[] = {{218, 45.58, 411.0}, {219, 45.58, 411.0}, {220, 45.58, 411.0}, {230, 35.92, 83.4}};
    for (int i = 0; i < 4; i++) {
        tuner_query q = {ORDER_ALL_REDUCE, 1048576, 8, 8, TUNER_GPU_A100, 1, 1, 0, one[i].v};
        tuner_choose(&q, &p);
        CT_CHECK_MSG(p.nccl_algo == TUNER_RING && p.nccl_proto == TUNER_LL &&
                     fabs(p.table_us[TUNER_RING][TUNER_LL] - one[i].ring_ll) < 0.05 &&
                     fabs(p.table_us[TUNER_TREE][TUNER_SIMPLE] - one[i].tree_simple) < 0.05,
                     "NCCL %d, A100 1x8 1 MB: %s/%s; ring LL %.2f, tree simple %.2f",
                     (int)one[i].v, tuner_algo_name(p.nccl_algo), tuner_proto_name(p.nccl_proto),
                     p.table_us[TUNER_RING][TUNER_LL], p.table_us[TUNER_TREE][TUNER_SIMPLE]);
    }
    /* H100, 16 nodes x 8, 77,194,752 bytes. 2.18: NVLS_TREE takes the graph's inter bandwidth,
     * 48 x 8 = 384, x .7 x 16 / (2 x 15) = 143.36 GB/s; latency 23 + 2 x 15 x 19 = 593: 1131.5
     * us. The pick is tree/LL128: Hopper's tree cap across 3+ nodes is 33 then, min(384 x .92,
     * 8 x 33) = 264, x 120/128 = 247.5 (under 8 x 36.7), x .5 x .9 (correction at 2^20 x 64 B)
     * = 111.375 -> 693.1 us of bytes; 14 + 2 x (7 x 1.25 + 4 x 8.5) = 99.5: 792.6 us. 2.19:
     * NVLS_TREE min(45, 48/2) x 8 x 5/6 = 160 GB/s; 0 + 23 + 2 x 4 x 14 = 135: 617.5 us, the
     * pick (2.30: 613.0, above). */
    tuner_query h = {ORDER_ALL_REDUCE, 77194752, 128, 8, TUNER_GPU_H100, 1, 1, 0, 218};
    tuner_choose(&h, &p);
    CT_CHECK_MSG(p.nccl_algo == TUNER_TREE && p.nccl_proto == TUNER_LL128 &&
                 fabs(p.time_us - 792.6) < 0.05 &&
                 fabs(p.table_us[TUNER_NVLS_TREE][TUNER_SIMPLE] - 1131.5) < 0.05,
                 "NCCL 2.18, H100 16x8 77 MB: %s/%s %.2f us, nvls_tree %.2f",
                 tuner_algo_name(p.nccl_algo), tuner_proto_name(p.nccl_proto), p.time_us,
                 p.table_us[TUNER_NVLS_TREE][TUNER_SIMPLE]);
    h.nccl_version = 219;
    tuner_choose(&h, &p);
    CT_CHECK_MSG(p.nccl_algo == TUNER_NVLS_TREE && fabs(p.time_us - 617.5) < 0.05,
                 "NCCL 2.19, H100 16x8 77 MB: %s/%s %.2f us", tuner_algo_name(p.nccl_algo),
                 tuner_proto_name(p.nccl_proto), p.time_us);
    /* names both ways; an unknown version is refused by order_check */
    CT_CHECK(tuner_version_parse("2.19") == 219 && tuner_version_parse("2.21") == -1 &&
             !strcmp(tuner_version_name(0), "2.30") && !strcmp(tuner_version_name(220), "2.20"));
    order_config oc = order_config_default(REDUCE_NCCL);
    char why[256];
    oc.nccl_version = 221;
    CT_CHECK(order_check(&oc, 8, why, sizeof why) != 0 && strstr(why, "nccl_version"));
}

/* algo = nccl: the engine runs the model's pick, cut as NCCL cuts it. */
CT_TEST(algo_nccl_runs_the_tuner_models_pick_with_nccls_split) {
    /* A100, 8 nodes x 8, the long runs' head (128,000 bf16): tree/LL128 on 16 channels, the
     * first 8 on tree 0 and the others on tree 1 (16 = 2 x 8 search channels) */
    tuner_query q = {ORDER_ALL_REDUCE, 256000, 64, 8, TUNER_GPU_A100, 1, 1, 0, 230};
    tuner_pick p;
    tuner_choose(&q, &p);
    CT_CHECK(p.algo == REDUCE_DBTREE && p.comm_channels == 16 && p.task_channels == 16);
    ref_case c;
    if (ref_case_open(&c, 64, CT_DTYPE_BF16, 128000, 0, 71)) {
        ref_emulate(&c, REF_TREE, 8, 16, 0, 2, 0, 16);
        run_and_compare(&c, "[comm]\nalgo = nccl\ngpu = a100\ngpus_per_node = 8\n"
                        "timeout_s = 60\n", 0, "algo = nccl, A100 8x8, 128,000 bf16");
    } else {
        ct_test_fail(__FILE__, __LINE__, "out of memory");
    }
    ref_case_close(&c);
    /* one node of 8 H100, 4 MB: NVLS (25 + 21.9 us, against ring LL128's 61.8), the switch's
     * sum (at 1 MB the model picks ring/LL: 27 us against NVLS's 30.5) */
    q = (tuner_query){ORDER_ALL_REDUCE, 4000006, 8, 8, TUNER_GPU_H100, 1, 1, 0, 230};
    tuner_choose(&q, &p);
    CT_CHECK_MSG(p.algo == REDUCE_NVLS, "H100 one node 4 MB: %s/%s", tuner_algo_name(p.nccl_algo),
                 tuner_proto_name(p.nccl_proto));
    check_node_sum(2000003, 0, 72, "[comm]\nalgo = nccl\ngpu = h100\ngpus_per_node = 8\n",
                   "algo = nccl, one node of 8 H100");
}
