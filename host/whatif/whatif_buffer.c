/* whatif_buffer.c — the buffer what-if reduces the head in (a DDP bucket, an FSDP unit of an
 * open_lm model, or the head alone) and the tuner model's pick for it with its closest rival
 * (see whatif_buffer.h). Not for: the command's options or output (cli/what_if.c).
 */
#include "whatif/whatif_buffer.h"

#include "../plugins/comm/threads/orders.h"

#include <stdio.h>
#include <string.h>

/* The seed's two models, as ini/experiments/seed/ builds them (open_lm's Block, gain-only
 * layer norms, qk_norm, SwiGLU, untied head, V = 50,432). */
static const whatif_fsdp_model models[] = {
    {"open_lm-125m", "the report's 125M: 24 blocks of width 768, 12 heads (ini/experiments/seed/"
                     "exp1-*.ini)", 50432, 768, 24, 12, 1},
    {"open_lm-1b", "the report's 1.3B: 48 blocks of width 2048, 16 heads (ini/experiments/seed/"
                   "exp2-*.ini; open_lm_1b.json has 24 blocks: the root unit is the same)",
     50432, 2048, 48, 16, 1},
};
#define N_MODELS (int)(sizeof models / sizeof models[0])

const whatif_fsdp_model *whatif_fsdp_find(const char *name) {
    for (int i = 0; i < N_MODELS; i++)
        if (!strcmp(name, models[i].name)) return &models[i];
    return NULL;
}

const char *whatif_fsdp_names(void) { return "open_lm-125m, open_lm-1b"; }

/* SwiGLU's hidden width in open_lm: 256 * ceil(floor(8C/3) / 256) */
static int64_t ffn_hidden(int64_t C) { return 256 * ((2 * 4 * C / 3 + 255) / 256); }

int64_t whatif_fsdp_block_elems(const whatif_fsdp_model *m) {
    int64_t C = m->C, H = ffn_hidden(C);
    return 3 * C * C + C * C + (m->qk_norm ? 2 * C : 0) /* attention */
           + 2 * H * C + C * H                          /* SwiGLU w12, w3 */
           + 2 * C;                                     /* attention_norm, ffn_norm */
}

int64_t whatif_fsdp_root_elems(const whatif_fsdp_model *m) { return 2 * m->V * m->C + m->C; }

int64_t whatif_fsdp_head_offset(const whatif_fsdp_model *m) { return m->V * m->C + m->C; }

void whatif_fsdp_print(FILE *f, const whatif_fsdp_model *m, uint32_t esize) {
    int64_t root = whatif_fsdp_root_elems(m), block = whatif_fsdp_block_elems(m);
    fprintf(f, "what-if: FSDP units of %s, %s; open_lm's wrapping (transformer_auto_wrap_policy "
            "on Block): %lld block units of %lld elements (%.1f MB in the %u-byte reduce dtype "
            "each: in_proj, out_proj, q/k norms, SwiGLU w12 and w3 (hidden %lld), two norms); "
            "the root unit %lld elements = %.1f MB (tok_embeddings %lld x %lld, norm %lld, "
            "output %lld x %lld), the head from element %lld; NO_SHARD all-reduces the root "
            "unit, head included, in one collective\n",
            m->name, m->what, (long long)m->blocks, (long long)block, block * (double)esize / 1e6,
            (unsigned)esize, (long long)ffn_hidden(m->C), (long long)root,
            root * (double)esize / 1e6, (long long)m->V, (long long)m->C, (long long)m->C,
            (long long)m->V, (long long)m->C, (long long)whatif_fsdp_head_offset(m));
}

int whatif_buffer_of(uint64_t bucket_bytes, const whatif_fsdp_model *m, uint64_t head_elems,
                     uint32_t esize, uint64_t *count, uint64_t *base, char *why, size_t len) {
    *count = head_elems;
    *base = 0;
    if (bucket_bytes) {
        if (bucket_bytes / esize < head_elems) {
            snprintf(why, len, "--bucket-bytes %llu is smaller than the head (%llu elements = "
                     "%llu bytes in the %u-byte reduce dtype) ---> a bucket holds the head: give "
                     "at least %llu", (unsigned long long)bucket_bytes,
                     (unsigned long long)head_elems, (unsigned long long)(head_elems * esize),
                     (unsigned)esize, (unsigned long long)(head_elems * esize));
            return -1;
        }
        *count = bucket_bytes / esize;
    } else if (m) {
        uint64_t own = (uint64_t)(m->V * m->C);
        if (head_elems > own) {
            snprintf(why, len, "--fsdp-units %s: the run's head (%llu elements) is larger than "
                     "%s's (%lld x %lld) ---> name a model whose head holds it",
                     m->name, (unsigned long long)head_elems, m->name, (long long)m->V,
                     (long long)m->C);
            return -1;
        }
        *count = (uint64_t)whatif_fsdp_root_elems(m);
        *base = (uint64_t)whatif_fsdp_head_offset(m);
    }
    return 0;
}

int32_t whatif_engine_algo(int32_t a) {
    switch (a) {
    case TUNER_TREE: return REDUCE_DBTREE;
    case TUNER_NVLS: return REDUCE_NVLS;
    case TUNER_NVLS_TREE: return REDUCE_NVLS_TREE;
    default: return REDUCE_RING;
    }
}

void whatif_pick_of(const tuner_query *q, whatif_pick *out) {
    memset(out, 0, sizeof *out);
    tuner_choose(q, &out->pick);
    out->nbytes = q->nbytes;
    out->rival = -1;
    int32_t mine = whatif_engine_algo(out->pick.nccl_algo);
    for (int32_t a = 0; a < TUNER_N_ALGOS; a++) {
        if (whatif_engine_algo(a) == mine) continue; /* PAT runs as the ring */
        for (int32_t p = 0; p < TUNER_N_PROTOS; p++) {
            double t = out->pick.table_us[a][p];
            if (t >= 0 && (out->rival < 0 || t < out->rival_us))
                out->rival = a, out->rival_proto = p, out->rival_us = t;
        }
    }
    if (out->rival >= 0 && out->pick.time_us > 0) {
        out->margin = out->rival_us / out->pick.time_us - 1.0;
        out->fragile = out->margin < WHATIF_FRAGILE;
    }
}
