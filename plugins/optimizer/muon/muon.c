/* muon.c — the optimizer plugin `muon`: momentum orthogonalised by a Newton–Schulz iteration
 * on the hidden 2-D matrices (Jordan et al. 2024; torch.optim.Muon's update), AdamW
 * (torch.optim.AdamW, [optim] beta1/beta2/eps) on embeddings, the head, norms and biases.
 * Not for: the schedule, clipping or checkpoints (the host's); devices other than the cpu.
 *
 * Whole matrices: Newton–Schulz needs a matrix whole. Under ddp and no_shard every rank holds
 * every unit whole (ct_optim_shard.replicated) and runs it directly. Under full_shard a rank
 * holds a 1/world slice of each unit's flat buffer, which may cut a matrix between or inside
 * rows; muon then updates the momentum of its own slice, all-gathers the unit's momentum
 * updates (one f32 all_gather of the unit per step, the size of FSDP's parameter gather in
 * f32) from the rank's comm engine, runs Newton–Schulz on each whole matrix (every rank the
 * same, redundantly) and applies the rows of its own slice. Every rank calls the all_gather for
 * the same units (those holding a matrix: the tensor list is the same on every rank).
 *
 * Matrix products through OpenBLAS in f32. [optimizer.muon] ns_dtype = f32 (the default) keeps
 * Newton–Schulz in f32; bf16 rounds to bf16 where torch.optim.Muon's bf16 tensors do (the
 * input, the norm, the quotient and each product's result, products accumulated in f32), so it
 * can be compared with torch's as shipped (tests/optim_reference.py). */
#include <ctrain/ctrain.h>
#include <ctrain/numerics.h>

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct muon {
    ct_device_ref dev;
    ct_comm_ref   comm;
    double        momentum;
    int32_t       nesterov, ns_steps, match_rms, ns_bf16;
    double        ns_a, ns_b, ns_c, eps;
    float        *upd, *full;  /* (numel) this shard's momentum update; (padded) the unit's */
    uint64_t      upd_cap, full_cap;
    float        *work;        /* Newton–Schulz: X, gram, gram update, product */
    uint64_t      work_cap;
} muon;

static const char *const state[2] = {"m", "v"}; /* matrices: the momentum in m; others AdamW's */

static void *muon_create(const ct_create_args *a, ct_error *err) {
    double mom = 0, eps = 0;
    int32_t nest = 1;
    int64_t steps = 5;
    const char *adjust = "original", *ns_dtype = "f32";
    if (a->api->get_float(a->host, a->section, "momentum", &mom, err) != CT_OK ||
        a->api->get_bool(a->host, a->section, "nesterov", &nest, err) != CT_OK ||
        a->api->get_int(a->host, a->section, "ns_steps", &steps, err) != CT_OK ||
        a->api->get_float(a->host, a->section, "ns_eps", &eps, err) != CT_OK ||
        a->api->get_string(a->host, a->section, "adjust_lr", &adjust, err) != CT_OK ||
        a->api->get_string(a->host, a->section, "ns_dtype", &ns_dtype, err) != CT_OK)
        return NULL;
    muon *self = calloc(1, sizeof *self);
    if (!self) return ct_error_set(err, CT_ERR_NOMEM, "optimizer muon: out of memory"), NULL;
    self->dev = a->device;
    self->comm = a->comm;
    self->momentum = mom;
    self->nesterov = nest;
    self->ns_steps = (int32_t)steps;
    self->eps = eps;
    self->match_rms = strcmp(adjust, "match_rms_adamw") == 0;
    self->ns_bf16 = strcmp(ns_dtype, "bf16") == 0;
    self->ns_a = 3.4445, self->ns_b = -4.7750, self->ns_c = 2.0315; /* the quintic's */
    return self;
}

static void muon_destroy(void *p) {
    muon *self = p;
    free(self->upd);
    free(self->full);
    free(self->work);
    free(self);
}

static int32_t muon_state_names(void *self, uint32_t *n, const char *const **names,
                                ct_error *err) {
    (void)self, (void)err;
    *n = 2;
    *names = state;
    return CT_OK;
}

/* *buf grown to hold n floats (host memory: the cpu device's memory is the host's). */
static int grow(float **buf, uint64_t *cap, uint64_t n) {
    if (n <= *cap) return 1;
    float *b = realloc(*buf, (n ? n : 1) * sizeof *b);
    if (!b) return 0;
    *buf = b;
    *cap = n;
    return 1;
}

/* torch.lerp's f32 arithmetic: a + w (b - a) for |w| < 0.5, else b - (b - a)(1 - w). */
static inline float lerp(float a, float b, float w) {
    return fabsf(w) < 0.5f ? a + w * (b - a) : b - (b - a) * (1.0f - w);
}

