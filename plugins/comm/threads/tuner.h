/* tuner.h — a model of NCCL's own choice of algorithm, protocol and channels for one collective
 * ([comm] algo = nccl): the latency/bandwidth model of NCCL's tuning.cc (its constant tables,
 * its per-algorithm refinements and its selection of the fastest) as of the versions 2.18,
 * 2.19, 2.20 (what PyTorch bundled in early 2024) and 2.30 ([comm] nccl_version), and enqueue.cc's
 * channel count per size, fed with what NCCL's topology search would find on a DGX/HGX-like node
 * of the given GPU generation (assumed here: tuner.c's presets, docs/collectives.md).
 * This is a model of the tuner, not the tuner: it has no measured bandwidths, no topology
 * search, no environment overrides (NCCL_ALGO, NCCL_PROTO, NCCL_MIN/MAX_NCHANNELS, ...), no
 * tuner plugin, no CollNet/SHARP and no aggregation of several collectives in one launch.
 * Not for: running anything (orders.c turns the pick into a plan).
 */
#ifndef COMM_THREADS_TUNER_H
#define COMM_THREADS_TUNER_H

#include "orders.h"

#include <stddef.h>
#include <stdint.h>

typedef enum tuner_gpu {
    TUNER_GPU_A100 = 0, /* sm80, NVLink 3 NVSwitch, 8 x 200 Gb/s NICs per node */
    TUNER_GPU_H100 = 1, /* sm90, NVLink 4 NVSwitch (NVLS), 8 x 400 Gb/s NICs per node */
    TUNER_GPU_H200 = 2, /* as H100 for NCCL's model (same links, same tables) */
    TUNER_N_GPUS = 3,
} tuner_gpu;

/* NCCL's algorithms and protocols as its tables number them. */
enum { TUNER_TREE = 0, TUNER_RING = 1, TUNER_COLLNET_DIRECT = 2, TUNER_COLLNET_CHAIN = 3,
       TUNER_NVLS = 4, TUNER_NVLS_TREE = 5, TUNER_PAT = 6, TUNER_N_ALGOS = 7 };
enum { TUNER_LL = 0, TUNER_LL128 = 1, TUNER_SIMPLE = 2, TUNER_N_PROTOS = 3 };

/* The question: one collective as NCCL would see it. */
typedef struct tuner_query {
    int32_t  kind;        /* ORDER_ALL_REDUCE or ORDER_REDUCE_SCATTER */
    uint64_t nbytes;      /* NCCL's nBytes: all-reduce the buffer, reduce-scatter all N blocks */
    int32_t  world_size;  /* ranks */
    int32_t  gpus_per_node;
    int32_t  gpu;         /* a tuner_gpu */
    int32_t  nvswitch;    /* the node's GPUs sit on an NVSwitch (Hopper's gives NVLS) */
    int32_t  nvls_ok;     /* NCCL runs NVLS on this dtype and op (bf16 or f32 SUM) */
    int32_t  avg;         /* the op is ncclAvg (PreMulSum): no NVLS, no PAT reduce-scatter */
    int32_t  nccl_version; /* whose tuning.cc: 218, 219, 220 or 230 (0: 230) */
} tuner_query;

/* The modelled NCCL versions, as [comm] nccl_version spells them ("2.18", "2.19", "2.20",
 * "2.30", NULL-ended), and their ids (218 ...; -1: none; the name of 0 is "2.30"). */
#define TUNER_N_VERSIONS 4
extern const char *const tuner_version_names[];
int32_t tuner_version_parse(const char *name);
const char *tuner_version_name(int32_t id);

/* The answer. */
typedef struct tuner_pick {
    int32_t nccl_algo;       /* TUNER_TREE, TUNER_RING, TUNER_NVLS, TUNER_NVLS_TREE, TUNER_PAT */
    int32_t nccl_proto;      /* TUNER_LL, TUNER_LL128, TUNER_SIMPLE */
    int32_t algo;            /* the engine's order for it (reduce_algo); PAT runs as the ring */
    int32_t proto;           /* order_proto */
    int32_t task_channels;   /* the collective's channels (nMaxChannels) */
    int32_t comm_channels;   /* the communicator's channels (ring/tree collectives) */
    int32_t search_channels; /* the topology search's channels (comm_channels come in copies) */
    int32_t nvls_channels;   /* NVLS channels, 0 without NVLS */
    double  time_us;         /* the model's time of the pick */
    double  table_us[TUNER_N_ALGOS][TUNER_N_PROTOS]; /* every time, < 0 where not possible */
} tuner_pick;

/* Pick as NCCL's default tuner would for q. */
void tuner_choose(const tuner_query *q, tuner_pick *out);

/* "a100", "h100", "h200" (and back: -1 for none). */
const char *tuner_gpu_name(int32_t gpu);
int32_t tuner_gpu_parse(const char *name);

/* NCCL's names: "tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat";
 * "LL", "LL128", "simple". */
const char *tuner_algo_name(int32_t nccl_algo);
const char *tuner_proto_name(int32_t nccl_proto);

/* One line for the log: "NCCL 2.30 would run this 77 MB all-reduce at 16 nodes x 8 A100 as
 * tree/simple on 16 channels (model of NCCL's tuner; ...)" into buf. */
void tuner_describe(const tuner_query *q, const tuner_pick *p, char *buf, size_t len);

#endif /* COMM_THREADS_TUNER_H */
