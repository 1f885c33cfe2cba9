/* loop.c — the training loop of `ctrain train`: each rank's steps (train_rank: metrics,
 * evaluation, samples, checkpoints at the steps every rank agrees on, the stop signal's
 * checkpoint), run on this process's rank threads under a supervisor (run_ranks). Not for: the
 * step's arithmetic (step.c, optim.c), file formats (checkpoint.c) or the command line
 * (cli/train.c). */
#include "run/loop.h"

#include "base/cmdout.h"
#include "base/thread_start.h"
#include "run/checkpoint.h"
#include "run/master.h"
#include "run/memory.h"
#include "run/mfu.h"
#include "run/optim.h"
#include "run/param_norms.h"
#include "run/preempt.h"
#include "run/sample.h"
#include "run/step.h"
#include "run/watchdog.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct rank_job {
    run_shared *shared;
    int32_t     slot; /* index among this process's ranks */
    int32_t     rank; /* the rank it starts as */
} rank_job;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Host-side figures of one log interval, summed over steps; reduced over ranks at log time. */
enum {
    SUM_LOSS, SUM_MICRO, SUM_TOKENS, SUM_LOGIT, SUM_ROW_NORM, SUM_LSE, SUM_ROWS,
    SUM_TERMS /* then one per loss term */
};

typedef struct interval {
    double  sums[SUM_TERMS + HOST_MAX_LOSS];
    double  max_row_norm, max_abs;
    double  t_start;
    int64_t steps;
} interval;

static void interval_add(interval *iv, const host_step_stats *s, int32_t n_loss) {
    iv->sums[SUM_LOSS] += s->loss_sum;
    iv->sums[SUM_MICRO] += (double)s->micro_batches;
    iv->sums[SUM_TOKENS] += (double)s->tokens;
    iv->sums[SUM_LOGIT] += s->logits.sum_logit;
    iv->sums[SUM_ROW_NORM] += s->logits.sum_row_norm;
    iv->sums[SUM_LSE] += s->logits.sum_lse;
    iv->sums[SUM_ROWS] += (double)s->logits.rows;
    for (int32_t i = 0; i < n_loss; i++) iv->sums[SUM_TERMS + i] += s->term_sum[i];
    if (s->logits.max_row_norm > iv->max_row_norm) iv->max_row_norm = s->logits.max_row_norm;
    if (s->logits.max_abs > iv->max_abs) iv->max_abs = s->logits.max_abs;
    iv->steps++;
}

/* Reduce the interval and the plugins' reports over ranks into r->metrics' final table `out`. */
static int32_t reduce_interval(host_rank *r, interval *iv, const char *prefix,
                               host_metric_table *out, ct_error *err) {
    int32_t n = SUM_TERMS + r->n_loss, rc;
    if ((rc = optim_allreduce_f64(r, iv->sums, (uint64_t)n, CT_REDUCE_SUM, err)) != CT_OK) return rc;
    double mx[2] = {iv->max_row_norm, iv->max_abs};
    if ((rc = optim_allreduce_f64(r, mx, 2, CT_REDUCE_MAX, err)) != CT_OK) return rc;
    double micro = iv->sums[SUM_MICRO], rows = iv->sums[SUM_ROWS];
    char name[HOST_METRIC_NAME_MAX];
#define PUT(suffix, value)                                                                     \
    do {                                                                                       \
        snprintf(name, sizeof name, "%s%s", prefix, suffix);                                   \
        metrics_add(out, name, (value), CT_METRIC_MEAN);                                       \
    } while (0)
    PUT("loss", iv->sums[SUM_LOSS] / micro);
    for (int32_t i = 0; i < r->n_loss; i++) {
        char term[HOST_METRIC_NAME_MAX];
        snprintf(term, sizeof term, "loss/%s", r->loss_name[i]);
        PUT(term, iv->sums[SUM_TERMS + i] / micro);
    }
    PUT("logit_mean", iv->sums[SUM_LOGIT] / (rows * (double)r->V));
    PUT("logit_norm_mean", iv->sums[SUM_ROW_NORM] / rows);
    PUT("logit_norm_max", mx[0]);
    PUT("lse_mean", iv->sums[SUM_LSE] / rows);
    PUT("logit_max_abs", mx[1]);
#undef PUT
    return CT_OK;
}

