/* tuner.c — the model of NCCL's choice for one collective (see tuner.h): the tables of the
 * tuning.cc of NCCL 2.18.6, 2.19.4, 2.20.5 and 2.30.7 (latencies, per-channel bandwidth caps,
 * the medium-size tree correction), their bandwidth and latency formulas per algorithm and
 * protocol (where the versions differ: version_model, bandwidth(), latency()), the pick of the
 * fastest, and
 * enqueue.cc's channel count per size, on the assumed topology of a DGX/HGX-like node (presets
 * below). Written from NCCL's source facts, not from its code.
 * Not for: the orders themselves (orders.c).
 */
#include "tuner.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* --- NCCL's constant tables (src/graph/tuning.cc of each modelled tag) ---------------------
 * [algo] in NCCL's order (tree, ring, collnet direct, collnet chain, nvls, nvls tree, pat),
 * [proto] LL, LL128, simple; compute-capability index 0 Volta, 1 Ampere, 2 Hopper, 3 Blackwell;
 * the node-count index 0 one node, 1 two nodes, 2 more. What differs between the versions is
 * in the latency tables, the Hopper rows of the caps, and the formulas (version_model below,
 * bandwidth() and latency()); the per-channel caps of Volta and Ampere are the same in all four
 * tags. "2.18" is v2.18.1-1, the NCCL PyTorch 2.1 bundled (v2.18.3 to v2.18.6 took the tree's
 * simple latency back to 4 / 14 us: not modelled); "2.19" v2.19.3-1 (PyTorch 2.2; the same
 * tuning.cc as v2.19.4-1), "2.20" v2.20.5-1 (PyTorch 2.3). */
enum { HW_NVLINK = 0, HW_PCI = 1, HW_NET = 2 };

typedef struct version_model {
    int32_t     id;                                  /* 218, 219, 220, 230 */
    const char *name;                                /* "2.18" */
    const char *tag;                                 /* the tag the tables were read from */
    double      base_lat[TUNER_N_ALGOS][TUNER_N_PROTOS];
    double      hw_lat[3][TUNER_N_ALGOS][TUNER_N_PROTOS];
    double      ll_max_bw_hopper[3];                 /* the LL cap's Hopper row (one node) */
    double      tree_bw_hopper[3];                   /* the tree's per-channel cap, Hopper */
    double      tree_ll128_bw_hopper[3];             /* the tree LL128's, Hopper */
} version_model;

