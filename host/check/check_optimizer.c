/* check_optimizer.c — check-plugin's checks of an optimizer (ABI 1.7), on one unit holding a
 * tensor of every role (two hidden matrices, an embedding, a norm): state_names gives at most
 * CT_OPTIM_MAX_STATE distinct names; a zero gradient with zero weight decay leaves every weight
 * as it was; on a quadratic f(p) = 1/2 sum a_i (p_i - t_i)^2 the first update goes downhill
 * (its inner product with the gradient is negative) and 20 steps lower f; the state is all the
 * plugin keeps (after 5 steps, a new instance given copies of the parameters and the state
 * makes the same 6th step, bit for bit); the grad buffer is not written; and with a replicated
 * shard (ddp, no_shard) every rank of worlds of 1, 2 and 3 ranks (threads engine, one instance
 * per rank) ends with the bits of world 1. Sharded as full_shard lays it out, the difference
 * from the replicated run is printed as a note (an optimizer may reduce over ranks).
 * Not for: an optimizer's agreement with a reference (tests/optim_reference.py).
 * Buffers are fenced (check_guard.c); each group of checks runs in a child (check_child.c).
 */
#include "check/check.h"

#include "plugin/calls.h"
#include "plugin/contract.h"

#include <ctrain/numerics.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum { MAXN = 3, N_T = 4, STEPS = 8 };

typedef struct toy { const char *name; int64_t rows, cols; int32_t role; } toy;
static const toy tensors[N_T] = {
    {"wte.weight", 24, 12, CT_ROLE_EMBEDDING},
    {"blocks.0.attn.qkv.weight", 16, 12, CT_ROLE_MATRIX},
    {"blocks.0.mlp.proj.weight", 12, 20, CT_ROLE_MATRIX},
    {"blocks.0.ln1.weight", 12, 0, CT_ROLE_NORM},
};

static uint64_t t_numel(int k) { return (uint64_t)(tensors[k].rows * (tensors[k].cols ? tensors[k].cols : 1)); }
static uint64_t t_off(int k) {
    uint64_t o = 0;
    for (int j = 0; j < k; j++) o += ct_align_up(t_numel(j), CT_TENSOR_ALIGN);
    return o;
}
static uint64_t unit_len(void) { return t_off(N_T - 1) + t_numel(N_T - 1); }

/* The quadratic's curvature and target of element i. */
static double curv(uint64_t i) { return 1.25 + 0.75 * check_urand(CHECK_SEED + 1, i); }
static double target(uint64_t i) { return 0.5 * check_urand(CHECK_SEED + 2, i); }
static float init_p(uint64_t i) { return (float)check_urand(CHECK_SEED + 3, i); }

/* One rank's shard of the unit and the optimizer's buffers (fenced host memory). */
typedef struct shard_bufs {
    float   *param, *grad, *state[CT_OPTIM_MAX_STATE];
    uint8_t *mask;
    uint64_t numel, offset, padded;
    uint32_t n_state;
    ct_optim_tensor t[N_T];
} shard_bufs;

static void bufs_free(shard_bufs *b) {
    check_buf_free(b->param);
    check_buf_free(b->grad);
    check_buf_free(b->mask);
    for (uint32_t k = 0; k < CT_OPTIM_MAX_STATE; k++) check_buf_free(b->state[k]);
    memset(b, 0, sizeof *b);
}

