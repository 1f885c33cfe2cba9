/* probe.h — the reduction-error probe ([run] probe = true): at each log step, before a unit's
 * gradient goes to the strategy, reduce a sample of the real local gradient twice — the
 * precision policy's way (cast to its reduce dtype, FSDP's pre/post divide, the policy's hook
 * or the comm's native sum) and exactly (f64 sum of the same local values) — and report the
 * relative error and the signed bias of the reduction per unit. For the output head it also
 * reports the change of the batch-mean logit that the reduction error alone would cause.
 * Not for: changing the gradient (the probe only reads it). */
#ifndef CTRAIN_HOST_PROBE_H
#define CTRAIN_HOST_PROBE_H

#include "run/rank.h"

/* Probe unit u of rank r (its local gradient is complete for the step). Collective: every rank
 * probes the same units in the same order. Reports metrics probe/<unit>/rel_err,
 * probe/<unit>/bias and, for the head unit, probe/head/rel_err and probe/head/logit_push. */
int32_t probe_unit(host_rank *r, uint32_t u, ct_error *err);

#endif /* CTRAIN_HOST_PROBE_H */
