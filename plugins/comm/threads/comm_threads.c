/* comm_threads.c — the `threads` comm plugin: N ranks as threads of one process, collectives
 * in shared memory with NCCL's ring arithmetic (a low-precision SUM rounds the partial sum to
 * the wire dtype after every hop, N-1 roundings per element), so one machine reproduces the
 * numerics of N GPUs. The orders (orders.c): NCCL's ring split into `channels`, NCCL's tree
 * (chain per node, double binary tree across nodes of `gpus_per_node` ranks), NVLS and
 * NVLS_TREE (the switch's once-rounded f32 sum of a node, then a ring or NCCL's tree across
 * nodes), a hierarchical ring, a heap-ordered binary tree for comparison, and `nccl`: what a
 * model of NCCL's tuner would pick per collective (tuner.c), each cut into channels, loops and
 * chunks as NCCL's enqueue does (key split). ncclAvg (CT_REDUCE_AVG, ABI 1.6) premultiplies
 * every contribution. ABI 1.5's all_reduce_sr / reduce_scatter_sr run the same orders with
 * every combine rounded stochastically (ct_bf16_add_sr), for the bf16_sr policy.
 * Not for: GPU memory (it reads other ranks' buffers with the CPU) or several processes (mpi).
 *
 * How a collective runs: each rank posts its arguments (kind, count, dtype, op, buffers) in
 * the world, meets the others at a rendezvous, checks that all ranks called the same thing,
 * then does its share of the work by reading the other ranks' buffers directly, and meets
 * them again so no rank touches its buffers while another still reads them. See
 * docs/collectives.md for the exact orders.
 *
 * Traffic: every collective reports the bytes a ring sends as the metric "comm/bytes_per_rank"
 * (see wire_bytes; docs/benchmarks.md explains the figure in metrics.jsonl).
 */
#include <ctrain/ctrain.h>

#include "reduce.h"
#include "tuner.h"
#include "world.h"

#include <stdlib.h>

typedef struct threads_comm {
    comm_world   *world;
    int32_t       rank;
    int32_t       world_size;
    int32_t       owns_world; /* 1: a world of one made by create (no world_create) */
    ct_device_ref device;
    uint64_t      n_calls;    /* collectives called so far, to name them in messages */
    double       *scratch;    /* (REDUCE_SCRATCH) for reduce_run */
    order_step   *prog;       /* (order_max_steps(world_size)) the program of one unit */
    const void  **srcs;       /* (world_size) pointer scratch */
    void        **dsts;       /* (world_size) pointer scratch */
    int           done;       /* its address is the request every async call returns */
    int64_t       outstanding; /* requests handed out and not yet waited for */
    const ct_host_api *api;   /* for the traffic metric; NULL: not reported */
    ct_host           *host;
    uint64_t           told[32]; /* rank 0, algo = nccl: collectives whose pick was logged */
    int32_t            n_told;
} threads_comm;

/* indexed by reduce_algo */
static const char *const algo_choices[] = {"ring", "tree", "dbtree", "hier", "nvls",
                                           "nvls_tree", "nccl", NULL};
static const char *const split_choices[] = {"nccl", "even", NULL}; /* by order_split */
static const char *const proto_choices[] = {"simple", "ll", "ll128", NULL}; /* by order_proto */
static const char *const gpu_choices[] = {"a100", "h100", "h200", NULL}; /* by tuner_gpu */
/* nccl_version: tuner.h's tuner_version_names ("2.18", "2.19", "2.20", "2.30") */
static const char *const version_choices[] = {"2.18", "2.19", "2.20", "2.30", NULL};

/* [comm] world_size is a host key (the host runs that many rank threads and passes it to
 * world_create); these are the engine's own keys. */
