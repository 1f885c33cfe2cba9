/* master.h — master weights in a dtype other than f32 (ABI 1.7: a policy's master_dtype bf16):
 * where the optimizer's f32 arithmetic happens and how its result is written back. Per unit,
 * the host widens this rank's bf16 master shard exactly into an f32 scratch (master_widen), the
 * optimizer plugin updates that scratch with its own f32 state as it would an f32 master, and
 * the host writes the result back into the bf16 master with the policy's rule
 * (master_write_back: nearest, stochastic rounding or Kahan with a bf16 compensation buffer per
 * master element, sharded like the master). The staging goes through host memory, so it works
 * on any device. The buffers are made and freed with the rank (rank.c: master_setup, master_free,
 * master_check_policy). Not for: the per-element rounding (sdk precision_kit.h / numerics.h), the
 * update's arithmetic (the optimizer plugin) or where shards live (the strategy plugin). */
#ifndef CTRAIN_HOST_MASTER_H
#define CTRAIN_HOST_MASTER_H

#include "run/rank.h"

/* 1 when the rank's master weights are not f32 (the write-back path is taken). */
int master_is_low(const host_rank *r);

/* *param = the rank's f32 scratch (device memory) holding shard sh's master widened exactly
 * (sh.numel elements); valid until the next call. */
int32_t master_widen(host_rank *r, const ct_shard *sh, float **param, ct_error *err);

/* The scratch master_widen filled (now the optimizer's result) written back into unit u's
 * master shard sh with the policy's rule at 1-based step `step`. */
int32_t master_write_back(host_rank *r, uint32_t u, const ct_shard *sh, int64_t step,
                          ct_error *err);

/* Host f32 <-> device (f32 or bf16) copies, widening exactly / rounding to nearest even. */
int32_t master_to_host_f32(host_rank *r, float *dst, const void *src, int32_t dtype, uint64_t n,
                           ct_error *err);
int32_t master_from_host_f32(host_rank *r, void *dst, int32_t dtype, const float *src,
                             uint64_t n, ct_error *err);

/* Bytes per element of the rank's master weights and of its compensation buffer (0 without). */
uint32_t master_bytes(const host_rank *r);
uint32_t master_comp_bytes(const host_rank *r);

#endif /* CTRAIN_HOST_MASTER_H */