/* Plugins' own reports (sorted by name on every rank), combined over ranks into out. */
static int32_t reduce_plugin_metrics(host_rank *r, host_metric_table *out, ct_error *err) {
    host_metric_table *t = &r->metrics;
    metrics_sort(t);
    /* n, not t->n: the comm plugin's traffic report of the reductions below may add a name */
    int32_t n = t->n;
    double sums[HOST_METRICS_MAX], mx[HOST_METRICS_MAX], mn[HOST_METRICS_MAX];
    for (int32_t i = 0; i < n; i++) {
        double v = metrics_value(t, t->items[i].name);
        sums[i] = v;
        mx[i] = v;
        mn[i] = v;
    }
    int32_t rc = optim_allreduce_f64(r, sums, (uint64_t)n, CT_REDUCE_SUM, err);
    if (rc == CT_OK) rc = optim_allreduce_f64(r, mx, (uint64_t)n, CT_REDUCE_MAX, err);
    if (rc == CT_OK) rc = optim_allreduce_f64(r, mn, (uint64_t)n, CT_REDUCE_MIN, err);
    if (rc != CT_OK) return rc;
    for (int32_t i = 0; i < n; i++) {
        double v = t->items[i].reduce == CT_METRIC_MAX   ? mx[i]
                   : t->items[i].reduce == CT_METRIC_MIN ? mn[i]
                   : t->items[i].reduce == CT_METRIC_SUM ? sums[i]
                                                         : sums[i] / r->world;
        metrics_add(out, t->items[i].name, v, CT_METRIC_MEAN);
    }
    metrics_clear(t);
    return CT_OK;
}

/* Bytes per rank after the first step, into the first log line (MAX over ranks): the
 * strategy's memory() figures (params, grads, gathered) and the optimizer's state buffers
 * (adamw: m and v), n_state * 4 bytes per element of each shard this rank updates. Nothing when the strategy has no memory() hook. */
static int32_t report_memory(host_rank *r, ct_error *err) {
    const ct_strategy_vtable *st = r->strategy.vt;
    if (!st->memory) return CT_OK;
    uint64_t params = 0, grads = 0, gathered = 0, optim = 0, elements = 0;
    int32_t rc = RANK_STRATEGY(r, memory, &params, &grads, &gathered, err);
    for (uint32_t u = 0; rc == CT_OK && u < r->mdesc.n_units; u++) {
        ct_shard sh = {.struct_size = sizeof sh};
        rc = RANK_STRATEGY(r, shard, u, &sh, err);
        optim += r->n_state * sizeof(float) * sh.numel;
        elements += sh.numel;
    }
    if (rc != CT_OK) return rc;
    metrics_add(&r->metrics, "mem/params_bytes", (double)params, CT_METRIC_MAX);
    metrics_add(&r->metrics, "mem/grads_bytes", (double)grads, CT_METRIC_MAX);
    metrics_add(&r->metrics, "mem/gathered_bytes", (double)gathered, CT_METRIC_MAX);
    metrics_add(&r->metrics, "mem/optim_bytes", (double)optim, CT_METRIC_MAX);
    if (master_comp_bytes(r)) /* the bf16 master's Kahan compensation (master.h) */
        metrics_add(&r->metrics, "mem/comp_bytes", (double)elements * master_comp_bytes(r),
                    CT_METRIC_MAX);
    return CT_OK;
}

static void format_eta(double seconds, char *buf, size_t n) {
    if (!isfinite(seconds) || seconds < 0) seconds = 0;
    long s = (long)(seconds + 0.5);
    if (s >= 3600) snprintf(buf, n, "%ldh%02ldm", s / 3600, s / 60 % 60);
    else snprintf(buf, n, "%ldm%02lds", s / 60, s % 60);
}

