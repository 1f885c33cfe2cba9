/* check_strategy.c — check-plugin's checks of a sharding strategy: a few training steps of a
 * tiny gpt (n_layer 1, d_model 32, n_head 2, vocab 64, seq_len 16) on generated token data in a
 * temporary folder, fp32, the same global batch of 4 sequences, with the plugin at world sizes
 * 1 and 2 (threads engine) against the built-in ddp at world size 1. In fp32 only the
 * summation order differs, so per step the loss and the gradient norm, and after the first
 * step every unit's reduced gradient element by element (each rank's shard against the same
 * slice of ddp's), must agree within 1e-5 relative. The loss alone would not do: AdamW is
 * blind to a gradient's scale, so a strategy that forgets to divide by N trains the same
 * losses; its gradient norm and its gradients are N times too large.
 *
 * The steps are the host's own: rank_open, step_train, optim_grad_norm, optim_step, rank_close,
 * called in the order train.c's train_rank calls them. train_rank itself is not reused: it
 * writes metrics.jsonl and checkpoints into [run] out_dir, which a check must not leave behind.
 * Each world size runs in a child process of its own (check_child.c), reference included.
 * Not for: comparing strategies at scale (tests/cli/test_distributed.sh) or bf16 policies.
 */
#include "check/check.h"

#include "plugin/calls.h"
#include "data/data.h"
#include "run/optim.h"
#include "run/rank.h"
#include "run/step.h"
#include "plugin/wiring.h"
#include "run/init_ckpt.h"

#include <ctrain/numerics.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { STEPS = 4, GLOBAL_B = 4, SEQ = 16, VOCAB = 64, TOKENS = 64 * SEQ + 1, MAXW = 2,
       MAXU = 64 };

#define REL_TOL 1e-5

/* What one run measured (rank 0's view of the reduced figures). */
typedef struct run_result {
    double  loss[STEPS], gnorm[STEPS];
    int32_t rc;
    int32_t failed_rank;
    char    message[600];
    /* step-1 gradient against the reference (test runs only) */
    double  grad_err;      /* max |g - ref| / max |ref| of the unit, over units and ranks */
    int32_t grad_unit, grad_rank;
    uint64_t grad_index;
    double  grad_want, grad_got;
    /* shard coverage: 1 when every element of every unit is owned once (or by every rank,
     * replicated); else cover_message says where it is not */
    int32_t cover_ok;
    char    cover_message[200];
} run_result;

typedef struct run_shared {
    const host_config *cfg;
    const host_wiring *wiring;
    void            *comm_world;
    int32_t          world;
    float          **ref;       /* (MAXU) reference step-1 gradients (unit numel); filled by
                                   the reference run (world 1), read by the others */
    uint64_t        *ref_numel; /* (MAXU) */
    int32_t          is_reference;
    run_result      *out;
} run_shared;

typedef struct rank_job {
    run_shared *sh;
    int32_t     rank, rc;
    ct_error    err;
    double      grad_err, grad_want, grad_got;
    int32_t     grad_unit;
    uint64_t    grad_index;
    /* the step-1 shards: which elements of each unit this rank owns */
    uint32_t    n_units;
    uint64_t    unit_numel[MAXU], shard_offset[MAXU], shard_numel[MAXU];
    int32_t     shard_replicated[MAXU];
} rank_job;

/* After step 1: this rank's shard of every unit's reduced gradient, stored as the reference
 * (reference run) or compared with the reference's same elements. */
