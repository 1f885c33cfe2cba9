/* onednn.c — matrix products through oneDNN's matmul primitive (see onednn.h): the ISA probe,
 * a per-context cache of primitives keyed by shape, strides, dtype, alpha and beta, and the
 * execution with the context's own scratchpad. Not for: deciding when it runs (gpt.c) or
 * preparing bf16 operands (layers.c). Built empty (every call "not available") without
 * GPT_HAVE_ONEDNN.
 *
 * Threads: oneDNN's OpenMP runtime plans a primitive for omp_get_max_threads() of the calling
 * thread and runs it on that many; a context sets that to its own count before creating or
 * running anything, so every rank runs the same primitives on the same threads (results are
 * then the same bits run after run: oneDNN's kernels are deterministic for a given shape, ISA
 * and thread count).
 */
#include "onednn.h"

#include <ctrain/ctrain.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef GPT_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>

#define GPT_DNNL_SLOTS 256 /* primitives per context; a full cache replaces its oldest */

typedef struct {
    int32_t dtype, ta, tb;
    int64_t M, N, K, lda, ldb, ldc;
    float   alpha, beta;
} dnnl_key;

typedef struct {
    dnnl_key         key;
    dnnl_primitive_t prim;          /* NULL: refused (the slot remembers it) */
    dnnl_memory_t    a, b, c, s;    /* handles set at each call; s NULL without scratchpad */
    size_t           scratch_bytes;
} dnnl_slot;

struct gpt_dnnl {
    int           threads;
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    dnnl_slot     slot[GPT_DNNL_SLOTS];
    int           n_slots, next_evict, last;
    int           created;
    void         *scratch;
    size_t        scratch_bytes;
    char          error[200];
};

static const char *isa_name(dnnl_cpu_isa_t isa) {
    switch (isa) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_mic: return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "unknown";
    }
}

/* The stored matrix of op(X) (rows x cols): row-major with row stride ld, or its transpose. */
static dnnl_status_t matrix_md(dnnl_memory_desc_t *md, int64_t rows, int64_t cols, int trans,
                               int64_t ld, dnnl_data_type_t dt) {
    dnnl_dims_t dims = {rows, cols};
    dnnl_dims_t strides = {trans ? 1 : ld, trans ? ld : 1};
    return dnnl_memory_desc_init_by_strides(md, 2, dims, dt, strides);
}

static void set_threads(int threads) {
    if (omp_get_max_threads() != threads) omp_set_num_threads(threads);
}

static void slot_clear(dnnl_slot *s) {
    if (s->prim) dnnl_primitive_destroy(s->prim);
    if (s->a) dnnl_memory_destroy(s->a);
    if (s->b) dnnl_memory_destroy(s->b);
    if (s->c) dnnl_memory_destroy(s->c);
    if (s->s) dnnl_memory_destroy(s->s);
    memset(s, 0, sizeof *s);
}

/* Create the primitive of key k into s (s->prim stays NULL on refusal; d->error says why). */
static void slot_create(gpt_dnnl *d, dnnl_slot *s, const dnnl_key *k) {
    memset(s, 0, sizeof *s);
    s->key = *k;
    dnnl_data_type_t dt = k->dtype == CT_DTYPE_BF16 ? dnnl_bf16 : dnnl_f32;
    dnnl_memory_desc_t a, b, c;
    dnnl_matmul_desc_t desc;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t ops = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t st;
    const char *what = "memory descriptors";
    if ((st = matrix_md(&a, k->M, k->K, k->ta, k->lda, dt)) != dnnl_success ||
        (st = matrix_md(&b, k->K, k->N, k->tb, k->ldb, dt)) != dnnl_success ||
        (st = matrix_md(&c, k->M, k->N, 0, k->ldc, dnnl_f32)) != dnnl_success)
        goto out_refused;
    what = "matmul descriptor";
    if ((st = dnnl_matmul_desc_init(&desc, &a, &b, NULL, &c)) != dnnl_success) goto out_refused;
    what = "attributes";
    if ((st = dnnl_primitive_attr_create(&attr)) != dnnl_success ||
        (st = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user)) !=
            dnnl_success)
        goto out_refused;
    if (k->alpha != 1.0f &&
        (st = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &k->alpha)) != dnnl_success)
        goto out_refused;
    if (k->beta != 0.0f) {
        if ((st = dnnl_post_ops_create(&ops)) != dnnl_success ||
            (st = dnnl_post_ops_append_sum(ops, 1.0f)) != dnnl_success ||
            (st = dnnl_primitive_attr_set_post_ops(attr, ops)) != dnnl_success)
            goto out_refused;
    }
    what = "primitive descriptor";
    set_threads(d->threads);
    if ((st = dnnl_primitive_desc_create(&pd, &desc, attr, d->engine, NULL)) != dnnl_success)
        goto out_refused;
    const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    s->scratch_bytes = smd ? dnnl_memory_desc_get_size(smd) : 0;
    what = "primitive";
    if ((st = dnnl_primitive_create(&s->prim, pd)) != dnnl_success) goto out_refused;
    what = "memory objects";
    if ((st = dnnl_memory_create(&s->a, &a, d->engine, DNNL_MEMORY_NONE)) != dnnl_success ||
        (st = dnnl_memory_create(&s->b, &b, d->engine, DNNL_MEMORY_NONE)) != dnnl_success ||
        (st = dnnl_memory_create(&s->c, &c, d->engine, DNNL_MEMORY_NONE)) != dnnl_success ||
        (s->scratch_bytes &&
         (st = dnnl_memory_create(&s->s, smd, d->engine, DNNL_MEMORY_NONE)) != dnnl_success))
        goto out_refused;
    d->created++;
    goto out_free;

