/* train.c — `ctrain train CONFIG.ini [--set section.key=value ...] [--resume | --resume-from DIR
 * | --force] [--stop-after N]` (stop after step N as if interrupted, e.g. to test resuming;
 * --force starts over in an out_dir that holds a run, which is refused otherwise): resolves the
 * configuration exactly as `validate` does (run/session.h), prepares the out_dir (its lock,
 * config.ini, the data's tokenizer), installs the stop signals, creates an in-process engine's
 * world and starts the ranks (threads of this process for in-process engines, else one rank per
 * process, placed by the launcher: launcher.h) through the training loop (run/loop.h).
 * Not for: the loop itself (run/loop.c) or reading the launcher's variables (launcher.c). */
#include "base/cmdout.h"
#include "base/printable.h"
#include "base/launcher.h"
#include "cli/commands.h"
#include "data/runtok.h"
#include "io/outfile.h"
#include "plugin/calls.h"
#include "run/checkpoint.h"
#include "run/loop.h"
#include "run/optim.h"
#include "run/preempt.h"
#include "run/runlock.h"
#include "run/session.h"
#include "run/watchdog.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* OUT/tokenizer.ini (+ .model) from the data's meta.ini; required when [run] sample_every > 0. */
static int32_t record_tokenizer(const host_config *cfg, const char *out_dir, ct_error *err) {
    int64_t every = 0;
    int found = 0;
    config_get_int(cfg, "run", "sample_every", &every, NULL);
    return runtok_record(cfg, out_dir, every > 0, &found, err);
}

/* The grace after a stop signal while the configuration is read and checked (the plugins'
 * create() in preflight included), before [run] stop_grace_s is known. */
#define TRAIN_SETUP_GRACE_S 10

/* --resume that found no checkpoint starts from step 0 and starts metrics.jsonl anew: the lines
 * of the attempt that ended before its first save are set aside as metrics.jsonl.before_resume
 * (.2, .3, ... when that exists; never replacing a file), never removed. Under the out_dir's
 * lock. */
static int32_t keep_old_metrics(const char *out_dir, ct_error *err) {
    char from[4200], to[4300];
    struct stat st;
    snprintf(from, sizeof from, "%s/metrics.jsonl", out_dir);
    if (lstat(from, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) return CT_OK;
    for (int k = 1; k < 1000; k++) {
        snprintf(to, sizeof to, k == 1 ? "%s.before_resume" : "%s.before_resume.%d", from, k);
        if (renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE) == 0) {
            fprintf(stderr, "ctrain train: --resume: kept the metrics of the attempt before as "
                    "%s\n", to);
            return CT_OK;
        }
        if (errno != EEXIST) break;
    }
    return ct_error_set(err, CT_ERR_IO, "--resume: cannot set aside %s before starting it anew: "
                        "%s ---> move it yourself, then resume", from, strerror(errno));
}