static int32_t gradients(host_rank *r, rank_job *job, ct_error *err) {
    run_shared *sh = job->sh;
    if (r->mdesc.n_units > MAXU)
        return ct_error_set(err, CT_ERR_UNSUPPORTED, "the model has %u units; check-plugin "
                            "keeps %d", r->mdesc.n_units, MAXU);
    for (uint32_t u = 0; u < r->mdesc.n_units; u++) {
        ct_shard s = {.struct_size = sizeof s};
        int32_t rc = RANK_STRATEGY(r, shard, u, &s, err);
        if (rc != CT_OK) return rc;
        job->n_units = r->mdesc.n_units;
        job->unit_numel[u] = r->units[u].numel;
        job->shard_offset[u] = s.offset;
        job->shard_numel[u] = s.numel;
        job->shard_replicated[u] = s.replicated;
        float *g = malloc((s.numel ? s.numel : 1) * sizeof *g);
        if (!g) return ct_error_set(err, CT_ERR_NOMEM, "out of memory");
        rc = RANK_DEV(r, copy, g, s.grad, s.numel * sizeof *g, CT_COPY_D2H, err);
        uint64_t numel = r->units[u].numel;
        if (rc == CT_OK && sh->is_reference) {
            sh->ref[u] = calloc(numel ? numel : 1, sizeof(float));
            sh->ref_numel[u] = numel;
            if (!sh->ref[u]) rc = ct_error_set(err, CT_ERR_NOMEM, "out of memory");
            for (uint64_t i = 0; rc == CT_OK && i < s.numel; i++)
                if (s.offset + i < numel) sh->ref[u][s.offset + i] = g[i];
        } else if (rc == CT_OK) {
            double big = 0;
            for (uint64_t i = 0; i < sh->ref_numel[u]; i++) big = fmax(big, fabs(sh->ref[u][i]));
            for (uint64_t i = 0; i < s.numel; i++) {
                uint64_t at = s.offset + i;
                if (at >= numel || at >= sh->ref_numel[u]) continue;
                double e = fabs((double)g[i] - (double)sh->ref[u][at]) / (big > 0 ? big : 1);
                if (!(e <= job->grad_err)) {
                    job->grad_err = isfinite(e) ? e : INFINITY;
                    job->grad_unit = (int32_t)u;
                    job->grad_index = at;
                    job->grad_want = sh->ref[u][at];
                    job->grad_got = g[i];
                }
            }
        }
        free(g);
        if (rc != CT_OK) return rc;
    }
    return CT_OK;
}

/* One rank's training steps, as train.c's train_rank makes them (without files). */
static int32_t rank_steps(host_rank *r, rank_job *job, ct_error *err) {
    run_shared *sh = job->sh;
    host_optim_config oc;
    int32_t rc = optim_config(sh->cfg, &oc, err);
    for (int64_t step = 1; rc == CT_OK && step <= STEPS; step++) {
        host_step_stats st;
        double gnorm = 0, lr = optim_lr(&oc, step - 1);
        rc = step_train(r, &st, err);
        if (rc == CT_OK) rc = optim_grad_norm(r, &gnorm, err);
        if (rc == CT_OK && step == 1) rc = gradients(r, job, err);
        if (rc == CT_OK) rc = optim_step(r, &oc, step, lr, gnorm, 0, err);
        double sums[2] = {st.loss_sum, (double)st.micro_batches};
        if (rc == CT_OK) rc = optim_allreduce_f64(r, sums, 2, CT_REDUCE_SUM, err);
        if (rc == CT_OK && r->rank == 0) {
            sh->out->loss[step - 1] = sums[0] / sums[1];
            sh->out->gnorm[step - 1] = gnorm;
        }
    }
    return rc;
}

static void *rank_thread(void *arg) {
    rank_job *job = arg;
    run_shared *sh = job->sh;
    host_rank r;
    job->err.struct_size = sizeof job->err;
    calls_bind(1 + job->rank, job->rank); /* a fault report names the rank and the call */
    job->rc = rank_open(&r, sh->cfg, sh->wiring, job->rank, sh->world, sh->comm_world, &job->err);
    if (job->rc == CT_OK) {
        job->rc = rank_steps(&r, job, &job->err);
        if (job->rc != CT_OK && job->rc != CT_ERR_COMM && r.comm_ref.vt && r.comm_ref.vt->abort)
            RANK_COMM_VOID(&r, abort, job->err.message);
        rank_close(&r);
    }
    calls_unbind();
    return NULL;
}

