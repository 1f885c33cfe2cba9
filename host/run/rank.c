/* rank.c — building and tearing down one rank: plugin instances in dependency order
 * (device, comm, precision, strategy, model, loss terms, optimizer), the strategy's setup with
 * freshly initialised parameters, the optimizer's state buffers, step buffers and data
 * loaders; and the same build without comm, parameters or buffers that preflight runs. */
#include "run/rank.h"

#include "plugin/contract.h"
#include <ctrain/precision_kit.h>
#include "run/groups.h"
#include "weights/import.h"
#include "base/init.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Rows of an automatic range ([run] logit_chunk_rows = -1). Not fewer: each range adds its
 * head gradient as a product of depth `rows` into the (V,C) gradient, which reads and writes
 * all of it; at 64 rows that update is memory-bound and a step of the bench shape took ~15%
 * more CPU time than the whole micro-batch, at 256 rows the same (docs/benchmarks.md). */
#define HOST_LOGIT_CHUNK_ROWS 256

static int32_t make_instance(host_rank *r, host_instance *inst, const host_plugin *p,
                             const char *section, void *comm_world, ct_error *err) {
    inst->plugin = p;
    inst->vt = p->vtable;
    hostapi_init(&inst->host, r->cfg, r->rank, p->desc.name, &r->metrics);
    int64_t seed = 0;
    config_get_int(r->cfg, "run", "seed", &seed, NULL);
    ct_create_args a = {
        .struct_size = sizeof a,
        .api = hostapi_table(),
        .host = &inst->host,
        .section = section,
        .rank = r->rank,
        .world_size = r->world,
        .device = r->dev,
        .comm = r->comm_ref,
        .seed = (uint64_t)seed,
        .comm_world = comm_world,
    };
    /* the registry refused plugins without create/destroy (contract.c) */
    contract_lifecycle life = contract_lifecycle_of(p->desc.kind, p->vtable);
    err->code = CT_OK;
    err->message[0] = '\0';
    inst->self = CALLS(p, "create", life.create(&a, err));
    if (!inst->self) return contract_name_failed_create(err, p);
    return CT_OK;
}

static void drop_instance(host_instance *inst) {
    if (inst->self && inst->plugin)
        CALLS_VOID(inst->plugin, "destroy",
                   contract_lifecycle_of(inst->plugin->desc.kind, inst->plugin->vtable)
                       .destroy(inst->self));
    inst->self = NULL;
}

int32_t rank_unit_first_stage(const host_rank *r, uint32_t u) {
    for (uint32_t s = 0; s < r->mdesc.n_stages; s++)
        if (r->mdesc.stages[s].unit == (int32_t)u) return (int32_t)s;
    return -1;
}

int32_t rank_unit_last_stage(const host_rank *r, uint32_t u) {
    for (int32_t s = (int32_t)r->mdesc.n_stages - 1; s >= 0; s--)
        if (r->mdesc.stages[s].unit == (int32_t)u) return s;
    return -1;
}

static void *dev_alloc(host_rank *r, uint64_t bytes, ct_error *err) {
    return RANK_DEV(r, alloc, bytes, err);
}

/* The policy's master dtype and rule are ones the host can hold (f32; bf16 with nearest, sr or
 * kahan): CT_ERR_UNSUPPORTED naming the plugin otherwise. */
static int32_t master_check_policy(const host_rank *r, ct_error *err) {
    if (ct_pkit_master_ok(&r->policy)) return CT_OK;
    const char *name = r->precision.plugin ? r->precision.plugin->desc.name : "?";
    if (r->policy.master_dtype != CT_DTYPE_BF16)
        return ct_error_set(err, CT_ERR_UNSUPPORTED, "precision %s: master dtype %s; the host "
                            "keeps master weights in f32 or bf16 only ---> use a policy with "
                            "master f32 (amp) or bf16 (bf16_master)", name,
                            ct_dtype_name(r->policy.master_dtype));
    return ct_error_set(err, CT_ERR_UNSUPPORTED, "precision %s: master_update = %d is not a "
                        "ct_master_update (0 nearest, 1 sr, 2 kahan) ---> fix the plugin's "
                        "policy()", name, (int)r->policy.master_update);
}

/* A master dtype other than f32 (master.h), after the strategy's setup and load_unit: every
 * shard says it holds the policy's master dtype (a strategy built before 1.7 cannot hold bf16:
 * an error naming it); the compensation buffers (kahan: bf16, one per element of each shard,
 * zero) and the f32 scratch and its host staging are allocated. Nothing for an f32 master. */
