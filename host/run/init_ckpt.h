/* init_ckpt.h — [model] init_from = a ctrain checkpoint folder (OUT/checkpoints/step_N) or a
 * run folder (OUT: its newest valid checkpoint): fine-tuning from another run's weights. The
 * master weights are read (reassembled from any world size's rank files, f32 as saved); the
 * optimizer state, the data position and the step are not: the run starts at step 0 with a fresh
 * optimizer. The checkpoint's [model] must equal this run's, key by key, except the keys that do
 * not change what the weights mean (INIT_CKPT_FREE_KEYS). The source folder is only read.
 * Not for: resuming a run (checkpoint.h: --resume) or other weight formats (import.h). */
#ifndef CTRAIN_HOST_INIT_CKPT_H
#define CTRAIN_HOST_INIT_CKPT_H

#include "config/config.h"
#include "plugin/wiring.h"

#include <ctrain/ctrain.h>

/* [model] keys that may differ from the checkpoint's: where the weights come from, and keys of
 * training alone (regularisation, memory) that leave the forward pass of the saved weights as
 * it was. Every other [model] key must be the checkpoint's. */
#define INIT_CKPT_FREE_KEYS {"init_from", "from_config", "dropout", "recompute", NULL}

enum {
    INIT_CKPT_NONE = 0, /* not a ctrain folder (a Hugging Face folder, a file: import.h) */
    INIT_CKPT_STEP = 1, /* a checkpoint folder: a directory holding rank_00000.bin */
    INIT_CKPT_RUN  = 2, /* a run folder: a directory holding checkpoints/ (and no rank file) */
};

/* What `init_from` names (stat only; nothing is read). */
int init_ckpt_kind(const char *init_from);

/* Before [model] is validated (wiring.c): a run folder is resolved to its newest valid
 * checkpoint folder, which becomes [model] init_from (named on stderr by launcher rank 0; a
 * damaged newer one is skipped with a warning, as --resume does, and left where it is); with
 * [model] from_config = true every [model] key the configuration leaves out is taken from that
 * checkpoint's config.ini (its origin). An init_from inside this run's own out_dir is refused.
 * CT_OK doing nothing when init_from is not a ctrain folder. */
int32_t init_ckpt_resolve(host_config *cfg, ct_error *err);

/* The model source every caller of wiring_resolve hands over (plugin/wiring.h): settle =
 * init_ckpt_resolve, then, when init_from is not a ctrain folder, hf_config_fill
 * (weights/hf_config.h: a Hugging Face config.json); is_checkpoint = init_ckpt_kind;
 * open_source, unit, close_source = init_ckpt_open, init_ckpt_unit, init_ckpt_close. */
extern const host_model_source init_ckpt_source;

typedef struct init_ckpt init_ckpt;

/* Open checkpoint or run folder `path` for the model cfg/d describes: verified whole, [model]
 * compared key by key (CT_ERR_INVALID naming the key, both values and what to set), the units'
 * lengths compared with d's. `say`: print the fine-tuning note (whose weights, that the
 * optimizer state is not loaded) on stderr, from launcher rank 0. */
int32_t init_ckpt_open(const char *path, const host_config *cfg, const ct_model_desc *d, int say,
                       init_ckpt **out, ct_error *err);
/* Unit u's weights into full (the model's unit length in floats). */
int32_t init_ckpt_unit(init_ckpt *c, uint32_t u, float *full, ct_error *err);
void init_ckpt_close(init_ckpt *c);

#endif /* CTRAIN_HOST_INIT_CKPT_H */