/* The INI of one run: strategy `strategy` (a name or the plugin's path) at `world` ranks. */
static void run_ini(char *buf, size_t cap, const char *data, const char *strategy, int32_t world) {
    snprintf(buf, cap,
             "[run]\nseed = %u\nsteps = %d\n"
             "[data]\ntrain = %s\nbatch_size = %d\nseq_len = %d\n"
             "[model]\nplugin = gpt\nn_layer = 1\nn_head = 2\nd_model = 32\nvocab_size = %d\n"
             "seq_len = %d\n"
             "[loss]\nplugins = ce\n"
             "[strategy]\nplugin = %s\n"
             "[precision]\nplugin = fp32\n"
             "[comm]\nplugin = threads\nworld_size = %d\ntimeout_s = 30\n"
             "[device]\ntype = cpu\nthreads = 1\n"
             "[optim]\nlr = 1e-3\nwarmup = 0\nschedule = constant\ngrad_clip = 0\n",
             CHECK_SEED, STEPS, data, GLOBAL_B / world, SEQ, VOCAB, SEQ, strategy, (int)world);
}

/* Do the ranks' shards of every unit cover each element exactly once (sharded) or does every
 * rank hold all of it (replicated)? */
static void coverage(const rank_job *jobs, int32_t world, run_result *out) {
    out->cover_ok = 1;
    for (uint32_t u = 0; u < jobs[0].n_units && out->cover_ok; u++) {
        uint64_t n = jobs[0].unit_numel[u];
        int32_t repl = jobs[0].shard_replicated[u];
        uint8_t *owners = calloc(n ? n : 1, 1);
        if (!owners) return;
        for (int32_t r = 0; r < world && out->cover_ok; r++) {
            if (jobs[r].shard_replicated[u] != repl) {
                out->cover_ok = 0;
                snprintf(out->cover_message, sizeof out->cover_message, "unit %u: rank %d says "
                         "replicated %d, rank 0 says %d", u, (int)r,
                         (int)jobs[r].shard_replicated[u], (int)repl);
            }
            for (uint64_t i = 0; i < jobs[r].shard_numel[u]; i++) {
                uint64_t at = jobs[r].shard_offset[u] + i;
                if (at < n && owners[at] < 255) owners[at]++;
            }
        }
        for (uint64_t i = 0; i < n && out->cover_ok; i++)
            if (owners[i] != (repl ? world : 1)) {
                out->cover_ok = 0;
                snprintf(out->cover_message, sizeof out->cover_message, "unit %u element %llu "
                         "is owned by %d ranks, expected %d (%s)", u, (unsigned long long)i,
                         (int)owners[i], repl ? (int)world : 1,
                         repl ? "replicated" : "sharded");
            }
        free(owners);
    }
}