/* x[0..n) rounded to bf16 (ns_dtype = bf16), else left as it is. */
static void to_dtype(const muon *self, float *x, int64_t n) {
    if (!self->ns_bf16) return;
    for (int64_t i = 0; i < n; i++) x[i] = ct_round_bf16(x[i]);
}

/* out (rows x cols) = the Newton–Schulz orthogonalisation of in (rows x cols, row-major). */
static int32_t newton_schulz(muon *self, const float *in, int64_t rows, int64_t cols,
                             float *out, ct_error *err) {
    int tr = rows > cols; /* iterate on the wide orientation: X (m x n), m <= n */
    int64_t m = tr ? cols : rows, n = tr ? rows : cols;
    uint64_t need = (uint64_t)(2 * m * n + 2 * m * m);
    if (!grow(&self->work, &self->work_cap, need))
        return ct_error_set(err, CT_ERR_NOMEM, "optimizer muon: out of memory for a %lld x %lld "
                            "matrix", (long long)rows, (long long)cols);
    float *X = self->work, *Y = X + m * n, *G = Y + m * n, *H = G + m * m;
    double ss = 0;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) {
            float x = self->ns_bf16 ? ct_round_bf16(in[i * cols + j]) : in[i * cols + j];
            ss += (double)x * x;
            if (tr) X[j * n + i] = x;
            else X[i * n + j] = x;
        }
    float norm = (float)sqrt(ss), floor_ = (float)self->eps;
    to_dtype(self, &norm, 1);
    to_dtype(self, &floor_, 1);
    if (norm < floor_) norm = floor_;
    for (int64_t i = 0; i < m * n; i++) X[i] /= norm;
    to_dtype(self, X, m * n);
    float a = (float)self->ns_a, b = (float)self->ns_b, c = (float)self->ns_c;
    for (int32_t s = 0; s < self->ns_steps; s++) {
        /* G = X X^T; H = b G + c G G; Y = a X + H X */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)m, (int)n, 1.0f, X,
                    (int)n, X, (int)n, 0.0f, G, (int)m);
        to_dtype(self, G, m * m);
        memcpy(H, G, (size_t)(m * m) * sizeof *H);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)m, (int)m, c, G,
                    (int)m, G, (int)m, b, H, (int)m);
        to_dtype(self, H, m * m);
        memcpy(Y, X, (size_t)(m * n) * sizeof *Y);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)n, (int)m, 1.0f, H,
                    (int)m, X, (int)n, a, Y, (int)n);
        to_dtype(self, Y, m * n);
        float *t = X;
        X = Y, Y = t;
    }
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) out[i * cols + j] = tr ? X[j * n + i] : X[i * n + j];
    return CT_OK;
}

static int is_matrix(const ct_optim_tensor *t) { return t->role == CT_ROLE_MATRIX && t->ndim == 2; }

