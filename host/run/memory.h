/* memory.h — the start-of-training memory line: what this rank holds per parameter element
 * and in total (weights, gradients, optimizer state, the master's compensation buffer), so a
 * policy's saving is visible before the first step. Not for: the peaks of transient buffers
 * (the strategy's memory(), logged as mem/... metrics after the first step: loop.c). */
#ifndef CTRAIN_HOST_MEMORY_H
#define CTRAIN_HOST_MEMORY_H

#include "run/rank.h"

#include <stddef.h>

/* What rank r holds now, in bytes, and the parameter elements of its shards (padding
 * included). grads is the strategy's memory() figure before any step (persistent buffers;
 * UINT64_MAX when the strategy has no memory()). */
typedef struct host_memory {
    uint64_t elements, weights, grads, optim, comp;
} host_memory;

int32_t memory_measure(host_rank *r, host_memory *m, ct_error *err);

/* One line: "memory per rank (rank 0 of N, before the first step): weights 2.00 B/param
 * (master bf16 = compute) 1.6 MB | grads ... | optimizer state ... | compensation ... | total
 * ..." into buf. */
void memory_format(const host_rank *r, const host_memory *m, char *buf, size_t n);

#endif /* CTRAIN_HOST_MEMORY_H */
