/* gpt.h — private declarations of the gpt model plugin: the instance, where each tensor sits in
 * its unit's flat buffer, the activation buffers, and the kernels the stages call.
 * Not for: anything the host sees (that is ctrain.h); the CUDA entry points are gpt_cuda.h.
 *
 * Shape legend (every file of this plugin): B batch, T time, C channels (d_model), V vocabulary,
 * L layers, NH heads, HD head dim (C/NH), F MLP hidden width, N = B*T rows, KVH key/value heads
 * (NH/KVH query heads share one: grouped-query attention; KVH = NH is multi-head, 1 multi-query),
 * KC = KVH*HD key (and value) width, QW = C + 2*KC the width of a qkv row (3C when KVH = NH).
 * Matrices are row-major; a linear layer's weight is (out, in) as in PyTorch: y = x W^T + b.
 */
#ifndef GPT_PLUGIN_GPT_H
#define GPT_PLUGIN_GPT_H

#include <ctrain/ctrain.h>
#include <ctrain/numerics.h>
#include <assert.h>
#include <stdint.h>

#include "dropout.h"  /* the masks' hash */
#include "gpt_cuda.h" /* gpt_cuda_fns, the companion's entry points (plain C declarations) */
#include "onednn.h"   /* gpt_dnnl: products through oneDNN's matmul primitive */

typedef enum { GPT_NORM_LAYERNORM = 0, GPT_NORM_RMSNORM = 1, GPT_NORM_GAIN_ONLY = 2 } gpt_norm;
typedef enum { GPT_MLP_GELU = 0, GPT_MLP_SWIGLU = 1 } gpt_mlp;
typedef enum { GPT_POS_LEARNED = 0, GPT_POS_ROPE = 1 } gpt_pos;
typedef enum { GPT_INIT_GPT2 = 0, GPT_INIT_OPENLM = 1 } gpt_init_kind;
/* [model] attn_bias: which attention projections have a bias (auto: both when [model] bias). */
typedef enum { GPT_ABIAS_AUTO = 0, GPT_ABIAS_NONE = 1, GPT_ABIAS_QKV = 2, GPT_ABIAS_QKV_O = 3 } gpt_abias;
/* [model] rope_scaling, as transformers' rope_type: default (none), linear, llama3. */
typedef enum { GPT_ROPE_NONE = 0, GPT_ROPE_LINEAR = 1, GPT_ROPE_LLAMA3 = 2 } gpt_rope_scaling;
/* [model] attention: the CUDA kernel (the CPU always runs attention.c's blocked attention). */
typedef enum { GPT_ATT_FLASH = 0, GPT_ATT_NAIVE = 1 } gpt_att_kind;
/* [model] mlp_epilogue: the CUDA gelu MLP's bias/GELU steps (the CPU always runs layers.c). */
typedef enum { GPT_EPI_CUBLASLT = 0, GPT_EPI_KERNELS = 1 } gpt_epi_kind;
/* [model] bf16_matmul: how the CPU multiplies bf16 operands (gpt.c, choose_bf16_path). */
typedef enum { GPT_MM_AUTO = 0, GPT_MM_ONEDNN = 1, GPT_MM_OPENBLAS = 2 } gpt_mm_kind;
/* [model] recompute: which activations of a block backward recomputes from the block's input
 * instead of keeping them from forward (stages.c; gpt.c, layout). */
typedef enum { GPT_RECOMPUTE_NONE = 0, GPT_RECOMPUTE_BLOCKS = 1, GPT_RECOMPUTE_ATTENTION = 2 }
    gpt_recompute;

/* Element offsets of the root unit's tensors in its flat buffer; -1 when absent. */
typedef struct {
    int64_t wte;         /* (V,C) token embedding */
    int64_t wpe;         /* (seq_len,C) learned positions */
    int64_t lnf_w, lnf_b; /* (C) final norm */
    int64_t head;        /* (V,C) output head; == wte when tied */
} gpt_root_layout;

