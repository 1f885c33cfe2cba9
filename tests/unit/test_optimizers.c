/* test_optimizers.c — the optimizer plugins (ABI 1.7: adamw, sgd, lion, muon) driven as the
 * host drives them, on a two-unit toy model whose tensors have every role: each gives the same
 * bits on a replicated shard (ddp) as sharded over 2, 3 and 4 ranks of the threads engine
 * (full_shard's layout, which cuts matrices inside rows; muon gathers them), and adamw's own
 * loop gives the device kernel's bits. With CTRAIN_OPTIM_TRACE=DIR set, the replicated runs are
 * written to DIR/NAME.json for tests/optim_reference.py (a Python transcription of each
 * update, and PyTorch's where installed: tests/cli/test_optimizers.sh). Not for: the host's
 * driver (tests/cli/test_optimizers.sh trains through it).
 */
#include "ct_test.h"
#include "threads_world.h"

#include <ctrain/ctrain.h>
#include <ctrain/numerics.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STEPS 20
#define N_UNITS 2
#define MAX_T 4

typedef struct toy_tensor {
    const char *name;
    int64_t     rows, cols; /* cols 0: 1-D */
    int32_t     role;
} toy_tensor;

static const toy_tensor toy[N_UNITS][MAX_T] = {
    {{"wte.weight", 16, 8, CT_ROLE_EMBEDDING}, {"lnf.weight", 8, 0, CT_ROLE_NORM},
     {"lm_head.weight", 10, 8, CT_ROLE_HEAD}, {NULL, 0, 0, 0}},
    {{"blocks.0.mlp.fc.weight", 12, 8, CT_ROLE_MATRIX}, {"blocks.0.mlp.fc.bias", 12, 0, CT_ROLE_BIAS},
     {"blocks.0.mlp.proj.weight", 8, 20, CT_ROLE_MATRIX}, {"blocks.0.ln2.weight", 8, 0, CT_ROLE_NORM}},
};
static const char *const unit_names[N_UNITS] = {"root", "block.0"};

static uint64_t numel_of(const toy_tensor *t) { return (uint64_t)(t->rows * (t->cols ? t->cols : 1)); }
static uint64_t offset_of(uint32_t u, uint32_t k) {
    uint64_t o = 0;
    for (uint32_t j = 0; j < k; j++) o += ct_align_up(numel_of(&toy[u][j]), CT_TENSOR_ALIGN);
    return o;
}
static uint32_t n_tensors(uint32_t u) {
    uint32_t n = 0;
    while (n < MAX_T && toy[u][n].name) n++;
    return n;
}
static uint64_t unit_len(uint32_t u) {
    uint32_t n = n_tensors(u);
    return offset_of(u, n - 1) + numel_of(&toy[u][n - 1]);
}
static uint64_t padded_len(uint32_t u, int32_t world) {
    return ct_align_up(unit_len(u), (uint64_t)world * CT_TENSOR_ALIGN);
}

/* The step's schedule: lr varies, clipping scales some steps' gradients. */
static float lr_at(int32_t s) { return (float)(0.02 * (1.0 + 0.3 * sin(0.7 * s))); }
static float scale_at(int32_t s) { return s % 4 == 0 ? 0.625f : 1.0f; }
static const float WD = 0.1f, B1 = 0.9f, B2 = 0.95f, EPS = 1e-8f;

/* Groups as the host makes them with decay_embeddings = false and lr_mult_norm = 0.5: no decay
 * on embeddings, norms and biases; norms at half the lr. */
static float wd_of(int32_t role) { return role == CT_ROLE_MATRIX || role == CT_ROLE_HEAD ? WD : 0; }
static float mult_of(int32_t role) { return role == CT_ROLE_NORM ? 0.5f : 1.0f; }

static float init_value(uint32_t u, uint64_t i) {
    return (float)(0.5 * (2.0 * ct_uniform01(ct_hash64(7, u), i) - 1.0));
}
static float grad_value(int32_t s, uint32_t u, uint64_t i) {
    double x = 2.0 * ct_uniform01(ct_hash64((uint64_t)s * 31 + u, 99), i) - 1.0;
    return (float)(x * (1.0 + 0.5 * (double)(i % 5))); /* some elements larger than others */
}

typedef struct opt_case {
    const char *so, *section, *ini, *label;
    int32_t     world;
    int32_t     sharded;
    /* results: params after each step, per unit at their unpadded offsets */
    float      *after[STEPS + 1][N_UNITS];
} opt_case;

