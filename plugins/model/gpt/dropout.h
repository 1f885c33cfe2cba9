/* dropout.h — the gpt plugin's dropout masks: a counter-based hash (SplitMix64's finaliser) of
 * (seed, step, micro-batch, rank, site, element), so a mask is never stored: forward and backward
 * (and a recomputed forward, and a resumed run) regenerate the same bits from the same numbers.
 * Plain C with no state, so a CUDA kernel could call the same functions. Not for: where dropout
 * applies (stages.c, attention.c) or the key's inputs (ct_stage_args, gpt.h).
 *
 * Sites: 0 the embedding output; block l: 1 + 3l the attention probabilities, 2 + 3l the
 * attention branch's output, 3 + 3l the MLP branch's output (nanoGPT's four places).
 */
#ifndef GPT_PLUGIN_DROPOUT_H
#define GPT_PLUGIN_DROPOUT_H

#include <stdint.h>

#define GPT_DROP_SITE_EMBED 0u
#define GPT_DROP_SITE_ATT(l) (1u + 3u * (uint32_t)(l))
#define GPT_DROP_SITE_ATT_OUT(l) (2u + 3u * (uint32_t)(l))
#define GPT_DROP_SITE_MLP_OUT(l) (3u + 3u * (uint32_t)(l))

/* SplitMix64's output function: a bijection of 64 bits that mixes every input bit into every
 * output bit. */
static inline uint64_t gpt_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The key of one micro-batch on one rank: each input is mixed in turn, so changing any of them
 * gives an unrelated key. */
static inline uint64_t gpt_drop_key(uint64_t seed, int64_t step, int32_t micro, int32_t rank) {
    uint64_t k = gpt_mix64(seed ^ 0x6470726f706f7574ull); /* "dropout" */
    k = gpt_mix64(k ^ (uint64_t)step);
    k = gpt_mix64(k ^ ((uint64_t)(uint32_t)micro << 32 | (uint32_t)rank));
    return k;
}

/* The key of one site of a micro-batch. */
static inline uint64_t gpt_drop_site_key(uint64_t key, uint32_t site) {
    return gpt_mix64(key ^ ((uint64_t)site * 0xd6e8feb86659fd93ull));
}

/* Element i of a site is kept when the top 32 bits of its hash reach thr = round(p * 2^32):
 * P(kept) = 1 - thr / 2^32 (SplitMix64's stream: element i is state key + (i+1) * gamma). */
static inline int gpt_drop_keep(uint64_t site_key, uint64_t i, uint32_t thr) {
    uint64_t h = gpt_mix64(site_key + (i + 1) * 0x9e3779b97f4a7c15ull);
    return (uint32_t)(h >> 32) >= thr;
}

#endif /* GPT_PLUGIN_DROPOUT_H */