static const version_model versions[TUNER_N_VERSIONS] = {
    /* v2.18.1-1: tree/simple has no base latency and 28 us per hop (NVLink, PCI and net);
     * NVLS and NVLS_TREE carry a 23 us base; Hopper's tree caps 33 GB/s per channel across 3+
     * nodes, its tree LL128 36.7 everywhere */
    {218, "2.18", "v2.18.1-1",
     {{6.8, 14.0, 0}, {6.6, 14.0, 8.4}, {6.8, 14.0, 0}, {6.8, 14.0, 0}, {0, 0, 23.0},
      {0, 0, 23.0}, {0, 0, 0}},
     {{{0.6, 1.25, 28}, {0.6, 1.9, 3.4}, {0, 0, 8.0}, {0, 0, 4.75}, {0, 0, 0}, {0, 0, 0},
       {0, 0, 0}},
      {{1.0, 1.9, 28}, {1.0, 2.5, 5.7}, {0, 0, 8.0}, {0, 0, 8.0}, {0, 0, 0}, {0, 0, 0},
       {0, 0, 0}},
      {{5.0, 8.5, 28}, {2.7, 4.0, 14.0}, {0, 0, 10.7}, {0, 0, 14}, {0, 0, 18}, {0, 0, 19},
       {0, 0, 0}}},
     {87.7, 22.5, 19.0}, {38.7, 41.4, 33.0}, {36.7, 36.7, 36.7}},
    /* v2.19.3-1: tree/simple still 28 us per hop (no base); NVLS's latency moved into the
     * hardware table */
    {219, "2.19", "v2.19.3-1",
     {{6.8, 14.0, 0}, {6.6, 14.0, 8.4}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}},
     {{{0.6, 1.25, 28}, {0.6, 1.9, 3.4}, {0, 0, 3.7}, {0, 0, 2.8}, {0, 0, 23}, {0, 0, 23},
       {0, 0, 0}},
      {{1.0, 1.9, 28}, {1.0, 2.5, 5.7}, {0, 0, 3.7}, {0, 0, 2.8}, {0, 0, 0}, {0, 0, 0},
       {0, 0, 0}},
      {{5.0, 8.5, 28}, {2.7, 4.0, 14.0}, {0, 0, 31}, {0, 0, 30}, {0, 0, 18}, {0, 0, 14},
       {0, 0, 0}}},
     {87.7, 22.5, 19.0}, {38.7, 41.4, 36.0}, {36.7, 36.7, 29.0}},
    /* v2.20.5-1: the tables of 2.19 (what changed is CollNet's and MNNVL's, not modelled) */
    {220, "2.20", "v2.20.5-1",
     {{6.8, 14.0, 0}, {6.6, 14.0, 8.4}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}},
     {{{0.6, 1.25, 28}, {0.6, 1.9, 3.4}, {0, 0, 3.7}, {0, 0, 2.8}, {0, 0, 23}, {0, 0, 23},
       {0, 0, 0}},
      {{1.0, 1.9, 28}, {1.0, 2.5, 5.7}, {0, 0, 3.7}, {0, 0, 2.8}, {0, 0, 0}, {0, 0, 0},
       {0, 0, 0}},
      {{5.0, 8.5, 28}, {2.7, 4.0, 14.0}, {0, 0, 31}, {0, 0, 30}, {0, 0, 18}, {0, 0, 14},
       {0, 0, 0}}},
     {87.7, 22.5, 19.0}, {38.7, 41.4, 36.0}, {36.7, 36.7, 29.0}},
    /* v2.30.7-1 */
    {230, "2.30", "v2.30.7-1",
     {{6.8, 14.0, 8.4}, {6.6, 14.0, 8.4}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0},
      {8.0, 8.0, 8.0}},
     {{{0.6, 1.25, 4.0}, {0.6, 1.9, 3.4}, {0, 0, 3.7}, {0, 0, 2.8}, {0, 0, 25}, {0, 0, 25},
       {0, 0, 4.0}},
      {{1.0, 1.9, 4.0}, {1.0, 2.5, 5.7}, {0, 0, 3.7}, {0, 0, 2.8}, {0, 0, 0}, {0, 0, 0},
       {0, 0, 4.0}},
      {{5.0, 8.5, 14}, {2.7, 4.0, 14.0}, {0, 0, 31}, {0, 0, 30}, {0, 0, 18}, {0, 0, 20.9},
       {0, 0, 14}}},
     {141.0, 45.0, 35.0}, {38.7, 41.4, 36.0}, {36.7, 36.7, 29.0}},
};

static const version_model *version_of(int32_t id) {
    for (int32_t v = 0; v < TUNER_N_VERSIONS; v++)
        if (versions[v].id == id) return &versions[v];
    return &versions[TUNER_N_VERSIONS - 1]; /* 0 (unset): 2.30 */
}

const char *tuner_version_name(int32_t id) {
    for (int32_t v = 0; v < TUNER_N_VERSIONS; v++)
        if (versions[v].id == id) return versions[v].name;
    return id == 0 ? versions[TUNER_N_VERSIONS - 1].name : "?";
}

int32_t tuner_version_parse(const char *name) {
    for (int32_t v = 0; v < TUNER_N_VERSIONS; v++)
        if (!strcmp(name, versions[v].name)) return versions[v].id;
    return -1;
}

const char *const tuner_version_names[] = {"2.18", "2.19", "2.20", "2.30", NULL};