static int32_t train_rank(host_rank *r, run_shared *sh, ct_error *err) {
    const host_config *cfg = sh->cfg;
    host_optim_config oc;
    int32_t rc = optim_config(cfg, &oc, err);
    if (rc != CT_OK) return rc;
    int64_t log_every = 10, eval_every = 0, ckpt_every = 0, keep = 2;
    double ckpt_minutes = 0;
    config_get_int(cfg, "run", "log_every", &log_every, NULL);
    config_get_float(cfg, "run", "checkpoint_minutes", &ckpt_minutes, NULL);
    config_get_int(cfg, "run", "eval_every", &eval_every, NULL);
    config_get_int(cfg, "run", "checkpoint_every", &ckpt_every, NULL);
    config_get_int(cfg, "run", "keep_checkpoints", &keep, NULL);

    /* a one-rank-per-process engine's world must be the one the launcher started */
    if (!sh->comm_world &&
        (rc = launcher_check_comm_world(sh->launch, r->comm.plugin->desc.name, r->rank, r->world,
                                        err)) != CT_OK)
        return rc;
    int64_t start = 0;
    int32_t resumed = sh->resume || sh->resume_from;
    if (resumed) {
        calls_host_op("resuming from a checkpoint");
        rc = checkpoint_resume(r, sh->out_dir, sh->resume_from, &start, err);
        calls_host_op(NULL);
        if (rc != CT_OK) return rc;
        if (start >= oc.steps) { /* nothing is left to run: nothing is written either */
            if (r->rank == 0)
                fprintf(stderr, "ctrain train: the run in %s is complete: its checkpoint is of "
                        "step %lld and [run] steps = %lld; nothing was trained ---> to train "
                        "further, resume with more steps (--resume --set run.steps=%lld); the lr "
                        "schedule then stretches to the new steps unless [optim] schedule_steps "
                        "fixes its length\n", sh->out_dir, (long long)start, (long long)oc.steps,
                        (long long)start * 2);
            return CT_OK;
        }
        if (r->rank == 0) fprintf(cmdout(), "resumed from step %lld\n", (long long)start);
    }

    /* rank 0 writes OUT/metrics.jsonl; after a resume it keeps the rows up to the checkpoint's
     * step only, so the steps run again are not logged twice */
    metrics_file mfile = {.fd = -1, .tb.fd = -1}, *mf = NULL;
    if (r->rank == 0) {
        int32_t tensorboard = 0;
        config_get_bool(cfg, "run", "tensorboard", &tensorboard, NULL);
        calls_host_op("opening metrics.jsonl");
        rc = metrics_file_open(&mfile, sh->out_dir, resumed ? start : -1, err);
        if (rc == CT_OK && tensorboard)
            rc = metrics_file_tensorboard(&mfile, sh->out_dir, resumed ? start : -1, err);
        calls_host_op(NULL);
        if (rc != CT_OK) {
            ct_error scratch = {.struct_size = sizeof scratch};
            metrics_file_close(&mfile, &scratch);
            return rc;
        }
        mf = &mfile;
    }

    /* FLOPs per token and the peak (the cpu device measures ~0.05 s): before the clock starts */
    mfu_state mfu;
    if ((rc = mfu_open(r, &mfu, mf ? cmdout() : NULL, err)) != CT_OK) goto out_close_metrics;
    if (mf) {
        char line[512];
        step_describe_logits(r, line, sizeof line);
        fprintf(cmdout(), "%s\n", line);
    }
    { /* what each rank holds per parameter, before the first step (rank 0's figures) */
        host_memory mem;
        if ((rc = memory_measure(r, &mem, err)) != CT_OK) goto out_close_metrics;
        if (mf) {
            char line[768];
            memory_format(r, &mem, line, sizeof line);
            fprintf(cmdout(), "%s\n", line);
        }
    }

    interval iv;
    memset(&iv, 0, sizeof iv);
    iv.t_start = now_s();
    double t_run = now_s(), t_saved = t_run;
    int64_t steps_done_here = 0;
    int64_t last = sh->stop_after > 0 && sh->stop_after < oc.steps ? sh->stop_after : oc.steps;
    int32_t probe = 0, ckpt_start = 0, param_norms = 0;
    config_get_bool(cfg, "run", "probe", &probe, NULL);
    config_get_bool(cfg, "run", "checkpoint_at_start", &ckpt_start, NULL);
    config_get_bool(cfg, "run", "log_param_norms", &param_norms, NULL);
    host_metric_table norms; /* per-tensor gradient norms of the log step ([run] log_param_norms) */
    metrics_clear(&norms);
    if (ckpt_start && !resumed && rc == CT_OK) {
        rc = checkpoint_save(r, sh->out_dir, 0, (int32_t)keep, err);
        if (rc == CT_OK && r->rank == 0)
            fprintf(cmdout(), "checkpoint: %s/checkpoints/step_%08d\n", sh->out_dir, 0);
    }
    double t_step = now_s();
    int64_t skipped = 0; /* optimizer updates the precision policy skipped in the interval */
    int32_t scaling = CT_HAS_MEMBER((const ct_precision_vtable *)r->precision.vt,
                                    ct_precision_vtable, loss_scale);
    for (int64_t step = start + 1; step <= last && rc == CT_OK; step++) {
        host_step_stats st;
        r->step = step;
        r->probe_now = probe && (step % log_every == 0 || step == oc.steps);
        rc = optim_scale_begin(r, err); /* the policy's loss scale of this step */
        if (rc == CT_OK) rc = step_train(r, &st, err);
        double gnorm = 0, lr = optim_lr(&oc, step - 1);
        int32_t skip = 0;
        if (rc == CT_OK) rc = optim_unscale(r, err);
        if (rc == CT_OK) rc = optim_grad_norm(r, &gnorm, err);
        if (rc == CT_OK && param_norms && (step % log_every == 0 || step == oc.steps))
            rc = param_norms_grad(r, &norms, err);
        /* a non-finite norm stops the run unless the policy skips the step (all ranks alike) */
        if (rc == CT_OK) rc = optim_after_reduce(r, gnorm, &skip, err);
        if (rc == CT_OK) rc = optim_step(r, &oc, step, lr, gnorm, skip, err);
        if (rc != CT_OK) break;
        skipped += skip;
        interval_add(&iv, &st, r->n_loss);
        if (++steps_done_here == 1 && (rc = report_memory(r, err)) != CT_OK) break;

        if (step % log_every == 0 || step == oc.steps) {
            host_metric_table out;
            metrics_clear(&out);
            double hnorm = 0;
            rc = reduce_interval(r, &iv, "", &out, err);
            if (rc == CT_OK) rc = reduce_plugin_metrics(r, &out, err);
            if (rc == CT_OK) rc = optim_head_norm(r, &hnorm, err);
            if (rc != CT_OK) break;
            double dt = now_s() - iv.t_start;
            double tps = iv.sums[SUM_TOKENS] / (dt > 0 ? dt : 1e-9);
            metrics_add(&out, "head_weight_norm", hnorm, CT_METRIC_MEAN);
            metrics_add(&out, "grad_norm", gnorm, CT_METRIC_MEAN);
            if (scaling) { /* the policy scales the loss (ABI 1.7 loss_scale) */
                metrics_add(&out, "loss_scale", r->loss_scale, CT_METRIC_MEAN);
                metrics_add(&out, "skipped_steps", (double)skipped, CT_METRIC_MEAN);
                skipped = 0; /* updates skipped in the log interval */
            }
            metrics_add(&out, "lr", lr, CT_METRIC_MEAN);
            metrics_add(&out, "tokens_per_s", tps, CT_METRIC_MEAN);
            metrics_add(&out, "world_size", r->world, CT_METRIC_MEAN);
            if (r->train_mix) mixture_add_metrics(r->train_mix, &out); /* the realised mixture */
            for (int32_t i = 0; i < norms.n; i++)
                metrics_add(&out, norms.items[i].name, metrics_value(&norms, norms.items[i].name),
                            CT_METRIC_MEAN);
            metrics_clear(&norms);
            mfu_add_metrics(&mfu, tps, &out);
            metrics_sort(&out);
            if (mf) {
                if ((rc = metrics_file_write(mf, &out, step, err)) != CT_OK) break;
                char eta[32], mfu_text[32];
                mfu_format(&mfu, tps, mfu_text, sizeof mfu_text);
                double per_step = (now_s() - t_run) / (double)steps_done_here;
                format_eta(per_step * (double)(oc.steps - step), eta, sizeof eta);
                fprintf(cmdout(), "step %lld/%lld | loss %.4f | lr %.2e | grad norm %.3f | "
                        "logit norm %.2f | %.0f tok/s | %s | ETA %s\n",
                        (long long)step, (long long)oc.steps, metrics_value(&out, "loss"), lr,
                        gnorm, metrics_value(&out, "logit_norm_mean"), tps, mfu_text, eta);
                fflush(cmdout());
            }
            memset(&iv, 0, sizeof iv);
            iv.t_start = now_s();
            /* a non-finite weight or moment stops the run before the next save can see it */
            if ((rc = optim_check_finite(r, step, err)) != CT_OK) break;
        }
        if (eval_every > 0 && (step % eval_every == 0 || step == oc.steps) && r->val_data) {
            host_step_stats es;
            rc = step_eval(r, r->eval_batches, &es, err); /* rank.c: default adapted */
            if (rc != CT_OK) break;
            interval ev;
            memset(&ev, 0, sizeof ev);
            interval_add(&ev, &es, r->n_loss);
            host_metric_table out;
            metrics_clear(&out);
            rc = reduce_interval(r, &ev, "val/", &out, err);
            if (rc != CT_OK) break;
            metrics_sort(&out);
            if (mf) {
                if ((rc = metrics_file_write(mf, &out, step, err)) != CT_OK) break;
                fprintf(cmdout(), "step %lld/%lld | val loss %.4f\n", (long long)step,
                        (long long)oc.steps, metrics_value(&out, "val/loss"));
            }
        }
        /* Every rank ends the step with the same verdict: stop (a signal reached some rank;
         * the largest signal number wins) and save on time (rank 0's clock), one all-reduce
         * (MAX) of two numbers, so a signal that reached one process only stops all at the
         * same step. */
        if ((rc = sample_train_hook(r, sh->out_dir, step, err)) != CT_OK) break;
        double agreed[2] = {(double)preempt_requested(),
                            r->rank == 0 && ckpt_minutes > 0 &&
                                    now_s() - t_saved >= 60.0 * ckpt_minutes ? 1.0 : 0.0};
        if ((rc = optim_allreduce_f64(r, agreed, 2, CT_REDUCE_MAX, err)) != CT_OK) break;
        if (agreed[0] > 0) calls_mark_stop_seen(); /* the watchdog's grace period is over */
        double t_now = now_s(); /* a slow step lengthens the grace period (watchdog.h) */
        watchdog_step_took(t_now - t_step);
        t_step = t_now;
        int32_t stop = agreed[0] > 0 && step < oc.steps;
        if ((ckpt_every > 0 && step % ckpt_every == 0) || step == last || stop || agreed[1] > 0) {
            calls_host_op("saving a checkpoint");
            rc = checkpoint_save(r, sh->out_dir, step, (int32_t)keep, err);
            calls_host_op(NULL);
            if (rc == CT_OK && r->rank == 0)
                fprintf(cmdout(), "checkpoint: %s/checkpoints/step_%08lld\n", sh->out_dir,
                        (long long)step);
            t_saved = now_s();
        }
        if (rc == CT_OK && stop) {
            /* rank 0 says so before any process exits: under mpirun the first process to exit
             * with status 3 ends the others, so they wait here until rank 0 has printed */
            if (r->rank == 0) {
                fprintf(cmdout(), "stopped by %s after checkpointing step %lld ---> continue with "
                        "--resume\n", preempt_signal_name((int)agreed[0]), (long long)step);
                fflush(cmdout());
            }
            double done = 0;
            rc = optim_allreduce_f64(r, &done, 1, CT_REDUCE_MAX, err);
            /* every rank stores the same values */
            __atomic_store_n(&sh->stop_sig, (int32_t)agreed[0], __ATOMIC_RELAXED);
            __atomic_store_n(&sh->stopped_at, step, __ATOMIC_RELAXED);
            break;
        }
    }
out_close_metrics:
    if (mf) {
        ct_error cerr = {.struct_size = sizeof cerr};
        if (metrics_file_close(mf, &cerr) != CT_OK && rc == CT_OK) {
            *err = cerr;
            rc = cerr.code;
        }
    }
    return rc;
}