out_refused:
    snprintf(d->error, sizeof d->error, "oneDNN refused a %s matmul (%lld x %lld x %lld, "
             "op %c%c, strides %lld/%lld/%lld): %s failed with status %d",
             k->dtype == CT_DTYPE_BF16 ? "bf16" : "f32", (long long)k->M, (long long)k->N,
             (long long)k->K, k->ta ? 'T' : 'N', k->tb ? 'T' : 'N', (long long)k->lda,
             (long long)k->ldb, (long long)k->ldc, what, (int)st);
    slot_clear(s); /* whatever was made; the key stays, so the refusal is remembered */
    s->key = *k;
out_free:
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (ops) dnnl_post_ops_destroy(ops);
    if (attr) dnnl_primitive_attr_destroy(attr);
}

static dnnl_slot *lookup(gpt_dnnl *d, const dnnl_key *k) {
    if (d->n_slots && memcmp(&d->slot[d->last].key, k, sizeof *k) == 0) return &d->slot[d->last];
    for (int i = 0; i < d->n_slots; i++)
        if (memcmp(&d->slot[i].key, k, sizeof *k) == 0) return &d->slot[d->last = i];
    int i = d->n_slots < GPT_DNNL_SLOTS ? d->n_slots++ : d->next_evict++ % GPT_DNNL_SLOTS;
    slot_clear(&d->slot[i]);
    slot_create(d, &d->slot[i], k);
    return &d->slot[d->last = i];
}

void gpt_dnnl_probe(gpt_dnnl_info *info) {
    memset(info, 0, sizeof *info);
    info->built = 1;
    const dnnl_version_t *v = dnnl_version();
    snprintf(info->version, sizeof info->version, "%d.%d.%d", v->major, v->minor, v->patch);
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    snprintf(info->isa, sizeof info->isa, "%s", isa_name(isa));
    /* the ISA values nest: each includes the bits of those it extends */
    info->bf16 = ((unsigned)isa & (unsigned)dnnl_cpu_isa_avx512_core_bf16) ==
                 (unsigned)dnnl_cpu_isa_avx512_core_bf16;
    info->amx = ((unsigned)isa & (unsigned)dnnl_cpu_isa_avx512_core_amx) ==
                (unsigned)dnnl_cpu_isa_avx512_core_amx;
    /* which kernel a typical product gets (no memory is touched) */
    dnnl_engine_t eng = NULL;
    dnnl_memory_desc_t a, b, c;
    dnnl_matmul_desc_t desc;
    dnnl_primitive_desc_t pd = NULL;
    const char *impl = NULL;
    if (dnnl_engine_create(&eng, dnnl_cpu, 0) == dnnl_success &&
        matrix_md(&a, 256, 768, 0, 768, dnnl_bf16) == dnnl_success &&
        matrix_md(&b, 768, 768, 1, 768, dnnl_bf16) == dnnl_success &&
        matrix_md(&c, 256, 768, 0, 768, dnnl_f32) == dnnl_success &&
        dnnl_matmul_desc_init(&desc, &a, &b, NULL, &c) == dnnl_success &&
        dnnl_primitive_desc_create(&pd, &desc, NULL, eng, NULL) == dnnl_success &&
        dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl)
        snprintf(info->impl, sizeof info->impl, "%s", impl);
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (eng) dnnl_engine_destroy(eng);
}

