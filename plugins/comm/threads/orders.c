/* orders.c — the reduction orders of the threads engine as programs over slots (see
 * orders.h for the contract, docs/collectives.md for the orders in words and the NCCL
 * version they follow). Pure functions: no threads, no arithmetic.
 * Not for: running a program (reduce.c) or splitting work between rank threads
 * (comm_threads.c).
 */
#include "orders.h"

#include <assert.h>
#include <stdio.h>

/* [begin, end) of piece i when n elements are cut into `pieces` floor-divided pieces (sizes
 * differ by at most one, short pieces first). */
static void split(uint64_t n, int32_t pieces, int32_t i, uint64_t *begin, uint64_t *end) {
    *begin = n * (uint64_t)i / (uint64_t)pieces;
    *end = n * (uint64_t)(i + 1) / (uint64_t)pieces;
}

int order_check(order_config *cfg, int32_t world_size, char *why, size_t why_len) {
    if (cfg->channels < 1) {
        snprintf(why, why_len, "channels = %d must be >= 1", (int)cfg->channels);
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
 * Channel k's ring visits the nodes in order; inside each node it enters at local rank k mod G
 * and goes up the local ranks (k, k+1, ..., k-1 mod G) before leaving for the next node (a
 * rail-optimised cluster where channel k uses NIC k). Ring index i counts from rank 0. */

int32_t order_ring_rank(const order_config *cfg, int32_t world_size, int32_t k, int32_t i) {
    int32_t g = cfg->gpus_per_node, rot = k % g;
    int32_t pos0 = (g - rot) % g;                 /* rank 0's position in the ring */
    int32_t p = (int32_t)(((int64_t)pos0 + i) % world_size);
    return (p / g) * g + (p % g + rot) % g;
}

/* The ring index of rank r in channel k (inverse of order_ring_rank). */
static int32_t ring_index(const order_config *cfg, int32_t world_size, int32_t k, int32_t r) {
    int32_t g = cfg->gpus_per_node, rot = k % g;
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

/* Channel k of the tree algorithm: the first ceil(C/2) channels use tree 0 and the rest are
 * their copies on tree 1 (NCCL duplicates its tree channels that way). Inside a node the
 * ranks form a chain in the local order (rot, rot+1, ...); the chain's head talks to the
 * parent node and to child d1's head, its second rank to child d0's head (NCCL's balanced
 * tree pattern). */
typedef struct tree_shape {
    int32_t n, g, t, rot;
} tree_shape;

static tree_shape tree_of(const order_config *cfg, int32_t n, int32_t k) {
    int32_t first = (cfg->channels + 1) / 2;
    tree_shape s = {n, cfg->gpus_per_node, k >= first, 0};
    s.rot = (k - (s.t ? first : 0)) % s.g;
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
    int32_t m = s->n / s->g;
    int32_t root_node = s->t == 0 ? 0 : (m % 2 == 1 ? 1 % m : m - 1);
    return root_node * s->g + local_at(s, 0);
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

/* --- units ------------------------------------------------------------------------------ */

int32_t order_all_reduce_unit(const order_config *cfg, int32_t world_size, uint64_t count,
                              int32_t k, int32_t u, uint64_t *begin, uint64_t *end,
                              order_step *prog) {
    uint64_t cb, ce, b, e;
    split(count, cfg->channels, k, &cb, &ce);
    int32_t n = world_size, g = cfg->gpus_per_node, steps;
    if (cfg->algo == REDUCE_HIER) {
        int32_t nodes = n / g, j = u / nodes, m = u % nodes;
        uint64_t pb, pe;
        split(ce - cb, g, j, &pb, &pe);
        split(pe - pb, nodes, m, &b, &e);
        b += pb;
        e += pb;
        steps = emit_hier(n, g, j, m, prog);
    } else {
        split(ce - cb, n, u, &b, &e);
        if (cfg->algo == REDUCE_TREE) {
            steps = emit_heap(n, 0, 0, prog, 0);
        } else if (cfg->algo == REDUCE_DBTREE) {
            tree_shape s = tree_of(cfg, n, k);
            steps = emit_tree(&s, tree_root(&s), 0, prog, 0);
        } else { /* ring: chunk u starts at ring index u+1 */
            steps = emit_ring(cfg, n, k, (u + 1) % n, prog);
        }
    }
    *begin = cb + b;
    *end = cb + e;
    assert(steps <= order_max_steps(world_size));
    return e > b ? steps : 0;
}

int32_t order_reduce_scatter_part(const order_config *cfg, int32_t world_size, uint64_t count,
                                  int32_t k, int32_t owner, uint64_t *begin, uint64_t *end,
                                  order_step *prog) {
    split(count, cfg->channels, k, begin, end);
    if (*end == *begin) return 0;
    if (cfg->algo == REDUCE_TREE) return emit_heap(world_size, 0, 0, prog, 0);
    /* the ring around channel k that ends at the owner */
    int32_t last = ring_index(cfg, world_size, k, owner);
    return emit_ring(cfg, world_size, k, (last + 1) % world_size, prog);
}
