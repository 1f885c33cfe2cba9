/* sr_combine.h — one hop of the bf16_sr policy's ring: the arithmetic alone, shared by the
 * plugin (precision_bf16_sr.c) and `ctrain what-if` (host/whatif_replay.c), which replays it.
 * Not for: the ring itself or its random stream's bookkeeping (the plugin). */
#ifndef PRECISION_BF16_SR_COMBINE_H
#define PRECISION_BF16_SR_COMBINE_H

#include <ctrain/numerics.h>

/* One hop: bf16 partial (received) + bf16 own contribution, added in f32 and rounded to bf16
 * with the random bits of (call stream, element, hop). */
CT_HD uint16_t sr_combine(uint16_t partial, uint16_t own, uint64_t stream, uint64_t element,
                          int32_t hop, int32_t world_size) {
    float v = ct_bf16_to_f32(partial) + ct_bf16_to_f32(own);
    uint64_t bits = ct_hash64(stream, element * (uint64_t)world_size + (uint64_t)hop);
    return ct_bf16_from_f32_sr(v, (uint32_t)(bits >> 48));
}

#endif /* PRECISION_BF16_SR_COMBINE_H */