/* Shard `rank` of `world` (world 1 or replicated: the whole padded unit), weights from init_p. */
static int bufs_open(shard_bufs *b, uint32_t n_state, int32_t rank, int32_t world, float wd) {
    memset(b, 0, sizeof *b);
    b->padded = ct_align_up(unit_len(), (uint64_t)world * CT_TENSOR_ALIGN);
    b->numel = b->padded / (uint64_t)world;
    b->offset = (uint64_t)rank * b->numel;
    b->n_state = n_state;
    b->param = check_buf_alloc("param", b->numel * 4, 0);
    b->grad = check_buf_alloc("grad", b->numel * 4, 1);
    b->mask = check_buf_alloc("decay_mask", b->numel, 1);
    int ok = b->param && b->grad && b->mask;
    for (uint32_t k = 0; k < n_state && ok; k++) ok = (b->state[k] = check_buf_alloc("state", b->numel * 4, 0)) != NULL;
    if (!ok) return 0;
    for (int k = 0; k < N_T; k++) {
        uint64_t lo = t_off(k), hi = lo + t_numel(k);
        uint64_t x = lo > b->offset ? lo : b->offset;
        uint64_t y = hi < b->offset + b->numel ? hi : b->offset + b->numel;
        ct_optim_tensor *o = &b->t[k];
        o->struct_size = sizeof *o;
        o->name = tensors[k].name;
        o->ndim = tensors[k].cols ? 2 : 1;
        o->shape[0] = tensors[k].rows;
        o->shape[1] = tensors[k].cols;
        o->unit_offset = lo;
        if (y > x) o->part_begin = x - lo, o->part_numel = y - x, o->shard_offset = x - b->offset;
        o->role = tensors[k].role;
        o->weight_decay = tensors[k].role == CT_ROLE_NORM ? 0 : wd;
        o->lr_mult = 1;
        for (uint64_t i = x; i < y; i++) {
            b->param[i - b->offset] = init_p(i);
            b->mask[i - b->offset] = o->weight_decay != 0;
        }
    }
    return 1;
}

/* grad = the quadratic's gradient at param (zero: all 0). */
static void set_grad(shard_bufs *b, int zero) {
    for (int k = 0; k < N_T; k++)
        for (uint64_t i = 0; i < b->t[k].part_numel; i++) {
            uint64_t at = b->t[k].shard_offset + i, e = b->offset + at;
            b->grad[at] = zero ? 0.0f : (float)(curv(e) * ((double)b->param[at] - target(e)));
        }
}

static double objective(const shard_bufs *b) {
    double f = 0;
    for (int k = 0; k < N_T; k++)
        for (uint64_t i = 0; i < b->t[k].part_numel; i++) {
            uint64_t at = b->t[k].shard_offset + i, e = b->offset + at;
            double d = (double)b->param[at] - target(e);
            f += 0.5 * curv(e) * d * d;
        }
    return f;
}

typedef struct opt_inst {
    host_check                *c;
    const ct_optimizer_vtable *vt;
    check_instance             inst;
} opt_inst;

/* One update of b at step `step`; the grad buffer must come back as it was. */
static int32_t update(opt_inst *o, shard_bufs *b, int64_t step, float lr, float wd,
                      int32_t replicated, ct_error *err) {
    ct_optim_step st = {.struct_size = sizeof st, .step = step, .lr = lr, .grad_scale = 1.0f,
                        .weight_decay = wd, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f};
    ct_optim_shard sh = {.struct_size = sizeof sh, .unit = 0, .unit_name = "check",
                         .param = b->param, .grad = b->grad, .state = b->state,
                         .n_state = b->n_state, .numel = b->numel, .offset = b->offset,
                         .padded_numel = b->padded, .replicated = replicated,
                         .decay_mask = b->mask, .n_tensors = N_T, .tensors = b->t};
    check_buf_seal(b->grad);
    check_buf_seal(b->mask);
    int32_t rc = CALLS(o->c->plugin, "update", o->vt->update(o->inst.self, &st, &sh, err));
    char why[256];
    int fenced = check_buf_verify(b->grad, "update", why, sizeof why) &&
                 check_buf_verify(b->mask, "update", why, sizeof why) &&
                 check_buf_verify(b->param, "update", why, sizeof why);
    for (uint32_t k = 0; fenced && k < b->n_state; k++)
        fenced = check_buf_verify(b->state[k], "update", why, sizeof why);
    if (rc == CT_OK && !fenced) rc = ct_error_set(err, CT_ERR_INVALID, "%s", why);
    return contract_name_silent_error(rc, err, o->c->plugin, "update");
}

