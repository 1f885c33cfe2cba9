/* orders.c — the reduction orders of the threads engine as programs over slots, and NCCL's work
 * split of one collective into channels, loops and chunks (see orders.h for the contract,
 * docs/collectives.md for the orders in words and the NCCL version they follow). Pure
 * functions: no threads, no arithmetic.
 * Not for: running a program (reduce.c), splitting work between rank threads
 * (comm_threads.c), NCCL's choice of algorithm (tuner.c).
 */
#include "orders.h"

#include "tuner.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

/* [begin, end) of piece i when n elements are cut into `pieces` floor-divided pieces (sizes
 * differ by at most one, short pieces first). */
static void split(uint64_t n, int32_t pieces, int32_t i, uint64_t *begin, uint64_t *end) {
    *begin = n * (uint64_t)i / (uint64_t)pieces;
    *end = n * (uint64_t)(i + 1) / (uint64_t)pieces;
}

static uint64_t div_up(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

order_config order_config_default(int32_t algo) {
    order_config c = {.algo = algo, .channels = 1, .gpus_per_node = 0,
                      .split = ORDER_SPLIT_NCCL, .proto = ORDER_PROTO_SIMPLE,
                      .search_channels = 0, .gpu = TUNER_GPU_H100, .nvswitch = 1,
                      .nccl_version = 230};
    return c;
}

int order_check(order_config *cfg, int32_t world_size, char *why, size_t why_len) {
    if (cfg->channels < 1 || cfg->channels > ORDER_MAX_CHANNELS) {
        snprintf(why, why_len, "channels = %d must be in 1..%d", (int)cfg->channels,
                 ORDER_MAX_CHANNELS);
        return -1;
    }
    if (cfg->algo < 0 || cfg->algo >= REDUCE_N_ALGOS || cfg->split < 0 ||
        cfg->split > ORDER_SPLIT_EVEN || cfg->proto < 0 || cfg->proto > ORDER_PROTO_LL128 ||
        cfg->gpu < 0 || cfg->gpu >= TUNER_N_GPUS ||
        (cfg->nccl_version != 0 && !strcmp(tuner_version_name(cfg->nccl_version), "?"))) {
        snprintf(why, why_len, "algo %d, split %d, proto %d, gpu %d or nccl_version %d is not "
                 "known", (int)cfg->algo, (int)cfg->split, (int)cfg->proto, (int)cfg->gpu,
                 (int)cfg->nccl_version);
        return -1;
    }
    /* one rank is every layout (every collective is a copy); tools that open a world of one
     * to check a config meant for more ranks must not trip on it */
    if (cfg->gpus_per_node == 0 || world_size == 1) cfg->gpus_per_node = world_size;
    if (cfg->gpus_per_node < 1 || world_size % cfg->gpus_per_node != 0) {
        snprintf(why, why_len, "world_size %d is not a whole number of nodes of gpus_per_node "
                 "= %d ---> set gpus_per_node to a divisor of world_size (0: one node)",
                 (int)world_size, (int)cfg->gpus_per_node);
        return -1;
    }
    return 0;
}

/* --- the ring ---------------------------------------------------------------------------
 * Channel k's ring visits the nodes in order; inside each node it enters at local rank
 * k mod G (k mod S mod G when the channels are copies of S search channels) and goes up the
 * local ranks before leaving for the next node (a rail-optimised cluster where channel k uses
 * NIC k). Ring index i counts from rank 0. */

static int32_t ring_rot(const order_config *cfg, int32_t k) {
    int32_t base = cfg->search_channels > 0 ? k % cfg->search_channels : k;
    return base % cfg->gpus_per_node;
}

int32_t order_ring_rank(const order_config *cfg, int32_t world_size, int32_t k, int32_t i) {
    int32_t g = cfg->gpus_per_node, rot = ring_rot(cfg, k);
    int32_t pos0 = (g - rot) % g;                 /* rank 0's position in the ring */
    int32_t p = (int32_t)(((int64_t)pos0 + i) % world_size);
    return (p / g) * g + (p % g + rot) % g;
}

/* The ring index of rank r in channel k (inverse of order_ring_rank). */
static int32_t ring_index(const order_config *cfg, int32_t world_size, int32_t k, int32_t r) {
    int32_t g = cfg->gpus_per_node, rot = ring_rot(cfg, k);
    int32_t pos0 = (g - rot) % g;
    int32_t p = (r / g) * g + (r % g - rot + g) % g;
    return (p - pos0 + world_size) % world_size;
}

/* acc = x at ring index `first`, then + x at the next N-1 indices. */
static int32_t emit_ring(const order_config *cfg, int32_t n, int32_t k, int32_t first,
                         order_step *prog) {
    for (int32_t j = 0; j < n; j++)
        prog[j] = (order_step){j ? STEP_ADD_RANK : STEP_LOAD, 0,
                               order_ring_rank(cfg, n, k, (first + j) % n)};
    return n;
}

/* --- the heap tree (for comparison) ----------------------------------------------------- */

/* value(r) = x_r (+) value(2r+1) (+) value(2r+2); the first child's subtree is computed in
 * the same slot (a + b rounds like b + a), later ones one slot deeper. */
static int32_t emit_heap(int32_t n, int32_t r, int32_t slot, order_step *prog, int32_t at) {
    int32_t c0 = 2 * r + 1, c1 = 2 * r + 2;
    if (c0 >= n) {
        prog[at++] = (order_step){STEP_LOAD, slot, r};
        return at;
    }
    at = emit_heap(n, c0, slot, prog, at);
    prog[at++] = (order_step){STEP_ADD_RANK, slot, r};
    if (c1 < n) {
        assert(slot + 1 < ORDER_MAX_SLOTS);
        at = emit_heap(n, c1, slot + 1, prog, at);
        prog[at++] = (order_step){STEP_ADD_SLOT, slot, slot + 1};
    }
    return at;
}

/* --- NCCL's tree ------------------------------------------------------------------------
 * Binary tree over nodes 0..M-1 (tree 0): node m's children come from its lowest set bit b:
 * m - b/2 and the largest m + b/2^j (j >= 1) below M; node 0 has the single child "largest
 * power of two below M". Tree 1 mirrors tree 0 (M even: node m plays M-1-m) or shifts it by
 * one (M odd: node m plays m-1). */

static void btree0(int32_t n_nodes, int32_t m, int32_t *d0, int32_t *d1) {
    *d0 = *d1 = -1;
    if (n_nodes <= 1) return;
    if (m == 0) {
        int32_t p = 1;
        while (p * 2 < n_nodes) p *= 2;
        *d1 = p;
        return;
    }
    int32_t low = m & -m, half = low / 2;
    if (half == 0) return; /* odd nodes are leaves */
    *d0 = m - half;
    while (half > 0 && m + half >= n_nodes) half /= 2;
    *d1 = half > 0 ? m + half : -1;
}

void order_btree_children(int32_t n_nodes, int32_t t, int32_t m, int32_t *d0, int32_t *d1) {
    if (t == 0) {
        btree0(n_nodes, m, d0, d1);
    } else if (n_nodes % 2 == 1) { /* shift */
        btree0(n_nodes, (m - 1 + n_nodes) % n_nodes, d0, d1);
        if (*d0 >= 0) *d0 = (*d0 + 1) % n_nodes;
        if (*d1 >= 0) *d1 = (*d1 + 1) % n_nodes;
    } else { /* mirror */
        btree0(n_nodes, n_nodes - 1 - m, d0, d1);
        if (*d0 >= 0) *d0 = n_nodes - 1 - *d0;
        if (*d1 >= 0) *d1 = n_nodes - 1 - *d1;
    }
}

/* The root node of tree t over m nodes. */
static int32_t btree_root(int32_t m, int32_t t) {
    return t == 0 ? 0 : (m % 2 == 1 ? 1 % m : m - 1);
}

/* Channel k of the tree algorithm: which of the two trees (without search channels, the first
 * ceil(C/2) channels use tree 0 and the rest are their copies on tree 1; with S search
 * channels, channel k is a copy of k mod 2S, and those at S and above run tree 1, as NCCL
 * duplicates its channels). Inside a node the ranks form a chain in the local order (rot,
 * rot+1, ...); the chain's head talks to the parent node and to child d1's head, its second
 * rank to child d0's head (NCCL's balanced tree pattern). */
typedef struct tree_shape {
    int32_t n, g, t, rot;
} tree_shape;

static tree_shape tree_of(const order_config *cfg, int32_t n, int32_t k) {
    tree_shape s = {n, cfg->gpus_per_node, 0, 0};
    if (cfg->search_channels > 0) {
        int32_t S = cfg->search_channels, base = k % (2 * S);
        s.t = base >= S;
        s.rot = (base % S) % s.g;
    } else {
        int32_t first = (cfg->channels + 1) / 2;
        s.t = k >= first;
        s.rot = (k - (s.t ? first : 0)) % s.g;
    }
    return s;
}

static int32_t local_at(const tree_shape *s, int32_t i) { return (i + s->rot) % s->g; }

/* The children of rank r in the order its reduction adds them; returns how many (<= 3). */
static int32_t tree_children(const tree_shape *s, int32_t r, int32_t out[3]) {
    int32_t node = r / s->g, local = r % s->g, i = (local - s->rot + s->g) % s->g, n = 0;
    if (i < s->g - 1) out[n++] = node * s->g + local_at(s, i + 1);
    int32_t d0, d1;
    order_btree_children(s->n / s->g, s->t, node, &d0, &d1);
    int32_t to_d0 = local_at(s, s->g > 1 ? 1 : 0), to_d1 = local_at(s, 0);
    if (local == to_d0 && d0 >= 0) out[n++] = d0 * s->g + local_at(s, 0);
    if (local == to_d1 && d1 >= 0) out[n++] = d1 * s->g + local_at(s, 0);
    return n;
}

/* value(r) = x_r (+) value(child 0) (+) value(child 1) ..., as NCCL's reduce step adds its own
 * input and then what each child sent, in the order of its down list. */
static int32_t emit_tree(const tree_shape *s, int32_t r, int32_t slot, order_step *prog,
                         int32_t at) {
    int32_t ch[3], n = tree_children(s, r, ch);
    if (n == 0) {
        prog[at++] = (order_step){STEP_LOAD, slot, r};
        return at;
    }
    at = emit_tree(s, ch[0], slot, prog, at);
    prog[at++] = (order_step){STEP_ADD_RANK, slot, r};
    for (int32_t j = 1; j < n; j++) {
        assert(slot + 1 < ORDER_MAX_SLOTS);
        at = emit_tree(s, ch[j], slot + 1, prog, at);
        prog[at++] = (order_step){STEP_ADD_SLOT, slot, slot + 1};
    }
    return at;
}

static int32_t tree_root(const tree_shape *s) {
    return btree_root(s->n / s->g, s->t) * s->g + local_at(s, 0);
}

/* --- NVLS --------------------------------------------------------------------------------
 * The switch's sum of node `node` into `slot`: its G ranks added in f32 in local rank order
 * (the order inside the switch is not published: assumed), rounded once to the wire dtype. */
static int32_t emit_node_sum(int32_t g, int32_t node, int32_t slot, order_step *prog,
                             int32_t at) {
    for (int32_t b = 0; b < g; b++)
        prog[at++] = (order_step){b ? STEP_ACC_RANK : STEP_LOAD, slot, node * g + b};
    if (g > 1) prog[at++] = (order_step){STEP_ROUND, slot, 0};
    return at;
}

/* NVLS across nodes: the node sums go round a ring of nodes in bf16 (assumed: NCCL 2.30 runs
 * NVLS across nodes only with CollNet/SHARP, whose order is not published), starting at node
 * first. */
static int32_t emit_nvls_ring(int32_t n, int32_t g, int32_t first, order_step *prog) {
    int32_t nodes = n / g, at = 0;
    for (int32_t a = 0; a < nodes; a++) {
        at = emit_node_sum(g, (first + a) % nodes, a ? 1 : 0, prog, at);
        if (a) prog[at++] = (order_step){STEP_ADD_SLOT, 0, 1};
    }
    return at;
}

/* NVLS_TREE: value(node) = switch sum (+) value(child d0) (+) value(child d1), NCCL's binary
 * tree t over the nodes (NVLS channel k runs tree k mod 2): a head receives the switch's sum
 * first, then its tree children in NCCL's down order. */
static int32_t emit_nvls_tree(int32_t nodes, int32_t g, int32_t t, int32_t node, int32_t slot,
                              order_step *prog, int32_t at) {
    at = emit_node_sum(g, node, slot, prog, at);
    int32_t d[2];
    order_btree_children(nodes, t, node, &d[0], &d[1]);
    for (int32_t j = 0; j < 2; j++) {
        if (d[j] < 0) continue;
        assert(slot + 1 < ORDER_MAX_SLOTS);
        at = emit_nvls_tree(nodes, g, t, d[j], slot + 1, prog, at);
        prog[at++] = (order_step){STEP_ADD_SLOT, slot, slot + 1};
    }
    return at;
}

/* --- the hierarchical ring --------------------------------------------------------------
 * The channel part is cut into G parts; part j is reduced inside every node by a ring over
 * the local ranks that starts at local rank j+1 and ends at local rank j, then across nodes
 * by a ring over the nodes' partial sums for chunk m of the part, which starts at node m+1 and
 * ends at node m. Unit u = j*M + m. With G = 1 this is the flat ring. */
static int32_t emit_hier(int32_t n, int32_t g, int32_t j, int32_t m, order_step *prog) {
    int32_t nodes = n / g, at = 0;
    for (int32_t a = 0; a < nodes; a++) {
        int32_t node = (m + 1 + a) % nodes, slot = a ? 1 : 0;
        for (int32_t b = 0; b < g; b++)
            prog[at++] = (order_step){b ? STEP_ADD_RANK : STEP_LOAD, slot,
                                      node * g + (j + 1 + b) % g};
        if (a) prog[at++] = (order_step){STEP_ADD_SLOT, 0, 1};
    }
    return at;
}

/* --- NCCL's work split (enqueue.cc, device/all_reduce.h) --------------------------------- */

#define NCCL_MIN_TRAFFIC_PER_CHANNEL 32768ull /* bytes: a channel's least share, a cell's */
#define NCCL_SIMPLE_CHUNK_BYTES 2097152ull    /* 4 MiB buffer / 8 steps x 4 steps per chunk */
#define NCCL_LL_CHUNK_BYTES 32768ull          /* 512 KiB buffer / 8 steps / 2 (flags) */
#define NCCL_LL128_CHUNK_BYTES 576000ull      /* 4.69 MiB / 8 steps, 15 data of 16 words */

int32_t order_nccl_parts(uint64_t count, uint32_t esize, uint64_t tpb, int32_t nch,
                         int32_t max_ch, uint64_t *part) {
    part[0] = 0;
    if (count == 0) return 0;
    uint64_t traffic = count * esize * tpb;
    if (traffic < NCCL_MIN_TRAFFIC_PER_CHANNEL) traffic = NCCL_MIN_TRAFFIC_PER_CHANNEL;
    uint64_t per_channel = div_up(traffic / (uint64_t)nch, 16) * 16;
    uint64_t cell = div_up(div_up(NCCL_MIN_TRAFFIC_PER_CHANNEL, tpb), 16) * 16; /* bytes */
    uint64_t per_cell = cell / esize;                                          /* elements */
    uint64_t cells = div_up(count * esize, cell);
    uint64_t cell_traffic = cell * tpb;
    uint64_t cpc = div_up(per_channel, cell_traffic);
    if (cpc > cells) cpc = cells;
    /* the first channel takes a channel's share, or everything when it is the only one */
    uint64_t lo = max_ch == 1 ? cells : cpc;
    int64_t mid = (int64_t)((cells - lo) / cpc);
    uint64_t hi = (cells - lo) % cpc;
    int64_t used = 1 + mid + (hi != 0);
    if (used > max_ch) { /* one channel too many: the rest spread over what is left */
        mid = max_ch - 2;
        cpc = (cells - lo) / (uint64_t)(mid + 1);
        hi = cpc + (cells - lo) % (uint64_t)(mid + 1);
    }
    if (hi == 0 && mid != 0) {
        hi = cpc;
        mid -= 1;
    }
    uint64_t c_lo = lo * per_cell, c_mid = mid ? cpc * per_cell : 0, c_hi = hi * per_cell;
    uint64_t excess = cells * per_cell - count; /* the last cell's padding */
    if (c_hi) c_hi -= excess;
    else c_lo -= excess;
    int32_t n = 0;
    part[++n] = c_lo;
    for (int64_t j = 0; j < mid; j++, n++) part[n + 1] = part[n] + c_mid;
    if (hi) n++, part[n] = part[n - 1] + c_hi;
    assert(part[n] == count && n <= max_ch);
    return n;
}

int32_t order_task_channels(int32_t algo, int32_t proto, int32_t channels, int32_t world_size,
                            uint64_t nbytes) {
    if (algo == REDUCE_NVLS || algo == REDUCE_NVLS_TREE) return channels;
    uint64_t nt = proto == ORDER_PROTO_LL128 ? 640 : 512;
    uint64_t thr = proto == ORDER_PROTO_SIMPLE ? 64 : 8;
    if (algo == REDUCE_RING && proto == ORDER_PROTO_LL) thr *= (uint64_t)world_size;
    int32_t nc = channels;
    while (nc >= 2 && nbytes < (uint64_t)nc * nt * thr) nc--;
    return nc;
}

uint64_t order_ring_chunk(int32_t proto, uint32_t esize) {
    uint64_t bytes = proto == ORDER_PROTO_LL      ? NCCL_LL_CHUNK_BYTES
                     : proto == ORDER_PROTO_LL128 ? NCCL_LL128_CHUNK_BYTES
                                                  : NCCL_SIMPLE_CHUNK_BYTES;
    return bytes / esize;
}

void order_plan_make(order_plan *p, const order_config *cfg, int32_t world_size, int32_t kind,
                     uint64_t count, uint32_t esize, int32_t nvls_ok, int32_t avg) {
    memset(p, 0, sizeof *p);
    p->oc = *cfg;
    p->world_size = world_size;
    p->kind = kind;
    p->count = count;
    p->esize = esize;
    int32_t N = world_size, ar = kind == ORDER_ALL_REDUCE;
    uint64_t nbytes = count * esize * (ar ? 1 : (uint64_t)N); /* NCCL's nBytes */
    if (cfg->algo == REDUCE_NCCL) {
        tuner_query q = {kind, nbytes, N, cfg->gpus_per_node, cfg->gpu, cfg->nvswitch, nvls_ok,
                         avg, cfg->nccl_version};
        tuner_pick pk;
        tuner_choose(&q, &pk);
        p->oc.algo = pk.algo;
        p->oc.proto = pk.proto;
        p->oc.search_channels = pk.search_channels;
        p->oc.channels = pk.algo == REDUCE_NVLS || pk.algo == REDUCE_NVLS_TREE ? pk.nvls_channels
                                                                              : pk.comm_channels;
        p->task_channels = pk.task_channels;
        p->tuned = 1;
        p->nccl_algo = pk.nccl_algo;
        p->tuned_us = pk.time_us;
    } else {
        p->task_channels = order_task_channels(cfg->algo, cfg->proto, cfg->channels, N, nbytes);
    }
    if (p->oc.split == ORDER_SPLIT_EVEN) {
        p->n_parts = p->oc.channels;
        for (int32_t k = 0; k <= p->n_parts; k++) p->part[k] = count * (uint64_t)k / (uint64_t)p->n_parts;
        p->task_channels = p->oc.channels;
        return;
    }
    /* NVLS on several nodes is scheduled like CollNet (every channel takes an equal grid of
     * chunks); which channel holds an element does not change its order there (one program) */
    uint64_t tpb = ar ? 2 : (uint64_t)N;
    if (p->oc.proto == ORDER_PROTO_LL) tpb *= 4;
    p->n_parts = order_nccl_parts(count, esize, tpb, p->task_channels, p->oc.channels, p->part);
    /* the ring's loops and chunks (hier at one rank per node is that ring) */
    if (ar && (p->oc.algo == REDUCE_RING || (p->oc.algo == REDUCE_HIER && p->oc.gpus_per_node == 1)))
        p->chunk = order_ring_chunk(p->oc.proto, esize);
}

int64_t order_loops(const order_plan *p, int32_t k) {
    uint64_t n = p->part[k + 1] - p->part[k];
    if (n == 0) return 0;
    if (!p->chunk) return 1;
    uint64_t loop = p->chunk * (uint64_t)p->world_size;
    return (int64_t)div_up(n, loop);
}

/* The range of unit u of loop l of part k, inside the part (no program). */
static void unit_range(const order_plan *p, int32_t k, int64_t l, int32_t u, uint64_t *b,
                       uint64_t *e) {
    int32_t N = p->world_size, g = p->oc.gpus_per_node;
    uint64_t n = p->part[k + 1] - p->part[k];
    if (p->chunk) { /* NCCL's ring loop l; the last, partial loop with the aligned chunk */
        uint64_t loop = p->chunk * (uint64_t)N, off = (uint64_t)l * loop, rem = n - off;
        uint64_t cc = p->chunk, align = 16 / p->esize ? 16 / p->esize : 1;
        if (rem < loop) cc = div_up(div_up(rem, (uint64_t)N), align) * align;
        uint64_t lo = (uint64_t)u * cc, hi = lo + cc;
        if (lo > rem) lo = rem;
        if (hi > rem) hi = rem;
        *b = off + lo;
        *e = off + hi;
    } else if (p->oc.algo == REDUCE_HIER) {
        int32_t nodes = N / g, j = u / nodes, m = u % nodes;
        uint64_t pb, pe, cb, ce;
        split(n, g, j, &pb, &pe);
        split(pe - pb, nodes, m, &cb, &ce);
        *b = pb + cb;
        *e = pb + ce;
    } else {
        split(n, N, u, b, e);
    }
}

/* The program of unit u of part k (all-reduce). */
static int32_t unit_program(const order_plan *p, int32_t k, int32_t u, order_step *prog) {
    const order_config *cfg = &p->oc;
    int32_t n = p->world_size, g = cfg->gpus_per_node, c = p->channel0 + k;
    switch (cfg->algo) {
    case REDUCE_TREE: return emit_heap(n, 0, 0, prog, 0);
    case REDUCE_DBTREE: {
        tree_shape s = tree_of(cfg, n, c);
        return emit_tree(&s, tree_root(&s), 0, prog, 0);
    }
    case REDUCE_HIER: {
        int32_t nodes = n / g;
        return emit_hier(n, g, u / nodes, u % nodes, prog);
    }
    case REDUCE_NVLS: return emit_nvls_ring(n, g, (u + 1) % (n / g), prog);
    case REDUCE_NVLS_TREE: {
        int32_t nodes = n / g, t = c % 2;
        return emit_nvls_tree(nodes, g, t, btree_root(nodes, t), 0, prog, 0);
    }
    default: return emit_ring(cfg, n, c, (u + 1) % n, prog); /* chunk u starts at u+1 */
    }
}

int32_t order_unit(const order_plan *p, int32_t k, int64_t l, int32_t u, uint64_t *begin,
                   uint64_t *end, order_step *prog) {
    uint64_t b, e;
    unit_range(p, k, l, u, &b, &e);
    *begin = p->part[k] + b;
    *end = p->part[k] + e;
    if (e <= b) return 0;
    int32_t steps = unit_program(p, k, u, prog);
    assert(steps <= order_max_steps(p->world_size));
    return steps;
}

int32_t order_unit_at(const order_plan *p, uint64_t i, uint64_t *begin, uint64_t *end,
                      order_step *prog) {
    assert(i < p->count);
    int32_t k = 0;
    while (k + 1 < p->n_parts && p->part[k + 1] <= i) k++;
    uint64_t off = i - p->part[k];
    int64_t l = p->chunk ? (int64_t)(off / (p->chunk * (uint64_t)p->world_size)) : 0;
    int32_t lo = 0, hi = p->world_size - 1; /* the last unit of the loop that starts <= off */
    while (lo < hi) {
        int32_t mid = (lo + hi + 1) / 2;
        uint64_t b, e;
        unit_range(p, k, l, mid, &b, &e);
        if (b <= off) lo = mid;
        else hi = mid - 1;
    }
    /* units begin in order; step back over empty ones that begin where off's unit does */
    uint64_t b, e;
    unit_range(p, k, l, lo, &b, &e);
    while (!(b <= off && off < e) && lo > 0) unit_range(p, k, l, --lo, &b, &e);
    int32_t steps = order_unit(p, k, l, lo, begin, end, prog);
    assert(steps > 0 && *begin <= i && i < *end);
    return steps;
}

int32_t order_rs_part(const order_plan *p, int32_t k, int32_t owner, uint64_t *begin,
                      uint64_t *end, order_step *prog) {
    *begin = p->part[k];
    *end = p->part[k + 1];
    if (*end == *begin) return 0;
    const order_config *cfg = &p->oc;
    int32_t n = p->world_size, c = p->channel0 + k;
    if (cfg->algo == REDUCE_TREE) return emit_heap(n, 0, 0, prog, 0);
    /* NVLS reduce-scatter on one node: the switch sums the node (across nodes NCCL would
     * need CollNet, so the ring runs there, as it does for the others) */
    if (cfg->algo == REDUCE_NVLS && cfg->gpus_per_node == n) return emit_node_sum(n, 0, 0, prog, 0);
    /* the ring around channel c that ends at the owner */
    int32_t last = ring_index(cfg, n, c, owner);
    return emit_ring(cfg, n, c, (last + 1) % n, prog);
}