static void *rank_thread(void *arg) {
    rank_job *job = arg;
    run_shared *sh = job->shared;
    host_rank r;
    ct_error err = {.struct_size = sizeof err};
    calls_bind(job->slot + 1, job->rank); /* what this thread calls, for fault reports */
    supervise_set_rank(sh->sv, job->slot, job->rank);
    int32_t rc = rank_open(&r, sh->cfg, sh->wiring, job->rank, sh->world, sh->comm_world, &err);
    /* the comm's rank (mpi: this process's rank in the job); rank_close keeps it */
    supervise_set_rank(sh->sv, job->slot, r.rank);
    if (rc != CT_OK) {
        supervise_failed(sh->sv, job->slot, rc, &err); /* rank_open has aborted the world */
    } else {
        rc = train_rank(&r, sh, &err);
        if (rc != CT_OK) {
            /* recorded (and printed) before the abort, so the other ranks' echoes of it
             * cannot come first */
            supervise_failed(sh->sv, job->slot, rc, &err);
            if (rc != CT_ERR_COMM && r.comm_ref.vt && r.comm_ref.vt->abort)
                RANK_COMM_VOID(&r, abort, err.message);
        }
        rank_close(&r);
    }
    calls_unbind();
    supervise_done(sh->sv, job->slot);
    return NULL;
}