static int32_t master_setup(host_rank *r, ct_error *err) {
    int64_t seed = 0;
    config_get_int(r->cfg, "run", "seed", &seed, NULL);
    r->seed = (uint64_t)seed;
    if (r->policy.master_dtype != CT_DTYPE_BF16) return CT_OK;
    const int kahan = r->policy.master_update == CT_MASTER_KAHAN;
    uint64_t cap = 1;
    for (uint32_t u = 0; u < r->mdesc.n_units; u++) {
        ct_shard sh = {.struct_size = sizeof sh};
        int32_t rc = RANK_STRATEGY(r, shard, u, &sh, err);
        if (rc != CT_OK) return rc;
        int32_t have = sh.struct_size >= offsetof(ct_shard, master_dtype) + sizeof(int32_t) &&
                               sh.master_dtype ? sh.master_dtype : CT_DTYPE_F32;
        if (have != r->policy.master_dtype)
            return ct_error_set(err, CT_ERR_UNSUPPORTED, "strategy %s (%s) keeps unit %u's master "
                                "in %s, but precision %s asks for %s master weights ---> use a "
                                "strategy built against ABI 1.7 or later (ddp, no_shard, "
                                "full_shard), or a policy with an f32 master",
                                r->strategy.plugin->desc.name, r->strategy.plugin->path, u,
                                ct_dtype_name(have), r->precision.plugin->desc.name,
                                ct_dtype_name(r->policy.master_dtype));
        if (sh.numel > cap) cap = sh.numel;
        if (kahan) {
            host_unit_state *us = &r->units[u];
            uint64_t bytes = (sh.numel ? sh.numel : 1) * sizeof(uint16_t);
            if (!(us->comp = RANK_DEV(r, alloc, bytes, err)))
                return err->code ? err->code
                                 : ct_error_set(err, CT_ERR_NOMEM, "out of memory for unit %u's "
                                                "compensation buffer (%llu bytes)", u,
                                                (unsigned long long)bytes);
            if ((rc = RANK_DEV(r, zero, us->comp, bytes, err)) != CT_OK) return rc;
        }
    }
    r->master_cap = cap;
    r->master_hf = malloc(cap * sizeof *r->master_hf);
    r->master_hw = malloc(cap * sizeof *r->master_hw);
    r->master_hc = kahan ? malloc(cap * sizeof *r->master_hc) : NULL;
    if (!r->master_hf || !r->master_hw || (kahan && !r->master_hc))
        return ct_error_set(err, CT_ERR_NOMEM, "out of memory for the master's f32 staging");
    if (!(r->master_scratch = RANK_DEV(r, alloc, cap * sizeof(float), err)))
        return err->code ? err->code
                         : ct_error_set(err, CT_ERR_NOMEM, "out of memory for the master's f32 "
                                        "scratch (%llu bytes)",
                                        (unsigned long long)(cap * sizeof(float)));
    return CT_OK;
}

/* Free what master_setup made. */
static void master_free(host_rank *r) {
    if (r->dev.vt) {
        for (uint32_t u = 0; r->units && u < r->mdesc.n_units; u++)
            RANK_DEV_VOID(r, free_mem, r->units[u].comp);
        RANK_DEV_VOID(r, free_mem, r->master_scratch);
    }
    free(r->master_hf);
    free(r->master_hw);
    free(r->master_hc);
    r->master_scratch = r->master_hf = NULL;
    r->master_hw = r->master_hc = NULL;
}

/* Initialise every unit from the seed and hand it to the strategy; allocate AdamW state and
 * decay masks for this rank's shard of each unit. */