/* Element offsets of a block's tensors (the same in every block); -1 when absent. */
typedef struct {
    int64_t ln1_w, ln1_b;   /* (C) */
    int64_t qkv_w, qkv_b;   /* (QW,C), (QW): rows 0..C-1 make q, then KC rows k, KC rows v */
    int64_t qn_w, qn_b;     /* (C) qk-norm of q (over all heads, as open_lm) */
    int64_t kn_w, kn_b;     /* (KC) qk-norm of k (over all key heads) */
    int64_t proj_w, proj_b; /* (C,C), (C) attention output projection */
    int64_t ln2_w, ln2_b;   /* (C) */
    int64_t fc_w, fc_b;     /* gelu: (F,C); swiglu: (2F,C), rows 0..F-1 the gate */
    int64_t fc2_w, fc2_b;   /* (C,F), (C) MLP output projection */
} gpt_block_layout;

/* Activations of one block for backward (f32; bf16-representable when computing in bf16). */
typedef struct {
    float *ln1, *ln1_mean, *ln1_rstd;   /* (N,C), (N), (N) */
    float *qkv;                          /* (N,QW) output of the qkv linear layer */
    float *q_mean, *q_rstd, *k_mean, *k_rstd; /* (N) qk-norm statistics, when qk_norm */
    float *qkv_att;                      /* (N,QW) q,k after qk-norm and rope, v: attention's input
                                            (== qkv when neither qk_norm nor rope) */
    float *att;                          /* (N,C) attention output, heads side by side */
    float *lse;                          /* (B,NH,T) log-sum-exp of each softmax row */
    float *xmid;                         /* (N,C) residual after attention */
    float *ln2, *ln2_mean, *ln2_rstd;    /* (N,C), (N), (N) */
    float *h;                            /* (N,F) gelu input, or (N,2F) swiglu gate|up */
    float *g;                            /* (N,F) MLP activation: input of fc2 */
} gpt_block_acts;