static const double ll_max_bw[4][3] = {
    {39.0, 39.0, 20.4}, {87.7, 22.5, 19.0}, {141.0, 45.0, 35.0}, {282.0, 90.0, 70.0}};
static const double ring_ll128_bw[4][3] = {
    {20.0, 20.0, 20.0}, {20.0, 20.0, 20.0}, {36.7, 36.7, 36.7}, {40.0, 40.0, 40.0}};
static const double tree_ll128_bw[4][3] = {
    {20.0, 20.0, 20.0}, {20.0, 20.0, 20.0}, {36.7, 36.7, 29.0}, {55.6, 31.67, 20.0}};
static const double tree_bw[4][3] = {
    {26.5, 18.5, 10.0}, {24.0, 23.6, 17.8}, {38.7, 41.4, 36.0}, {70.0, 42.8, 24.0}};
static const double nvls_tree_bw[4][3] = {
    {26.5, 18.5, 10.0}, {24.0, 23.6, 17.8}, {0.0, 57.7, 45.5}, {0.0, 96.0, 80.0}};
static const double nvls_efficiency[4] = {0.0, 0.0, 0.85, 0.74};
/* medium sizes: the tree's bandwidth times this, by log2(nBytes / 64), 64 B to 256 MB */
static const double tree_correction[TUNER_N_PROTOS][24] = {
    {1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0,
     1.0, 1.0},
    {1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0,
     1.0, 1.0},
    {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9,
     .9}};

/* threads per channel and the per-thread work before another channel is worth it (tuning.cc,
 * device.h, comm.h) */
#define SIMPLE_THREADS 512
#define LL_THREADS 512
#define LL128_THREADS 640
#define SIMPLE_THRESHOLD 64
#define LL_THRESHOLD 8
#define LL128_THRESHOLD 8

/* --- the assumed topology: what NCCL's search would report on such a node ------------------
 * Per GPU generation, for one node and for several: the ring and tree graphs' search channels
 * and per-channel bandwidth (GB/s), the NVLS graph's, and NVLS channels. Derived from the
 * search's speed tables for 8 GPUs on an NVSwitch and one NIC per GPU (docs/collectives.md):
 *   A100: NVLink 12 x 20 GB/s; one node 6 channels at 40 duplicated to 12 at 20; several nodes
 *         one channel per 200 Gb/s NIC at 24 (PCIe Gen4), 8 channels.
 *   H100/H200: NVLink 18 x 20.6 GB/s; one node 6 at 60 duplicated to 12 at 30; several nodes
 *         one channel per 400 Gb/s NIC at 48, 8 channels; NVLS: 8 heads at 40 (one node), 45
 *         intra / 48 inter (several); 16 NVLS channels. */
typedef struct graph_model {
    int32_t channels;
    double  bw_intra, bw_inter;
} graph_model;

typedef struct gpu_model {
    const char *name, *label;
    int32_t     cc_index, min_cc;
    graph_model ring1, treeN1, ringN, treeN; /* one node; several nodes */
    graph_model nvls1, nvlsN;                /* channels 0: no NVLS */
    int32_t     nvls_channels;
} gpu_model;

static const gpu_model gpus[TUNER_N_GPUS] = {
    {"a100", "A100", 1, 80, {12, 20, 20}, {12, 20, 20}, {8, 24, 24}, {8, 24, 24}, {0, 0, 0},
     {0, 0, 0}, 0},
    {"h100", "H100", 2, 90, {12, 30, 30}, {12, 30, 30}, {8, 48, 48}, {8, 48, 48}, {8, 40, 40},
     {8, 45, 48}, 16},
    {"h200", "H200", 2, 90, {12, 30, 30}, {12, 30, 30}, {8, 48, 48}, {8, 48, 48}, {8, 40, 40},
     {8, 45, 48}, 16},
};

const char *tuner_gpu_name(int32_t gpu) {
    return gpu >= 0 && gpu < TUNER_N_GPUS ? gpus[gpu].name : "?";
}