static int32_t setup_parameters(host_rank *r, ct_error *err) {
    uint32_t nu = r->mdesc.n_units;
    uint64_t *numel = calloc(nu, sizeof *numel);
    r->units = calloc(nu, sizeof *r->units);
    r->held = calloc(nu, sizeof *r->held);
    if (!numel || !r->units || !r->held) {
        free(numel);
        return ct_error_set(err, CT_ERR_NOMEM, "out of memory for %u units", nu);
    }
    for (uint32_t u = 0; u < nu; u++) numel[u] = r->units[u].numel = init_unit_numel(&r->mdesc, u);
    const ct_precision_vtable *pv = r->precision.vt;
    ct_strategy_setup su = {
        .struct_size = sizeof su,
        .n_units = nu,
        .unit_numel = numel,
        .policy = &r->policy,
        .precision = pv,
        .precision_self = r->precision.self,
    };
    int32_t rc = RANK_STRATEGY(r, setup, &su, err);
    free(numel);
    if (rc != CT_OK) return rc;

    int64_t seed = 0;
    config_get_int(r->cfg, "run", "seed", &seed, NULL);
    const char *init_from = r->no_init_from ? NULL : config_get(r->cfg, "model", "init_from");
    ct_import *im = NULL;  /* [model] init_from: its values replace the random ones */
    const host_model_source *ms = r->model_source;
    void *ck = NULL;       /* ... read from a ctrain checkpoint (fine-tuning: ms) */
    if (init_from && *init_from)
        rc = ms->is_checkpoint(init_from)
                 ? ms->open_source(init_from, r->cfg, &r->mdesc, 0, &ck, err)
                 : import_open(init_from, r->cfg, &r->mdesc, 0, &im, err);
    if (rc != CT_OK) return rc;
    for (uint32_t u = 0; u < nu; u++) {
        uint64_t n = r->units[u].numel;
        float *full = malloc(n * sizeof *full);
        uint8_t *mask = malloc(n);
        if (!full || !mask) {
            free(full);
            free(mask);
            import_close(im);
            if (ck) ms->close_source(ck);
            return ct_error_set(err, CT_ERR_NOMEM, "out of memory initialising unit %u", u);
        }
        init_unit(&r->mdesc, u, (uint64_t)seed, full);
        if (im) rc = import_unit(im, u, full, err);
        if (ck) rc = ms->unit(ck, u, full, err);
        groups_decay_mask(r->cfg, &r->mdesc, u, mask);
        if (rc == CT_OK) rc = RANK_STRATEGY(r, load_unit, u, full, err);
        ct_shard sh = {.struct_size = sizeof sh};
        if (rc == CT_OK) rc = RANK_STRATEGY(r, shard, u, &sh, err);
        if (rc == CT_OK) {
            host_unit_state *us = &r->units[u];
            int have = 1;
            for (uint32_t k = 0; k < r->n_state; k++)
                have &= (us->state[k] = dev_alloc(r, sh.numel * sizeof(float), err)) != NULL;
            us->decay_mask = dev_alloc(r, sh.numel, err);
            us->tensors = groups_tensors(r->cfg, &r->mdesc, u, &sh);
            /* the shard may reach into the end padding: mask 0 there */
            uint8_t *shard_mask = calloc(sh.numel ? sh.numel : 1, 1);
            if (!have || !us->decay_mask || !shard_mask || !us->tensors) {
                double mb = (double)sh.numel * (r->n_state * sizeof(float) + 1) / 1e6;
                rc = ct_error_set(err, CT_ERR_NOMEM, "out of memory for the optimizer "
                                  "state of unit %u (%s): %u state buffers and the decay mask, "
                                  "%llu elements = %.1f MB ---> use [strategy] plugin = "
                                  "full_shard (it shards the state over the ranks), a smaller "
                                  "model, or a machine with more memory", u,
                                  r->mdesc.units[u].name, r->n_state,
                                  (unsigned long long)sh.numel, mb);
            } else {
                for (uint64_t i = 0; i < sh.numel; i++)
                    if (sh.offset + i < n) shard_mask[i] = mask[sh.offset + i];
                rc = RANK_DEV(r, copy, us->decay_mask, shard_mask, sh.numel, CT_COPY_H2D, err);
            }
            free(shard_mask);
        }
        free(full);
        free(mask);
        if (rc != CT_OK) {
            import_close(im);
            if (ck) ms->close_source(ck);
            if (err->code == CT_OK) ct_error_set(err, rc, "out of memory for optimizer state");
            return rc;
        }
    }
    import_close(im);
    if (ck) ms->close_source(ck);
    return master_setup(r, err); /* a bf16 master: compensation buffers and f32 scratch */
}

/* [data] doc_mask: the separator ([data] eot_token, else meta.ini's eot_token of the train
 * shards), checked against the vocabulary, and a model that declares it honours the mask
 * (ct_model_desc.doc_mask, ABI 1.7). */
