/* test_gpt_train.c — claims about the gpt model plugin's training options (build/plugins/
 * model_gpt.so): [model] dropout is off outside training and bit-identical to no dropout at 0,
 * keeps 1-p of the elements, is a function of (seed, step, micro-batch, rank), and with its mask
 * fixed its gradients match finite differences; document masking (ct_stage_args.doc_mask) gives
 * the second document of a window the logits it has alone, and its gradients match finite
 * differences; [model] recompute = blocks | attention gives the bits of recompute = none.
 * Not for: the host's keys and runs (tests/cli/test_dropout.sh, test_doc_mask.sh,
 * test_recompute.sh). Legend: B batch, T time, N = B*T rows, C channels, V vocabulary.
 *
 * The loss is J = sum_{n,v} logits[n,v] * R[n,v] with a fixed random R (as test_gpt.c).
 */
#include "ct_test.h"
#include "harness.h"

#include "../../plugins/model/gpt/dropout.h" /* the masks' hash, header-only */

#include <ctrain/numerics.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAXU = 8 };

typedef struct {
    ct_harness            *h;
    const ct_model_vtable *vt;
    void                  *self;
    ct_model_desc          d;
    int                    B, T, V, N;
    uint64_t               numel[MAXU];
    float                 *p[MAXU], *g[MAXU];
    int32_t               *tokens;
    double                *R;
    float                 *logits, *dl;
    ct_stage_args          extra; /* train, doc_mask, eot_token, step, seed, micro_step */
} fx;

static double urand(uint64_t seed, uint64_t i) { return 2.0 * ct_uniform01(seed, i) - 1.0; }

static uint64_t tensor_off(const ct_unit_spec *u, uint32_t k) {
    uint64_t off = 0;
    for (uint32_t j = 0; j < k; j++) off += ct_align_up(ct_tensor_numel(&u->tensors[j]), CT_TENSOR_ALIGN);
    return off;
}

/* A 2-layer model of C = 8 (2 heads) from `keys`, params as test_gpt.c fills them. */
static int fx_new(fx *f, const char *keys, int B, int T, int V, int threads) {
    memset(f, 0, sizeof *f);
    f->B = B, f->T = T, f->V = V, f->N = B * T;
    char ini[1024];
    snprintf(ini, sizeof ini, "[model]\nn_layer = 2\nn_head = 2\nd_model = 8\nvocab_size = %d\n"
             "seq_len = %d\n%s\n[device]\nthreads = %d\n", V, T + 2, keys, threads);
    f->h = harness_new(ini);
    if (!f->h) return 0;
    ct_harness_plugin p;
    ct_error err = {sizeof err, 0, {0}};
    if (harness_create(f->h, "model_gpt.so", "model", &p, &err) != CT_OK) {
        CT_CHECK_MSG(0, "create model gpt with {%s}: %s", keys, err.message);
        return 0;
    }
    f->vt = p.vt;
    f->self = p.self;
    f->d.struct_size = sizeof f->d;
    CT_CHECK_INT(f->vt->describe(f->self, &f->d, &err), CT_OK);
    for (uint32_t u = 0; u < f->d.n_units && u < MAXU; u++) {
        const ct_unit_spec *us = &f->d.units[u];
        f->numel[u] = ct_align_up(tensor_off(us, us->n_tensors), 64);
        f->p[u] = calloc(f->numel[u], sizeof(float));
        f->g[u] = calloc(f->numel[u], sizeof(float));
        for (uint32_t k = 0; k < us->n_tensors; k++) {
            const ct_tensor_spec *t = &us->tensors[k];
            uint64_t off = tensor_off(us, k), n = ct_tensor_numel(t);
            for (uint64_t i = 0; i < n; i++) {
                double r = urand(1000 * u + k, i);
                f->p[u][off + i] = (float)(t->init == CT_INIT_ONES ? 1.0 + 0.2 * r
                                           : t->init == CT_INIT_ZEROS ? 0.2 * r : 0.5 * r);
            }
        }
    }
    f->tokens = calloc((size_t)f->N, sizeof *f->tokens);
    f->R = calloc((size_t)f->N * V, sizeof *f->R);
    f->logits = calloc((size_t)f->N * V, sizeof *f->logits);
    f->dl = calloc((size_t)f->N * V, sizeof *f->dl);
    for (int n = 0; n < f->N; n++) f->tokens[n] = 1 + (int32_t)(ct_hash64(7, (uint64_t)n) % (uint64_t)(V - 1));
    for (int i = 0; i < f->N * V; i++) f->dl[i] = (float)(f->R[i] = urand(99, (uint64_t)i));
    f->extra.seed = 1234;
    f->extra.step = 3;
    return 1;
}

