/* orders.h — in which order the threads engine combines the ranks' contributions to each
 * element: NCCL's ring split into channels, NCCL's tree (a chain inside each node, a double
 * binary tree across nodes), NVLS and NVLS_TREE (the node's sum taken by the switch, then a ring
 * or NCCL's tree across nodes), a hierarchical ring (inside nodes, then across nodes), and a
 * heap tree for comparison. An order is given as a small program over "slots" (partial results)
 * that reduce.c runs block by block. Which element gets which program follows NCCL's own work
 * split of one collective (its channels, loops and chunks: order_plan_make), or the even split
 * of earlier versions.
 * Not for: the arithmetic of one combine (reduce.h), threads or waiting (world.c), NCCL's choice
 * of algorithm (tuner.h, which order_plan_make asks when algo = nccl).
 * docs/collectives.md states each order, which NCCL version it follows, and its limits.
 * Also linked into the host for `ctrain what-if` and `ctrain reduce`: keep orders.c, tuner.c and
 * reduce.c pure (no plugin state, no threads).
 *
 * Work split of an all-reduce: the buffer is cut into parts, one per channel used; a part into
 * loops; a loop into world_size "units" (the ring's chunks); rank u of the engine reduces unit u
 * of every loop of every part. Which rank computes a unit changes nothing in the bits: the
 * program alone fixes the result.
 */
#ifndef COMM_THREADS_ORDERS_H
#define COMM_THREADS_ORDERS_H

#include <stddef.h>
#include <stdint.h>

typedef enum reduce_algo {
    REDUCE_RING = 0,      /* NCCL's ring, per channel (chunk c starts at ring index c+1) */
    REDUCE_TREE = 1,      /* binary tree in heap order rooted at rank 0 (for comparison) */
    REDUCE_DBTREE = 2,    /* NCCL's tree: chain in each node, double binary tree across nodes */
    REDUCE_HIER = 3,      /* ring inside each node, then ring across nodes over each part */
    REDUCE_NVLS = 4,      /* the switch sums each node (f32, one rounding), ring across nodes */
    REDUCE_NVLS_TREE = 5, /* the switch sums each node, NCCL's binary tree across nodes */
    REDUCE_NCCL = 6,      /* what NCCL's tuner would pick per collective (tuner.h) */
    REDUCE_N_ALGOS = 7,
} reduce_algo;

/* How a collective's elements are cut into parts, loops and units. */
typedef enum order_split {
    ORDER_SPLIT_NCCL = 0, /* NCCL's enqueue: channels by traffic in 32 KiB cells, the
                             protocol's chunks, loops of N chunks, the aligned last loop */
    ORDER_SPLIT_EVEN = 1, /* earlier versions: C contiguous floor parts, each cut into N floor
                             units, one loop (independent of dtype and protocol) */
} order_split;

/* NCCL's protocols: they set the chunk size and (LL) the traffic of the channel split. */
typedef enum order_proto {
    ORDER_PROTO_SIMPLE = 0,
    ORDER_PROTO_LL = 1,
    ORDER_PROTO_LL128 = 2,
} order_proto;

/* Collectives a plan is made for. */
enum { ORDER_ALL_REDUCE = 1, ORDER_REDUCE_SCATTER = 2 };

/* The [comm] keys that fix an order. */
typedef struct order_config {
    int32_t algo;            /* a reduce_algo */
    int32_t channels;        /* >= 1: the communicator's channels (NCCL's comm->nChannels; for
                                nvls and nvls_tree its NVLS channels) */
    int32_t gpus_per_node;   /* >= 1, divides the world size (0 is resolved by order_check) */
    int32_t split;           /* an order_split */
    int32_t proto;           /* an order_proto (algo = nccl: the tuner's) */
    int32_t search_channels; /* 0: channel k's ring enters node at local rank k mod G and the
                                first ceil(C/2) channels run tree 0; S > 0: channels repeat with
                                period 2S as NCCL's duplicated search channels (ring of k mod S,
                                tree (k mod 2S) >= S); set by the tuner model */
    int32_t gpu;             /* algo = nccl: a tuner_gpu (tuner.h) */
    int32_t nvswitch;        /* algo = nccl: 1 when the nodes' GPUs sit on an NVSwitch */
    int32_t nccl_version;    /* algo = nccl: whose tuner: 218, 219, 220 or 230 (tuner.h) */
} order_config;

/* A config of algo with everything else at its default (NCCL split, simple, one channel, one
 * node, h100 with NVSwitch and NCCL 2.30's tuner for algo = nccl). */
order_config order_config_default(int32_t algo);

/* The program of one element (or of a run of elements that share it). LOAD: slot = x[arg];
 * ADD_RANK: slot = slot (+) x[arg]; ADD_SLOT: slot = slot (+) slot[arg], each (+) one combine
 * rounded to the wire dtype; ACC_RANK: slot = slot + x[arg] in the accumulator of the switch
 * (f32 for bf16 and f32 wires), not rounded; ROUND: slot = slot rounded to the wire dtype (the
 * switch's one rounding). x[r] is rank r's contribution. The result is slot 0 after the last
 * step. */
enum { STEP_LOAD = 0, STEP_ADD_RANK = 1, STEP_ADD_SLOT = 2, STEP_ACC_RANK = 3, STEP_ROUND = 4 };
typedef struct order_step {
    int32_t op;
    int32_t slot;
    int32_t arg;
} order_step;

