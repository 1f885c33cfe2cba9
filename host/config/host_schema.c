/* host_schema.c — the tables behind host_schema.h: every key the host itself reads, with its
 * type, default, range and help. Change a default here and `ctrain inspect ctrain` and
 * `ctrain validate` follow. Not for: plugin keys (each plugin declares its own).
 */
#include "config/host_schema.h"

#include <string.h>

static const ct_param_spec run_specs[] = {
    CT_PARAM_STRING("name", "run", "name of the run (used in logs and the default out_dir)"),
    CT_PARAM_STRING("out_dir", "runs/run", "folder for metrics and checkpoints; default runs/<name>"),
    CT_PARAM_INT("steps", "100", 1, 1e9, "optimizer steps to run"),
    CT_PARAM_INT("seed", "1337", 0, 4611686018427387904.0, "seed of initialisation and data order"),
    CT_PARAM_INT("log_every", "10", 1, 1e9, "log metrics every this many steps"),
    CT_PARAM_INT("eval_every", "0", 0, 1e9, "evaluate on [data] val every this many steps; 0 = never"),
    CT_PARAM_INT("eval_batches", "8", 1, 1e9, "micro-batches per evaluation"),
    CT_PARAM_INT("checkpoint_every", "0", 0, 1e9, "checkpoint every this many steps; 0 = only at the end"),
    CT_PARAM_BOOL("checkpoint_at_start", "false",
                  "also checkpoint the initial weights (step_00000000) before the first step"),
    CT_PARAM_BOOL("log_param_norms", "false",
                  "add every tensor's gradient norm to metrics.jsonl at log steps "
                  "(grad_norm/<tensor>)"),
    CT_PARAM_BOOL("tensorboard", "false",
                  "also write every scalar of metrics.jsonl, at the same steps, as TensorBoard "
                  "event files in OUT/tb/ (`tensorboard --logdir OUT/tb`)"),
    CT_PARAM_INT("keep_checkpoints", "2", 1, 1e9, "checkpoints kept on disk (oldest removed)"),
    CT_PARAM_FLOAT("checkpoint_minutes", "0", 0, 1e6, "also checkpoint when this many minutes "
                   "have passed since the last save (rank 0's clock; every rank saves at the "
                   "same step); 0 = off"),
    CT_PARAM_BOOL("probe", "false",
                  "reduction-error probe at each log step: the policy's reduction of a gradient "
                  "sample against an exact f64 one (metrics probe/<unit>/...)"),
    CT_PARAM_INT("logit_chunk_rows", "-1", -1, 1e9,
                 "rows of logits computed at once (head, row statistics, losses, head backward "
                 "range by range); -1 = automatic (256 rows), 0 = the whole micro-batch"),
    CT_PARAM_INT("probe_sample", "4096", 1, 1e9,
                 "gradient elements per unit the probe reduces (the head is probed whole)"),
    CT_PARAM_INT("sample_every", "0", 0, 1e9,
                 "print a sample on rank 0 and append it to OUT/samples.jsonl every this many "
                 "steps; 0 = never (needs shards from `ctrain prepare`)"),
    CT_PARAM_STRING("sample_prompt", "", "text the samples of sample_every continue; empty = a newline"),
    CT_PARAM_INT("sample_tokens", "64", 1, 1e6, "tokens per sample of sample_every"),
    CT_PARAM_FLOAT_X("stop_grace_s", "30", 0, 86400, CT_PARAM_MIN_EXCLUSIVE,
                     "after a stop signal (SIGTERM, SIGINT, SIGUSR1), seconds each rank has to "
                     "reach the end of its step (at least 3 times the longest step so far); a "
                     "rank still in a plugin call or in ctrain's own work then is named and the "
                     "process exits with status 4"),
    CT_PARAM_END,
};