static const ct_param_spec threads_params[] = {
    CT_PARAM_ENUM("algo", "ring", algo_choices,
                  "reduction order: ring (NCCL's ring, N-1 roundings per element), dbtree "
                  "(NCCL's tree: a chain in each node, double binary tree across nodes), nvls / "
                  "nvls_tree (the NVSwitch sums each node in f32 and rounds once; then a ring / "
                  "NCCL's tree across nodes), nccl (what a model of NCCL's tuner picks per "
                  "collective for [comm] gpu and nccl_version, logged once per size), hier (ring inside each "
                  "node, then ring across nodes) or tree (binary tree in heap order rooted at "
                  "rank 0, for comparison); docs/collectives.md"),
    CT_PARAM_INT("channels", "1", 1, 64,
                 "NCCL channels of the communicator (nvls, nvls_tree: its NVLS channels): a "
                 "collective is cut into contiguous parts, one per channel it uses, each "
                 "reduced by its own ring (or tree); 1 = one ring. algo = nccl takes the "
                 "tuner model's instead"),
    CT_PARAM_INT("gpus_per_node", "0", 0, 1024,
                 "ranks per node of the emulated cluster (ring order, tree, nvls and hier "
                 "layout); 0 = all ranks on one node; must divide world_size"),
    CT_PARAM_ENUM("split", "nccl", split_choices,
                  "how a collective is cut: nccl (NCCL 2.30's enqueue: channels by traffic, the "
                  "protocol's chunks, loops, the aligned last loop: NCCL's bits at any count) "
                  "or even (earlier versions: equal contiguous parts and chunks, one loop)"),
    CT_PARAM_ENUM("proto", "simple", proto_choices,
                  "NCCL protocol whose chunks the split uses (simple: 2 MiB ring chunks; ll, "
                  "ll128); algo = nccl takes the tuner model's"),
    CT_PARAM_ENUM("gpu", "h100", gpu_choices,
                  "algo = nccl: the GPUs of the modelled DGX/HGX-like nodes (a100: NVLink 3, "
                  "200 Gb/s NICs; h100, h200: NVLink 4, NVLS, 400 Gb/s NICs)"),
    CT_PARAM_ENUM("nccl_version", "2.30", version_choices,
                  "algo = nccl: whose tuner is modelled: 2.18, 2.19, 2.20 (what PyTorch "
                  "bundled in early 2024) or 2.30; each from its tag's tuning.cc "
                  "(docs/collectives.md)"),
    CT_PARAM_BOOL("nvswitch", "true",
                  "algo = nccl: the node's GPUs sit on an NVSwitch (on h100/h200 this gives "
                  "NVLS); false: no NVLS"),
    CT_PARAM_FLOAT("timeout_s", "300", 0.001, 1e7,
                   "longest wait for a peer rank before the run is declared failed"),
    CT_PARAM_END,
};

/* The index of `value` in a NULL-ended choice list, or -1. */
static int32_t choice_index(const char *const *choices, const char *value) {
    for (int32_t i = 0; choices[i]; i++)
        if (!strcmp(value, choices[i])) return i;
    return -1;
}

/* ---------------------------------------------------------------------------------------
 * world_create / world_destroy / create / destroy
 * ------------------------------------------------------------------------------------- */

/* Read the order keys and timeout_s from the instance's section (defaults without a host)
 * and check the order against world_size. */
static int32_t read_config(const ct_create_args *args, int32_t world_size, order_config *order,
                           double *timeout_s, ct_error *err) {
    *order = order_config_default(REDUCE_RING);
    *timeout_s = 300.0;
    const char *section = args && args->section ? args->section : "comm";
    if (args && args->api && args->section) {
        const ct_host_api *api = args->api;
        const char *a = NULL, *sp = NULL, *pr = NULL, *gp = NULL, *nv = NULL;
        int64_t channels = 1, gpn = 0;
        int32_t nvswitch = 1;
        if (api->get_string(args->host, section, "algo", &a, err) != CT_OK ||
            api->get_int(args->host, section, "channels", &channels, err) != CT_OK ||
            api->get_int(args->host, section, "gpus_per_node", &gpn, err) != CT_OK ||
            api->get_string(args->host, section, "split", &sp, err) != CT_OK ||
            api->get_string(args->host, section, "proto", &pr, err) != CT_OK ||
            api->get_string(args->host, section, "gpu", &gp, err) != CT_OK ||
            api->get_string(args->host, section, "nccl_version", &nv, err) != CT_OK ||
            api->get_bool(args->host, section, "nvswitch", &nvswitch, err) != CT_OK ||
            api->get_float(args->host, section, "timeout_s", timeout_s, err) != CT_OK)
            return err ? err->code : CT_ERR_INVALID;
        order->algo = choice_index(algo_choices, a);
        order->split = choice_index(split_choices, sp);
        order->proto = choice_index(proto_choices, pr);
        order->gpu = choice_index(gpu_choices, gp);
        order->nvswitch = nvswitch != 0;
        order->nccl_version = tuner_version_parse(nv);
        if (order->algo < 0 || order->split < 0 || order->proto < 0 || order->gpu < 0 ||
            order->nccl_version < 0)
            return ct_error_set(err, CT_ERR_INVALID, "comm threads: [%s] algo = %s, split = %s, "
                                "proto = %s, gpu = %s or nccl_version = %s is not known ---> "
                                "see `ctrain inspect threads`", section, a, sp, pr, gp, nv);
        if (channels < 1 || channels > 64 || gpn < 0 || gpn > 1024)
            return ct_error_set(err, CT_ERR_INVALID, "comm threads: [%s] channels = %lld or "
                                "gpus_per_node = %lld out of range ---> channels 1..64, "
                                "gpus_per_node 0..1024", section, (long long)channels,
                                (long long)gpn);
        order->channels = (int32_t)channels;
        order->gpus_per_node = (int32_t)gpn;
    }
    char why[200];
    if (order_check(order, world_size, why, sizeof why) != 0)
        return ct_error_set(err, CT_ERR_INVALID, "comm threads: [%s] %s", section, why);
    return CT_OK;
}