static int32_t resolve_doc_mask(host_rank *r, const host_data_meta *meta, ct_error *err) {
    int32_t on = 0;
    int64_t eot = -1;
    config_get_bool(r->cfg, "data", "doc_mask", &on, NULL);
    config_get_int(r->cfg, "data", "eot_token", &eot, NULL);
    r->doc_mask = 0;
    r->eot_token = 0;
    if (!on) return CT_OK;
    const char *from = config_origin(r->cfg, "data", "eot_token");
    if (eot < 0 && meta->found && meta->eot_token >= 0) eot = meta->eot_token, from = meta->path;
    if (eot < 0)
        return ct_error_set(err, CT_ERR_INVALID, "%s: [data] doc_mask = true needs the token "
                            "that separates documents, but %s ---> set [data] eot_token (GPT-2's "
                            "<|endoftext|> is 50256), or prepare the data with `ctrain prepare` "
                            "from documents (it records eot_token in meta.ini)",
                            config_origin(r->cfg, "data", "doc_mask"),
                            meta->found ? "the train shards' meta.ini records no eot_token"
                                        : "the train shards have no meta.ini");
    if (eot >= r->V)
        return ct_error_set(err, CT_ERR_INVALID, "%s: the document separator %lld is outside "
                            "the model's vocabulary 0..%lld ---> set [data] eot_token to the "
                            "data's end-of-text id", from, (long long)eot, (long long)(r->V - 1));
    int declares = r->mdesc.struct_size >= offsetof(ct_model_desc, doc_mask) + sizeof(int32_t) &&
                   r->mdesc.doc_mask;
    if (!declares)
        return ct_error_set(err, CT_ERR_UNSUPPORTED, "%s: [data] doc_mask = true, but model %s "
                            "does not declare document masking (ct_model_desc.doc_mask, ABI "
                            "1.7) ---> use a model that does (gpt), or set doc_mask = false",
                            config_origin(r->cfg, "data", "doc_mask"),
                            r->model.plugin->desc.name);
    r->doc_mask = 1;
    r->eot_token = (int32_t)eot;
    return CT_OK;
}

static int32_t open_data(host_rank *r, ct_error *err) {
    const char *train = NULL, *val = NULL;
    int64_t seed = 0;
    config_get_string(r->cfg, "data", "train", &train, NULL);
    config_get_string(r->cfg, "data", "val", &val, NULL);
    config_get_int(r->cfg, "run", "seed", &seed, NULL);
    mix_spec spec; /* [data] train = NAME:WEIGHT, ...: a mixture checks each dataset itself */
    int32_t rc = mixture_parse(r->cfg, &spec, err);
    if (rc != CT_OK) return rc;
    if (spec.n) {
        r->train_mix = mixture_open(r->cfg, &spec, r->V, r->B, r->T, r->rank, r->world,
                                    (uint64_t)seed, err);
        if (!r->train_mix) return err->code;
        train = NULL;
    }
    /* the data's vocabulary (meta.ini) must fit the model's */
    host_data_meta meta = {.max_token = -1};
    rc = train && *train ? data_meta_for(train, &meta, err) : CT_OK;
    if (rc != CT_OK) return rc;
    data_meta_free(&meta);
    r->seed = (uint64_t)seed;
    if ((rc = resolve_doc_mask(r, &meta, err)) != CT_OK) return rc;
    if (meta.found && meta.vocab_size > r->V)
        return ct_error_set(err, CT_ERR_INVALID, "%s: [model] vocab_size = %lld is smaller than "
                            "the data's vocabulary %d (%s) ---> leave [model] vocab_size out to "
                            "take it from meta.ini, or set it to at least %d",
                            config_origin(r->cfg, "model", "vocab_size"), (long long)r->V,
                            meta.vocab_size, meta.path, meta.vocab_size);
    if (!r->train_mix) {
        r->train_data = loader_open(train, "train", r->V, r->B, r->T, r->rank, r->world,
                                    (uint64_t)seed, err);
        if (!r->train_data) return err->code;
    }
    if (val && *val) {
        r->val_data = loader_open(val, "val", r->V, r->B, r->T, r->rank, r->world, (uint64_t)seed, err);
        if (!r->val_data) return err->code;
        const char *both = r->train_data ? loader_partial_overlap(r->train_data, r->val_data) : NULL;
        for (int32_t i = 0; r->train_mix && !both && i < spec.n; i++) {
            both = loader_partial_overlap(mixture_component(r->train_mix, i), r->val_data);
            train = spec.c[i].path;
        }
        if (both)
            return ct_error_set(err, CT_ERR_INVALID, "%s: [data] train (%s) and val (%s) both "
                                "take %s, though they are not the same shards: the model would "
                                "be evaluated partly on text it trains on ---> make the train "
                                "glob match the train shards only (e.g. DIR/train_*.bin)",
                                config_origin(r->cfg, "data", "train"), train, val, both);
        int64_t eval_batches = 8, eval_every = 0, per_epoch = loader_batches_per_epoch(r->val_data);
        config_get_int(r->cfg, "run", "eval_batches", &eval_batches, NULL);
        config_get_int(r->cfg, "run", "eval_every", &eval_every, NULL);
        r->eval_batches = eval_batches;
        /* the default adapts to a small validation set (rank_dry_open says so once); only a
         * value the user set is refused */
        if (eval_batches > per_epoch && !strcmp(config_origin(r->cfg, "run", "eval_batches"),
                                                "default"))
            r->eval_batches = per_epoch;
        else if (eval_every > 0 && eval_batches > per_epoch)
            return ct_error_set(err, CT_ERR_INVALID, "%s: [run] eval_batches = %lld is more than "
                                "the validation data holds: %lld micro-batch%s of %lld x %lld "
                                "tokens per rank at world size %d (%s) ---> set eval_batches to "
                                "at most %lld (more would read the same sequences again)",
                                config_origin(r->cfg, "run", "eval_batches"),
                                (long long)eval_batches, (long long)per_epoch,
                                per_epoch == 1 ? "" : "es", (long long)r->B, (long long)r->T,
                                (int)r->world, val, (long long)per_epoch);
    }
    return CT_OK;
}