static const ct_param_spec data_specs[] = {
    CT_PARAM_STRING("train", NULL, "training token shards (llm.c format): a file, a folder or "
                    "a glob; or a mixture NAME:WEIGHT, ... of datasets, each in [data.NAME] path"),
    CT_PARAM_STRING("val", "", "validation shards; empty = none"),
    CT_PARAM_INT("batch_size", "4", 1, 65536, "sequences per micro-batch, per rank (B)"),
    CT_PARAM_INT("seq_len", "64", 1, 1048576, "tokens per sequence (T)"),
    CT_PARAM_INT("grad_accum", "1", 1, 65536, "micro-batches per optimizer step"),
    CT_PARAM_BOOL("doc_mask", "false",
                  "attention does not cross documents: each position attends only back to the "
                  "end-of-text token that opens its document (positions are not restarted)"),
    CT_PARAM_INT("eot_token", "-1", -1, 2147483647.0,
                 "the document separator for doc_mask; -1: eot_token of the train shards' "
                 "meta.ini (written by `ctrain prepare`)"),
    CT_PARAM_END,
};

static const char *const schedule_choices[] = {"cosine", "linear", "constant", "wsd", NULL};
static const char *const decay_shape_choices[] = {"linear", "cosine", "sqrt", NULL};
static const ct_param_spec optim_specs[] = {
    CT_PARAM_FLOAT("lr", "6e-4", 0, 10, "peak learning rate"),
    CT_PARAM_FLOAT("min_lr", "0", 0, 10, "learning rate at the end of the schedule; <= lr"),
    CT_PARAM_INT("warmup", "0", 0, 1e9, "linear warm-up steps"),
    CT_PARAM_ENUM("schedule", "cosine", schedule_choices, "decay after warm-up; wsd = "
                  "warmup-stable-decay: lr until the last decay_frac of the schedule, then "
                  "down to min_lr in decay_shape"),
    CT_PARAM_FLOAT("decay_frac", "0.2", 0, 1, "wsd: the decay's share of the steps after the "
                   "warm-up"),
    CT_PARAM_ENUM("decay_shape", "linear", decay_shape_choices, "wsd: the decay's shape: "
                  "linear, cosine, or sqrt (1 - sqrt of the decay's progress)"),
    CT_PARAM_INT("schedule_steps", "0", 0, 1e9, "length of the lr schedule in steps; 0 = [run] "
                 "steps (set it to keep a schedule when a resume changes steps)"),
    CT_PARAM_FLOAT_X("beta1", "0.9", 0, 1, CT_PARAM_MAX_EXCLUSIVE, "AdamW first-moment decay"),
    CT_PARAM_FLOAT_X("beta2", "0.95", 0, 1, CT_PARAM_MAX_EXCLUSIVE, "AdamW second-moment decay"),
    CT_PARAM_FLOAT("eps", "1e-8", 0, 1, "AdamW epsilon; >= 1.1754944e-38 (FLT_MIN: AdamW runs in f32)"),
    CT_PARAM_FLOAT("weight_decay", "0.1", 0, 10, "decoupled weight decay"),
    CT_PARAM_BOOL("decay_all", "false", "decay every tensor (open_lm) instead of matrices only"),
    CT_PARAM_FLOAT("grad_clip", "1.0", 0, 1e9, "clip the global gradient norm to this; 0 = off"),
    CT_PARAM_BOOL("decay_embeddings", "true", "weight decay on the embedding tables (and a tied "
                  "head); false = torchtitan's group without decay (norms and biases never decay "
                  "unless decay_all)"),
    CT_PARAM_FLOAT("lr_mult_matrix", "1", 0, 1e3, "lr multiplier of the hidden matrices' group"),
    CT_PARAM_FLOAT("lr_mult_embedding", "1", 0, 1e3, "lr multiplier of the embeddings' group"),
    CT_PARAM_FLOAT("lr_mult_head", "1", 0, 1e3, "lr multiplier of the output head (untied)"),
    CT_PARAM_FLOAT("lr_mult_norm", "1", 0, 1e3, "lr multiplier of the norms' gains and biases"),
    CT_PARAM_FLOAT("lr_mult_bias", "1", 0, 1e3, "lr multiplier of the other 1-D tensors (biases)"),
    CT_PARAM_END,
};