/* ct_plugin_desc.validate: read_config's checks against [comm] world_size, before any rank
 * starts, so `ctrain validate` refuses a gpus_per_node that does not divide world_size. */
static int32_t threads_validate(const ct_create_args *args, ct_error *err) {
    int64_t world_size = 1;
    if (args->api->get_int(args->host, args->section, "world_size", &world_size, err) != CT_OK)
        return err->code;
    order_config order;
    double timeout_s;
    return read_config(args, (int32_t)world_size, &order, &timeout_s, err);
}

static void *threads_world_create(int32_t world_size, const ct_create_args *args,
                                  ct_error *err) {
    if (world_size < 1)
        return ct_error_set(err, CT_ERR_INVALID, "comm threads: world_size %d must be >= 1",
                            (int)world_size),
               NULL;
    order_config order;
    double timeout_s;
    if (read_config(args, world_size, &order, &timeout_s, err) != CT_OK) return NULL;
    return world_new(world_size, &order, timeout_s, err);
}

static void threads_world_destroy(void *world) { world_free(world); }

static void *threads_create(const ct_create_args *args, ct_error *err) {
    if (args->device.vt && args->device.type != CT_DEVICE_CPU)
        return ct_error_set(err, CT_ERR_UNSUPPORTED,
                            "comm threads: the threads engine reads other ranks' buffers with "
                            "the CPU and needs device cpu ---> use [comm] plugin = nccl for "
                            "GPUs"),
               NULL;
    threads_comm *self = calloc(1, sizeof *self);
    if (!self) goto out_nomem;
    self->device = args->device;
    self->rank = args->rank;
    self->world_size = args->world_size;
    self->api = args->api;
    self->host = args->host;
    if (args->comm_world) {
        self->world = args->comm_world;
        if (self->world_size != self->world->world_size || self->rank < 0 ||
            self->rank >= self->world_size) {
            ct_error_set(err, CT_ERR_INVALID,
                         "comm threads: rank %d of world_size %d does not fit the world of %d "
                         "ranks ---> the host must pass the world_create world and its size",
                         (int)self->rank, (int)self->world_size,
                         (int)self->world->world_size);
            goto out_free_self;
        }
    } else if (self->world_size <= 1) { /* no host-made world: a world of one, like local */
        order_config order;
        double timeout_s;
        if (read_config(args, 1, &order, &timeout_s, err) != CT_OK) goto out_free_self;
        self->world = world_new(1, &order, timeout_s, err);
        if (!self->world) goto out_free_self;
        self->owns_world = 1;
        self->rank = 0;
        self->world_size = 1;
    } else {
        ct_error_set(err, CT_ERR_INVALID,
                     "comm threads: rank %d of %d created without a world ---> the host calls "
                     "world_create once and passes it as args->comm_world to every rank",
                     (int)self->rank, (int)self->world_size);
        goto out_free_self;
    }
    size_t n = (size_t)self->world_size;
    self->scratch = malloc(REDUCE_SCRATCH * sizeof *self->scratch);
    self->prog = malloc((size_t)order_max_steps(self->world_size) * sizeof *self->prog);
    self->srcs = malloc(n * sizeof *self->srcs);
    self->dsts = malloc(n * sizeof *self->dsts);
    if (!self->scratch || !self->prog || !self->srcs || !self->dsts) goto out_free_scratch;
    return self;

out_free_scratch:
    free(self->scratch);
    free(self->prog);
    free(self->srcs);
    free(self->dsts);
    if (self->owns_world) world_free(self->world);
    free(self);
out_nomem:
    ct_error_set(err, CT_ERR_NOMEM, "comm threads: out of memory creating rank %d",
                 (int)args->rank);
    return NULL;
out_free_self:
    free(self);
    return NULL;
}

static void threads_destroy(void *p) {
    threads_comm *self = p;
    if (!self) return;
    if (self->owns_world) world_free(self->world);
    free(self->scratch);
    free(self->prog);
    free(self->srcs);
    free(self->dsts);
    free(self);
}

static int32_t threads_rank(void *p) { return ((threads_comm *)p)->rank; }
static int32_t threads_world_size(void *p) { return ((threads_comm *)p)->world_size; }

/* ---------------------------------------------------------------------------------------
 * checking what the ranks posted (every rank runs the same check on the same posts, so all
 * reach the same verdict)
 * ------------------------------------------------------------------------------------- */

