/* runlock.h — the lock of a run's out_dir: OUT/.lock, held with flock(LOCK_EX) for as long as
 * the run writes the folder, so a second run into the same folder is refused at once instead of
 * interleaving its metrics and checkpoints with the first. The file records the holder's host
 * name and pid for the refusal message. Not for: locking anything across hosts on file systems
 * without flock (some NFS setups), or the checkpoint format (checkpoint.c). */
#ifndef CTRAIN_HOST_RUNLOCK_H
#define CTRAIN_HOST_RUNLOCK_H

#include <ctrain/ctrain.h>

typedef struct host_runlock {
    int fd; /* the open OUT/.lock (close-on-exec); -1 when not held */
} host_runlock;

/* Take the lock of out_dir (which must exist) without waiting. CT_OK: held until
 * runlock_release or the end of the process (the kernel drops it even after a kill -9, so a
 * lock file left by a dead run never blocks). CT_ERR_IO: another run holds it (err names the
 * folder and that run's host and pid) or the file cannot be opened. */
int32_t runlock_take(host_runlock *lk, const char *out_dir, ct_error *err);

/* Whether another run holds out_dir's lock, changing nothing (the file is opened read-only,
 * and only when it exists): CT_OK when no run holds it, else runlock_take's CT_ERR_IO. For a
 * command that must say so before it decides anything else. */
int32_t runlock_check(const char *out_dir, ct_error *err);

/* Drop the lock (the file stays, with the last holder's name in it). Safe when not held. */
void runlock_release(host_runlock *lk);

#endif /* CTRAIN_HOST_RUNLOCK_H */