/* What every check needs: [optimizer.NAME] from --set, device cpu, comm threads. */
typedef struct opt_setup {
    host_config       *cfg;
    const host_plugin *threads;
    char               section[96];
} opt_setup;

static int setup_open(host_check *c, opt_setup *su, ct_error *err) {
    static const char *const comm_skip[] = {"plugin", "world_size", NULL};
    memset(su, 0, sizeof *su);
    snprintf(su->section, sizeof su->section, "optimizer.%s", c->plugin->desc.name);
    int32_t rc = check_config(c, "[device]\nthreads = 1\n[comm]\ntimeout_s = 20\n", su->section,
                              NULL, &su->cfg, err);
    if (rc == CT_OK) rc = check_device_section(c, su->cfg, err);
    if (rc == CT_OK && !(su->threads = registry_resolve(c->reg, CT_KIND_COMM, "threads", err)))
        rc = err->code ? err->code : CT_ERR_INVALID;
    if (rc == CT_OK)
        rc = config_validate_section(su->cfg, "comm", su->threads->params, sizeof(ct_param_spec),
                                     su->threads->desc.name, comm_skip, err);
    return rc == CT_OK;
}

static int32_t open_opt(host_check *c, const opt_setup *su, int32_t rank, int32_t world,
                        ct_device_ref dev, ct_comm_ref comm, opt_inst *o, uint32_t *n_state,
                        const char *const **names, ct_error *err) {
    o->c = c;
    o->vt = c->plugin->vtable;
    int32_t rc = check_create(&o->inst, c->plugin, su->cfg, su->section, rank, world, dev, comm,
                              NULL, err);
    if (rc != CT_OK) return rc;
    rc = CALLS(c->plugin, "state_names", o->vt->state_names(o->inst.self, n_state, names, err));
    return contract_name_silent_error(rc, err, c->plugin, "state_names");
}