static const char *kind_name(int32_t kind) {
    switch (kind) {
    case COLL_ALL_REDUCE: return "all_reduce";
    case COLL_REDUCE_SCATTER: return "reduce_scatter";
    case COLL_ALL_GATHER: return "all_gather";
    case COLL_ALL_TO_ALL: return "all_to_all";
    case COLL_BROADCAST: return "broadcast";
    case COLL_BARRIER: return "barrier";
    default: return "?";
    }
}

static int is_reduction(int32_t kind) {
    return kind == COLL_ALL_REDUCE || kind == COLL_REDUCE_SCATTER;
}

/* Elements of send and recv a rank's post covers. */
static void post_extent(const coll_post *p, int32_t world_size, uint64_t *send_n,
                        uint64_t *recv_n) {
    uint64_t n = p->count, nn = p->count * (uint64_t)world_size;
    switch (p->kind) {
    case COLL_ALL_REDUCE: *send_n = n; *recv_n = n; break;
    case COLL_REDUCE_SCATTER: *send_n = nn; *recv_n = n; break;
    case COLL_ALL_GATHER: *send_n = n; *recv_n = nn; break;
    case COLL_ALL_TO_ALL: *send_n = nn; *recv_n = nn; break;
    case COLL_BROADCAST: *send_n = 0; *recv_n = n; break;
    default: *send_n = 0; *recv_n = 0; break;
    }
}

/* CT_OK when every rank posted the same collective with usable arguments. *culprit is the
 * first rank that disagrees with rank 0 (their sequences are out of step: the world cannot go
 * on), or -1. */
static int32_t check_posts(const threads_comm *self, const char *what, int32_t *culprit,
                           ct_error *err) {
    const coll_post *posts = self->world->posts, *p0 = &posts[0];
    int32_t n = self->world_size;
    *culprit = -1;
    for (int32_t r = 1; r < n; r++) {
        const coll_post *p = &posts[r];
        int differs = p->kind != p0->kind || p->count != p0->count || p->dtype != p0->dtype ||
                      (is_reduction(p->kind) && (p->op != p0->op || p->sr != p0->sr ||
                                                 p->sr_stream != p0->sr_stream)) ||
                      (p->kind == COLL_BROADCAST && p->root != p0->root);
        if (!differs) continue;
        *culprit = r;
        return ct_error_set(err, CT_ERR_COMM,
                            "comm threads: %s: rank 0 called %s(count %llu, %s, op %d, root %d) "
                            "but rank %d called %s(count %llu, %s, op %d, root %d) ---> HINT: "
                            "every rank must call the same collectives in the same order with "
                            "the same count, dtype, op and root (and the same stream for the "
                            "_sr ones)",
                            what, kind_name(p0->kind), (unsigned long long)p0->count,
                            ct_dtype_name(p0->dtype), (int)p0->op, (int)p0->root, (int)r,
                            kind_name(p->kind), (unsigned long long)p->count,
                            ct_dtype_name(p->dtype), (int)p->op, (int)p->root);
    }
    if (p0->kind != COLL_BARRIER && !ct_dtype_size(p0->dtype))
        return ct_error_set(err, CT_ERR_INVALID, "comm threads: %s with unknown dtype %d", what,
                            (int)p0->dtype);
    if (is_reduction(p0->kind) && !reduce_supported(p0->dtype, p0->op))
        return ct_error_set(err, CT_ERR_UNSUPPORTED,
                            "comm threads: %s: reduce op %d over %s is not supported ---> use "
                            "SUM, MAX or MIN over f32, bf16, f16, f64 or i32, AVG over f32, bf16, "
                            "f16 or f64", what, (int)p0->op, ct_dtype_name(p0->dtype));
    int32_t algo = self->world->order.algo;
    if (is_reduction(p0->kind) && p0->op == CT_REDUCE_AVG &&
        (algo == REDUCE_NVLS || algo == REDUCE_NVLS_TREE))
        return ct_error_set(err, CT_ERR_UNSUPPORTED,
                            "comm threads: %s: AVG with algo = %s: NCCL's NVLS reduces SUM, MIN "
                            "and MAX only (ncclAvg is a premultiplied sum it runs on the ring or "
                            "tree) ---> use algo = nccl, ring or dbtree", what,
                            algo == REDUCE_NVLS ? "nvls" : "nvls_tree");
    if (p0->sr && (p0->dtype != CT_DTYPE_BF16 || p0->op != CT_REDUCE_SUM))
        return ct_error_set(err, CT_ERR_UNSUPPORTED,
                            "comm threads: %s_sr over %s: stochastic rounding is for bf16 "
                            "sums only ---> call %s for other dtypes", what,
                            ct_dtype_name(p0->dtype), kind_name(p0->kind));
    if (p0->kind == COLL_BROADCAST && (p0->root < 0 || p0->root >= n))
        return ct_error_set(err, CT_ERR_INVALID, "comm threads: %s: root %d is not a rank of "
                            "0..%d", what, (int)p0->root, (int)n - 1);
    size_t es = ct_dtype_size(p0->dtype);
    for (int32_t r = 0; r < n; r++) {
        const coll_post *p = &posts[r];
        uint64_t sn, rn;
        post_extent(p, n, &sn, &rn);
        if ((sn && !p->send) || (rn && !p->recv))
            return ct_error_set(err, CT_ERR_INVALID, "comm threads: %s: rank %d passed a NULL "
                                "buffer for %llu elements", what, (int)r,
                                (unsigned long long)(sn ? sn : rn));
        if (p->kind == COLL_ALL_TO_ALL && sn) { /* others read send while we fill recv */
            const char *s = p->send, *d = p->recv;
            if (s < d + rn * es && d < s + sn * es)
                return ct_error_set(err, CT_ERR_INVALID, "comm threads: %s: rank %d's send "
                                    "and recv overlap ---> all_to_all is not in place",
                                    what, (int)r);
        }
    }
    return CT_OK;
}