/* Grace period after the first failure before ranks that have not stopped are given up:
 * [comm] timeout_s (a healthy rank reaches its next collective, where it sees the failure,
 * within that time), at most RANKS_GRACE_MAX_S; RANKS_GRACE_MAX_S for engines without the key. */
#define RANKS_GRACE_MAX_S 10.0

static double grace_period(const host_config *cfg) {
    double t = RANKS_GRACE_MAX_S;
    if (config_get(cfg, "comm", "timeout_s")) config_get_float(cfg, "comm", "timeout_s", &t, NULL);
    return t > 0 && t < RANKS_GRACE_MAX_S ? t : RANKS_GRACE_MAX_S;
}

/* Run all ranks of this process. The first failure is printed as it happens (supervise.h);
 * ranks that do not stop within the grace period after it are named and the process ends
 * (_exit: their threads still use the world, the plugins and the configuration). */
int32_t run_ranks(run_shared *sh, int32_t first_rank, int32_t n_threads) {
    rank_job *jobs = calloc((size_t)n_threads, sizeof *jobs);
    pthread_t *th = calloc((size_t)n_threads, sizeof *th);
    sh->sv = supervise_new(n_threads, grace_period(sh->cfg), stderr);
    if (!jobs || !th || !sh->sv) {
        free(jobs);
        free(th);
        supervise_free(sh->sv);
        fprintf(stderr, "ctrain: out of memory starting %d ranks\n", n_threads);
        return 1;
    }
    calls_expect_ranks(n_threads);
    for (int32_t i = 0; i < n_threads; i++) {
        jobs[i].shared = sh;
        jobs[i].slot = i;
        jobs[i].rank = first_rank + i;
    }
    int32_t started = 0;
    if (n_threads == 1) {
        rank_thread(&jobs[0]); /* on this thread: its call record is the rank's meanwhile */
        calls_bind(0, -1);
        started = 1;
    } else {
        ct_error e = {.struct_size = sizeof e};
        if (thread_start_ranks(th, n_threads, rank_thread, jobs, sizeof *jobs, first_rank,
                               "lower [comm] world_size", &started, &e) != CT_OK) {
            /* the started ranks will wait for the missing ones until the comm's timeout */
            for (int32_t i = started; i < n_threads; i++) {
                supervise_failed(sh->sv, i, CT_ERR_NOMEM, &e);
                supervise_done(sh->sv, i);
            }
        }
    }
    int32_t still_running = 0;
    int32_t status = supervise_wait(sh->sv, &still_running);
    if (still_running > 0) {
        fflush(cmdout());
        _exit(1);
    }
    for (int32_t i = 0; n_threads > 1 && i < started; i++) pthread_join(th[i], NULL);
    supervise_free(sh->sv);
    sh->sv = NULL;
    free(jobs);
    free(th);
    return status;
}