/* Whether the logits go by row ranges (step.c, ABI 1.3) and how many rows one holds: [run]
 * logit_chunk_rows, -1 = automatic (HOST_LOGIT_CHUNK_ROWS), 0 = the whole micro-batch. Ranges need the model's
 * head_row_range and every loss term's forward_backward_rows; training also needs f32 gradient
 * accumulation (the head's gradient is added range by range). r->chunk_why says why not. */
static void choose_chunks(host_rank *r) {
    int64_t want = -1;
    config_get_int(r->cfg, "run", "logit_chunk_rows", &want, NULL);
    r->chunk_rows = 0;
    r->chunk_train = r->chunk_eval = 0;
    r->chunk_why[0] = '\0';
    if (want == 0) {
        snprintf(r->chunk_why, sizeof r->chunk_why, "[run] logit_chunk_rows = 0");
        return;
    }
    if (!r->mdesc.head_row_range) {
        snprintf(r->chunk_why, sizeof r->chunk_why, "model %s (ABI %d.%d) runs its head on whole "
                 "micro-batches", r->model.plugin->desc.name, r->model.plugin->desc.abi_major,
                 r->model.plugin->desc.abi_minor);
        return;
    }
    for (int32_t i = 0; i < r->n_loss; i++) {
        const ct_loss_vtable *lv = r->loss[i].vt;
        if (lv->forward_backward_rows) continue;
        snprintf(r->chunk_why, sizeof r->chunk_why, "loss term %s (ABI %d.%d) takes whole "
                 "micro-batches", r->loss_name[i], r->loss[i].plugin->desc.abi_major,
                 r->loss[i].plugin->desc.abi_minor);
        return;
    }
    int64_t rows = want < 0 ? HOST_LOGIT_CHUNK_ROWS : want;
    r->chunk_rows = rows < r->N ? rows : r->N;
    r->chunk_eval = 1;
    r->chunk_train = r->policy.grad_accum_dtype == CT_DTYPE_F32;
    if (!r->chunk_train)
        snprintf(r->chunk_why, sizeof r->chunk_why, "training keeps whole micro-batches: the "
                 "precision policy accumulates gradients in %s (a range's head gradient would be "
                 "rounded once per range)", ct_dtype_name(r->policy.grad_accum_dtype));
}