int cmd_train(int argc, char **argv) {
    ct_error err = {.struct_size = sizeof err};
    host_config *cfg = NULL;
    host_registry *reg = NULL;
    host_wiring w;
    int n_rest = 0;
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    host_runlock lock = {.fd = -1};
    int32_t resume = 0, force = 0, status = 2;
    int64_t stop_after = 0;
    const char *resume_from = NULL;
    /* SIGTERM / SIGINT / SIGUSR1 from here on: before the first step the run stops after the
     * setup (a setup that does not end within TRAIN_SETUP_GRACE_S, say a plugin's create that
     * hangs, is reported naming the call: watchdog.h), then at the end of a step with a
     * checkpoint, within [run] stop_grace_s */
    if (preempt_install() != 0 || watchdog_start(TRAIN_SETUP_GRACE_S) != 0) {
        fprintf(stderr, "ctrain train: cannot install the stop-signal handlers: %s\n",
                strerror(errno));
        free(rest);
        return 1;
    }
    if (!rest || session_configure(argc, argv, &n_rest, rest, &cfg, &reg, &w, &err) != CT_OK) {
        print_message_line(stderr, "ctrain train: ", rest ? err.message : "out of memory");
        free(rest);
        return 2;
    }
    for (int i = 0; i < n_rest; i++) {
        char *end = NULL;
        if (strcmp(rest[i], "--resume") == 0) resume = 1;
        else if (strcmp(rest[i], "--force") == 0) force = 1;
        else if (strcmp(rest[i], "--resume-from") == 0 && i + 1 < n_rest)
            resume_from = rest[++i];
        else if (strcmp(rest[i], "--stop-after") == 0 && i + 1 < n_rest &&
                 (stop_after = strtoll(rest[i + 1], &end, 10)) > 0 && *end == 0)
            i++;
        else {
            fprintf(stderr, "ctrain train: %s '%s' ---> see `ctrain help`\n",
                    strcmp(rest[i], "--resume-from") == 0 ? "a folder must follow"
                    : strcmp(rest[i], "--stop-after") == 0 ? "a step > 0 must follow"
                                                            : "unknown option",
                    rest[i]);
            goto out_session;
        }
    }
    if (resume && resume_from) {
        fprintf(stderr, "ctrain train: --resume and --resume-from exclude each other ---> "
                "--resume takes the newest valid checkpoint of [run] out_dir, --resume-from DIR "
                "that folder\n");
        goto out_session;
    }
    if (force && (resume || resume_from)) {
        fprintf(stderr, "ctrain train: --force starts the run over and --%s continues it ---> "
                "give one of them\n", resume ? "resume" : "resume-from");
        goto out_session;
    }
    host_optim_config oc; /* the optimiser's bounds, before anything is written */
    if (optim_config(cfg, &oc, &err) != CT_OK) {
        print_message_line(stderr, "ctrain train: ", err.message);
        goto out_session;
    }
    const char *out_dir = NULL;
    config_get_string(cfg, "run", "out_dir", &out_dir, NULL);
    int64_t world = 1;
    config_get_int(cfg, "comm", "world_size", &world, NULL);
    const ct_comm_vtable *cv = w.comm->vtable;
    status = 1;
    /* the stop signals' grace, now that the configuration is read (watchdog.h) */
    double grace_s = 30;
    config_get_float(cfg, "run", "stop_grace_s", &grace_s, NULL);
    watchdog_set_grace(grace_s);
    if (preempt_requested()) {
        fprintf(stderr, "ctrain train: %s came while the run was being set up; nothing was "
                "trained or written\n", preempt_signal_name(preempt_requested()));
        status = 3;
        goto out_session;
    }
    /* under a launcher every process gets here: the first one of the job (rank 0 by the
     * launcher: mpirun, srun or torchrun-style) writes config.ini */
    const host_launch *launch = launcher_current();
    int first_process = launch->rank == 0;
    /* --resume before the first checkpoint starts fresh, so a requeue script can always pass
     * it; a folder that holds checkpoints, none of them valid, stays an error (rank_open) */
    int n_saved = 0, n_all = 0, fresh = !resume && !resume_from;
    calls_host_op("looking for checkpoints to resume from");
    int counted = checkpoint_count(out_dir, &n_saved, &n_all, &err) == CT_OK;
    calls_host_op(NULL);
    if (!counted) {
        print_message_line(stderr, resume ? "ctrain train: --resume: " : "ctrain train: ", err.message);
        goto out_session;
    }
    int fell_back = resume && n_saved == 0; /* --resume with nothing to resume from */
    if (fell_back) {
        if (first_process)
            fprintf(stderr, "ctrain train: --resume: no checkpoint %sunder %s/checkpoints yet; "
                    "starting from step 0\n", n_all ? "of this run " : "", out_dir);
        resume = 0;
    }
    /* a fresh run never takes over a folder that holds a run: refused before anything is
     * touched, unless --force (which removes only what that run wrote: checkpoint.h) */
    if (fresh && first_process && runlock_check(out_dir, &err) != CT_OK) {
        print_message_line(stderr, "ctrain train: ", err.message); /* a live run comes first */
        goto out_session;
    }
    if (fresh && first_process && !force) {
        char mpath[4200];
        struct stat mst;
        snprintf(mpath, sizeof mpath, "%s/metrics.jsonl", out_dir);
        int has_metrics = lstat(mpath, &mst) == 0 && mst.st_size > 0; /* empty: nothing lost */
        if (n_all > 0 || has_metrics) {
            char what[160] = "";
            if (n_all)
                snprintf(what, sizeof what, "%d checkpoint folder%s under checkpoints/%s", n_all,
                         n_all == 1 ? "" : "s", has_metrics ? " and " : "");
            if (has_metrics)
                snprintf(what + strlen(what), sizeof what - strlen(what),
                         "metrics.jsonl (%lld bytes)", (long long)mst.st_size);
            char msg[4600];
            snprintf(msg, sizeof msg, "[run] out_dir %s holds a run: %s; nothing was changed "
                     "---> --resume to continue it, --force to start over (removes that run's "
                     "checkpoints and metrics), or set [run] out_dir to another folder",
                     out_dir, what);
            print_message_line(stderr, "ctrain train: ", msg);
            status = 2;
            goto out_session;
        }
    }
    /* the process that writes the folder's config.ini holds its lock for the whole run (the
     * in-process ranks share it; the other processes of an mpirun job take none) */
    calls_host_op("preparing [run] out_dir (lock, config.ini, tokenizer)");
    char lock_path[4200]; /* checked (inside a run's checkpoints?) before a folder is made */
    snprintf(lock_path, sizeof lock_path, "%s/.lock", out_dir);
    int prepared = (!first_process || outfile_check(lock_path, 0, &err) == CT_OK) &&
                   out_make_folders(out_dir, &err) == CT_OK &&
                   (!first_process || runlock_take(&lock, out_dir, &err) == CT_OK) &&
                   (!first_process || !fresh || !force ||
                    checkpoint_start_over(out_dir, &err) == CT_OK) &&
                   (!first_process || !fell_back || keep_old_metrics(out_dir, &err) == CT_OK) &&
                   (!first_process || checkpoint_run_id(out_dir, fresh, &err) == CT_OK) &&
                   (!first_process || checkpoint_write_config(cfg, out_dir, &err) == CT_OK) &&
                   (!first_process || record_tokenizer(cfg, out_dir, &err) == CT_OK);
    calls_host_op(NULL);
    if (!prepared) {
        print_message_line(stderr, "ctrain train: ", err.message);
        goto out_session;
    }
    run_shared sh = {.cfg = cfg, .wiring = &w, .world = (int32_t)world, .resume = resume,
                     .resume_from = resume_from, .stop_after = stop_after, .out_dir = out_dir,
                     .launch = launch};
    if (cv->world_create) {
        /* the engine reads its own keys ([comm] algo, timeout_s, ...) here, through the host
         * API exactly as at create(); wh lives until world_destroy */
        ct_host wh;
        hostapi_init(&wh, cfg, 0, w.comm->desc.name, NULL);
        ct_create_args a = {.struct_size = sizeof a,
                            .api = hostapi_table(),
                            .host = &wh,
                            .section = "comm",
                            .rank = 0,
                            .world_size = (int32_t)world};
        sh.comm_world = CALLS(w.comm, "world_create", cv->world_create((int32_t)world, &a, &err));
        if (!sh.comm_world) {
            char who[96]; /* the engine's message may already start with "comm NAME" */
            snprintf(who, sizeof who, "comm %s", w.comm->desc.name);
            int named = strncmp(err.message, who, strlen(who)) == 0;
            fprintf(stderr, "ctrain train: %s%s%s\n", named ? "" : who, named ? "" : ": ",
                    err.message);
            goto out_session;
        }
        status = run_ranks(&sh, 0, (int32_t)world);
        CALLS_VOID(w.comm, "world_destroy", cv->world_destroy(sh.comm_world));
    } else {
        /* world_size > 1 without an in-process engine was refused by preflight_check; the
         * comm plugin learns its world itself and train_rank checks it against the launcher's */
        sh.world = launch->world;
        status = run_ranks(&sh, launch->rank, 1);
    }
    /* train_rank printed "stopped by SIG after checkpointing step N" */
    if (status == 0 && sh.stopped_at > 0) status = PREEMPT_EXIT_STOPPED;
    if (status == 0 && first_process) fprintf(cmdout(), "metrics: %s/metrics.jsonl\n", out_dir);
out_session:
    runlock_release(&lock);
    registry_close(reg);
    config_free(cfg);
    free(rest);
    return status;
}