static void rank_job_fn(rank_job *job) {
    opt_case *c = job->arg;
    int32_t R = job->rank, W = c->sharded ? c->world : 1;
    ct_harness *h = job->w->h;
    ct_error *err = &job->err;
    const ct_plugin_desc *d = harness_load(c->so);
    if (!d) {
        job->rc = CT_ERR_IO;
        return;
    }
    const ct_optimizer_vtable *vt = d->vtable;
    ct_create_args a = harness_args_rank(h, c->section, R, c->world);
    a.comm = (ct_comm_ref){job->w->vt, job_comm(job), R, c->world};
    void *self = vt->create(&a, err);
    if (!self) {
        job->rc = err->code ? err->code : CT_ERR_INTERNAL;
        return;
    }
    uint32_t n_state = 0;
    const char *const *names = NULL;
    job_note(job, vt->state_names(self, &n_state, &names, err));
    float *param[N_UNITS], *grad[N_UNITS], *state[N_UNITS][CT_OPTIM_MAX_STATE];
    uint8_t *mask[N_UNITS];
    ct_optim_tensor tens[N_UNITS][MAX_T];
    uint64_t sn[N_UNITS], so[N_UNITS];
    for (uint32_t u = 0; u < N_UNITS; u++) {
        uint64_t P = padded_len(u, W);
        sn[u] = P / (uint64_t)W;
        so[u] = (uint64_t)R * sn[u];
        param[u] = calloc(sn[u], sizeof(float));
        grad[u] = calloc(sn[u], sizeof(float));
        mask[u] = calloc(sn[u], 1);
        for (uint32_t k = 0; k < CT_OPTIM_MAX_STATE; k++) state[u][k] = calloc(sn[u], sizeof(float));
        for (uint32_t k = 0; k < n_tensors(u); k++) {
            const toy_tensor *t = &toy[u][k];
            uint64_t lo = offset_of(u, k), hi = lo + numel_of(t);
            uint64_t x = lo > so[u] ? lo : so[u], y = hi < so[u] + sn[u] ? hi : so[u] + sn[u];
            ct_optim_tensor *o = &tens[u][k];
            memset(o, 0, sizeof *o);
            o->struct_size = sizeof *o;
            o->name = t->name;
            o->ndim = t->cols ? 2 : 1;
            o->shape[0] = t->rows;
            o->shape[1] = t->cols;
            o->unit_offset = lo;
            if (y > x) o->part_begin = x - lo, o->part_numel = y - x, o->shard_offset = x - so[u];
            o->role = t->role;
            o->weight_decay = wd_of(t->role);
            o->lr_mult = mult_of(t->role);
            for (uint64_t i = x; i < y; i++) {
                param[u][i - so[u]] = init_value(u, i);
                mask[u][i - so[u]] = wd_of(t->role) != 0;
            }
        }
    }
    for (int32_t s = 1; s <= STEPS && job->rc == CT_OK; s++) {
        ct_optim_step st = {.struct_size = sizeof st, .step = s, .lr = lr_at(s),
                            .grad_scale = scale_at(s), .weight_decay = WD, .beta1 = B1,
                            .beta2 = B2, .eps = EPS};
        for (uint32_t u = 0; u < N_UNITS && job->rc == CT_OK; u++) {
            for (uint32_t k = 0; k < n_tensors(u); k++) {
                const ct_optim_tensor *o = &tens[u][k];
                for (uint64_t i = 0; i < o->part_numel; i++)
                    grad[u][o->shard_offset + i] = grad_value(s, u, o->unit_offset + o->part_begin + i);
            }
            ct_optim_shard sh = {
                .struct_size = sizeof sh, .unit = u, .unit_name = unit_names[u],
                .param = param[u], .grad = grad[u], .state = state[u], .n_state = n_state,
                .numel = sn[u], .offset = so[u], .padded_numel = sn[u] * (uint64_t)W,
                .replicated = !c->sharded, .decay_mask = mask[u], .n_tensors = n_tensors(u),
                .tensors = tens[u],
            };
            job_note(job, vt->update(self, &st, &sh, err));
            /* this rank's part of each tensor after step s */
            for (uint32_t k = 0; k < n_tensors(u); k++) {
                const ct_optim_tensor *o = &tens[u][k];
                memcpy(c->after[s][u] + o->unit_offset + o->part_begin,
                       param[u] + o->shard_offset, o->part_numel * sizeof(float));
            }
        }
    }
    vt->destroy(self);
    for (uint32_t u = 0; u < N_UNITS; u++) {
        free(param[u]);
        free(grad[u]);
        free(mask[u]);
        for (uint32_t k = 0; k < CT_OPTIM_MAX_STATE; k++) free(state[u][k]);
    }
}