int32_t tuner_gpu_parse(const char *name) {
    for (int32_t g = 0; g < TUNER_N_GPUS; g++)
        if (!strcmp(name, gpus[g].name)) return g;
    return -1;
}

const char *tuner_algo_name(int32_t a) {
    static const char *const names[TUNER_N_ALGOS] = {"tree", "ring", "collnet_direct",
                                                     "collnet_chain", "nvls", "nvls_tree", "pat"};
    return a >= 0 && a < TUNER_N_ALGOS ? names[a] : "?";
}

const char *tuner_proto_name(int32_t p) {
    static const char *const names[TUNER_N_PROTOS] = {"LL", "LL128", "simple"};
    return p >= 0 && p < TUNER_N_PROTOS ? names[p] : "?";
}

static int32_t log2i(uint64_t n) {
    int32_t l = 0;
    while (n >>= 1) l++;
    return l;
}

/* The graph of algorithm a for this node count. */
static const graph_model *graph_of(const gpu_model *m, int32_t a, int32_t nodes) {
    if (a == TUNER_NVLS || a == TUNER_NVLS_TREE) return nodes == 1 ? &m->nvls1 : &m->nvlsN;
    if (a == TUNER_TREE) return nodes == 1 ? &m->treeN1 : &m->treeN;
    return nodes == 1 ? &m->ring1 : &m->ringN; /* ring, pat */
}

/* NCCL's bus bandwidth of (a, p) for the collective, turned into algorithm bandwidth (GB/s);
 * 0 where NCCL would not run it. v: the version whose formulas apply. */
