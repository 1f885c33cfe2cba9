/* init.c — reproducible parameter initialisation and weight-decay masks (see init.h). */
#include "base/init.h"

#include <ctrain/numerics.h>
#include <math.h>
#include <string.h>

const ct_tensor_spec *init_tensor(const ct_model_desc *desc, uint32_t unit, uint32_t k) {
    const ct_unit_spec *u = &desc->units[unit];
    return (const ct_tensor_spec *)((const char *)u->tensors + (size_t)k * desc->tensor_struct_size);
}

uint64_t init_tensor_offset(const ct_model_desc *desc, uint32_t unit, uint32_t k) {
    uint64_t off = 0;
    for (uint32_t j = 0; j < k; j++)
        off += ct_align_up(ct_tensor_numel(init_tensor(desc, unit, j)), CT_TENSOR_ALIGN);
    return off;
}

uint64_t init_unit_numel(const ct_model_desc *desc, uint32_t unit) {
    return init_tensor_offset(desc, unit, desc->units[unit].n_tensors);
}

/* A standard normal from two uniforms of the counter stream (Box-Muller). */
static double normal01(uint64_t key, uint64_t counter) {
    double u1 = ((double)(ct_hash64(key, 2 * counter) >> 11) + 1.0) / 9007199254740993.0;
    double u2 = (double)(ct_hash64(key, 2 * counter + 1) >> 11) / 9007199254740992.0;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static float draw(const ct_tensor_spec *t, uint64_t key, uint64_t i) {
    switch (t->init) {
    case CT_INIT_ZEROS: return 0.0f;
    case CT_INIT_ONES: return 1.0f;
    case CT_INIT_NORMAL: return (float)(t->init_std * normal01(key, i));
    case CT_INIT_TRUNC_NORMAL:
        /* resample outside [-3, 3] std: attempt a uses counter i + a * 2^40 */
        for (uint64_t a = 0;; a++) {
            double z = normal01(key, i + (a << 40));
            if (fabs(z) <= 3.0) return (float)(t->init_std * z);
        }
    default: return 0.0f;
    }
}

void init_unit(const ct_model_desc *desc, uint32_t unit, uint64_t seed, float *out) {
    uint64_t numel = init_unit_numel(desc, unit);
    memset(out, 0, numel * sizeof *out);
    for (uint32_t k = 0; k < desc->units[unit].n_tensors; k++) {
        const ct_tensor_spec *t = init_tensor(desc, unit, k);
        uint64_t key = ct_hash64(seed, ((uint64_t)unit << 20) | k);
        uint64_t off = init_tensor_offset(desc, unit, k), n = ct_tensor_numel(t);
        for (uint64_t i = 0; i < n; i++) out[off + i] = draw(t, key, i);
    }
}

void init_decay_mask(const ct_model_desc *desc, uint32_t unit, int32_t decay_all, uint8_t *out) {
    memset(out, 0, init_unit_numel(desc, unit));
    for (uint32_t k = 0; k < desc->units[unit].n_tensors; k++) {
        const ct_tensor_spec *t = init_tensor(desc, unit, k);
        uint64_t off = init_tensor_offset(desc, unit, k), n = ct_tensor_numel(t);
        memset(out + off, decay_all || t->decay ? 1 : 0, n);
    }
}