static int run_case(opt_case *c) {
    for (int32_t s = 0; s <= STEPS; s++)
        for (uint32_t u = 0; u < N_UNITS; u++) {
            c->after[s][u] = calloc(unit_len(u), sizeof(float));
            for (uint64_t i = 0; i < unit_len(u); i++) c->after[s][u][i] = init_value(u, i);
        }
    char ini[512];
    snprintf(ini, sizeof ini, "[device]\nthreads = 1\n[comm.threads]\ntimeout_s = 30\n%s",
             c->ini ? c->ini : "");
    world_run w;
    if (!world_open(&w, c->world, ini)) {
        world_close(&w);
        return 0;
    }
    /* the section validated (defaults filled) once, through the host's code */
    ct_error err = {.struct_size = sizeof err};
    int ok = harness_validate(w.h, c->so, c->section, &err) == CT_OK;
    CT_CHECK_MSG(ok, "%s: %s", c->label, err.message);
    rank_job jobs[MAX_RANKS];
    if (ok) {
        world_run_all(&w, rank_job_fn, c, jobs);
        check_all_ok(jobs, c->world);
        for (int32_t r = 0; r < c->world; r++) ok &= jobs[r].rc == CT_OK;
    }
    world_close(&w);
    return ok;
}

static void free_case(opt_case *c) {
    for (int32_t s = 0; s <= STEPS; s++)
        for (uint32_t u = 0; u < N_UNITS; u++) free(c->after[s][u]);
}

/* Every parameter after every step bit for bit equal in a and b. */
static void check_same_bits(const opt_case *a, const opt_case *b) {
    for (int32_t s = 1; s <= STEPS; s++)
        for (uint32_t u = 0; u < N_UNITS; u++)
            for (uint64_t i = 0; i < unit_len(u); i++)
                if (memcmp(&a->after[s][u][i], &b->after[s][u][i], sizeof(float)) != 0) {
                    CT_CHECK_MSG(0, "%s vs %s: step %d unit %u element %llu: %.9g vs %.9g",
                                 a->label, b->label, (int)s, u, (unsigned long long)i,
                                 a->after[s][u][i], b->after[s][u][i]);
                    return;
                }
}

static void write_json_floats(FILE *f, const float *x, uint64_t n) {
    fputc('[', f);
    for (uint64_t i = 0; i < n; i++) fprintf(f, "%s%.9g", i ? "," : "", x[i]);
    fputc(']', f);
}

/* DIR/NAME.json: the toy model, the schedule, every step's gradients and C's parameters. */
static void write_trace(const char *dir, const char *name, const char *keys, const opt_case *c) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.json", dir, name);
    FILE *f = fopen(path, "w");
    CT_CHECK_MSG(f != NULL, "cannot write %s", path);
    if (!f) return;
    fprintf(f, "{\"optimizer\": \"%s\", \"keys\": {%s}, \"beta1\": %.9g, \"beta2\": %.9g, "
            "\"eps\": %.9g, \"steps\": %d,\n \"lr\": [", name, keys, B1, B2, EPS, STEPS);
    for (int32_t s = 1; s <= STEPS; s++) fprintf(f, "%s%.9g", s > 1 ? "," : "", lr_at(s));
    fprintf(f, "],\n \"grad_scale\": [");
    for (int32_t s = 1; s <= STEPS; s++) fprintf(f, "%s%.9g", s > 1 ? "," : "", scale_at(s));
    fprintf(f, "],\n \"tensors\": [");
    int first = 1;
    for (uint32_t u = 0; u < N_UNITS; u++)
        for (uint32_t k = 0; k < n_tensors(u); k++) {
            const toy_tensor *t = &toy[u][k];
            uint64_t lo = offset_of(u, k), n = numel_of(t);
            float *buf = malloc(n * sizeof *buf);
            char shape[64];
            if (t->cols) snprintf(shape, sizeof shape, "[%lld, %lld]", (long long)t->rows,
                                  (long long)t->cols);
            else snprintf(shape, sizeof shape, "[%lld]", (long long)t->rows);
            fprintf(f, "%s\n  {\"name\": \"%s\", \"shape\": %s, \"role\": %d, "
                    "\"weight_decay\": %.9g, \"lr_mult\": %.9g,\n   \"init\": ", first ? "" : ",",
                    t->name, shape, (int)t->role, wd_of(t->role), mult_of(t->role));
            write_json_floats(f, c->after[0][u] + lo, n);
            fprintf(f, ",\n   \"grads\": [");
            for (int32_t s = 1; s <= STEPS; s++) {
                for (uint64_t i = 0; i < n; i++) buf[i] = grad_value(s, u, lo + i);
                fprintf(f, "%s", s > 1 ? "," : "");
                write_json_floats(f, buf, n);
            }
            fprintf(f, "],\n   \"after\": [");
            for (int32_t s = 1; s <= STEPS; s++) {
                fprintf(f, "%s", s > 1 ? "," : "");
                write_json_floats(f, c->after[s][u] + lo, n);
            }
            fprintf(f, "]}");
            free(buf);
            first = 0;
        }
    fprintf(f, "]}\n");
    fclose(f);
}