static int32_t alloc_buffers(host_rank *r, ct_error *err) {
    r->logit_rows = r->chunk_train ? r->chunk_rows : r->N;
    uint64_t bt = (uint64_t)(r->B * r->T), nv = (uint64_t)r->logit_rows * (uint64_t)r->V;
    r->tokens = dev_alloc(r, bt * sizeof(int32_t), err);
    r->targets = dev_alloc(r, bt * sizeof(int32_t), err);
    r->logits = dev_alloc(r, nv * sizeof(float), err);
    r->dlogits = dev_alloc(r, nv * sizeof(float), err);
    if ((r->chunk_train || r->chunk_eval) && r->dev.vt->row_softmax)
        if (!(r->probs = dev_alloc(r, (uint64_t)r->chunk_rows * (uint64_t)r->V * sizeof(float), err)))
            return ct_error_set(err, CT_ERR_NOMEM, "out of memory for the softmax of %lld rows "
                                "of logits ---> lower [run] logit_chunk_rows",
                                (long long)r->chunk_rows);
    r->row_max = dev_alloc(r, (uint64_t)r->N * sizeof(float), err);
    r->row_lse = dev_alloc(r, (uint64_t)r->N * sizeof(float), err);
    r->h_tokens = malloc(bt * sizeof(int32_t));
    r->h_targets = malloc(bt * sizeof(int32_t));
    if (!r->tokens || !r->targets || !r->logits || !r->dlogits || !r->row_max || !r->row_lse ||
        !r->h_tokens || !r->h_targets)
        return ct_error_set(err, CT_ERR_NOMEM,
                            "out of memory for step buffers (logits are %lld rows x V = %lld "
                            "floats) ---> lower [data] batch_size or seq_len, or [run] "
                            "logit_chunk_rows", (long long)r->logit_rows, (long long)nv);
    return CT_OK;
}

/* Device, comm (unless with_comm is 0: r->comm_ref is then the caller's), precision with its
 * policy, strategy, model with its description, loss terms: in this order, into r. On failure
 * what was made stays in r for rank_close. */
static int32_t open_instances(host_rank *r, const host_wiring *w, void *comm_world, int with_comm,
                              ct_error *err) {
    int32_t rc;
#define TRY(expr)                                                                              \
    do {                                                                                       \
        if ((rc = (expr)) != CT_OK) return rc;                                                 \
    } while (0)

    TRY(make_instance(r, &r->device, w->device, "device", NULL, err));
    r->dev.vt = r->device.vt;
    r->dev.self = r->device.self;
    r->dev.type = (w->device->desc.devices & CT_DEVICE_CUDA) ? CT_DEVICE_CUDA : CT_DEVICE_CPU;

    if (with_comm) {
        TRY(make_instance(r, &r->comm, w->comm, "comm", comm_world, err));
        const ct_comm_vtable *cv = r->comm.vt;
        r->comm_ref.vt = cv;
        r->comm_ref.self = r->comm.self;
        r->comm_ref.rank = cv->rank ? CALLS(w->comm, "rank", cv->rank(r->comm.self)) : r->rank;
        r->comm_ref.world_size =
            cv->world_size ? CALLS(w->comm, "world_size", cv->world_size(r->comm.self)) : r->world;
        r->rank = r->comm_ref.rank;
        r->world = r->comm_ref.world_size;
        r->device.host.rank = r->comm.host.rank = r->rank;
    }

    TRY(make_instance(r, &r->precision, w->precision, "precision", NULL, err));
    r->policy.struct_size = sizeof r->policy;
    TRY(contract_name_silent_error(RANK_PRECISION(r, policy, &r->policy, err), err,
                                   w->precision, "policy"));
    TRY(master_check_policy(r, err));

    TRY(make_instance(r, &r->strategy, w->strategy, "strategy", NULL, err));
    TRY(make_instance(r, &r->model, w->model, "model", NULL, err));
    r->mdesc.struct_size = sizeof r->mdesc;
    TRY(contract_name_silent_error(RANK_MODEL(r, describe, &r->mdesc, err), err, w->model,
                                   "describe"));
    if (r->mdesc.tensor_struct_size == 0) r->mdesc.tensor_struct_size = sizeof(ct_tensor_spec);

    for (int32_t i = 0; i < w->n_loss; i++) {
        snprintf(r->loss_name[i], sizeof r->loss_name[i], "%s", w->loss[i]->desc.name);
        TRY(make_instance(r, &r->loss[i], w->loss[i], w->loss_section[i], NULL, err));
        r->n_loss = i + 1;
    }
    if (w->optimizer) {
        TRY(make_instance(r, &r->optimizer, w->optimizer, "optimizer", NULL, err));
        const char *const *names = NULL;
        uint32_t n = 0;
        TRY(contract_name_silent_error(RANK_OPTIMIZER(r, state_names, &n, &names, err), err,
                                       w->optimizer, "state_names"));
        if (n > CT_OPTIM_MAX_STATE || (n > 0 && !names))
            return ct_error_set(err, CT_ERR_INVALID, "optimizer %s (%s): state_names gave %u "
                                "buffers%s; at most %d, each named ---> fix the plugin",
                                w->optimizer->desc.name, w->optimizer->path, n,
                                n && !names ? " without names" : "", CT_OPTIM_MAX_STATE);
        r->n_state = n;
        r->state_names = names;
    }
    return CT_OK;
#undef TRY
}

