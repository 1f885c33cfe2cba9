/* groups.h — the parameter groups of nanoGPT and torchtitan: each tensor's role (hidden matrix,
 * embedding, head, norm, bias), whether weight decay applies to it, its group's lr multiplier,
 * and the tensors of a shard as the optimizer plugin sees them (ct_optim_tensor).
 * Not for: the update (optim.c and the optimizer plugins) or where shards live (the strategy).
 */
#ifndef CTRAIN_HOST_GROUPS_H
#define CTRAIN_HOST_GROUPS_H

#include "config/config.h"

#include <ctrain/ctrain.h>
#include <stdio.h>

/* The role of tensor k of unit u (ct_optim_role): the model's head tensor is HEAD unless it
 * is also the token embedding (tied: EMBEDDING); other 2-D+ tensors of the head's unit are
 * EMBEDDING, elsewhere MATRIX; 1-D tensors whose name holds "ln" or "norm" NORM, else BIAS. */
int32_t groups_role(const ct_model_desc *d, uint32_t u, uint32_t k);
extern const char *const groups_role_names[5]; /* "matrix", "embedding", "head", "norm", "bias" */

/* Whether weight decay applies to tensor k of unit u: [optim] decay_all, else the model's
 * ct_tensor_spec.decay, less the embeddings when [optim] decay_embeddings = false. */
int32_t groups_decays(const host_config *cfg, const ct_model_desc *d, uint32_t u, uint32_t k);

/* The unit's decay mask (unit numel bytes, 1 = decay) from groups_decays. */
void groups_decay_mask(const host_config *cfg, const ct_model_desc *d, uint32_t u, uint8_t *out);

/* The unit's tensors as the optimizer sees them in shard sh (malloc'd, n_tensors entries;
 * NULL when out of memory; names point into the model's description). */
ct_optim_tensor *groups_tensors(const host_config *cfg, const ct_model_desc *d, uint32_t u,
                                const ct_shard *sh);

/* The parameter groups, one line each, for validate ("group matrix: 8 tensors, decay 0.1,
 * lr x1"). */
void groups_print(const host_config *cfg, const ct_model_desc *d, FILE *out);

#endif /* CTRAIN_HOST_GROUPS_H */