/* Configure, wire and run `world` rank threads; the outcome in *out. */
static void run(host_check *c, const char *data, const char *strategy, int with_sets,
                int32_t world, run_shared *sh, run_result *out) {
    memset(out, 0, sizeof *out);
    ct_error err = {.struct_size = sizeof err};
    char ini[2048];
    run_ini(ini, sizeof ini, data, strategy, world);
    host_config *cfg = config_new();
    host_wiring w;
    rank_job jobs[MAXW];
    pthread_t tid[MAXW];
    int32_t rc = cfg ? config_load_string(cfg, "check-plugin", ini, &err) : CT_ERR_NOMEM;
    for (int32_t i = 0; rc == CT_OK && with_sets && i < c->n_sets; i++) {
        const char *eq = strchr(c->sets[i], '=');
        char key[128];
        snprintf(key, sizeof key, "%.*s", (int)(eq - c->sets[i]), c->sets[i]);
        rc = config_set(cfg, "strategy", key, eq + 1, "--set", &err);
    }
    if (rc == CT_OK) rc = wiring_resolve(cfg, c->reg, &w, &init_ckpt_source, &err);
    const ct_comm_vtable *cv = rc == CT_OK ? w.comm->vtable : NULL;
    if (rc == CT_OK) {
        ct_create_args a = {.struct_size = sizeof a, .section = "comm", .world_size = world};
        if (!(sh->comm_world = CALLS(w.comm, "world_create", cv->world_create(world, &a, &err))))
            rc = err.code ? err.code : CT_ERR_COMM;
    }
    if (rc != CT_OK) {
        out->rc = rc;
        out->failed_rank = -1;
        snprintf(out->message, sizeof out->message, "%s", err.message);
        goto out_config;
    }
    sh->cfg = cfg;
    sh->wiring = &w;
    sh->world = world;
    sh->out = out;
    memset(jobs, 0, sizeof jobs);
    for (int32_t r = 0; r < world; r++) {
        jobs[r].sh = sh;
        jobs[r].rank = r;
        pthread_create(&tid[r], NULL, rank_thread, &jobs[r]);
    }
    for (int32_t r = 0; r < world; r++) pthread_join(tid[r], NULL);
    CALLS_VOID(w.comm, "world_destroy", cv->world_destroy(sh->comm_world));
    sh->comm_world = NULL;
    /* a rank's own error before the communication errors it caused elsewhere */
    for (int pass = 0; pass < 2 && !out->rc; pass++)
        for (int32_t r = 0; r < world && !out->rc; r++)
            if (jobs[r].rc != CT_OK && (pass == 1 || jobs[r].rc != CT_ERR_COMM)) {
                out->rc = jobs[r].rc;
                out->failed_rank = r;
                snprintf(out->message, sizeof out->message, "%s", jobs[r].err.message);
            }
    if (!out->rc && !sh->is_reference) coverage(jobs, world, out);
    for (int32_t r = 0; r < world; r++)
        if (!(jobs[r].grad_err <= out->grad_err)) {
            out->grad_err = jobs[r].grad_err;
            out->grad_unit = jobs[r].grad_unit;
            out->grad_rank = r;
            out->grad_index = jobs[r].grad_index;
            out->grad_want = jobs[r].grad_want;
            out->grad_got = jobs[r].grad_got;
        }
out_config:
    if (cfg) config_free(cfg);
}

/* max over steps of |a - b| / |b|; *at the step. */
static double max_rel(const double *a, const double *b, int *at) {
    double worst = 0;
    *at = 0;
    for (int s = 0; s < STEPS; s++) {
        double e = fabs(a[s] - b[s]) / fmax(fabs(b[s]), 1e-30);
        if (!(e <= worst)) worst = isfinite(e) ? e : INFINITY, *at = s;
    }
    return worst;
}

static void judge(host_check *c, int32_t world, const run_result *got, const run_result *ref) {
    if (got->rc != CT_OK) {
        if (got->failed_rank >= 0)
            check_verdict(c, 0, "world %d: %d training steps: rank %d: %s", (int)world, STEPS,
                          (int)got->failed_rank, got->message);
        else
            check_verdict(c, 0, "world %d: set-up: %s", (int)world, got->message);
        return;
    }
    int at;
    double e = max_rel(got->loss, ref->loss, &at);
    check_verdict(c, e <= REL_TOL, "world %d: losses of %d steps match ddp at world 1 (max rel "
                  "diff %.2g, tol %.0e; step %d: expected %.9g got %.9g)", (int)world, STEPS, e,
                  REL_TOL, at + 1, ref->loss[at], got->loss[at]);
    e = max_rel(got->gnorm, ref->gnorm, &at);
    check_verdict(c, e <= REL_TOL, "world %d: gradient norms of %d steps match ddp at world 1 "
                  "(max rel diff %.2g, tol %.0e; step %d: expected %.9g got %.9g)", (int)world,
                  STEPS, e, REL_TOL, at + 1, ref->gnorm[at], got->gnorm[at]);
    if (got->cover_ok)
        check_verdict(c, 1, "world %d: the shards cover every element of every unit once (or "
                      "all of it on every rank, replicated)", (int)world);
    else
        check_verdict(c, 0, "world %d: the shards cover every element of every unit once: %s",
                      (int)world, got->cover_message);
    check_verdict(c, got->grad_err <= REL_TOL, "world %d: step-1 gradient of every unit matches "
                  "ddp's elementwise (max err %.2g of the unit's largest, tol %.0e; worst: rank %d "
                  "unit %d element %llu: expected %.9g got %.9g)", (int)world, got->grad_err,
                  REL_TOL, (int)got->grad_rank, (int)got->grad_unit,
                  (unsigned long long)got->grad_index, got->grad_want, got->grad_got);
}