typedef struct plugin_case {
    const char *name, *so, *section, *ini, *keys; /* keys: JSON of the plugin's keys */
} plugin_case;

static const plugin_case plugins[] = {
    {"adamw", "optimizer_adamw.so", "optimizer.adamw", "[optimizer.adamw]\nkernel = plugin\n", ""},
    {"sgd", "optimizer_sgd.so", "optimizer.sgd",
     "[optimizer.sgd]\nmomentum = 0.9\nnesterov = true\n",
     "\"momentum\": 0.9, \"dampening\": 0, \"nesterov\": true"},
    {"sgd_damp", "optimizer_sgd.so", "optimizer.sgd",
     "[optimizer.sgd]\nmomentum = 0.8\ndampening = 0.25\n",
     "\"momentum\": 0.8, \"dampening\": 0.25, \"nesterov\": false"},
    {"lion", "optimizer_lion.so", "optimizer.lion", "[optimizer.lion]\nbeta1 = 0.9\nbeta2 = 0.99\n",
     "\"beta1\": 0.9, \"beta2\": 0.99"},
    {"muon", "optimizer_muon.so", "optimizer.muon", "[optimizer.muon]\nmomentum = 0.95\n",
     "\"momentum\": 0.95, \"nesterov\": true, \"ns_steps\": 5, \"ns_eps\": 1e-7"},
    {"muon_bf16", "optimizer_muon.so", "optimizer.muon",
     "[optimizer.muon]\nmomentum = 0.95\nns_dtype = bf16\n",
     "\"momentum\": 0.95, \"nesterov\": true, \"ns_steps\": 5, \"ns_eps\": 1e-7, "
     "\"ns_dtype\": \"bf16\""},
};

CT_TEST(each_optimizer_gives_the_same_bits_sharded_over_2_3_4_ranks_as_replicated) {
    const char *trace = getenv("CTRAIN_OPTIM_TRACE");
    for (size_t p = 0; p < sizeof plugins / sizeof *plugins; p++) {
        const plugin_case *pc = &plugins[p];
        opt_case rep = {.so = pc->so, .section = pc->section, .ini = pc->ini, .label = pc->name,
                        .world = 1, .sharded = 0};
        if (!run_case(&rep)) {
            free_case(&rep);
            continue;
        }
        if (trace && *trace) write_trace(trace, pc->name, pc->keys, &rep);
        for (int32_t w = 2; w <= 4; w++) {
            char label[64];
            snprintf(label, sizeof label, "%s sharded over %d ranks", pc->name, (int)w);
            opt_case sh = {.so = pc->so, .section = pc->section, .ini = pc->ini, .label = label,
                           .world = w, .sharded = 1};
            if (run_case(&sh)) check_same_bits(&rep, &sh);
            free_case(&sh);
        }
        free_case(&rep);
    }
}

CT_TEST(adamw_plugin_loop_gives_the_device_kernels_bits_with_groups_and_lr_multipliers) {
    opt_case a = {.so = "optimizer_adamw.so", .section = "optimizer.adamw",
                  .ini = "[optimizer.adamw]\nkernel = plugin\n", .label = "adamw plugin loop",
                  .world = 1};
    opt_case b = {.so = "optimizer_adamw.so", .section = "optimizer.adamw",
                  .ini = "[optimizer.adamw]\nkernel = device\n", .label = "cpu device's adamw",
                  .world = 1};
    if (run_case(&a) && run_case(&b)) check_same_bits(&a, &b);
    free_case(&a);
    free_case(&b);
}

CT_TEST(an_optimizer_moves_every_parameter_it_is_given_and_nothing_else) {
    /* the parameters change at step 1 for every optimizer (no update lost to a shard cut) */
    for (size_t p = 0; p < sizeof plugins / sizeof *plugins; p++) {
        opt_case c = {.so = plugins[p].so, .section = plugins[p].section, .ini = plugins[p].ini,
                      .label = plugins[p].name, .world = 3, .sharded = 1};
        if (run_case(&c)) {
            uint64_t same = 0;
            for (uint32_t u = 0; u < N_UNITS; u++)
                for (uint64_t i = 0; i < unit_len(u); i++) same += c.after[1][u][i] == c.after[0][u][i];
            /* alignment gaps between tensors keep their (initial) values; count the tensors' */
            uint64_t gaps = 0;
            for (uint32_t u = 0; u < N_UNITS; u++) {
                uint64_t inside = 0;
                for (uint32_t k = 0; k < n_tensors(u); k++) inside += numel_of(&toy[u][k]);
                gaps += unit_len(u) - inside;
            }
            CT_CHECK_MSG(same == gaps, "%s: %llu elements unchanged after step 1, %llu are "
                         "alignment gaps", plugins[p].name, (unsigned long long)same,
                         (unsigned long long)gaps);
        }
        free_case(&c);
    }
}