/* ---------------------------------------------------------------------------------------
 * this rank's share of the work (between the two rendezvous)
 * ------------------------------------------------------------------------------------- */

static const void *at_c(const void *p, uint64_t elems, size_t es) {
    return (const char *)p + elems * es;
}
static void *at(void *p, uint64_t elems, size_t es) { return (char *)p + elems * es; }

/* The plan of the reduction the ranks posted (every rank makes the same). */
static void plan_of(const threads_comm *self, order_plan *plan) {
    const coll_post *p0 = &self->world->posts[0];
    int32_t dt = p0->dtype, op = p0->op;
    int32_t nvls_ok = (dt == CT_DTYPE_BF16 || dt == CT_DTYPE_F16 || dt == CT_DTYPE_F32) &&
                      op == CT_REDUCE_SUM;
    order_plan_make(plan, &self->world->order, self->world_size,
                    p0->kind == COLL_ALL_REDUCE ? ORDER_ALL_REDUCE : ORDER_REDUCE_SCATTER,
                    p0->count, (uint32_t)ct_dtype_size(dt), nvls_ok, op == CT_REDUCE_AVG);
}

/* algo = nccl: rank 0 logs the model's pick once per collective, size, dtype and op. */
static void tell_pick(threads_comm *self, const order_plan *plan) {
    const coll_post *p0 = &self->world->posts[0];
    if (!plan->tuned || self->rank != 0 || !self->api || !self->api->log) return;
    uint64_t key = ct_hash64(p0->count * 131 + (uint64_t)p0->kind,
                             (uint64_t)p0->dtype * 7 + (uint64_t)p0->op);
    for (int32_t i = 0; i < self->n_told; i++)
        if (self->told[i] == key) return;
    if (self->n_told == (int32_t)(sizeof self->told / sizeof self->told[0])) return;
    self->told[self->n_told++] = key;
    const order_config *oc = &self->world->order;
    tuner_query q = {plan->kind, plan->count * plan->esize *
                                     (plan->kind == ORDER_ALL_REDUCE ? 1 : (uint64_t)plan->world_size),
                     plan->world_size, oc->gpus_per_node, oc->gpu, oc->nvswitch,
                     (p0->dtype == CT_DTYPE_BF16 || p0->dtype == CT_DTYPE_F16 ||
                      p0->dtype == CT_DTYPE_F32) && p0->op == CT_REDUCE_SUM,
                     p0->op == CT_REDUCE_AVG, oc->nccl_version};
    tuner_pick pk;
    tuner_choose(&q, &pk);
    char line[512], msg[600];
    tuner_describe(&q, &pk, line, sizeof line);
    snprintf(msg, sizeof msg, "%s (%s)", line, ct_dtype_name(p0->dtype));
    self->api->log(self->host, CT_LOG_INFO, msg);
}

/* All-reduce: in every part (channel) and loop, rank u reduces unit u (orders.h) of every
 * rank's send and writes it into every rank's recv: the reduce and the broadcast (or
 * all-gather) phases of NCCL's algorithm in one pass, so every rank gets identical bits. */
