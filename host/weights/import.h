/* import.h — [model] init_from = PATH: a run's starting weights, in place of the random
 * initialisation, from a Hugging Face folder (config.json with model.safetensors, or a sharded
 * model.safetensors.index.json and its shards), a safetensors file (any layout export.c
 * writes: hf-gpt2, hf-llama, ctrain; told by its "ctrain.layout" metadata, else by its tensor
 * names; F32, BF16 or F16) or an llm.c fp32 model file. The config.json of a folder, or beside
 * a file, is checked against [model] first (hf_config.h); then every tensor (name, shape,
 * dtype) before any is used. Not for: resuming (checkpoint.c: the optimizer state and data
 * position are not in an export). */
#ifndef CTRAIN_HOST_IMPORT_H
#define CTRAIN_HOST_IMPORT_H

#include "config/config.h"

#include <ctrain/ctrain.h>

typedef struct ct_import ct_import;

/* Open `path` for the model cfg/d describes and check it whole. CT_ERR_INVALID naming the
 * config.json settings that disagree with [model], or listing the tensors that do not match
 * (name, this model's shape, the file's shape; missing; unexpected); CT_ERR_UNSUPPORTED when
 * the architecture or the file's layout cannot express this model; CT_ERR_IO when it cannot
 * be read. `say`: print the one-line note that BF16/F16 tensors are converted (the process's
 * check before any rank starts says it; each rank's open does not). */
int32_t import_open(const char *path, const host_config *cfg, const ct_model_desc *d, int say,
                    ct_import **out, ct_error *err);
/* Overwrite unit u's tensors in `full` (init_unit_numel floats) with the file's values; a NaN
 * or Inf value is CT_ERR_INVALID naming the tensor and the element. full may be NULL (only
 * the check). */
int32_t import_unit(ct_import *im, uint32_t u, float *full, ct_error *err);
/* Read every tensor and check each value is finite (what validate does; train checks unit by
 * unit as it loads). */
int32_t import_check_values(ct_import *im, ct_error *err);
void import_close(ct_import *im);

#endif /* CTRAIN_HOST_IMPORT_H */