gpt_dnnl *gpt_dnnl_new(int threads) {
    gpt_dnnl *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    d->threads = threads > 0 ? threads : 1;
    if (dnnl_engine_create(&d->engine, dnnl_cpu, 0) != dnnl_success ||
        dnnl_stream_create(&d->stream, d->engine, dnnl_stream_default_flags) != dnnl_success) {
        gpt_dnnl_free(d);
        return NULL;
    }
    return d;
}

void gpt_dnnl_free(gpt_dnnl *d) {
    if (!d) return;
    for (int i = 0; i < d->n_slots; i++) slot_clear(&d->slot[i]);
    if (d->stream) dnnl_stream_destroy(d->stream);
    if (d->engine) dnnl_engine_destroy(d->engine);
    free(d->scratch);
    free(d);
}

int gpt_dnnl_gemm(gpt_dnnl *d, int32_t dtype, int ta, int tb, int64_t M, int64_t N, int64_t K,
                  float alpha, const void *A, int64_t lda, const void *B, int64_t ldb, float beta,
                  float *C, int64_t ldc) {
    dnnl_key k;
    memset(&k, 0, sizeof k); /* padding bytes too: the key is compared with memcmp */
    k.dtype = dtype, k.ta = ta, k.tb = tb, k.M = M, k.N = N, k.K = K;
    k.lda = lda, k.ldb = ldb, k.ldc = ldc, k.alpha = alpha, k.beta = beta;
    dnnl_slot *s = lookup(d, &k);
    if (!s->prim) return -1;
    if (s->scratch_bytes > d->scratch_bytes) {
        void *p = aligned_alloc(64, (s->scratch_bytes + 63) / 64 * 64);
        if (!p) {
            snprintf(d->error, sizeof d->error, "out of memory for a %zu-byte oneDNN scratchpad",
                     s->scratch_bytes);
            return -1;
        }
        free(d->scratch);
        d->scratch = p;
        d->scratch_bytes = s->scratch_bytes;
    }
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, s->a}, {DNNL_ARG_WEIGHTS, s->b},
                               {DNNL_ARG_DST, s->c}, {DNNL_ARG_SCRATCHPAD, s->s}};
    dnnl_status_t st;
    set_threads(d->threads);
    if ((st = dnnl_memory_set_data_handle(s->a, (void *)A)) != dnnl_success ||
        (st = dnnl_memory_set_data_handle(s->b, (void *)B)) != dnnl_success ||
        (st = dnnl_memory_set_data_handle(s->c, C)) != dnnl_success ||
        (s->s && (st = dnnl_memory_set_data_handle(s->s, d->scratch)) != dnnl_success) ||
        (st = dnnl_primitive_execute(s->prim, d->stream, s->s ? 4 : 3, args)) != dnnl_success ||
        (st = dnnl_stream_wait(d->stream)) != dnnl_success) {
        snprintf(d->error, sizeof d->error, "oneDNN failed to run a matmul (%lld x %lld x %lld): "
                 "status %d", (long long)M, (long long)N, (long long)K, (int)st);
        return -1;
    }
    return 0;
}

const char *gpt_dnnl_error(const gpt_dnnl *d) { return d ? d->error : ""; }
int gpt_dnnl_primitives(const gpt_dnnl *d) { return d ? d->created : 0; }

#else /* without oneDNN: nothing is available */

void gpt_dnnl_probe(gpt_dnnl_info *info) { memset(info, 0, sizeof *info); }
gpt_dnnl *gpt_dnnl_new(int threads) {
    (void)threads;
    return NULL;
}
void gpt_dnnl_free(gpt_dnnl *d) { (void)d; }
int gpt_dnnl_gemm(gpt_dnnl *d, int32_t dtype, int ta, int tb, int64_t M, int64_t N, int64_t K,
                  float alpha, const void *A, int64_t lda, const void *B, int64_t ldb, float beta,
                  float *C, int64_t ldc) {
    (void)d, (void)dtype, (void)ta, (void)tb, (void)M, (void)N, (void)K, (void)alpha, (void)A;
    (void)lda, (void)B, (void)ldb, (void)beta, (void)C, (void)ldc;
    return -1;
}
const char *gpt_dnnl_error(const gpt_dnnl *d) {
    (void)d;
    return "this build of the gpt plugin has no oneDNN";
}
int gpt_dnnl_primitives(const gpt_dnnl *d) {
    (void)d;
    return 0;
}

#endif /* GPT_HAVE_ONEDNN */
