/* mixture.h — a weighted mixture of datasets as the training data: `[data] train = web:0.7,
 * books:0.3`, each NAME a dataset of its own shards given in its own section, `[data.web] path =
 * SHARDS` (a file, a folder or a glob, as [data] train takes; a section so that a path may hold
 * ':' or ','). A layer above the single-dataset loader (data.h): each component is one loader
 * dealing single windows; the mixture decides, window by window, which component deals.
 * Not for: reading shards (data.c) or validation data ([data] val stays one dataset).
 *
 * Semantics (what the tests rely on):
 *   - Weights are positive finite numbers, normalised by their sum (web:7, books:3 is
 *     web:0.7, books:0.3). A value is a mixture when it reads as NAME:WEIGHT[, NAME:WEIGHT...]
 *     with NAME of letters, digits, '_' and '-' (never '/', '.' or ':'); any other value is a
 *     path, as before (a file named like a mixture is written ./web:0.7).
 *   - Global window j of the run (counted from 0 over every micro-batch of every rank, in
 *     rank order within a global micro-batch, as data.h counts windows) comes from the
 *     component that u_j = splitmix64(seed, j) in [0, 1) selects by the cumulative
 *     normalised weights. So the sequence of components depends on [run] seed alone; a rank
 *     takes slots [rank*B, (rank+1)*B) of each global micro-batch of world*B windows.
 *   - Component i deals its windows in the order of its own loader with batch 1 on one rank
 *     (an epoch is a permutation of its windows drawn from (its seed, epoch); its next epoch
 *     starts when the last window is dealt), its seed = [run] seed XOR FNV-1a 64 of NAME. A
 *     window is read only by the rank that takes it; the others skip it.
 *   - The state (windows drawn, each component's epoch and position) is what a checkpoint
 *     saves: a resume deals the same next windows as the uninterrupted run, on any world size
 *     with the same world*B.
 * Shape legend: B sequences per micro-batch on this rank, T tokens per sequence.
 */
#ifndef CTRAIN_HOST_MIXTURE_H
#define CTRAIN_HOST_MIXTURE_H

#include "config/config.h"
#include "data/data.h"
#include "io/metrics.h"

#include <ctrain/ctrain.h>

#define MIX_MAX       32  /* components in one mixture */
#define MIX_NAME_MAX  48  /* bytes of a NAME, with its NUL */

typedef struct mix_component {
    char        name[MIX_NAME_MAX];
    const char *path;    /* [data.NAME] path, owned by the configuration */
    double      weight;  /* as written */
    double      share;   /* weight / sum of weights */
} mix_component;

typedef struct mix_spec {
    int32_t       n;     /* 0: [data] train is a path, not a mixture */
    mix_component c[MIX_MAX];
} mix_spec;

/* Whether a [data] value has the shape of a mixture (NAME:WEIGHT, ...); its weights are not
 * judged here (mixture_parse does: a bad weight is an error, not a path). */
int mixture_is_spec(const char *value);

/* [data] train read as a mixture into *out (out->n = 0 when it is a path). CT_ERR_INVALID
 * naming [data] train (file:line) for a weight that is not a positive finite number, a name
 * given twice, more than MIX_MAX names, and naming the section for a NAME without a [data.NAME]
 * section or without its path. */
int32_t mixture_parse(const host_config *cfg, mix_spec *out, ct_error *err);

/* `ctrain validate`/train (wiring.c): [data] train's mixture read (mixture_parse's errors) and
 * each listed [data.NAME] section validated against mixture_section_specs (unknown keys named,
 * path required); a mixture in [data] val is refused (validation takes one dataset). */
int32_t mixture_validate(host_config *cfg, ct_error *err);

/* The [data.NAME] keys (path), for validation and `ctrain validate`'s listing. */
const ct_param_spec *mixture_section_specs(void);

/* Whether section `name` ("data.web") is a component's of [data] train's mixture: 1 listed, 0
 * not ("data.X" of a name the mixture does not list: inert), -1 not a "data." section. */
int mixture_section_listed(const host_config *cfg, const char *name);

/* The shards whose meta.ini stands for [data] train (the vocabulary, the tokenizer): [data]
 * train itself, or a mixture's first component's path (every component must share its
 * tokenizer: mixture_open checks). NULL when [data] train is absent. */
const char *mixture_train_path(const host_config *cfg);

typedef struct host_mixture host_mixture;

/* Open every component (loader_open: batch 1, rank 0 of 1, its seed) for rank `rank` of
 * `world` dealing B windows of T+1 tokens a micro-batch. Each component's meta.ini vocabulary
 * must fit vocab_size_limit, and the components' tokenizers must agree (both errors name the
 * component's section). NULL with err filled on failure. */
host_mixture *mixture_open(const host_config *cfg, const mix_spec *spec, int64_t vocab_size_limit,
                           int64_t B, int64_t T, int32_t rank, int32_t world, uint64_t seed,
                           ct_error *err);
void mixture_close(host_mixture *m);

/* This rank's next micro-batch, as loader_next; advances every rank's view of the global
 * position by world*B windows. */
int32_t mixture_next(host_mixture *m, int32_t *inputs, int32_t *targets, ct_error *err);

/* Component i's loader (for the train/val overlap check), 0 <= i < spec->n. */
const host_loader *mixture_component(const host_mixture *m, int32_t i);

/* The realised mixture since step 0 (all ranks' windows): metrics "mix/NAME/tokens" (tokens
 * drawn, T per window) and "mix/NAME/fraction" (its share of every window drawn). */
void mixture_add_metrics(const host_mixture *m, host_metric_table *out);

/* Windows drawn so far by all ranks (the global window counter). */
uint64_t mixture_drawn(const host_mixture *m);

/* The state as bytes (a checkpoint's data.bin, checkpoint.c): written into buf (cap bytes),
 * its length into *n; CT_ERR_INVALID when cap is too small. */
int32_t mixture_save(const host_mixture *m, void *buf, size_t cap, size_t *n, ct_error *err);
/* Restore a state mixture_save wrote. CT_ERR_INVALID naming `what` (the file) when it is
 * damaged or of another mixture (names, their order or their windows differ); a change of
 * weights only is allowed, with a warning on stderr from rank 0 (the windows drawn from here on
 * differ from the saved run's). */
int32_t mixture_load(host_mixture *m, const void *buf, size_t n, const char *what, ct_error *err);
#define MIX_STATE_MAX (32 + MIX_MAX * (MIX_NAME_MAX + 48)) /* bytes of a saved state */

#endif /* CTRAIN_HOST_MIXTURE_H */