typedef struct gpt {
    const ct_host_api *api;
    ct_host           *host;

    /* configuration */
    int64_t L, NH, C, V, max_T, HD, F;
    int64_t KVH, KC, QW;  /* key/value heads, their width KVH*HD, a qkv row's C + 2*KC */
    int     norm, mlp, pos, qk_norm, tie, bias, init;
    int     qkv_bias, proj_bias; /* the attention projections' biases ([model] attn_bias, bias) */
    int     rope_scaling;     /* gpt_rope_scaling */
    double  rope_factor, rope_low, rope_high; /* factor, low/high_freq_factor (llama3) */
    int64_t rope_orig_T;      /* original_max_position_embeddings (llama3) */
    int     attention; /* gpt_att_kind: which CUDA attention (flash_attention.cu or gpt_cuda.cu) */
    int     mlp_epilogue; /* gpt_epi_kind: CUDA gelu MLP through mlp_lt.cu or gpt_cuda.cu's kernels */
    float   eps, rope_theta;
    int     threads; /* OpenMP threads of element-wise loops and products (>= 1) */
    int     bf16_matmul; /* gpt_mm_kind: [model] bf16_matmul */
    int     rank;     /* this instance's rank (the start-up line is rank 0's) */
    float   dropout;  /* [model] dropout: probability of dropping an element (0: off) */
    int     recompute; /* gpt_recompute: [model] recompute */

    /* per stage call (check_args in stages.c, from ct_stage_args since ABI 1.7) */
    int      drop_on;    /* this micro-batch drops (training, dropout > 0) */
    uint32_t drop_thr;   /* an element is kept when its 32-bit hash is >= drop_thr */
    float    drop_scale; /* 1/(1-p): a kept element's factor */
    uint64_t drop_key;   /* gpt_drop_key of the micro-batch (dropout.h) */
    int      doc_on;     /* attention stops at document boundaries (ct_stage_args.doc_mask) */

    /* units and stages, as describe() returns them */
    gpt_root_layout  root;
    gpt_block_layout blk;
    uint64_t         unit_numel_max;   /* largest unit, unpadded, in elements */
    uint64_t         block_numel;      /* a block unit, unpadded, in elements */
    ct_unit_spec    *units;            /* L+1 */
    ct_tensor_spec  *tensors;          /* every unit's tensors, unit after unit */
    char            *names;            /* storage of the tensor and unit names */
    ct_stage_spec   *stages;           /* L+2 */
    uint64_t         n_params;
    int32_t          head_tensor;
    float           *rope_cos, *rope_sin; /* (max_T, HD/2) when pos == rope */

    /* activation buffers, sized by prepare() */
    int64_t         B, T, N;
    int32_t         dtype;        /* compute dtype given to prepare() */
    int             bf16;         /* the current stage call computes in a 16-bit dtype (bf16,
                                     or f16 when f16 is set): activations rounded to it */
    int             f16;          /* ... and that dtype is f16 (emulated like bf16; OpenBLAS) */
    void           *arena;        /* one host allocation holding everything below */
    int32_t        *tokens;       /* (N) copy of the micro-batch's tokens */
    int32_t        *doc_start;    /* (N) position in its sequence where row n's document begins
                                     (the last eot_token at or before it, else 0); written by
                                     embed's forward when doc_on, else all 0 */
    uint64_t        act_bytes;    /* bytes of the block activations kept for backward */
    float          *res;          /* (L+1,N,C) residual stream: input of block l, final output */
    gpt_block_acts *acts;         /* L */
    float          *lnf, *lnf_mean, *lnf_rstd; /* (N,C), (N), (N) */
    float          *dres;         /* (N,C) gradient of the residual stream between stages */
    float          *dnc;          /* (N,C) scratch gradient */
    float          *dqkv;         /* (N,QW) */
    float          *dh;           /* (N,F) or (N,2F) */
    float          *dg;           /* (N,F) */
    float          *att_s, *att_dp; /* (threads,GPT_ATT_QB,T) per-thread scores /
                                       probabilities and their gradient, one query block */
    float          *att_pd;       /* (threads,GPT_ATT_QB,T) the probabilities after dropout
                                     (backward), when dropout > 0; else NULL */
    float          *wbuf;         /* (unit_numel_max) f32 copy of bf16 params, else NULL */
    int             head_w_ready; /* wbuf holds the head's weights of this micro-batch
                                     (stages.c, head_weights) */
    float          *gbuf;         /* (gbuf_n) f32 scratch for parameter gradients */
    int64_t         gbuf_n;
    float          *dlog;         /* (N, VCHUNK) rounded slice of dlogits (bf16 only); its
                                     bytes hold the slice as bf16 bits on the oneDNN path */

    /* bf16 products through oneDNN (onednn.c), when prepare() was given bf16 and
     * choose_bf16_path (gpt.c) chose it: operands as bf16 bits, products into f32 */
    int             use_dnnl;     /* 1: the bf16 stages multiply through oneDNN */
    int             f16_said;     /* the start-up line "cpu f16: ..." was logged */
    int             mm_said;      /* the start-up line "cpu bf16: ..." was logged */
    int             mm_warned;    /* a refusal was logged (once per instance) */
    gpt_dnnl       *dnnl;         /* products of the rank's thread, on m->threads threads */
    gpt_dnnl      **dnnl_att;     /* (threads) one per OpenMP thread of attention, 1 thread each */
    uint16_t       *xb, *yb;      /* (N, WMAX) bf16 copies of a product's activation operands */
    uint16_t       *qkvb;         /* (N,QW) bf16 copy of attention's q, k, v */
    uint16_t       *att_b;        /* (threads, 2, GPT_ATT_QB, T) per-thread bf16 P and dS */
    int32_t        *tok_order;    /* (N) positions sorted by token, for the embedding grad */
    int32_t        *tok_start;    /* (V+1) counting-sort buckets */

    /* incremental decoding (decode.c): one sequence's key/value cache and the scratch of up
     * to dec_max_T new rows, in one host allocation of its own, sized by prepare_decode() */
    int64_t         dec_max_T;    /* capacity in tokens; 0 before prepare_decode() */
    int64_t         dec_len;      /* tokens cached (positions 0..dec_len-1) */
    int32_t         dec_dtype;    /* compute dtype given to prepare_decode() */
    void           *dec_arena;
    float          *dec_k, *dec_v; /* (L,dec_max_T,KC) keys (after qk-norm and rope), values */
    float          *dec_x, *dec_xmid, *dec_ln, *dec_tmp, *dec_att; /* (dec_max_T,C) */
    float          *dec_qkv, *dec_qkv_att; /* (dec_max_T,QW) */
    float          *dec_h, *dec_g;  /* (dec_max_T,FH), (dec_max_T,F) */
    float          *dec_mean, *dec_rstd; /* (dec_max_T) norm statistics (not needed after) */
    float          *dec_s;        /* (threads,dec_max_T) attention scores of one row */
    float          *dec_wbuf;     /* (unit_numel_max) f32 copy of bf16 params, else NULL */

    /* CUDA path (gpt_cuda.cu in the companion cuda/model_gpt_cuda.so, built with nvcc:
     * CT_HAVE_CUDA). When on_cuda, every stage runs there through cu and the activation buffers
     * above are device memory (arena: the device arena). */
    ct_device_ref   dev;          /* the rank's device, from create() */
    int             on_cuda;      /* 1: created on a CUDA device (cu is then resolved) */
    void           *cuda;         /* gpt_cuda state (stream, cuBLAS, scratch); NULL on the CPU */
    gpt_cuda_fns    cu;           /* the companion's entry points; all NULL on the CPU */
} gpt;