static double bandwidth(const tuner_query *q, const version_model *v, const gpu_model *m,
                        int32_t a, int32_t p, int32_t nodes, int32_t nvls_support) {
    int32_t N = q->world_size, ar = q->kind == ORDER_ALL_REDUCE;
    int32_t idx2 = nodes <= 2 ? nodes - 1 : 2;
    int32_t old = v->id < 230; /* 2.18, 2.19, 2.20 */
    double ppn = (double)N / nodes;
    const graph_model *g = graph_of(m, a, nodes);
    if (a == TUNER_COLLNET_DIRECT || a == TUNER_COLLNET_CHAIN) return 0; /* no CollNet/SHARP */
    if (ar && a == TUNER_PAT) return 0;
    if (a == TUNER_PAT && old) return 0;                     /* PAT came after 2.20 */
    if (!ar && a == TUNER_NVLS && v->id == 218) return 0;    /* 2.18: reduce-scatter is a ring */
    if (!ar && a != TUNER_PAT && a != TUNER_RING && a != TUNER_NVLS) return 0;
    if ((a == TUNER_NVLS || a == TUNER_NVLS_TREE) && (p != TUNER_SIMPLE || !nvls_support))
        return 0;
    if (a == TUNER_NVLS && nodes > 1) return 0;      /* needs CollNet across nodes */
    if (a == TUNER_NVLS_TREE && nodes == 1) return 0; /* disabled on one node */
    if (a == TUNER_PAT && (p != TUNER_SIMPLE || nodes != N || q->avg)) return 0;
    if (g->channels < 1) return 0;
    double bw = nodes <= 2 ? g->bw_intra : g->bw_inter;
    if ((a == TUNER_NVLS || a == TUNER_NVLS_TREE) && !old) {
        if (g->channels < 2) return 0;
        double intra = g->bw_intra * nvls_efficiency[m->cc_index] * (g->channels - 1) /
                       g->channels;
        intra *= ar ? 2.0 : (ppn - 1) / ppn;
        double inter = g->bw_inter * ((nodes <= 2 && a == TUNER_NVLS_TREE) ? 2 : 1);
        bw = intra < inter ? intra : inter;
        if (a == TUNER_NVLS_TREE && nvls_tree_bw[m->cc_index][idx2] < bw)
            bw = nvls_tree_bw[m->cc_index][idx2];
    } else if (a == TUNER_NVLS && v->id >= 219) {
        bw = fmin(g->bw_intra, g->bw_inter);
    } else if (a == TUNER_NVLS_TREE && v->id >= 219) {
        bw = fmin(g->bw_intra, nodes <= 2 ? g->bw_inter : g->bw_inter / 2);
    } /* 2.18: NVLS and NVLS_TREE take the graph's bandwidth as the ring does */
    double bus = g->channels * bw;
    int32_t ll_idx1 = nodes == 1 ? m->cc_index : 0; /* several nodes: an Intel CPU assumed */
    double llmax = ll_idx1 == 2 ? v->ll_max_bw_hopper[idx2] : ll_max_bw[ll_idx1][idx2];
    /* the ring's LL: half the bus from 2.2x on; a quarter before (a third for a one-node
     * collective that is not an all-reduce) */
    if (a == TUNER_RING && p == TUNER_LL)
        bus = fmin(llmax, bus * (!old ? .5 : (nodes > 1 || ar) ? 1.0 / 4.0 : 1.0 / 3.0));
    if (a == TUNER_RING && p == TUNER_LL128) /* before 2.2x: 0.7 at one GPU per node */
        bus = fmin(bus * (old && ppn < 2 ? 0.7 : 0.92),
                   g->channels * ring_ll128_bw[m->cc_index][idx2]);
    int32_t hop = m->cc_index == 2; /* Hopper: the version's row */
    double tree_cap = hop ? v->tree_bw_hopper[idx2] : tree_bw[m->cc_index][idx2];
    double tree_ll128_cap = hop ? v->tree_ll128_bw_hopper[idx2] : tree_ll128_bw[m->cc_index][idx2];
    if (a == TUNER_TREE && ar) bus = fmin(bus * .92, g->channels * tree_cap);
    if (a == TUNER_TREE && p == TUNER_LL) bus = fmin(bus * 1.0 / 3.8, llmax);
    if (a == TUNER_TREE && p == TUNER_LL128)
        bus = fmin(bus * (nodes == 1 ? 7.0 / 9.0 : 120.0 / 128.0), g->channels * tree_ll128_cap);
    if (a == TUNER_PAT) bus *= .75;
    /* bus to algorithm bandwidth. 2.30: ring and NVLS by N / nsteps, the tree by 1/2, a
     * reduce-scatter that is not a ring keeps its bus figure. 2.19, 2.20: ring N / nsteps,
     * NVLS and NVLS_TREE 5/6, the tree 1/2. 2.18: NVLS .75, NVLS_TREE .7 nodes / (2 (nodes -
     * 1)). */
    int32_t nsteps = ar ? 2 * (N - 1) : N - 1;
    if (!old) {
        if (!(a != TUNER_RING && !ar))
            bus *= (a == TUNER_RING || a == TUNER_NVLS || a == TUNER_NVLS_TREE)
                       ? (double)N / nsteps : .5;
    } else if (a == TUNER_RING) {
        bus *= (double)N / nsteps;
    } else if (a == TUNER_NVLS || (a == TUNER_NVLS_TREE && v->id >= 219)) {
        bus *= v->id == 218 ? .75 : 5.0 / 6.0;
    } else if (a == TUNER_NVLS_TREE) {
        bus *= .70 * nodes / (2.0 * (nodes - 1));
    } else {
        bus *= .5;
    }
    return bus;
}