static void do_all_reduce(threads_comm *self) {
    const coll_post *posts = self->world->posts;
    int32_t n = self->world_size;
    size_t es = ct_dtype_size(posts[0].dtype);
    order_plan plan;
    plan_of(self, &plan);
    tell_pick(self, &plan);
    for (int32_t k = 0; k < plan.n_parts; k++) {
        int64_t loops = order_loops(&plan, k);
        for (int64_t l = 0; l < loops; l++) {
            uint64_t b, e;
            int32_t steps = order_unit(&plan, k, l, self->rank, &b, &e, self->prog);
            if (!steps) continue;
            for (int32_t r = 0; r < n; r++) {
                self->srcs[r] = at_c(posts[r].send, b, es);
                self->dsts[r] = at(posts[r].recv, b, es);
            }
            reduce_sr sr = {posts[0].sr_stream, b, n};
            reduce_arith ar = {posts[0].dtype, posts[0].op, n, posts[0].sr ? &sr : NULL};
            reduce_run(self->srcs, self->prog, steps, self->dsts, n, e - b, &ar, self->scratch);
        }
    }
}

/* Reduce-scatter: rank c reduces block c of every rank's send into its recv, part by part,
 * each by the ring of its channel that ends at rank c. */
static void do_reduce_scatter(threads_comm *self) {
    const coll_post *posts = self->world->posts;
    int32_t n = self->world_size, c = self->rank;
    uint64_t count = posts[0].count;
    size_t es = ct_dtype_size(posts[0].dtype);
    order_plan plan;
    plan_of(self, &plan);
    tell_pick(self, &plan);
    for (int32_t k = 0; k < plan.n_parts; k++) {
        uint64_t b, e;
        int32_t steps = order_rs_part(&plan, k, c, &b, &e, self->prog);
        if (!steps) continue;
        for (int32_t r = 0; r < n; r++)
            self->srcs[r] = at_c(posts[r].send, (uint64_t)c * count + b, es);
        void *dst = at(posts[c].recv, b, es);
        reduce_sr sr = {posts[0].sr_stream, (uint64_t)c * count + b, n};
        reduce_arith ar = {posts[0].dtype, posts[0].op, n, posts[0].sr ? &sr : NULL};
        reduce_run(self->srcs, self->prog, steps, &dst, 1, e - b, &ar, self->scratch);
    }
}

static void copy_block(void *dst, const void *src, uint64_t bytes) {
    if (dst != src && bytes) memmove(dst, src, (size_t)bytes);
}

static void do_all_gather(threads_comm *self) {
    const coll_post *posts = self->world->posts;
    uint64_t bytes = posts[0].count * ct_dtype_size(posts[0].dtype);
    for (int32_t r = 0; r < self->world_size; r++)
        copy_block(at(posts[self->rank].recv, (uint64_t)r, bytes), posts[r].send, bytes);
}

static void do_all_to_all(threads_comm *self) {
    const coll_post *posts = self->world->posts;
    uint64_t bytes = posts[0].count * ct_dtype_size(posts[0].dtype);
    for (int32_t r = 0; r < self->world_size; r++)
        copy_block(at(posts[self->rank].recv, (uint64_t)r, bytes),
                   at_c(posts[r].send, (uint64_t)self->rank, bytes), bytes);
}

static void do_broadcast(threads_comm *self) {
    const coll_post *posts = self->world->posts;
    uint64_t bytes = posts[0].count * ct_dtype_size(posts[0].dtype);
    if (self->rank != posts[0].root)
        copy_block(posts[self->rank].recv, posts[posts[0].root].recv, bytes);
}

/* Bytes one rank sends for a collective when it runs as NCCL's ring, n = count * dtype size
 * bytes per rank, N ranks (NCCL's "algorithmic bytes"; the mean over ranks, which is also what
 * the tree order sends on average: a tree over N ranks has N-1 edges, as a ring has N-1 hops):
 *   all_reduce      2(N-1)/N * n   reduce-scatter pass, then all-gather pass
 *   reduce_scatter  (N-1)/N * N*n  every block but its own leaves the rank once
 *   all_gather      (N-1)/N * N*n  every block but its own is forwarded once
 *   all_to_all      (N-1)/N * N*n  every block but its own
 *   broadcast       (N-1)/N * n    a pipelined ring: every rank but the last forwards n
 *   barrier         0               (send: n, recv: 0; see threads_send)
 * This engine really copies through shared memory; the figure is what a network would carry. */
static double wire_bytes(int32_t kind, uint64_t count, int32_t dtype, int32_t world_size) {
    double n = (double)count * (double)ct_dtype_size(dtype), N = world_size;
    switch (kind) {
    case COLL_ALL_REDUCE: return 2.0 * (N - 1) / N * n;
    case COLL_REDUCE_SCATTER:
    case COLL_ALL_GATHER:
    case COLL_ALL_TO_ALL: return (N - 1) * n;
    case COLL_BROADCAST: return (N - 1) / N * n;
    default: return 0;
    }
}