static int32_t muon_update(void *p, const ct_optim_step *st, const ct_optim_shard *s,
                           ct_error *err) {
    muon *self = p;
    if (st->step < 1 || s->n_state != 2)
        return ct_error_set(err, CT_ERR_INVALID, "optimizer muon: step %lld, %u state buffers",
                            (long long)st->step, s->n_state);
    float bc1 = (float)(1.0 - pow((double)st->beta1, (double)st->step));
    float bc2 = (float)(1.0 - pow((double)st->beta2, (double)st->step));
    float w_buf = (float)(1.0 - self->momentum), w_nest = (float)self->momentum;
    int any = 0;
    if (!grow(&self->upd, &self->upd_cap, s->numel))
        return ct_error_set(err, CT_ERR_NOMEM, "optimizer muon: out of memory");
    memset(self->upd, 0, s->numel * sizeof(float));
    for (uint32_t k = 0; k < s->n_tensors; k++) {
        const ct_optim_tensor *t = &s->tensors[k];
        uint64_t o = t->shard_offset;
        float *pp = s->param + o, *m = s->state[0] + o, *v = s->state[1] + o;
        const float *g = s->grad + o;
        any |= is_matrix(t);
        if (is_matrix(t)) { /* momentum, and the (nesterov) update to orthogonalise */
            for (uint64_t i = 0; i < t->part_numel; i++) {
                float gi = g[i] * st->grad_scale;
                m[i] = lerp(m[i], gi, w_buf);
                self->upd[o + i] = self->nesterov ? lerp(gi, m[i], w_nest) : m[i];
            }
            continue;
        }
        float lr = st->lr * t->lr_mult;
        for (uint64_t i = 0; i < t->part_numel; i++)
            ct_adamw_update(&pp[i], g[i] * st->grad_scale, &m[i], &v[i], lr, st->beta1,
                            st->beta2, st->eps, t->weight_decay, bc1, bc2);
    }
    if (!any) return CT_OK;
    const float *full = self->upd; /* the unit's updates, whole */
    if (!s->replicated) {
        if (!self->comm.vt || !self->comm.vt->all_gather)
            return ct_error_set(err, CT_ERR_UNSUPPORTED, "optimizer muon: unit %s is sharded "
                                "but no comm engine was given to gather its matrices ---> use "
                                "[strategy] plugin = ddp or no_shard", s->unit_name);
        uint64_t world = s->padded_numel / (s->numel ? s->numel : 1);
        if (s->numel * world != s->padded_numel)
            return ct_error_set(err, CT_ERR_INVALID, "optimizer muon: unit %s: a shard of %llu "
                                "of %llu elements is not an even slice", s->unit_name,
                                (unsigned long long)s->numel, (unsigned long long)s->padded_numel);
        if (!grow(&self->full, &self->full_cap, s->padded_numel))
            return ct_error_set(err, CT_ERR_NOMEM, "optimizer muon: out of memory");
        int32_t rc = self->comm.vt->all_gather(self->comm.self, self->upd, self->full, s->numel,
                                               CT_DTYPE_F32, NULL, err);
        if (rc != CT_OK) return rc;
        full = self->full;
    } else if (s->offset != 0) {
        return ct_error_set(err, CT_ERR_INVALID, "optimizer muon: a replicated shard of unit %s "
                            "starts at %llu, not 0", s->unit_name, (unsigned long long)s->offset);
    }
    float *ortho = NULL;
    uint64_t ortho_cap = 0;
    int32_t rc = CT_OK;
    for (uint32_t k = 0; k < s->n_tensors && rc == CT_OK; k++) {
        const ct_optim_tensor *t = &s->tensors[k];
        if (!is_matrix(t) || !t->part_numel) continue;
        int64_t A = t->shape[0], B = t->shape[1];
        if (!grow(&ortho, &ortho_cap, (uint64_t)(A * B))) {
            rc = ct_error_set(err, CT_ERR_NOMEM, "optimizer muon: out of memory");
            break;
        }
        if ((rc = newton_schulz(self, full + t->unit_offset, A, B, ortho, err)) != CT_OK) break;
        double ratio = self->match_rms ? 0.2 * sqrt((double)(A > B ? A : B))
                                       : sqrt(A > B ? (double)A / (double)B : 1.0);
        float lr = st->lr * t->lr_mult, adj = (float)((double)lr * ratio);
        float keep = 1.0f - lr * t->weight_decay;
        float *pp = s->param + t->shard_offset;
        const float *O = ortho + t->part_begin;
        for (uint64_t i = 0; i < t->part_numel; i++) {
            pp[i] = pp[i] * keep;
            pp[i] = pp[i] + -adj * O[i];
        }
    }
    free(ortho);
    return rc;
}

static const char *const adjust_choices[] = {"original", "match_rms_adamw", NULL};
static const char *const ns_dtype_choices[] = {"f32", "bf16", NULL};
static const ct_param_spec muon_params[] = {
    CT_PARAM_FLOAT_X("momentum", "0.95", 0, 1, CT_PARAM_MAX_EXCLUSIVE, "momentum of the matrices"),
    CT_PARAM_BOOL("nesterov", "true", "orthogonalise the Nesterov update (torch's default)"),
    CT_PARAM_INT("ns_steps", "5", 1, 100, "Newton–Schulz iterations"),
    CT_PARAM_FLOAT_X("ns_eps", "1e-7", 0, 1, CT_PARAM_MIN_EXCLUSIVE,
                     "floor of the Frobenius norm a matrix is divided by"),
    CT_PARAM_ENUM("adjust_lr", "original", adjust_choices,
                  "a matrix's lr: original = lr sqrt(max(1, rows/cols)); match_rms_adamw = "
                  "lr 0.2 sqrt(max(rows, cols)) (Moonshot)"),
    CT_PARAM_ENUM("ns_dtype", "f32", ns_dtype_choices,
                  "Newton–Schulz in f32, or rounded to bf16 as torch.optim.Muon computes it"),
    CT_PARAM_END,
};

static const ct_optimizer_vtable muon_vtable = {
    .struct_size = sizeof(ct_optimizer_vtable),
    .create = muon_create,
    .destroy = muon_destroy,
    .state_names = muon_state_names,
    .update = muon_update,
};

CT_DEFINE_PLUGIN(.kind = CT_KIND_OPTIMIZER, .name = "muon", .version = "1.0.0",
                 .summary = "Muon: Newton-Schulz orthogonalised momentum on hidden matrices, "
                            "AdamW elsewhere (full_shard: gathers each unit's matrices)",
                 .params = muon_params, .devices = CT_DEVICE_CPU, .vtable = &muon_vtable)
