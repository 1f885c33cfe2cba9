/* cores.h — how many CPU threads a rank of this process uses when [device] threads = 0 (auto),
 * and how idle OpenMP threads wait. One rule for every CPU plugin (the device's element loops,
 * the model's products), handed to them through the host key [device] auto_threads (ctrain.h).
 * Not for: which rank runs where (launcher.h) or the threads themselves (the plugins').
 */
#ifndef CTRAIN_HOST_CORES_H
#define CTRAIN_HOST_CORES_H

#include "base/launcher.h"

#include <stddef.h>
#include <stdint.h>

/* What the automatic choice saw, for the start-up line. */
typedef struct cores_choice {
    int32_t threads;    /* threads per rank, >= 1 */
    int32_t usable;     /* CPUs this process may run on (its affinity mask) */
    int32_t online;     /* CPUs online on the node */
    int32_t node_procs; /* processes of the job on this node (0: the launcher does not say) */
    int32_t in_process; /* ranks that run as threads of this process */
} cores_choice;

/* The automatic thread count of one rank: the CPUs this process may use, capped at the node's
 * share of one process (online CPUs / processes on the node: an unbound launch must not give
 * every process every core; a launcher that binds each process to its own cores gives a mask
 * below that share, which is taken as it is), divided among the ranks of this process; at
 * least 1. in_process >= 1. Pure: reads the affinity mask and the CPU count only. */
cores_choice cores_auto(const host_launch *l, int32_t in_process);

/* "2 threads per rank (auto: 2 CPUs usable, 1 process on this node, 1 rank in it)" into buf. */
void cores_describe(const cores_choice *c, int32_t configured, char *buf, size_t cap);

/* Idle OpenMP threads sleep instead of spinning unless the user chose (OMP_WAIT_POLICY or
 * GOMP_SPINCOUNT set): a spinning team takes the CPU from every other process, and on a busy
 * machine a step took 3-10x longer (docs/benchmarks.md). Must run before a plugin loads the
 * OpenMP runtime (it reads the variables once, when loaded). Returns the policy in force, as
 * text for the start-up line. */
const char *cores_wait_policy_init(void);
const char *cores_wait_policy(void);

#endif /* CTRAIN_HOST_CORES_H */
