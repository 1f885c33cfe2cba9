/* preflight.h — the cross-section checks of a resolved configuration that `validate` and
 * `train` share, run before any rank starts: what the ranks would refuse (plugin create()s,
 * [data] seq_len against the model, the data's tokens against the model's vocabulary, the
 * optimizer's settings, the world size against the comm engine), found without training.
 * Not for: per-key schema checks (config.c, wiring.c) or building real ranks (rank.c).
 */
#ifndef CTRAIN_HOST_PREFLIGHT_H
#define CTRAIN_HOST_PREFLIGHT_H

#include "config/config.h"
#include "plugin/wiring.h"

#include <stdio.h>

/* Check cfg (resolved by wiring_resolve) as the ranks of `train` would, in the order they do:
 *   - optim_config() accepts [optim] and [run] steps;
 *   - [comm] world_size > 1 only with an in-process engine (one that has world_create);
 *   - device (the configured one), precision (and its policy), strategy, model (and its
 *     describe()) and each loss term are created with the arguments rank 0 gets, then
 *     destroyed; the comm plugin is not created (mpi would start MPI): create()s get a comm
 *     reference that knows rank 0 and the world size and refuses every call;
 *   - [data] seq_len <= the model's seq_len;
 *   - the strategy's setup() accepts the precision policy (on units of one element);
 *   - [data] train (and val when set) open, and every token is < the model's vocab_size.
 * Parameters, optimizer state and step buffers are never allocated. Under a launcher (mpi)
 * the world is 1 here: checks that need the launcher's world run when the ranks start.
 * On failure CT_ERR_* and err's message is the one train gives, starting with the FILE:LINE
 * of the key (or section) concerned. */
int32_t preflight_check(const host_config *cfg, const host_wiring *w, ct_error *err);

/* The optimizer's parameter groups of the configured model into out, one line each (for
 * `validate`): the plugins are created as preflight_check creates them, then destroyed. */
int32_t preflight_print_groups(const host_config *cfg, const host_wiring *w, FILE *out,
                               ct_error *err);

#endif /* CTRAIN_HOST_PREFLIGHT_H */