/* Slots any program uses at most (a tree over 1024 nodes nests about 12 deep). */
#define ORDER_MAX_SLOTS 48
/* Channels a communicator may have (NCCL's MAXCHANNELS). */
#define ORDER_MAX_CHANNELS 64

/* Steps a program may need for world_size ranks (the size of the caller's program buffer). */
static inline int32_t order_max_steps(int32_t world_size) { return 3 * world_size + 4; }

/* Checks cfg against world_size and resolves gpus_per_node = 0 to world_size (one node); a
 * world of one rank takes any gpus_per_node (it is set to 1).
 * Returns 0, or -1 with a message in why (what is wrong and what to do). */
int order_check(order_config *cfg, int32_t world_size, char *why, size_t why_len);

/* How one collective is cut (order_plan_make fills it). */
typedef struct order_plan {
    order_config oc;           /* as resolved: algo is never REDUCE_NCCL */
    int32_t      world_size, kind;
    uint64_t     count;        /* elements: the buffer (all-reduce), one rank's block (RS) */
    uint32_t     esize;        /* bytes per element */
    int32_t      n_parts;      /* channels used */
    int32_t      channel0;     /* NCCL's channel id of part 0 (part k runs on channel0 + k) */
    uint64_t     part[ORDER_MAX_CHANNELS + 1]; /* part k: [part[k], part[k+1]) */
    uint64_t     chunk;        /* ring, NCCL split: elements per chunk of a whole loop; 0: one
                                  loop per part, cut into N floor units */
    int32_t      task_channels; /* NCCL's nMaxChannels of the collective (<= oc.channels) */
    int32_t      tuned;        /* 1: algo, proto and channels came from the tuner model */
    int32_t      nccl_algo;    /* tuned: the algorithm the model picked, as tuner.h numbers it
                                  (differs from oc.algo when the engine runs a stand-in) */
    double       tuned_us;     /* tuned: the model's time for it, microseconds */
} order_plan;

/* Plan a collective of `kind` (ORDER_ALL_REDUCE or ORDER_REDUCE_SCATTER) of `count` elements of
 * esize bytes over world_size ranks with cfg (checked by order_check). With algo = nccl the
 * tuner model picks algo, protocol and channels for this size first; nvls_ok says whether NCCL
 * could run NVLS on the dtype and op (bf16 or f32 SUM), avg whether the op is ncclAvg. */
void order_plan_make(order_plan *p, const order_config *cfg, int32_t world_size, int32_t kind,
                     uint64_t count, uint32_t esize, int32_t nvls_ok, int32_t avg);

/* Loops of part k (0 for an empty part). */
int64_t order_loops(const order_plan *p, int32_t k);

/* Unit u (0 .. world_size-1) of loop l of part k of an all-reduce: its elements [*begin, *end)
 * and the program that reduces each of them; returns the number of steps (0 when the unit is
 * empty). prog holds order_max_steps(world_size) steps. Units tile a loop in order, loops a
 * part, parts the buffer. */
int32_t order_unit(const order_plan *p, int32_t k, int64_t l, int32_t u, uint64_t *begin,
                   uint64_t *end, order_step *prog);

/* The unit of an all-reduce that holds element i (< count): as order_unit. */
int32_t order_unit_at(const order_plan *p, uint64_t i, uint64_t *begin, uint64_t *end,
                      order_step *prog);

/* Part k of the block of `owner` in a reduce-scatter: [*begin, *end) inside the block, and its
 * program (0 steps when empty). NCCL's reduce-scatter is a ring (NVLS on one node), so dbtree,
 * hier, nvls_tree and nvls across nodes use the ring here; the heap tree takes the block of its
 * tree result. */
int32_t order_rs_part(const order_plan *p, int32_t k, int32_t owner, uint64_t *begin,
                      uint64_t *end, order_step *prog);

/* The rank at ring index i of channel k (index 0 is rank 0; chunk c of a ring all-reduce
 * starts at index c+1 and ends at index c). Exposed for the docs' and tests' sake. */
int32_t order_ring_rank(const order_config *cfg, int32_t world_size, int32_t k, int32_t i);

/* The children of node m in NCCL's binary tree t (0 or 1) over n_nodes nodes, as *d0, *d1
 * (-1 when absent); d0 is the first child. */
void order_btree_children(int32_t n_nodes, int32_t t, int32_t m, int32_t *d0, int32_t *d1);

/* NCCL's split of one collective over channels (enqueue's scheduling of a single task):
 * count elements of esize bytes, traffic_per_byte (all-reduce 2, reduce-scatter N; times 4
 * under LL), nch = the collective's channels, max_ch = the communicator's. part[0..n] as in
 * order_plan; returns n. Exposed for the tests. */
int32_t order_nccl_parts(uint64_t count, uint32_t esize, uint64_t traffic_per_byte, int32_t nch,
                         int32_t max_ch, uint64_t *part);

/* NCCL's nMaxChannels for a ring or tree collective of nbytes on a communicator of channels:
 * one fewer while nbytes < channels x threads x per-thread threshold (the protocol's). */
int32_t order_task_channels(int32_t algo, int32_t proto, int32_t channels, int32_t world_size,
                            uint64_t nbytes);

/* Elements of one chunk of NCCL's ring for a protocol and element size (default buffers). */
uint64_t order_ring_chunk(int32_t proto, uint32_t esize);

#endif /* COMM_THREADS_ORDERS_H */
