/* init.h — parameter initialisation from the model's tensor specs, reproducible from the seed
 * alone: element i of tensor k of unit u gets the same value whatever the world size or the
 * strategy, because each value comes from a counter-based generator keyed by (seed, u, k, i).
 * Not for: optimizer state (zero) or loading checkpoints (checkpoint.c). */
#ifndef CTRAIN_HOST_INIT_H
#define CTRAIN_HOST_INIT_H

#include <ctrain/ctrain.h>

/* Number of elements of unit `unit` laid out as the ABI says (tensors in order, each rounded up
 * to CT_TENSOR_ALIGN), before the end padding a strategy adds. */
uint64_t init_unit_numel(const ct_model_desc *desc, uint32_t unit);

/* Element offset of tensor `k` in its unit. */
uint64_t init_tensor_offset(const ct_model_desc *desc, uint32_t unit, uint32_t k);

/* The spec of tensor k of unit u (honours tensor_struct_size). */
const ct_tensor_spec *init_tensor(const ct_model_desc *desc, uint32_t unit, uint32_t k);

/* Fill `out` (init_unit_numel elements, f32, host memory) with unit u's initial values; the
 * alignment gaps are zero. */
void init_unit(const ct_model_desc *desc, uint32_t unit, uint64_t seed, float *out);

/* Per-element weight-decay flags of unit u (1 = decay), for the same layout; decay_all sets
 * every element of every tensor (open_lm's behaviour). */
void init_decay_mask(const ct_model_desc *desc, uint32_t unit, int32_t decay_all, uint8_t *out);

#endif /* CTRAIN_HOST_INIT_H */
