/* checkpoint.h — checkpoints: one folder per step (OUT/checkpoints/step_NNNNNNNN) holding one
 * file per rank (its master-weight shard, AdamW moments, data position) and the resolved
 * configuration. Written under a temporary name, fsync'd, then renamed, so a folder that
 * exists is complete. Resume reads every rank's file, so a run saved at world size N resumes
 * at world size M (each rank takes its new shard of the reassembled units).
 * Not for: exporting a consolidated model to other formats (export.c). */
#ifndef CTRAIN_HOST_CHECKPOINT_H
#define CTRAIN_HOST_CHECKPOINT_H

#include "rank.h"

/* Write OUT/config.ini: the resolved configuration (rank 0 only; call before the ranks start). */
int32_t checkpoint_write_config(const ct_config *cfg, const char *out_dir, ct_error *err);

/* Save step `step`. Collective: every rank calls it. Keeps the newest `keep` checkpoints. */
int32_t checkpoint_save(ct_rank *r, const char *out_dir, int64_t step, int32_t keep,
                        ct_error *err);

/* Load the newest checkpoint under OUT/checkpoints into the rank (parameters, AdamW state, data
 * position) and set *step to its step. Collective. CT_ERR_IO when there is none. */
int32_t checkpoint_resume(ct_rank *r, const char *out_dir, int64_t *step, ct_error *err);

/* Path of the newest complete checkpoint folder under out_dir into buf; CT_ERR_IO if none. */
int32_t checkpoint_latest(const char *out_dir, char *buf, size_t n, int64_t *step, ct_error *err);

#endif /* CTRAIN_HOST_CHECKPOINT_H */
