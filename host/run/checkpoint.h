/* checkpoint.h — checkpoints: one folder per step (OUT/checkpoints/step_NNNNNNNN) holding one
 * file per rank (its master-weight shard, AdamW moments, data position) and the resolved
 * configuration. Written under a temporary name, fsync'd, then renamed, so a folder that
 * exists is complete; a save that fails removes its temporary folder, and a save never writes a
 * non-finite parameter or moment. Resume reads every rank's file, so a run saved at world size
 * N resumes at world size M (each rank takes its new shard of the reassembled units).
 * checkpoint_read_master gives a checkpoint's weights reassembled whole, for export.c.
 * Not for: writing other formats (export.c, safetensors.c, llmc.c). Paths are opaque bytes:
 * folders are made and removed in-process, never through a shell.
 */
#ifndef CTRAIN_HOST_CHECKPOINT_H
#define CTRAIN_HOST_CHECKPOINT_H

#include "run/rank.h"

#include <limits.h>

/* Write OUT/config.ini: the resolved configuration (rank 0 only; call before the ranks start).
 * Through a temporary file that is removed when the write fails. */
int32_t checkpoint_write_config(const host_config *cfg, const char *out_dir, ct_error *err);

/* Save step `step`. Collective: every rank calls it, and every rank returns an error when any
 * rank failed (the failing rank with its own message, the others with CT_ERR_COMM).
 * Refuses (CT_ERR_INVALID, naming the unit, tensor and step) when a master weight or an AdamW
 * moment is not finite: nothing is written and the newest checkpoint stays the newest.
 * On success keeps the newest `keep` checkpoints of steps <= `step` and removes those of later
 * steps (a history abandoned by resuming from an older checkpoint) and stale temporaries: only
 * folders of this run's own lineage (OUT/run_id = their manifest.ini's run_id); a folder of
 * the same step written by another run fails the save, untouched. */
int32_t checkpoint_save(host_rank *r, const char *out_dir, int64_t step, int32_t keep,
                        ct_error *err);

/* Load a checkpoint into the rank (parameters, AdamW state, data position) and set *step to its
 * step. Collective. `from` is a checkpoint folder (--resume-from) or NULL: the newest valid one
 * under OUT/checkpoints, where a folder that fails its checksum, cannot be parsed, holds a
 * non-finite value or lacks config.ini is skipped with a warning on stderr (rank 0) naming it
 * and why. CT_ERR_IO when there is none. The checkpoint's [model] section must equal the run's
 * (else CT_ERR_INVALID naming the key, both values and the checkpoint's config.ini).
 * Another run's folders (a shared checkpoints folder) are passed over. After a successful
 * load, rank 0 renames each folder skipped as damaged to step_N.skipped (kept, never picked
 * again) and removes this run's OUT/checkpoints/step_N of N > *step (the history the resume
 * abandons, like the rows of metrics.jsonl after it), naming each on stderr; it warns when the
 * learning-rate schedule's length differs from the checkpoint's. A missing `from` is
 * CT_ERR_IO "not found" with the resolved path. */
int32_t checkpoint_resume(host_rank *r, const char *out_dir, const char *from, int64_t *step,
                          ct_error *err);

/* How many complete checkpoint folders (step_ and digits, directories) OUT/checkpoints holds:
 * into *all every one, into *own those a --resume would consider (not another run's, by
 * lineage: see checkpoint.c); 0 when there is none or no such folder. CT_ERR_IO when it cannot
 * be listed. Does not read the rank files (a folder counted may still fail the resume). */
int32_t checkpoint_count(const char *out_dir, int *own, int *all, ct_error *err);

/* OUT/run_id: the run's lineage id, recorded in every checkpoint it saves (manifest.ini with
 * config.ini's checksum). `fresh`: a new id; else the one there (made when missing). */
int32_t checkpoint_run_id(const char *out_dir, int fresh, ct_error *err);

/* `train --force`: remove what the out_dir's earlier run wrote (its own step folders and
 * temporaries, by lineage, metrics.jsonl, samples.jsonl, tb/'s event files when tb/ is its own
 * folder), naming each on stderr; another run's folders and set-aside ones are kept (and
 * counted). Call with the out_dir's lock held, before checkpoint_run_id. */