static void fx_free(fx *f) {
    for (int u = 0; u < MAXU; u++) free(f->p[u]), free(f->g[u]);
    free(f->tokens), free(f->R), free(f->logits), free(f->dl);
    if (f->h) harness_free(f->h);
}

static ct_stage_args args(const fx *f, int32_t s) {
    ct_stage_args a = f->extra;
    a.struct_size = sizeof a;
    a.stage = s;
    a.params = f->p[f->d.stages[s].unit];
    a.param_dtype = a.grad_dtype = CT_DTYPE_F32;
    a.tokens = f->tokens;
    a.logits = f->logits;
    a.dlogits = f->dl;
    return a;
}

static double fx_forward(fx *f) {
    ct_error err = {sizeof err, 0, {0}};
    CT_CHECK_INT(f->vt->prepare(f->self, f->B, f->T, CT_DTYPE_F32, &err), CT_OK);
    for (uint32_t s = 0; s < f->d.n_stages; s++) {
        ct_stage_args a = args(f, (int32_t)s);
        int32_t rc = f->vt->forward(f->self, &a, &err);
        CT_CHECK_MSG(rc == CT_OK, "forward stage %u: %s", s, err.message);
        if (rc != CT_OK) return NAN;
    }
    double J = 0;
    for (int i = 0; i < f->N * f->V; i++) J += f->logits[i] * f->R[i];
    return J;
}

static void fx_backward(fx *f) {
    ct_error err = {sizeof err, 0, {0}};
    for (int s = (int)f->d.n_stages - 1; s >= 0; s--) {
        ct_stage_args a = args(f, s);
        a.grads = f->g[f->d.stages[s].unit];
        int32_t rc = f->vt->backward(f->self, &a, &err);
        CT_CHECK_MSG(rc == CT_OK, "backward stage %d: %s", s, err.message);
    }
}

static void fx_zero_grads(fx *f) {
    for (uint32_t u = 0; u < f->d.n_units; u++) memset(f->g[u], 0, f->numel[u] * sizeof(float));
}

/* Every tensor: up to 7 elements against central differences of J, the stage args (and so the
 * dropout masks and document starts) fixed. Tolerance as test_gpt.c. */
static void check_fd(const char *what, fx *f) {
    fx_zero_grads(f);
    fx_forward(f);
    fx_backward(f);
    const float eps = 5e-3f; /* 1e-2 (test_gpt.c) truncates too much once dropout scales by 1/(1-p) */
    int checked = 0;
    for (uint32_t u = 0; u < f->d.n_units; u++) {
        const ct_unit_spec *us = &f->d.units[u];
        for (uint32_t k = 0; k < us->n_tensors; k++) {
            const ct_tensor_spec *t = &us->tensors[k];
            uint64_t off = tensor_off(us, k), n = ct_tensor_numel(t);
            for (int j = 0; j < 7; j++) {
                uint64_t i = j == 0 ? 0 : j == 6 ? n - 1 : ct_hash64(u * 100 + k, (uint64_t)j) % n;
                float *p = &f->p[u][off + i], keep = *p;
                *p = keep + eps;
                double jp = fx_forward(f);
                *p = keep - eps;
                double jm = fx_forward(f);
                *p = keep;
                double fd = (jp - jm) / (2.0 * (double)eps), g = f->g[u][off + i];
                double tol = 2e-3 + 1e-2 * fabs(fd);
                CT_CHECK_MSG(fabs(g - fd) <= tol, "%s: %s[%llu]: gradient %.6g, finite difference "
                             "%.6g (tolerance %.2g)", what, t->name, (unsigned long long)i, g, fd, tol);
                checked++;
            }
        }
    }
    CT_CHECK(checked > 50);
}

/* Copies of the logits and every gradient after one forward and backward. */
typedef struct {
    float *logits, *g[MAXU];
    int    n_units;
} snap;