/* World 1: names, zero gradient, descent, state save -> load. */
static void body_single(host_check *c, void *ctx, void *out) {
    (void)ctx, (void)out;
    ct_error err = {.struct_size = sizeof err};
    opt_setup su;
    check_instance dev = {0};
    ct_device_ref devref = {0};
    ct_comm_ref no_comm = {0};
    opt_inst a = {0}, b = {0};
    shard_bufs s = {0}, t = {0};
    uint32_t n = 0, n2 = 0;
    const char *const *names = NULL, *const *names2 = NULL;
    if (!setup_open(c, &su, &err) || check_device_open(c, su.cfg, 0, &dev, &devref, &err) != CT_OK ||
        open_opt(c, &su, 0, 1, devref, no_comm, &a, &n, &names, &err) != CT_OK) {
        check_verdict(c, 0, "create and state_names at world 1: %s", err.message);
        check_stop(c);
        goto out;
    }
    int ok = n <= CT_OPTIM_MAX_STATE && (n == 0 || names);
    for (uint32_t i = 0; ok && i < n; i++) {
        ok = names[i] && names[i][0];
        for (uint32_t j = 0; ok && j < i; j++) ok = strcmp(names[i], names[j]) != 0;
    }
    char list[256] = "";
    for (uint32_t i = 0; ok && i < n; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", names[i]);
    if (!check_verdict(c, ok, "state_names: %u distinct named per-element buffers (at most %d)%s%s%s",
                       n, CT_OPTIM_MAX_STATE, n ? ": " : "", list, ok ? "" : " ---> name each once")) {
        check_stop(c);
        goto out;
    }
    /* a zero gradient with zero decay: 3 steps, every weight the same bits */
    if (!bufs_open(&s, n, 0, 1, 0.0f)) goto out_nomem;
    set_grad(&s, 1);
    float *before = malloc(s.numel * sizeof *before);
    memcpy(before, s.param, s.numel * 4);
    int32_t rc = CT_OK;
    for (int64_t step = 1; step <= 3 && rc == CT_OK; step++) rc = update(&a, &s, step, 1e-2f, 0, 1, &err);
    uint64_t moved = 0;
    for (uint64_t i = 0; rc == CT_OK && i < s.numel; i++) moved += memcmp(&before[i], &s.param[i], 4) != 0;
    check_verdict(c, rc == CT_OK && moved == 0, "a zero gradient with zero weight decay leaves "
                  "every weight unchanged over 3 steps%s%s", rc != CT_OK ? ": " : "",
                  rc != CT_OK ? err.message : moved ? ": some weights moved" : "");
    free(before);
    bufs_free(&s);
    check_destroy(&a.inst);
    /* descent on the quadratic, from a fresh instance */
    if ((rc = open_opt(c, &su, 0, 1, devref, no_comm, &a, &n, &names, &err)) != CT_OK ||
        !bufs_open(&s, n, 0, 1, 0.0f)) {
        check_verdict(c, 0, "create: %s", err.message);
        goto out;
    }
    double f0 = objective(&s), dot = 0;
    set_grad(&s, 0);
    float *p0 = malloc(s.numel * sizeof *p0);
    memcpy(p0, s.param, s.numel * 4);
    rc = update(&a, &s, 1, 1e-2f, 0, 1, &err);
    for (uint64_t i = 0; i < s.numel; i++) dot += ((double)s.param[i] - p0[i]) * s.grad[i];
    free(p0);
    for (int64_t step = 2; step <= 20 && rc == CT_OK; step++) {
        set_grad(&s, 0);
        rc = update(&a, &s, step, 1e-2f, 0, 1, &err);
    }
    double f20 = objective(&s);
    check_verdict(c, rc == CT_OK && dot < 0, "a descent direction on a quadratic: the first "
                  "update's inner product with the gradient is %.3g (< 0)%s%s", dot,
                  rc ? ": " : "", rc ? err.message : "");
    check_verdict(c, rc == CT_OK && f20 < f0, "20 steps at lr 1e-2 lower the quadratic: %.6g -> "
                  "%.6g", f0, f20);
    /* state save -> load: 5 steps, then a new instance given copies makes the same 6th step */
    bufs_free(&s);
    check_destroy(&a.inst);
    if ((rc = open_opt(c, &su, 0, 1, devref, no_comm, &a, &n, &names, &err)) != CT_OK ||
        !bufs_open(&s, n, 0, 1, 0.1f) || !bufs_open(&t, n, 0, 1, 0.1f)) {
        check_verdict(c, 0, "create: %s", err.message);
        goto out;
    }
    for (int64_t step = 1; step <= 5 && rc == CT_OK; step++) {
        set_grad(&s, 0);
        rc = update(&a, &s, step, 1e-2f, 0.1f, 1, &err);
    }
    if (rc == CT_OK) rc = open_opt(c, &su, 0, 1, devref, no_comm, &b, &n2, &names2, &err);
    memcpy(t.param, s.param, s.numel * 4);
    for (uint32_t k = 0; k < n; k++) memcpy(t.state[k], s.state[k], s.numel * 4);
    set_grad(&s, 0);
    set_grad(&t, 0);
    if (rc == CT_OK) rc = update(&a, &s, 6, 1e-2f, 0.1f, 1, &err);
    if (rc == CT_OK) rc = update(&b, &t, 6, 1e-2f, 0.1f, 1, &err);
    uint64_t diff = 0;
    for (uint64_t i = 0; rc == CT_OK && i < s.numel; i++) {
        diff += memcmp(&s.param[i], &t.param[i], 4) != 0;
        for (uint32_t k = 0; k < n; k++) diff += memcmp(&s.state[k][i], &t.state[k][i], 4) != 0;
    }
    check_verdict(c, rc == CT_OK && diff == 0, "state save -> load: after 5 steps a new instance "
                  "given copies of the weights and the %u state buffers makes the same 6th step, "
                  "bit for bit%s%s", n, rc ? ": " : diff ? ": it differs (the plugin keeps state "
                  "outside its declared buffers) ---> declare it in state_names" : "",
                  rc ? err.message : "");
    goto out;
out_nomem:
    check_verdict(c, 0, "buffers: out of memory");
out:
    bufs_free(&s);
    bufs_free(&t);
    check_destroy(&b.inst);
    check_destroy(&a.inst);
    check_destroy(&dev);
    if (su.cfg) config_free(su.cfg);
}

/* ---- worlds of N ranks ------------------------------------------------------------------ */

typedef struct world_ctx world_ctx;
typedef struct rank_slot {
    world_ctx     *w;
    int32_t        rank;
    check_instance dev, comm;
    opt_inst       opt;
    ct_device_ref  devref;
    ct_comm_ref    commref;
    float         *result; /* (unit_len) this rank's view after STEPS: its part (sharded) */
    int32_t        rc;
    ct_error       err;
} rank_slot;

struct world_ctx {
    host_check        *c;
    opt_setup         *su;
    int32_t            n, sharded;
    void              *world;
    rank_slot          slots[MAXN];
};

/* STEPS steps of the quadratic on this rank's shard (the gradient of its own parameters: under a
 * replicated shard every rank computes the same). */
static void *rank_main(void *arg) {
    rank_slot *s = arg;
    world_ctx *w = s->w;
    calls_bind(1 + s->rank, s->rank);
    uint32_t n = 0;
    const char *const *names = NULL;
    shard_bufs b = {0};
    s->rc = open_opt(w->c, w->su, s->rank, w->n, s->devref, s->commref, &s->opt, &n, &names, &s->err);
    if (s->rc == CT_OK && !bufs_open(&b, n, w->sharded ? s->rank : 0, w->sharded ? w->n : 1, 0.1f))
        s->rc = ct_error_set(&s->err, CT_ERR_NOMEM, "out of memory");
    for (int64_t step = 1; step <= STEPS && s->rc == CT_OK; step++) {
        set_grad(&b, 0);
        s->rc = update(&s->opt, &b, step, 1e-2f, 0.1f, !w->sharded, &s->err);
    }
    for (int k = 0; k < N_T && s->rc == CT_OK; k++)
        memcpy(s->result + b.t[k].unit_offset + b.t[k].part_begin, b.param + b.t[k].shard_offset,
               b.t[k].part_numel * 4);
    if (s->rc != CT_OK && s->commref.vt && s->commref.vt->abort)
        s->commref.vt->abort(s->commref.self, s->err.message);
    bufs_free(&b);
    calls_unbind();
    return NULL;
}

static void world_close(world_ctx *w) {
    for (int32_t r = 0; r < w->n; r++) {
        rank_slot *s = &w->slots[r];
        check_destroy(&s->opt.inst);
        check_destroy(&s->comm);
        check_destroy(&s->dev);
        free(s->result);
        s->result = NULL;
    }
    if (w->world) {
        const host_plugin *t = w->su->threads;
        CALLS_VOID(t, "world_destroy", ((const ct_comm_vtable *)t->vtable)->world_destroy(w->world));
    }
    w->world = NULL;
}

/* Run a world of N ranks; 1 when every rank finished. */
static int world_run(world_ctx *w, int32_t N, int sharded, ct_error *err) {
    const host_plugin *tp = w->su->threads;
    const ct_comm_vtable *cv = tp->vtable;
    ct_host wh;
    hostapi_init(&wh, w->su->cfg, 0, "threads", NULL);
    ct_create_args wa = {.struct_size = sizeof wa, .api = hostapi_table(), .host = &wh,
                         .section = "comm", .world_size = N, .seed = CHECK_SEED};
    w->n = N;
    w->sharded = sharded;
    memset(w->slots, 0, sizeof w->slots);
    if (!(w->world = CALLS(tp, "world_create", cv->world_create(N, &wa, err)))) return 0;
    for (int32_t r = 0; r < N; r++) {
        rank_slot *s = &w->slots[r];
        s->w = w;
        s->rank = r;
        s->err.struct_size = sizeof s->err;
        s->result = calloc(unit_len(), sizeof(float));
        ct_comm_ref no_comm = {0};
        int32_t rc = s->result ? check_device_open(w->c, w->su->cfg, r, &s->dev, &s->devref, err)
                               : ct_error_set(err, CT_ERR_NOMEM, "out of memory");
        if (rc == CT_OK)
            rc = check_create(&s->comm, tp, w->su->cfg, "comm", r, N, s->devref, no_comm,
                              w->world, err);
        if (rc != CT_OK) return 0;
        s->commref = (ct_comm_ref){cv, s->comm.self, r, N};
    }
    pthread_t tid[MAXN];
    for (int32_t r = 0; r < N; r++) pthread_create(&tid[r], NULL, rank_main, &w->slots[r]);
    for (int32_t r = 0; r < N; r++) pthread_join(tid[r], NULL);
    for (int32_t r = 0; r < N; r++)
        if (w->slots[r].rc != CT_OK) {
            *err = w->slots[r].err;
            return 0;
        }
    return 1;
}

static void body_worlds(host_check *c, void *ctx, void *out) {
    (void)ctx, (void)out;
    ct_error err = {.struct_size = sizeof err};
    opt_setup su;
    world_ctx w = {.c = c, .su = &su};
    float *ref = calloc(unit_len(), sizeof *ref);
    if (!ref || !setup_open(c, &su, &err)) {
        check_verdict(c, 0, "set-up ([optimizer.%s] from --set, device cpu, comm threads): %s",
                      c->plugin->desc.name, err.message);
        goto out;
    }
    int ok = world_run(&w, 1, 0, &err);
    if (ok) memcpy(ref, w.slots[0].result, unit_len() * 4);
    world_close(&w);
    if (!check_verdict(c, ok, "%d steps at world 1%s%s", STEPS, ok ? "" : ": ", ok ? "" : err.message))
        goto out;
    for (int32_t N = 2; N <= MAXN; N++) {
        ok = world_run(&w, N, 0, &err);
        uint64_t diff = 0;
        for (int32_t r = 0; ok && r < N; r++)
            for (uint64_t i = 0; i < unit_len(); i++) diff += memcmp(&ref[i], &w.slots[r].result[i], 4) != 0;
        world_close(&w);
        check_verdict(c, ok && diff == 0, "replicated shards (ddp, no_shard): every rank of a "
                      "world of %d has world 1's bits after %d steps%s%s", (int)N, STEPS,
                      !ok ? ": " : diff ? ": elements differ" : "", !ok ? err.message : "");
    }
    for (int32_t N = 2; N <= MAXN; N++) { /* full_shard's layout: a note */
        ok = world_run(&w, N, 1, &err);
        double worst = 0;
        uint64_t diff = 0;
        float *got = calloc(unit_len(), sizeof *got);
        for (int32_t r = 0; ok && got && r < N; r++) { /* each rank's slice, assembled */
            uint64_t per = ct_align_up(unit_len(), (uint64_t)N * CT_TENSOR_ALIGN) / (uint64_t)N;
            for (uint64_t i = (uint64_t)r * per; i < (uint64_t)(r + 1) * per && i < unit_len(); i++)
                got[i] = w.slots[r].result[i];
        }
        for (uint64_t i = 0; ok && got && i < unit_len(); i++) {
            diff += memcmp(&got[i], &ref[i], 4) != 0;
            double d = fabs((double)got[i] - ref[i]) / fmax(fabs(ref[i]), 1e-2);
            if (d > worst) worst = d;
        }
        free(got);
        world_close(&w);
        if (ok)
            check_note(c, "sharded as full_shard over %d ranks: %llu elements differ from the "
                       "replicated run (max relative difference %.3g)", (int)N,
                       (unsigned long long)diff, worst);
        else
            check_verdict(c, 0, "sharded as full_shard over %d ranks: %s", (int)N, err.message);
    }
out:
    free(ref);
    if (su.cfg) config_free(su.cfg);
}

void check_optimizer(host_check *c) {
    check_in_child(c, "the update on one rank", body_single, NULL, NULL, 0);
    if (!c->stop) check_in_child(c, "worlds of 1 to 3 ranks", body_worlds, NULL, NULL, 0);
}