int32_t checkpoint_start_over(const char *out_dir, ct_error *err);
/* Path of the newest complete checkpoint folder (a directory named step_ and digits only)
 * under out_dir into buf; CT_ERR_IO if none. Does not read the files (checkpoint_resume does). */
int32_t checkpoint_latest(const char *out_dir, char *buf, size_t n, int64_t *step, ct_error *err);

/* A checkpoint's master weights, every unit reassembled whole (unpadded, f32, host memory)
 * from the rank files whatever world size and strategy saved them: what export.c writes. */
typedef struct ckpt_master {
    char       dir[PATH_MAX]; /* the checkpoint folder read */
    int64_t    step;
    int32_t    world;     /* the world size that saved it */
    uint32_t   n_units;
    uint64_t  *numel;     /* (n_units) each unit's length as saved */
    float    **units;     /* (n_units) arrays of numel[u] floats */
    host_config *cfg;       /* the folder's config.ini, loaded (not validated) */
} ckpt_master;

/* Read `path`: a checkpoint folder (it holds rank_00000.bin), or a run folder whose newest
 * valid checkpoint is taken (invalid ones skipped with a warning on stderr, as --resume does).
 * Verifies every file as resume does. On failure *out is empty and err says why. Free with
 * checkpoint_master_free. */
int32_t checkpoint_read_master(const char *path, ckpt_master *out, ct_error *err);
void checkpoint_master_free(ckpt_master *m);

/* For inference: `path` is a checkpoint folder (holding rank_00000.bin) or a run folder (holding
 * checkpoints/). Into buf the checkpoint folder to use: the given one, verified, or the newest
 * valid one of the run (an invalid one is skipped with a warning on stderr, as resume does);
 * *step its step. CT_ERR_INVALID naming the path when it is neither; CT_ERR_IO when the run
 * has no valid checkpoint. Reads, never changes anything. */
int32_t checkpoint_find(const char *path, char *buf, size_t n, int64_t *step, ct_error *err);

/* Load the master weights of checkpoint folder dir into the rank (any saved world size; the
 * strategy reshards). Not collective: for a rank of world 1 (rank_open_model). The rank's
 * [model] must equal the checkpoint's, as for resume. */
int32_t checkpoint_load_weights(host_rank *r, const char *dir, ct_error *err);

/* A checkpoint's master weights read unit by unit, for [model] init_from = a checkpoint
 * (fine-tuning: init_ckpt.h): the folder `dir` (holding rank_00000.bin) verified whole as resume
 * verifies it (checksums, finite values, config.ini against its manifest), any saved world size.
 * Reads, never changes anything. Close with checkpoint_source_close. */
typedef struct ckpt_source ckpt_source;
int32_t checkpoint_source_open(const char *dir, ckpt_source **out, ct_error *err);
/* The folder's config.ini (loaded, not validated), its step, the world size that saved it. */
const host_config *checkpoint_source_config(const ckpt_source *s);
int64_t checkpoint_source_step(const ckpt_source *s);
int32_t checkpoint_source_world(const ckpt_source *s);
/* Units saved, and unit u's length (unpadded floats; u < checkpoint_source_units). */
uint32_t checkpoint_source_units(const ckpt_source *s);
uint64_t checkpoint_source_numel(const ckpt_source *s, uint32_t u);
/* Unit u's master weights, reassembled from every rank file, into full
 * (checkpoint_source_numel floats, f32: the master dtype of every ctrain checkpoint).
 * CT_ERR_IO naming the file when a rank file changed since it was verified. */
int32_t checkpoint_source_unit(ckpt_source *s, uint32_t u, float *full, ct_error *err);
void checkpoint_source_close(ckpt_source *s);

/* The data position saved with checkpoint folder dir (rank 0's file, verified as resume does)
 * into *ls, and the world size that saved it into *world: where the run's next step reads
 * its batch (`ctrain what-if`). */
int32_t checkpoint_data_position(const char *dir, host_loader_state *ls, int32_t *world,
                                 ct_error *err);

#endif /* CTRAIN_HOST_CHECKPOINT_H */