/* Report a call's traffic: "comm/bytes_per_rank" is a SUM metric (summed over calls and over
 * ranks by the host), so each rank reports its bytes / N and the logged value is the mean over
 * ranks of the bytes each rank sent in the log interval. */
static void report_bytes(const threads_comm *self, const coll_post *post) {
    if (post->kind == COLL_BARRIER || !self->api || !self->api->metric) return;
    double b = wire_bytes(post->kind, post->count, post->dtype, self->world_size);
    self->api->metric(self->host, "comm/bytes_per_rank", b / self->world_size, CT_METRIC_SUM);
}

/* Post, meet, check, work, meet. On success with req non-NULL, *req is a completed request
 * (this engine finishes every call before returning); on failure *req is NULL. */
static int32_t run_collective(threads_comm *self, coll_post post, ct_request **req,
                              ct_error *err) {
    comm_world *w = self->world;
    if (req) *req = NULL;
    char what[64];
    snprintf(what, sizeof what, "%s #%llu", kind_name(post.kind),
             (unsigned long long)++self->n_calls);
    if (self->device.vt && self->device.vt->synchronize) { /* inputs must be complete */
        int32_t rc = self->device.vt->synchronize(self->device.self, err);
        if (rc != CT_OK) return rc;
    }
    w->posts[self->rank] = post; /* nobody reads it before the rendezvous below */
    int32_t rc = world_rendezvous(w, self->rank, what, err);
    if (rc != CT_OK) return rc;

    int32_t culprit = -1;
    ct_error bad = {.struct_size = sizeof bad};
    int32_t bad_rc = check_posts(self, what, &culprit, &bad);
    if (bad_rc == CT_OK) {
        switch (post.kind) {
        case COLL_ALL_REDUCE: do_all_reduce(self); break;
        case COLL_REDUCE_SCATTER: do_reduce_scatter(self); break;
        case COLL_ALL_GATHER: do_all_gather(self); break;
        case COLL_ALL_TO_ALL: do_all_to_all(self); break;
        case COLL_BROADCAST: do_broadcast(self); break;
        default: break;
        }
    }
    /* Close: nobody may reuse its buffers or its post while another rank still reads them. */
    rc = world_rendezvous(w, self->rank, what, err);
    if (rc != CT_OK) return rc;
    if (bad_rc != CT_OK) {
        if (culprit >= 0) world_fail(w, culprit, bad.message);
        return ct_error_set(err, bad_rc, "%s", bad.message);
    }
    report_bytes(self, &post);
    if (req) {
        *req = (ct_request *)&self->done;
        self->outstanding++;
    }
    return CT_OK;
}

/* ---------------------------------------------------------------------------------------
 * the vtable's collectives
 * ------------------------------------------------------------------------------------- */

static int32_t threads_all_reduce(void *p, const void *send, void *recv, uint64_t count,
                                  int32_t dtype, int32_t op, ct_request **req, ct_error *err) {
    coll_post post = {.kind = COLL_ALL_REDUCE, .count = count, .dtype = dtype, .op = op,
                      .send = send, .recv = recv};
    return run_collective(p, post, req, err);
}

static int32_t threads_reduce_scatter(void *p, const void *send, void *recv, uint64_t count,
                                      int32_t dtype, int32_t op, ct_request **req,
                                      ct_error *err) {
    coll_post post = {.kind = COLL_REDUCE_SCATTER, .count = count, .dtype = dtype, .op = op,
                      .send = send, .recv = recv};
    return run_collective(p, post, req, err);
}

/* ABI 1.5: the same collectives with every combine of the order rounded stochastically
 * (ct_bf16_add_sr); run_collective's check refuses anything but a bf16 SUM on every rank. */
static int32_t threads_all_reduce_sr(void *p, const void *send, void *recv, uint64_t count,
                                     int32_t dtype, uint64_t stream, ct_error *err) {
    coll_post post = {.kind = COLL_ALL_REDUCE, .count = count, .dtype = dtype, .op = CT_REDUCE_SUM,
                      .send = send, .recv = recv, .sr = 1, .sr_stream = stream};
    return run_collective(p, post, NULL, err);
}

static int32_t threads_reduce_scatter_sr(void *p, const void *send, void *recv, uint64_t count,
                                         int32_t dtype, uint64_t stream, ct_error *err) {
    coll_post post = {.kind = COLL_REDUCE_SCATTER, .count = count, .dtype = dtype,
                      .op = CT_REDUCE_SUM, .send = send, .recv = recv, .sr = 1,
                      .sr_stream = stream};
    return run_collective(p, post, NULL, err);
}