/* One world size (one child process per world, check_child.c): the reference (ddp at world 1)
 * and the plugin at `world`, judged against it. */
typedef struct strat_job {
    const char *data;
    int32_t     world;
} strat_job;

typedef struct strat_ref {
    double  first, last; /* the reference's losses at step 1 and STEPS */
    int32_t ok;
} strat_ref;

static void body_world(host_check *c, void *ctx, void *out) {
    const strat_job *job = ctx;
    strat_ref *o = out;
    static float *ref_grads[MAXU];
    static uint64_t ref_numel[MAXU];
    static run_result ref, got;
    run_shared sh = {.ref = ref_grads, .ref_numel = ref_numel, .is_reference = 1};
    run(c, job->data, "ddp", 0, 1, &sh, &ref);
    if (ref.rc != CT_OK) {
        check_verdict(c, 0, "world %d: reference run (ddp, world 1): %s", (int)job->world,
                      ref.message);
        goto out;
    }
    sh.is_reference = 0;
    run(c, job->data, c->plugin->path, 1, job->world, &sh, &got);
    judge(c, job->world, &got, &ref);
    o->first = ref.loss[0];
    o->last = ref.loss[STEPS - 1];
    o->ok = 1;
out:
    for (int u = 0; u < MAXU; u++) free(ref_grads[u]);
}

void check_strategy(host_check *c) {
    ct_error err = {.struct_size = sizeof err};
    static const char *const skip[] = {"plugin", NULL};
    host_config *keys = NULL; /* the --set keys, validated once before any run */
    if (check_config(c, NULL, "strategy", skip, &keys, &err) != CT_OK) {
        check_verdict(c, 0, "[strategy] from --set and defaults: %s", err.message);
        return;
    }
    config_free(keys);
    const char *tmp = getenv("TMPDIR");
    char dir[1024], data[1100];
    snprintf(dir, sizeof dir, "%s/ctrain-check-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        check_verdict(c, 0, "set-up: cannot create a temporary folder %s: %s ---> set TMPDIR to "
                      "a writable folder", dir, strerror(errno));
        return;
    }
    snprintf(data, sizeof data, "%s/train.bin", dir);
    uint16_t *tokens = malloc(TOKENS * sizeof *tokens);
    strat_ref ref = {0};
    if (!tokens) {
        check_verdict(c, 0, "set-up: out of memory");
        goto out_rmdir;
    }
    /* a repeating pattern with noise: something to learn in a few steps */
    for (int i = 0; i < TOKENS; i++)
        tokens[i] = (uint16_t)((i % 7) * 9 + ct_hash64(CHECK_SEED, (uint64_t)i) % 3) % VOCAB;
    if (shard_write(data, tokens, TOKENS, &err) != CT_OK) {
        check_verdict(c, 0, "set-up: %s", err.message);
        goto out_rmdir;
    }
    for (int32_t world = 1; world <= MAXW && !c->stop; world++) {
        char what[64];
        snprintf(what, sizeof what, "world %d: %d training steps against ddp", (int)world, STEPS);
        strat_job job = {data, world};
        strat_ref got = {0};
        if (check_in_child(c, what, body_world, &job, &got, sizeof got) && got.ok) ref = got;
    }
    if (ref.ok)
        check_note(c, "reference: ddp at world 1, losses %.6f .. %.6f over %d steps; not checked "
                   "yet: bf16 policies, grad_accum > 1, world sizes > 2, memory()", ref.first,
                   ref.last, STEPS);
    unlink(data);
out_rmdir:
    rmdir(dir);
    free(tokens);
}