/* Element-wise spans (a thread's unit of work in layers.c and attention.c) are compiled for
 * AVX-512, AVX2 and the baseline (GCC's target_clones: cpuid picks one when the plugin loads) so
 * they vectorize at the machine's width. Every clone computes the same bits: C11 mode contracts
 * nothing into FMAs, each operation is the same IEEE one, and sums run in the order the code
 * writes, so no result depends on the machine's vector width. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define GPT_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define GPT_VECTOR_CLONES
#endif

/* Query rows per attention block (attention.c). */
#define GPT_ATT_QB 64

/* Rows of V handled at once by the head's chunked bf16 path. */
#define GPT_VCHUNK 1024

/* The rows [*r0, *r0 + *n) of a head call (ABI 1.3 row ranges): all N when row_count is 0.
 * gpt_forward/gpt_backward have checked that a range lies inside the micro-batch. */
static inline void gpt_head_rows(const gpt *m, const ct_stage_args *a, int64_t *r0, int64_t *n) {
    *r0 = a->row_count ? a->row_begin : 0;
    *n = a->row_count ? a->row_count : m->N;
}

/* ---- stages.c: the stages, forward and backward ------------------------------------ */
int32_t gpt_forward(void *self, const ct_stage_args *a, ct_error *err);
int32_t gpt_backward(void *self, const ct_stage_args *a, ct_error *err);

/* ---- decode.c: incremental decoding with a key/value cache (ct_model_vtable.decode) ---- */
int32_t gpt_prepare_decode(void *self, int64_t max_T, int32_t dtype, ct_error *err);
int32_t gpt_decode(void *self, const ct_decode_args *a, ct_error *err);
void gpt_decode_free(gpt *m);

/* ---- dropout.c: [model] dropout ------------------------------------------------------- */

/* Set the call's dropout state (m->drop_on, drop_thr, drop_scale, drop_key) from the stage
 * args: on only in a training micro-batch of a model with dropout > 0. */
void gpt_dropout_begin(gpt *m, const ct_stage_args *a);
/* y[i] = keep(site, i) ? x[i] / (1-p) : 0 for i < n (y may alias x), rounded to the 16-bit
 * compute dtype when the stage computes in one. The same call on the gradient is the backward:
 * dx = keep ? dy / (1-p) : 0. Only when m->drop_on. */
void gpt_dropout(const gpt *m, float *y, const float *x, int64_t n, uint32_t site);
/* The same for n elements numbered first.. of the site whose key is site_key (attention rows;
 * one thread's span, no threads of its own); rounded only when round is 1. */
void gpt_dropout_span(const gpt *m, float *y, const float *x, int64_t n, uint64_t site_key,
                      uint64_t first, int round);