static snap take(fx *f) {
    snap s = {malloc((size_t)f->N * f->V * sizeof(float)), {0}, (int)f->d.n_units};
    fx_zero_grads(f);
    fx_forward(f);
    fx_backward(f);
    memcpy(s.logits, f->logits, (size_t)f->N * f->V * sizeof(float));
    for (uint32_t u = 0; u < f->d.n_units; u++) {
        s.g[u] = malloc(f->numel[u] * sizeof(float));
        memcpy(s.g[u], f->g[u], f->numel[u] * sizeof(float));
    }
    return s;
}

static void snap_free(snap *s) {
    free(s->logits);
    for (int u = 0; u < s->n_units; u++) free(s->g[u]);
}

/* 1 when the logits and every gradient are the same bits. */
static int same_bits(const fx *f, const snap *a, const snap *b) {
    if (memcmp(a->logits, b->logits, (size_t)f->N * f->V * sizeof(float))) return 0;
    for (int u = 0; u < a->n_units; u++)
        if (memcmp(a->g[u], b->g[u], f->numel[u] * sizeof(float))) return 0;
    return 1;
}

/* ---- dropout ------------------------------------------------------------------------------ */

/* dropout = 0 in training, and dropout > 0 outside training (eval, logits, sample: train 0),
 * are the bits of the model without the key. */
CT_TEST(gpt_dropout_zero_and_eval_are_the_bits_without_dropout) {
    fx plain, zero, eval;
    int ok = fx_new(&plain, "", 2, 9, 11, 2) && fx_new(&zero, "dropout = 0", 2, 9, 11, 2) &&
             fx_new(&eval, "dropout = 0.3", 2, 9, 11, 2);
    if (ok) {
        zero.extra.train = 1; /* training, p = 0 */
        snap a = take(&plain), b = take(&zero), c = take(&eval); /* eval: train 0 */
        CT_CHECK_MSG(same_bits(&plain, &a, &b), "dropout = 0 in training changed the bits");
        CT_CHECK_MSG(same_bits(&plain, &a, &c), "dropout = 0.3 outside training changed the bits");
        snap_free(&a), snap_free(&b), snap_free(&c);
    }
    fx_free(&plain), fx_free(&zero), fx_free(&eval);
}

/* In training, dropout changes the logits; the same (seed, step, micro-batch) gives the same
 * bits again (forward and backward); changing any of seed, step, micro_step gives others. */
CT_TEST(gpt_dropout_is_a_function_of_seed_step_and_micro_batch) {
    fx f;
    if (fx_new(&f, "dropout = 0.2", 2, 9, 11, 2)) {
        snap off = take(&f);
        f.extra.train = 1;
        snap a = take(&f), b = take(&f);
        CT_CHECK_MSG(!same_bits(&f, &off, &a), "dropout 0.2 in training left the logits alone");
        CT_CHECK_MSG(same_bits(&f, &a, &b), "the same micro-batch twice gave other bits");
        f.extra.step = 4;
        snap s = take(&f);
        f.extra.step = 3, f.extra.micro_step = 1;
        snap mi = take(&f);
        f.extra.micro_step = 0, f.extra.seed = 1235;
        snap se = take(&f);
        CT_CHECK_MSG(!same_bits(&f, &a, &s), "another step gave the same masks");
        CT_CHECK_MSG(!same_bits(&f, &a, &mi), "another micro-batch gave the same masks");
        CT_CHECK_MSG(!same_bits(&f, &a, &se), "another seed gave the same masks");
        snap_free(&off), snap_free(&a), snap_free(&b), snap_free(&s), snap_free(&mi),
            snap_free(&se);
    }
    fx_free(&f);
}

/* The kept fraction of 10^6 elements per site is 1 - p within 5 standard deviations, for
 * p = 0.1 and 0.5, and two sites (or two ranks) agree on about (1-p)^2 + p^2 of them only. */
