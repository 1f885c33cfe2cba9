/* orders.h — in which order the threads engine combines the ranks' contributions to each
 * element: NCCL's ring split into channels, NCCL's tree (a chain inside each node, a double
 * binary tree across nodes), a hierarchical ring (inside nodes, then across nodes), and a heap
 * tree for comparison. An order is given as a small program over "slots" (partial results) that
 * reduce.c runs block by block, rounding every combine to the wire dtype.
 * Not for: the arithmetic of one combine (reduce.h), threads or waiting (world.c).
 * docs/collectives.md states each order, which NCCL version it follows, and its limits.
 * Also linked into the host for `ctrain what-if` (host/whatif_replay.c replays these programs):
 * keep orders.c and reduce.c pure (no plugin state, no threads).
 *
 * Work split: every collective's elements are cut into channels (contiguous parts), and each
 * channel part into world_size "units"; rank u reduces unit u of every channel. Which rank
 * computes a unit changes nothing in the bits: the program alone fixes the result.
 */
#ifndef COMM_THREADS_ORDERS_H
#define COMM_THREADS_ORDERS_H

#include <stddef.h>
#include <stdint.h>

typedef enum reduce_algo {
    REDUCE_RING = 0,   /* NCCL's ring, per channel (chunk c starts at ring index c+1) */
    REDUCE_TREE = 1,   /* binary tree in heap order rooted at rank 0 (for comparison) */
    REDUCE_DBTREE = 2, /* NCCL's tree: chain in each node, double binary tree across nodes */
    REDUCE_HIER = 3,   /* ring inside each node, then ring across nodes over each part */
} reduce_algo;

/* The [comm] keys that fix an order. */
typedef struct order_config {
    int32_t algo;          /* a reduce_algo */
    int32_t channels;      /* >= 1 */
    int32_t gpus_per_node; /* >= 1, divides the world size (0 is resolved by order_check) */
} order_config;

/* One step of a program. LOAD: slot = x[arg]; ADD_RANK: slot = slot (+) x[arg];
 * ADD_SLOT: slot = slot (+) slot[arg]. x[r] is rank r's contribution; every (+) is one combine
 * rounded to the wire dtype. The result is slot 0 after the last step. */
enum { STEP_LOAD = 0, STEP_ADD_RANK = 1, STEP_ADD_SLOT = 2 };
typedef struct order_step {
    int32_t op;
    int32_t slot;
    int32_t arg;
} order_step;

/* Slots any program uses at most (a tree over 1024 ranks nests about 12 deep). */
#define ORDER_MAX_SLOTS 48

/* Steps a program may need for world_size ranks (the size of the caller's program buffer). */
static inline int32_t order_max_steps(int32_t world_size) { return 2 * world_size + 4; }

/* Checks cfg against world_size and resolves gpus_per_node = 0 to world_size (one node); a
 * world of one rank takes any gpus_per_node (it is set to 1).
 * Returns 0, or -1 with a message in why (what is wrong and what to do). */
int order_check(order_config *cfg, int32_t world_size, char *why, size_t why_len);

/* Unit u (0 .. world_size-1) of channel k of an all-reduce of count elements: its elements
 * [*begin, *end) and the program that reduces each of them; returns the number of steps
 * (0 when the unit is empty). prog holds order_max_steps(world_size) steps. */
int32_t order_all_reduce_unit(const order_config *cfg, int32_t world_size, uint64_t count,
                              int32_t k, int32_t u, uint64_t *begin, uint64_t *end,
                              order_step *prog);

/* Channel k's part of the block of `owner` in a reduce-scatter (count elements per rank):
 * [*begin, *end) inside the block, and its program. NCCL's reduce-scatter is ring only, so
 * dbtree and hier use the ring here; the heap tree takes the block of its tree result. */
int32_t order_reduce_scatter_part(const order_config *cfg, int32_t world_size, uint64_t count,
                                  int32_t k, int32_t owner, uint64_t *begin, uint64_t *end,
                                  order_step *prog);

/* The rank at ring index i of channel k (index 0 is rank 0; chunk c of a ring all-reduce
 * starts at index c+1 and ends at index c). Exposed for the docs' and tests' sake. */
int32_t order_ring_rank(const order_config *cfg, int32_t world_size, int32_t k, int32_t i);

/* The children of node m in NCCL's binary tree t (0 or 1) over n_nodes nodes, as *d0, *d1
 * (-1 when absent); d0 is the first child. */
void order_btree_children(int32_t n_nodes, int32_t t, int32_t m, int32_t *d0, int32_t *d1);

#endif /* COMM_THREADS_ORDERS_H */
