/* loop.h — the training loop (loop.c): what the command hands it and how it is started.
 * Not for: the command line (cli/train.c) or one step (step.h).
 */
#ifndef CTRAIN_HOST_LOOP_H
#define CTRAIN_HOST_LOOP_H

#include "base/launcher.h"
#include "config/config.h"
#include "plugin/supervise.h"
#include "plugin/wiring.h"

#include <ctrain/ctrain.h>

/* What every rank of this process shares: set by `ctrain train` before run_ranks; stopped_at
 * and stop_sig are filled by the ranks. */
typedef struct run_shared {
    const host_config *cfg;
    const host_wiring *wiring;
    void            *comm_world; /* in-process engines */
    int32_t          world;
    int32_t          resume;
    const char      *resume_from; /* a checkpoint folder (--resume-from), or NULL */
    int64_t          stop_after; /* 0: run to [run] steps; else stop (and checkpoint) there */
    const char      *out_dir;
    supervisor      *sv;         /* watches this process's ranks (run_ranks) */
    const host_launch *launch;   /* the launcher's rank and world (launcher_current) */
    int64_t          stopped_at; /* a stop signal ended the run after checkpointing this step */
    int32_t          stop_sig;   /* that signal (the largest number any rank received) */
} run_shared;

/* Run ranks first_rank .. first_rank + n_threads - 1 of sh->world (one thread each, or on the
 * calling thread when n_threads is 1) to the end of the run. The first failure is printed as it
 * happens (supervise.h); ranks that do not stop within a grace period after it are named and the
 * process ends (_exit: their threads still use the world, the plugins and the configuration).
 * Returns the exit status (0: every rank finished). */
int32_t run_ranks(run_shared *sh, int32_t first_rank, int32_t n_threads);

#endif /* CTRAIN_HOST_LOOP_H */