/* The step's shape from [data] and the model's description: B, T, grad_accum, V, N; the
 * model must take sequences of [data] seq_len. */
static int32_t step_shape(host_rank *r, ct_error *err) {
    config_get_int(r->cfg, "data", "batch_size", &r->B, NULL);
    config_get_int(r->cfg, "data", "seq_len", &r->T, NULL);
    config_get_int(r->cfg, "data", "grad_accum", &r->grad_accum, NULL);
    r->V = r->mdesc.vocab_size;
    r->N = r->B * r->T;
    if (r->T > r->mdesc.max_seq_len)
        return ct_error_set(err, CT_ERR_INVALID,
                            "%s: [data] seq_len = %lld exceeds the model's seq_len %lld "
                            "---> lower [data] seq_len or raise [model] seq_len",
                            config_origin(r->cfg, "data", "seq_len"), (long long)r->T,
                            (long long)r->mdesc.max_seq_len);
    return CT_OK;
}

int32_t rank_open(host_rank *r, const host_config *cfg, const host_wiring *w, int32_t rank,
                  int32_t world, void *comm_world, ct_error *err) {
    memset(r, 0, sizeof *r);
    r->cfg = cfg;
    r->model_source = w->model_source;
    r->rank = rank;
    r->world = world;
    int32_t rc;
#define TRY(expr)                                                                              \
    do {                                                                                       \
        if ((rc = (expr)) != CT_OK) goto out_close;                                            \
    } while (0)

    TRY(open_instances(r, w, comm_world, 1, err));
    TRY(step_shape(r, err));
    TRY(contract_name_silent_error(RANK_MODEL(r, prepare, r->B, r->T,
                                              r->policy.param_dtype, err),
                                   err, w->model, "prepare"));
    TRY(setup_parameters(r, err));
    choose_chunks(r);
    TRY(alloc_buffers(r, err));
    TRY(open_data(r, err));
    return CT_OK;
#undef TRY
out_close:
    /* tell the other ranks, so they stop instead of waiting for this one in a collective */
    if (r->comm.self && r->comm_ref.vt && r->comm_ref.vt->abort)
        RANK_COMM_VOID(r, abort, err->message);
    rank_close(r);
    return rc;
}

int32_t rank_open_model(host_rank *r, const host_config *cfg, const host_wiring *w,
                        int for_checkpoint, ct_error *err) {
    memset(r, 0, sizeof *r);
    r->cfg = cfg;
    r->model_source = w->model_source;
    r->no_init_from = for_checkpoint;
    r->rank = 0;
    r->world = 1;
    int32_t rc = open_instances(r, w, NULL, 1, err);
    if (rc == CT_OK) {
        /* one sequence of the model's whole context, one micro-batch */
        r->B = 1, r->T = r->mdesc.max_seq_len, r->grad_accum = 1;
        r->V = r->mdesc.vocab_size, r->N = r->T;
        rc = contract_name_silent_error(RANK_MODEL(r, prepare, r->B, r->T,
                                                   r->policy.param_dtype, err),
                                        err, w->model, "prepare");
    }
    if (rc == CT_OK) rc = setup_parameters(r, err);
    if (rc == CT_OK) rc = alloc_buffers(r, err);
    if (rc != CT_OK) rank_close(r);
    return rc;
}

/* The strategy's setup() with the run's precision policy and hooks on units of one element
 * each, as rank_open's setup_parameters calls it: what a strategy refuses about the policy
 * (ddp: a policy whose hooks hand back f32 sums) is refused before any rank starts, without
 * buffers the size of the model. The instance is destroyed with the others. */
static int32_t dry_setup(host_rank *r, ct_error *err) {
    uint32_t nu = r->mdesc.n_units;
    uint64_t *numel = malloc((nu ? nu : 1) * sizeof *numel);
    if (!numel) return ct_error_set(err, CT_ERR_NOMEM, "out of memory");
    for (uint32_t u = 0; u < nu; u++) numel[u] = 1;
    ct_strategy_setup su = {
        .struct_size = sizeof su,
        .n_units = nu,
        .unit_numel = numel,
        .policy = &r->policy,
        .precision = r->precision.vt,
        .precision_self = r->precision.self,
    };
    int32_t rc = contract_name_silent_error(RANK_STRATEGY(r, setup, &su, err), err,
                                            r->strategy.plugin, "setup");
    free(numel);
    return rc;
}