/* ---- layers.c: kernels (forward and backward side by side) -------------------------- */

/* x[i] = bf16(x[i]) (f16(x[i]) when m->f16) for i < n: what a GPU stores when an activation
 * is bf16 (f16). */
void gpt_round_bf16(const gpt *m, float *x, int64_t n);
/* One value rounded to the stage's 16-bit compute dtype (bf16, or f16 when m->f16). */
static inline float gpt_round16(const gpt *m, float x) {
    return m->f16 ? ct_round_f16(x) : ct_round_bf16(x);
}
/* The stage multiplies bf16 operands through oneDNN (never f16: oneDNN's path is bf16 only). */
static inline int gpt_dnnl_on(const gpt *m) { return m->use_dnnl && m->bf16 && !m->f16; }
/* A 16-bit parameter or gradient element of dtype dt (CT_DTYPE_BF16 or CT_DTYPE_F16) as f32, and
 * back (round to nearest even). */
static inline float gpt_h16_to_f32(int32_t dt, uint16_t h) {
    return dt == CT_DTYPE_F16 ? ct_f16_to_f32(h) : ct_bf16_to_f32(h);
}
static inline uint16_t gpt_h16_from_f32(int32_t dt, float x) {
    return dt == CT_DTYPE_F16 ? ct_f16_from_f32(x) : ct_bf16_from_f32(x);
}

/* f32 view of n elements of the stage's params at element offset off: the params themselves
 * when they are f32, else converted (exactly) into wbuf at the same offset. */
const float *gpt_weights(gpt *m, const ct_stage_args *a, int64_t off, int64_t n);
/* f32 view of a unit's parameters for a stage: gpt_weights of the whole unit, except on the
 * oneDNN path, where only its vectors (norms, biases) are converted: its matrices are read as
 * bf16 (gpt_w16). Element offsets as in the unit. */
const float *gpt_unit_weights(gpt *m, const ct_stage_args *a, const ct_unit_spec *u, int64_t n);
/* The bf16 matrix at element offset off of the stage's params, when the stage multiplies
 * through oneDNN (m->use_dnnl, bf16 params); else NULL (products take the f32 view). */
static inline const uint16_t *gpt_w16(const gpt *m, const ct_stage_args *a, int64_t off) {
    return gpt_dnnl_on(m) && off >= 0 ? (const uint16_t *)a->params + off : NULL;
}

/* dst (rows, cols) dense = the bf16 bits of src (rows, cols; row stride ld), rounded to
 * nearest even (exact for values that are already bf16). */
void gpt_to_bf16(const gpt *m, uint16_t *dst, const float *src, int64_t rows, int64_t cols,
                 int64_t ld);
/* C (M,N) = alpha op(A) op(B) + beta C (beta 0 or 1) for bf16 A, B through oneDNN context d,
 * accumulated in f32; a product oneDNN refuses runs through OpenBLAS on the widened operands
 * (logged once). Same argument conventions as gpt_sgemm. */
void gpt_gemm_bf16(gpt *m, gpt_dnnl *d, int ta, int tb, int64_t M, int64_t N, int64_t K,
                   float alpha, const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb,
                   float beta, float *C, int64_t ldc);

/* C (M,N) = alpha op(A) op(B) + beta C, row-major (ta/tb: 0 plain, 1 transposed). A product of
 * 262144 multiply-adds or more is cut along the longer side of C into tiles that depend on the
 * shape only (layers.c: tile_len), each tile one single-threaded OpenBLAS call (one thread pool
 * for the whole plugin: OpenBLAS's own threads are set to 1 in create); the tiles are spread
 * over m->threads OpenMP threads, or run in turn inside a parallel region. So the bits never
 * depend on the thread count, only on the shape and the CPU's OpenBLAS kernel. */
void gpt_sgemm(const gpt *m, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
               const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
               int64_t ldc);
/* y (N,M) = x (N,K) W^T + b; W (M,K) f32, or bf16 w16 when not NULL (oneDNN; x is then
 * bf16-valued); b (M) or NULL. */