CT_TEST(gpt_dropout_keeps_one_minus_p) {
    const double ps[2] = {0.1, 0.5};
    const uint64_t n = 1000000;
    for (int k = 0; k < 2; k++) {
        double p = ps[k];
        uint32_t thr = (uint32_t)floor(p * 4294967296.0 + 0.5);
        uint64_t key = gpt_drop_key(42, 7, 0, 0), other = gpt_drop_key(42, 7, 0, 1);
        uint64_t s1 = gpt_drop_site_key(key, GPT_DROP_SITE_ATT(0));
        uint64_t s2 = gpt_drop_site_key(key, GPT_DROP_SITE_ATT_OUT(0));
        uint64_t s3 = gpt_drop_site_key(other, GPT_DROP_SITE_ATT(0));
        uint64_t kept = 0, same_site = 0, same_rank = 0;
        for (uint64_t i = 0; i < n; i++) {
            int a = gpt_drop_keep(s1, i, thr);
            kept += (uint64_t)a;
            same_site += (uint64_t)(a == gpt_drop_keep(s2, i, thr));
            same_rank += (uint64_t)(a == gpt_drop_keep(s3, i, thr));
        }
        double sd = sqrt(p * (1 - p) / (double)n), agree = (1 - p) * (1 - p) + p * p;
        double sda = sqrt(agree * (1 - agree) / (double)n);
        CT_CHECK_MSG(fabs((double)kept / n - (1 - p)) < 5 * sd, "p = %g: kept %.5f, expected "
                     "%.5f +- %.5f", p, (double)kept / n, 1 - p, 5 * sd);
        CT_CHECK_MSG(fabs((double)same_site / n - agree) < 5 * sda, "p = %g: two sites agree on "
                     "%.5f, independent masks would on %.5f", p, (double)same_site / n, agree);
        CT_CHECK_MSG(fabs((double)same_rank / n - agree) < 5 * sda, "p = %g: two ranks agree on "
                     "%.5f, independent masks would on %.5f", p, (double)same_rank / n, agree);
    }
}

/* With the masks fixed (the same stage args), every parameter's gradient matches finite
 * differences: the backward applies the forward's masks. T = 70 > 64: two attention blocks. */
CT_TEST(gpt_dropout_gradients_match_finite_differences) {
    /* at T = 70 only rope, as test_gpt.c's long sequence: qk_norm or swiglu there are beyond
     * the finite differences' accuracy even without dropout */
    const char *variants[4] = {"dropout = 0.25\nqk_norm = true",
                               "dropout = 0.25\nmlp = swiglu\ntie_embeddings = false",
                               "dropout = 0.25\nn_kv_head = 1", /* multi-query attention */
                               "dropout = 0.25\npos = rope"};
    for (int v = 0; v < 4; v++) {
        fx f;
        if (fx_new(&f, variants[v], v == 3 ? 1 : 2, v == 3 ? 70 : 6, 11, 2)) {
            f.extra.train = 1;
            check_fd(variants[v], &f);
        }
        fx_free(&f);
    }
}

/* ---- document masking -------------------------------------------------------------------- */

/* A window of [doc A (5 tokens) | eot + doc B (7 tokens)] gives doc B's rows the logits of the
 * window [eot + doc B] alone (rope: attention sees relative positions only; positions are not
 * restarted, so this holds up to f32 rounding of the rotations: 1e-5 relative), and differs
 * from them without the mask; with learned positions, doc B's rows do not depend on doc A's
 * tokens (another doc A of the same length: the same bits). */