/* NCCL's latency of (a, p) in microseconds, by version v's tables and formulas. */
static double latency(const tuner_query *q, const version_model *v, int32_t a, int32_t p,
                      int32_t nodes) {
    int32_t N = q->world_size, ar = q->kind == ORDER_ALL_REDUCE, old = v->id < 230;
    double ppn = (double)N / nodes;
    int32_t nsteps = ar ? 2 * (N - 1) : N - 1;
    double lat = v->base_lat[a][p];
    double intra = v->hw_lat[HW_NVLINK][a][p]; /* the presets' GPUs talk over NVLink */
    /* 2.30: at one GPU per node every algorithm crosses the net with the tree's latency */
    double inter = ppn == 1 && !old ? v->hw_lat[HW_NET][TUNER_TREE][p] : v->hw_lat[HW_NET][a][p];
    if (a == TUNER_RING) {
        double net = 0;
        if (nodes > 1) net = p == TUNER_SIMPLE ? 3.0 : 1.0; /* Intel: 1 us, x3 for simple */
        if (net > intra) intra = net;
        /* the ring's steps that cross the network: 2 (nodes - 1) for an all-reduce in 2.30,
         * 2 nodes before (2.18 to 2.20); nodes - 1 for a reduce-scatter */
        int32_t inter_steps = nodes == 1 ? 0 : !ar ? nodes - 1 : old ? 2 * nodes
                                                               : 2 * (nodes - 1);
        lat += (nsteps - inter_steps) * intra + inter_steps * inter;
    } else if (a == TUNER_TREE) {
        if (ar) lat += 2 * ((N / nodes - 1) * intra + log2i((uint64_t)nodes) * inter);
    } else if (a == TUNER_NVLS) {
        if (v->id == 218) lat += nodes > 1 ? inter : 0;
        else lat = intra + (nodes > 1 ? inter : 0);
    } else if (a == TUNER_NVLS_TREE) {
        if (v->id == 218) lat += 2 * (nodes - 1) * inter;
        else lat += intra + 2 * log2i((uint64_t)nodes) * inter;
    } else if (a == TUNER_PAT) {
        if (!ar) lat += log2i((uint64_t)nodes) * (inter / 3.5) + N * 2.8;
    }
    return lat;
}

static int32_t engine_proto(int32_t p) {
    return p == TUNER_LL ? ORDER_PROTO_LL : p == TUNER_LL128 ? ORDER_PROTO_LL128
                                                             : ORDER_PROTO_SIMPLE;
}

static int32_t engine_algo(int32_t a) {
    switch (a) {
    case TUNER_TREE: return REDUCE_DBTREE;
    case TUNER_NVLS: return REDUCE_NVLS;
    case TUNER_NVLS_TREE: return REDUCE_NVLS_TREE;
    default: return REDUCE_RING; /* ring, and PAT (not modelled: the engine runs the ring) */
    }
}