void gpt_linear_forward(gpt *m, float *y, const float *x, const float *w, const uint16_t *w16,
                        const float *b, int64_t N, int64_t K, int64_t M);
/* dx (N,K) = beta*dx + dy (N,M) W; W (M,K). */
void gpt_linear_backward_dx(const gpt *m, float *dx, const float *dy, const float *w, int64_t N, int64_t K,
                            int64_t M, float beta);
/* grads[off..] += dy^T (M,N) x (N,K) with ldy/ldx row strides, in the stage's grad dtype
 * (bf16: summed in f32, then g = bf16(f32(g) + sum), in row chunks of gbuf). */
void gpt_grad_matmul(gpt *m, const ct_stage_args *a, int64_t off, const float *dy, int64_t ldy,
                     const float *x, int64_t ldx, int64_t N, int64_t M, int64_t K);
/* The same with bf16 dy and x, through oneDNN (gpt_gemm_bf16). */
void gpt_grad_matmul_bf16(gpt *m, const ct_stage_args *a, int64_t off, const uint16_t *dy,
                          int64_t ldy, const uint16_t *x, int64_t ldx, int64_t N, int64_t M,
                          int64_t K);
/* grads[off..off+n) += d[0..n) in the stage's grad dtype. */
void gpt_grad_add(const ct_stage_args *a, int64_t off, const float *d, int64_t n);
/* db (M) = column sums of dy (N,M). */
void gpt_colsum(float *db, const float *dy, int64_t N, int64_t M);

/* Normalise each row of x (N rows of C, stride ldx) into y (stride ldy); mean and rstd (N) are
 * kept for backward. w (C) gain, b (C) bias or NULL. rmsnorm stores mean = 0. */
void gpt_norm_forward(const gpt *m, float *y, int64_t ldy, float *mean, float *rstd,
                      const float *x, int64_t ldx, const float *w, const float *b, int64_t N,
                      int64_t C);
/* dx = (add ? dx : 0) + d norm / dx . dy; dw (C) += sum dy*xhat; db (C, or NULL) += sum dy.
 * dx may alias dy when add == 0 and the strides match. */
void gpt_norm_backward(const gpt *m, float *dx, int64_t lddx, float *dw, float *db,
                       const float *dy, int64_t lddy, const float *x, int64_t ldx,
                       const float *mean, const float *rstd, const float *w, int64_t N,
                       int64_t C, int add);

/* MLP activation: gelu g = gelu(h), h (N,F); swiglu g = silu(h[:, :F]) * h[:, F:], h (N,2F). */
void gpt_act_forward(const gpt *m, float *g, const float *h, int64_t N);
/* dh from dg (N,F) and the stored h. */
void gpt_act_backward(const gpt *m, float *dh, const float *dg, const float *h, int64_t N);

/* ---- attention.c ---------------------------------------------------------------------- */

/* Rotary embedding (NeoX/open_lm: halves of each head rotate together) of the q and k parts of
 * qkv (N,QW) in place (NH query heads, KVH key heads); inverse == 1 applies the transposed
 * rotation (backward). */
void gpt_rope(const gpt *m, float *qkv, int64_t N, int inverse);
/* Causal softmax attention of qkv (N,QW) into att (N,C); lse (B,NH,T) kept for backward. Query
 * head h reads key/value head h / (NH/KVH). Row n attends to positions doc_start[n]..n of its
 * sequence (all 0 without document masking); with m->drop_on the probabilities are dropped (site
 * GPT_DROP_SITE_ATT(layer), element ((b*NH + h)*T + t)*T + j) before they multiply v. */
void gpt_attention_forward(gpt *m, float *att, float *lse, const float *qkv, int64_t layer);
/* From datt (N,C) write dqkv (N,QW) (every element), recomputing probabilities from lse (and the
 * same dropout masks); a key head's dK, dV sum over its query heads in head order. */
void gpt_attention_backward(gpt *m, float *dqkv, const float *datt, const float *qkv,
                            const float *lse, int64_t layer);

#endif /* GPT_PLUGIN_GPT_H */