static int32_t threads_all_gather(void *p, const void *send, void *recv, uint64_t count,
                                  int32_t dtype, ct_request **req, ct_error *err) {
    coll_post post = {.kind = COLL_ALL_GATHER, .count = count, .dtype = dtype, .send = send,
                      .recv = recv};
    return run_collective(p, post, req, err);
}

static int32_t threads_all_to_all(void *p, const void *send, void *recv, uint64_t count,
                                  int32_t dtype, ct_request **req, ct_error *err) {
    coll_post post = {.kind = COLL_ALL_TO_ALL, .count = count, .dtype = dtype, .send = send,
                      .recv = recv};
    return run_collective(p, post, req, err);
}

static int32_t threads_broadcast(void *p, void *buf, uint64_t count, int32_t dtype, int32_t root,
                                 ct_error *err) {
    coll_post post = {.kind = COLL_BROADCAST, .count = count, .dtype = dtype, .root = root,
                      .send = buf, .recv = buf};
    return run_collective(p, post, NULL, err);
}

static int32_t threads_barrier(void *p, ct_error *err) {
    coll_post post = {.kind = COLL_BARRIER, .dtype = CT_DTYPE_F32};
    return run_collective(p, post, NULL, err);
}

static int32_t check_peer(const threads_comm *self, const char *what, int32_t peer,
                          int32_t dtype, ct_error *err) {
    if (peer < 0 || peer >= self->world_size || peer == self->rank)
        return ct_error_set(err, CT_ERR_INVALID, "comm threads: %s: peer %d is not another rank "
                            "of 0..%d", what, (int)peer, (int)self->world_size - 1);
    if (!ct_dtype_size(dtype))
        return ct_error_set(err, CT_ERR_INVALID, "comm threads: %s with unknown dtype %d", what,
                            (int)dtype);
    return CT_OK;
}

static int32_t threads_send(void *p, const void *buf, uint64_t count, int32_t dtype,
                            int32_t peer, int32_t tag, ct_error *err) {
    threads_comm *self = p;
    int32_t rc = check_peer(self, "send", peer, dtype, err);
    if (rc != CT_OK) return rc;
    rc = world_send(self->world, self->rank, peer, tag, buf, count * ct_dtype_size(dtype), err);
    if (rc == CT_OK && self->api && self->api->metric) /* n bytes leave this rank */
        self->api->metric(self->host, "comm/bytes_per_rank",
                          (double)(count * ct_dtype_size(dtype)) / self->world_size,
                          CT_METRIC_SUM);
    return rc;
}

static int32_t threads_recv(void *p, void *buf, uint64_t count, int32_t dtype, int32_t peer,
                            int32_t tag, ct_error *err) {
    threads_comm *self = p;
    int32_t rc = check_peer(self, "recv", peer, dtype, err);
    if (rc != CT_OK) return rc;
    return world_recv(self->world, self->rank, peer, tag, buf, count * ct_dtype_size(dtype),
                      err);
}

static int32_t threads_wait(void *p, ct_request *req, ct_error *err) {
    threads_comm *self = p;
    if (!req) return CT_OK; /* a failed call hands out no request */
    if (req != (ct_request *)&self->done || self->outstanding <= 0)
        return ct_error_set(err, CT_ERR_INVALID, "comm threads: rank %d: wait on a request this "
                            "rank did not hand out (or waited twice)", (int)self->rank);
    self->outstanding--;
    return CT_OK;
}

static void threads_abort(void *p, const char *why) {
    threads_comm *self = p;
    world_fail(self->world, self->rank, why);
}

/* ---------------------------------------------------------------------------------------
 * descriptor
 * ------------------------------------------------------------------------------------- */

static const ct_comm_vtable threads_vtable = {
    .struct_size = sizeof(ct_comm_vtable),
    .world_create = threads_world_create,
    .world_destroy = threads_world_destroy,
    .create = threads_create,
    .destroy = threads_destroy,
    .rank = threads_rank,
    .world_size = threads_world_size,
    .all_reduce = threads_all_reduce,
    .reduce_scatter = threads_reduce_scatter,
    .all_gather = threads_all_gather,
    .all_to_all = threads_all_to_all,
    .broadcast = threads_broadcast,
    .barrier = threads_barrier,
    .send = threads_send,
    .recv = threads_recv,
    .wait = threads_wait,
    .abort = threads_abort,
    .all_reduce_sr = threads_all_reduce_sr,
    .reduce_scatter_sr = threads_reduce_scatter_sr,
};

CT_DEFINE_PLUGIN(
    .kind    = CT_KIND_COMM,
    .name    = "threads",
    .version = "1.2.0",
    .summary = "N ranks as threads of one process; NCCL's orders, split and tuner (model)",
    .params  = threads_params,
    .devices = CT_DEVICE_CPU,
    .vtable  = &threads_vtable,
    .validate = threads_validate)