CT_TEST(gpt_doc_mask_second_document_sees_only_itself) {
    enum { TA = 5, TBD = 7, V = 11, EOT = 0 };
    fx two, alone, other, learned, learned2;
    int ok = fx_new(&two, "pos = rope", 1, TA + TBD, V, 2) &&
             fx_new(&alone, "pos = rope", 1, TBD, V, 2) &&
             fx_new(&other, "pos = rope", 1, TA + TBD, V, 2) &&
             fx_new(&learned, "", 1, TA + TBD, V, 2) && fx_new(&learned2, "", 1, TA + TBD, V, 2);
    if (ok) {
        for (int t = 0; t < TBD; t++)
            alone.tokens[t] = t == 0 ? EOT : two.tokens[TA + t]; /* eot + doc B */
        for (int t = 0; t < TA + TBD; t++) {
            two.tokens[t] = t < TA ? two.tokens[t] : alone.tokens[t - TA];
            other.tokens[t] = learned.tokens[t] = two.tokens[t];
            learned2.tokens[t] = t < TA ? (two.tokens[t] % (V - 1)) + 1 : two.tokens[t];
        }
        learned2.tokens[1] = learned2.tokens[1] == 3 ? 4 : 3; /* surely another doc A */
        fx *masked[4] = {&two, &alone, &learned, &learned2};
        for (int i = 0; i < 4; i++) masked[i]->extra.doc_mask = 1, masked[i]->extra.eot_token = EOT;
        fx_forward(&two), fx_forward(&alone), fx_forward(&other); /* other: no mask */
        double worst = 0, off = 0, scale = 0;
        for (int i = 0; i < TBD * V; i++) {
            float w = alone.logits[i];
            scale = fmax(scale, fabs(w));
            worst = fmax(worst, fabs(two.logits[TA * V + i] - w));
            off = fmax(off, fabs(other.logits[TA * V + i] - w));
        }
        CT_CHECK_MSG(worst <= 1e-5 * scale, "doc B in the window vs alone: max |diff| %.3g "
                     "(max |logit| %.3g)", worst, scale);
        CT_CHECK_MSG(off > 1e-2 * scale, "without doc_mask doc B's logits should depend on doc A "
                     "(max |diff| %.3g)", off);
        fx_forward(&learned), fx_forward(&learned2);
        CT_CHECK_MSG(!memcmp(learned.logits + TA * V, learned2.logits + TA * V,
                             TBD * V * sizeof(float)), "learned positions: doc B's logits "
                     "depend on doc A's tokens");
        CT_CHECK_MSG(memcmp(learned.logits, learned2.logits, TA * V * sizeof(float)) != 0,
                     "the two doc A's should give different logits");
    }
    fx_free(&two), fx_free(&alone), fx_free(&other), fx_free(&learned), fx_free(&learned2);
}

/* Gradients with document masking (three documents in each of two sequences, one starting in
 * the second attention block) match finite differences, with and without dropout, and with
 * multi-query attention (n_kv_head = 1). */
CT_TEST(gpt_doc_mask_gradients_match_finite_differences) {
    const char *variants[3] = {"pos = rope", "dropout = 0.2", "dropout = 0.2\nn_kv_head = 1"};
    for (int v = 0; v < 3; v++) {
        fx f;
        int T = v ? 8 : 70;
        if (fx_new(&f, variants[v], 2, T, 11, 2)) {
            f.tokens[2] = f.tokens[T - 3] = f.tokens[T + 4] = 0; /* separators */
            if (!v) f.tokens[66] = 0;
            f.extra.doc_mask = 1;
            f.extra.train = v > 0;
            check_fd(variants[v], &f);
        }
        fx_free(&f);
    }
}

/* ---- recompute ---------------------------------------------------------------------------- */

/* recompute = blocks and = attention give the logits and every gradient of recompute = none,
 * bit for bit, over two micro-batches (threads pinned to 2), with dropout and document masking
 * on and off, in f32 on a shape whose products are split over threads. */
CT_TEST(gpt_recompute_gives_the_bits_of_keeping_activations) {
    const char *base[2] = {"", "dropout = 0.1\npos = rope\nqk_norm = true\nmlp = swiglu\n"
                               "n_kv_head = 1"};
    const char *modes[2] = {"recompute = blocks", "recompute = attention"};
    for (int v = 0; v < 2; v++) {
        fx ref;
        if (!fx_new(&ref, base[v], 2, 72, 300, 2)) {
            fx_free(&ref);
            continue;
        }
        ref.tokens[30] = ref.tokens[100] = 0;
        ref.extra.train = 1, ref.extra.doc_mask = v, ref.extra.eot_token = 0;
        snap want[2];
        for (int mi = 0; mi < 2; mi++) ref.extra.micro_step = mi, want[mi] = take(&ref);
        for (int k = 0; k < 2; k++) {
            char keys[256];
            snprintf(keys, sizeof keys, "%s\n%s", base[v], modes[k]);
            fx f;
            if (fx_new(&f, keys, 2, 72, 300, 2)) {
                memcpy(f.tokens, ref.tokens, (size_t)f.N * sizeof *f.tokens);
                f.extra = ref.extra;
                for (int mi = 0; mi < 2; mi++) {
                    f.extra.micro_step = mi;
                    snap got = take(&f);
                    CT_CHECK_MSG(same_bits(&f, &want[mi], &got), "{%s}: micro-batch %d: logits "
                                 "or gradients differ from recompute = none", keys, mi);
                    snap_free(&got);
                }
            }
            fx_free(&f);
        }
        snap_free(&want[0]), snap_free(&want[1]);
        fx_free(&ref);
    }
}