void tuner_choose(const tuner_query *q, tuner_pick *out) {
    memset(out, 0, sizeof *out);
    const gpu_model *m = &gpus[q->gpu >= 0 && q->gpu < TUNER_N_GPUS ? q->gpu : TUNER_GPU_H100];
    const version_model *v = version_of(q->nccl_version);
    int32_t G = q->gpus_per_node > 0 ? q->gpus_per_node : q->world_size;
    int32_t nodes = q->world_size / G, N = q->world_size;
    int32_t ar = q->kind == ORDER_ALL_REDUCE;
    /* NVLS: Hopper's NVSwitch, more than one GPU per node, a dtype/op the switch reduces */
    int32_t nvls_support = m->nvls_channels > 0 && q->nvswitch && G > 1 && q->nvls_ok &&
                           !q->avg;
    const graph_model *ring = nodes == 1 ? &m->ring1 : &m->ringN;
    const graph_model *tree = nodes == 1 ? &m->treeN1 : &m->treeN;
    int32_t search = ring->channels < tree->channels ? ring->channels : tree->channels;
    int32_t comm = 2 * search > ORDER_MAX_CHANNELS ? ORDER_MAX_CHANNELS : 2 * search;
    /* Hopper and later across nodes: more compute channels per search channel */
    if (m->min_cc >= 90 && nodes > 1 && ring->bw_intra > 45.0 && comm < 16) comm *= 2;
    out->comm_channels = comm;
    out->search_channels = search;
    out->nvls_channels = m->nvls_channels && q->nvswitch && G > 1 ? m->nvls_channels : 0;
    double best = -1;
    int32_t logsize = log2i(q->nbytes >> 6);
    for (int32_t a = 0; a < TUNER_N_ALGOS; a++)
        for (int32_t p = 0; p < TUNER_N_PROTOS; p++) {
            double bw = bandwidth(q, v, m, a, p, nodes, nvls_support), t = -1;
            if (bw > 0) {
                double lat = latency(q, v, a, p, nodes);
                if (a == TUNER_TREE && ar && q->nbytes >= 64 && logsize < 23)
                    bw *= tree_correction[p][logsize];
                /* the ring's plateau across nodes (sm80 and later) */
                if (a == TUNER_RING && p == TUNER_SIMPLE && nodes > 1 && ar &&
                    q->nbytes / ((uint64_t)comm * (uint64_t)N) >= 64)
                    lat *= 1.4;
                t = lat + (double)q->nbytes / (1000.0 * bw);
            }
            out->table_us[a][p] = t;
            if (t >= 0 && (best < 0 || t < best)) {
                best = t;
                out->nccl_algo = a;
                out->nccl_proto = p;
            }
        }
    out->time_us = best;
    out->algo = engine_algo(out->nccl_algo);
    out->proto = engine_proto(out->nccl_proto);
    if (out->nccl_algo == TUNER_NVLS || out->nccl_algo == TUNER_NVLS_TREE) {
        out->task_channels = out->nvls_channels;
    } else {
        /* enqueue's channel count: fewer channels while the buffer is small */
        int32_t nt = out->nccl_proto == TUNER_LL128 ? LL128_THREADS
                     : out->nccl_proto == TUNER_LL  ? LL_THREADS
                                                    : SIMPLE_THREADS;
        uint64_t thr = out->nccl_proto == TUNER_SIMPLE ? SIMPLE_THRESHOLD
                       : out->nccl_proto == TUNER_LL128 ? LL128_THRESHOLD
                                                        : LL_THRESHOLD;
        if (out->nccl_algo == TUNER_RING && out->nccl_proto == TUNER_LL) thr *= (uint64_t)N;
        int32_t nc = comm;
        while (nc >= 2 && q->nbytes < (uint64_t)nc * (uint64_t)nt * thr) nc--;
        out->task_channels = nc;
    }
}

/* bytes as NCCL_DEBUG would say them */
static void bytes_text(uint64_t b, char *buf, size_t len) {
    if (b >= 1000000000ull) snprintf(buf, len, "%.3g GB", b / 1e9);
    else if (b >= 1000000ull) snprintf(buf, len, "%.3g MB", b / 1e6);
    else if (b >= 1000ull) snprintf(buf, len, "%.3g kB", b / 1e3);
    else snprintf(buf, len, "%llu B", (unsigned long long)b);
}

void tuner_describe(const tuner_query *q, const tuner_pick *p, char *buf, size_t len) {
    int32_t G = q->gpus_per_node > 0 ? q->gpus_per_node : q->world_size;
    const gpu_model *m = &gpus[q->gpu >= 0 && q->gpu < TUNER_N_GPUS ? q->gpu : TUNER_GPU_H100];
    char size[32];
    bytes_text(q->nbytes, size, sizeof size);
    snprintf(buf, len, "NCCL %s would run this %s %s at %d node%s x %d %s%s as %s/%s on %d "
             "channel%s (model of NCCL's tuner, %.0f us; assumed topology, no measured "
             "bandwidths or NCCL_* overrides)%s",
             tuner_version_name(q->nccl_version), size, q->kind == ORDER_ALL_REDUCE ? "all-reduce" : "reduce-scatter",
             (int)(q->world_size / G), q->world_size / G == 1 ? "" : "s", (int)G, m->label,
             q->nvswitch ? "" : " (no NVSwitch)", tuner_algo_name(p->nccl_algo),
             tuner_proto_name(p->nccl_proto), (int)p->task_channels,
             p->task_channels == 1 ? "" : "s", p->time_us,
             p->nccl_algo == TUNER_PAT ? "; PAT is not modelled: the engine runs the ring" : "");
}