static const ct_param_spec model_specs[] = {
    CT_PARAM_STRING("plugin", "gpt", "model plugin (name or path to a .so)"),
    CT_PARAM_STRING("init_from", "", "start from these weights instead of the random init: a "
                    "Hugging Face folder (config.json and safetensors, sharded or not), a "
                    "safetensors file of `ctrain export`, an llm.c fp32 model file, or a ctrain "
                    "checkpoint folder or run folder (its newest checkpoint; weights only: a "
                    "fresh optimizer at step 0); empty = none"),
    CT_PARAM_BOOL("from_config", "false", "take every architecture key [model] leaves out from "
                  "init_from's config.json (Hugging Face GPT-2 or Llama) or checkpoint "
                  "config.ini; false: it is only checked against [model]"),
    CT_PARAM_END,
};

static const ct_param_spec loss_specs[] = {
    CT_PARAM_STRING("plugins", "ce", "comma-separated loss terms; term NAME's keys go in [loss.NAME]"),
    CT_PARAM_END,
};

static const ct_param_spec strategy_specs[] = {
    CT_PARAM_STRING("plugin", "ddp", "sharding strategy plugin"),
    CT_PARAM_END,
};

static const ct_param_spec precision_specs[] = {
    CT_PARAM_STRING("plugin", "fp32", "precision policy plugin"),
    CT_PARAM_END,
};

static const ct_param_spec comm_specs[] = {
    CT_PARAM_STRING("plugin", "auto", "collective engine; auto = nccl when several processes were "
                    "launched on cuda, mpi under mpirun or a multi-task srun, else threads when "
                    "world_size > 1, else local"),
    CT_PARAM_INT("world_size", "1", 1, 1024, "ranks of an in-process engine (threads)"),
    CT_PARAM_END,
};

static const ct_param_spec device_specs[] = {
    CT_PARAM_STRING("type", "cpu", "device plugin: cpu or cuda"),
    CT_PARAM_FLOAT("peak_tflops", "0", 0, 1e6,
                   "peak TFLOP/s of one device (one rank) for MFU; 0 = the device's own figure "
                   "(cpu: measured BLAS sgemm, cuda: datasheet by GPU name and dtype)"),
    CT_PARAM_END,
};

static const ct_param_spec optimizer_specs[] = {
    CT_PARAM_STRING("plugin", "adamw", "optimizer plugin; its own keys go in [optimizer.NAME] "
                    "(the schedule, clipping, lr and weight decay stay in [optim])"),
    CT_PARAM_END,
};

static const host_section sections[] = {
    {"run", run_specs, 0, NULL, "the run: length, logging, checkpoints"},
    {"data", data_specs, 0, NULL, "token shards and batch shape"},
    {"model", model_specs, CT_KIND_MODEL, "plugin", "the model plugin and its keys"},
    {"loss", loss_specs, CT_KIND_LOSS, "plugins", "loss terms (keys in [loss.NAME])"},
    {"strategy", strategy_specs, CT_KIND_STRATEGY, "plugin", "sharding strategy and its keys"},
    {"precision", precision_specs, CT_KIND_PRECISION, "plugin", "precision policy and its keys"},
    {"comm", comm_specs, CT_KIND_COMM, "plugin", "collective engine and its keys"},
    {"device", device_specs, CT_KIND_DEVICE, "type", "device plugin and its keys"},
    {"optim", optim_specs, 0, NULL, "lr schedule, clipping, weight decay, AdamW's betas"},
    {"optimizer", optimizer_specs, CT_KIND_OPTIMIZER, "plugin",
     "the optimizer plugin (keys in [optimizer.NAME])"},
};

const host_section *host_schema_sections(int32_t *n) {
    *n = (int32_t)(sizeof sections / sizeof *sections);
    return sections;
}

const host_section *host_schema_find(const char *name) {
    for (size_t i = 0; i < sizeof sections / sizeof *sections; i++)
        if (!strcmp(sections[i].name, name)) return &sections[i];
    return NULL;
}

int32_t host_schema_flat(const host_section *hs) { return hs && hs->kind == CT_KIND_MODEL; }