int32_t rank_dry_open(const host_config *cfg, const host_wiring *w, int32_t world, ct_comm_ref comm,
                      const char **failed, ct_error *err) {
    host_rank *r = calloc(1, sizeof *r);
    if (!r) return ct_error_set(err, CT_ERR_NOMEM, "out of memory");
    r->cfg = cfg;
    r->rank = comm.rank;
    r->world = world;
    r->comm_ref = comm;
    *failed = "plugins";
    int32_t rc = open_instances(r, w, NULL, 0, err);
    const char *init_from = config_get(cfg, "model", "init_from");
    if (rc == CT_OK && init_from && *init_from) { /* the whole file checked against the model */
        ct_import *im = NULL;
        void *ck = NULL; /* a checkpoint's files are verified whole as they are opened */
        *failed = "init_from";
        if (w->model_source->is_checkpoint(init_from)) {
            rc = w->model_source->open_source(init_from, cfg, &r->mdesc, 1, &ck, err);
        } else {
            rc = import_open(init_from, cfg, &r->mdesc, 1, &im, err);
            if (rc == CT_OK) rc = import_check_values(im, err);
        }
        import_close(im);
        if (ck) w->model_source->close_source(ck);
    }
    if (rc == CT_OK) *failed = "shape", rc = step_shape(r, err);
    if (rc == CT_OK) *failed = "plugins", rc = dry_setup(r, err);
    if (rc == CT_OK) *failed = "train", rc = open_data(r, err);
    if (rc != CT_OK && (r->train_data || r->train_mix)) *failed = "val";
    int64_t eval_every = 0, asked = 8;
    config_get_int(cfg, "run", "eval_every", &eval_every, NULL);
    config_get_int(cfg, "run", "eval_batches", &asked, NULL);
    if (rc == CT_OK && r->val_data && eval_every > 0 && r->eval_batches < asked) /* once */
        fprintf(stderr, "ctrain: note: [run] eval_batches: the default %lld is more than the "
                "validation data holds, so each evaluation reads all of it: %lld micro-batch%s "
                "of %lld x %lld tokens per rank\n", (long long)asked,
                (long long)r->eval_batches, r->eval_batches == 1 ? "" : "es", (long long)r->B,
                (long long)r->T);
    if (rc == CT_OK) *failed = NULL;
    rank_close(r);
    free(r);
    return rc;
}

int32_t rank_print_groups(const host_config *cfg, const host_wiring *w, ct_comm_ref comm,
                          FILE *out, ct_error *err) {
    host_rank *r = calloc(1, sizeof *r);
    if (!r) return ct_error_set(err, CT_ERR_NOMEM, "out of memory");
    r->cfg = cfg;
    r->rank = comm.rank;
    r->world = comm.world_size;
    r->comm_ref = comm;
    int32_t rc = open_instances(r, w, NULL, 0, err);
    if (rc == CT_OK) groups_print(cfg, &r->mdesc, out);
    rank_close(r);
    free(r);
    return rc;
}

void rank_close(host_rank *r) {
    if (r->train_data) loader_close(r->train_data);
    mixture_close(r->train_mix);
    if (r->val_data) loader_close(r->val_data);
    free(r->h_tokens);
    free(r->h_targets);
    if (r->dev.vt) {
        void *bufs[] = {r->tokens, r->targets, r->logits, r->dlogits, r->probs, r->row_max,
                        r->row_lse};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
            RANK_DEV_VOID(r, free_mem, bufs[i]);
        for (uint32_t u = 0; r->units && u < r->mdesc.n_units; u++) {
            for (uint32_t k = 0; k < CT_OPTIM_MAX_STATE; k++)
                RANK_DEV_VOID(r, free_mem, r->units[u].state[k]);
            RANK_DEV_VOID(r, free_mem, r->units[u].decay_mask);
        }
    }
    master_free(r);
    for (uint32_t u = 0; r->units && u < r->mdesc.n_units; u++) free(r->units[u].tensors);
    free(r->units);
    free(r->held);
    drop_instance(&r->optimizer);
    for (int32_t i = r->n_loss - 1; i >= 0; i--) drop_instance(&r->loss[i]);
    drop_instance(&r->model);
    drop_instance(&r->strategy);
    drop_instance(&r->precision);
    drop_instance(&r->comm);
    drop_instance(&r->device);
    int32_t rank = r->rank, world = r->world; /* kept: error reports name the rank */
    memset(r, 0, sizeof *r);
    r->rank = rank;
    r->world = world;
}
