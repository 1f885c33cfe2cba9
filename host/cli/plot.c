/* plot.c — `ctrain plot RUN_DIR... --metric NAME [--metric NAME]... --out FILE.png [--title T]
 * [--logy]`: metrics against step, one line per run, one panel per metric, drawn by gnuplot
 * (Debian's gnuplot-nox; pngcairo when it has it, else png), started with fork + execv and an
 * argument vector, never a shell. The data files, the script and the picture go to a temporary
 * folder, kept (and named) when gnuplot fails; the picture then reaches --out through the one
 * writer (outfile.h), so gnuplot never sees the user's path. Strings from the user or a run
 * folder (title, metric and run names) reach the script only as single-quoted gnuplot strings
 * (no escapes, no backquote substitution there) and only without control characters: a newline
 * would end the string and start a command.
 * Not for: reading metrics files (jsonl.c) or tables of figures (compare.c).
 */
#include "cli/commands.h"
#include "config/config.h"
#include "cli/runlog.h"
#include "io/outfile.h"
#include "base/printable.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define PLOT_MAX_METRICS 16
#define PLOT_MAX_RUNS    64

typedef struct plot_args {
    const char *runs[PLOT_MAX_RUNS];
    int32_t     n_runs;
    const char *metrics[PLOT_MAX_METRICS];
    int32_t     n_metrics;
    const char *out;
    const char *title;
    int32_t     logy;
    int32_t     force; /* --force: --out may replace a file or write inside a run's folder */
} plot_args;

static int usage(const char *why) {
    fprintf(stderr, "ctrain plot: %s\n"
            "usage: ctrain plot RUN_DIR... --metric NAME [--metric NAME]... --out FILE.png "
            "[--title T] [--logy] [--force]\n", why);
    return 2;
}

/* 0 on success, else the exit status (2: usage). */
static int parse_args(int argc, char **argv, plot_args *a) {
    memset(a, 0, sizeof *a);
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        int has_value = i + 1 < argc;
        if (!strcmp(s, "--metric") || !strcmp(s, "--out") || !strcmp(s, "--title")) {
            if (!has_value) {
                char why[96];
                snprintf(why, sizeof why, "%s needs a value", s);
                return usage(why);
            }
            const char *v = argv[++i];
            if (!strcmp(s, "--out")) a->out = v;
            else if (!strcmp(s, "--title")) a->title = v;
            else if (a->n_metrics == PLOT_MAX_METRICS) return usage("too many --metric (16 at most)");
            else a->metrics[a->n_metrics++] = v;
        } else if (!strcmp(s, "--logy")) {
            a->logy = 1;
        } else if (!strcmp(s, "--force")) {
            a->force = 1;
        } else if (!strcmp(s, "--help") || !strcmp(s, "-h")) {
            usage("draws metrics of runs against step");
            return 2;
        } else if (s[0] == '-' && s[1] == '-') {
            char why[160];
            snprintf(why, sizeof why, "unknown option '%.100s'", s);
            return usage(why);
        } else if (a->n_runs == PLOT_MAX_RUNS) {
            return usage("too many run directories (64 at most)");
        } else {
            a->runs[a->n_runs++] = s;
        }
    }
    if (!a->n_runs) return usage("no run directory given");
    if (!a->n_metrics) return usage("no --metric given (e.g. --metric logit_norm_mean)");
    if (!a->out) return usage("no --out FILE.png given");
    ct_error err = {.struct_size = sizeof err}; /* refused before gnuplot runs, not after */
    if (outfile_check(a->out, OUTFILE_USER | (a->force ? OUTFILE_FORCE : 0), &err) != CT_OK) {
        print_message_line(stderr, "ctrain plot: ", err.message);
        return 2;
    }
    return 0;
}

/* Absolute path of `prog` found in $PATH, into buf; 0 when not found. */
static int find_in_path(const char *prog, char *buf, size_t cap) {
    const char *path = getenv("PATH");
    if (!path) return 0;
    while (*path) {
        const char *colon = strchr(path, ':');
        size_t len = colon ? (size_t)(colon - path) : strlen(path);
        if (len) {
            snprintf(buf, cap, "%.*s/%s", (int)len, path, prog);
            if (access(buf, X_OK) == 0) return 1;
        }
        path += len + (colon ? 1 : 0);
    }
    return 0;
}

/* s as a gnuplot single-quoted string ('' for a quote). s holds no control character
 * (check_strings refused them): inside single quotes gnuplot then reads every byte as text. */
static void gp_quote(FILE *f, const char *s) {
    assert(!has_control_chars(s));
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'') fputc('\'', f);
        fputc(*s, f);
    }
    fputc('\'', f);
}

/* Write the (step, value) points of `metric` in `log` to path; *n_points gets their count.
 * Non-finite values are skipped, and non-positive ones with logy. */
static int write_series(const char *path, const run_log *log, const char *metric, int logy,
                        int32_t *n_points, ct_error *err) {
    outfile o;
    if (outfile_open(&o, path, err) != CT_OK) return 0;
    FILE *f = outfile_stream(&o, err);
    if (!f) {
        outfile_abort(&o);
        return 0;
    }
    *n_points = 0;
    for (int32_t i = 0; i < log->n_records; i++) {
        double step, v;
        if (!jsonl_get(&log->records[i], metric, &v) || !isfinite(v) || (logy && v <= 0)) continue;
        if (!jsonl_get(&log->records[i], "step", &step)) step = i;
        fprintf(f, "%.17g %.17g\n", step, v);
        (*n_points)++;
    }
    return outfile_commit(&o, err) == CT_OK;
}

/* Remove the temporary folder and its files. */
static void remove_tmp(const char *dir, const plot_args *a) {
    char path[4200];
    for (int32_t r = 0; r < a->n_runs; r++)
        for (int32_t m = 0; m < a->n_metrics; m++) {
            snprintf(path, sizeof path, "%s/r%d_m%d.dat", dir, (int)r, (int)m);
            unlink(path);
        }
    snprintf(path, sizeof path, "%s/plot.gp", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/plot.png", dir);
    unlink(path);
    rmdir(dir);
}

/* 1 when some run has `metric` as a number. */
static int any_run_has(const run_log *logs, int32_t n, const char *metric) {
    double v;
    for (int32_t l = 0; l < n; l++)
        for (int32_t i = 0; i < logs[l].n_records; i++)
            if (jsonl_get(&logs[l].records[i], metric, &v)) return 1;
    return 0;
}

/* The error for a metric no run has: the nearest name and every available one. */
static void report_unknown_metric(const run_log *logs, int32_t n, const char *metric) {
    int32_t nk = 0;
    char **keys = run_log_keys(logs, n, &nk);
    const char *near = NULL; /* a name that extends the word first, else the nearest */
    for (int32_t k = 0; k < nk && !near; k++)
        if (strncmp(keys[k], metric, strlen(metric)) == 0) near = keys[k];
    if (!near) near = config_nearest(metric, (const char *const *)keys, nk);
    fprintf(stderr, "ctrain plot: no run has metric '%s'%s%s%s ---> available:", metric,
            near ? " (did you mean '" : "", near ? near : "", near ? "'?)" : "");
    for (int32_t k = 0; k < nk; k++) fprintf(stderr, " %s", keys[k]);
    fprintf(stderr, "%s\n", nk ? "" : " none (the metrics files are empty)");
    run_log_free_keys(keys, nk);
}

/* Write the gnuplot script for the loaded runs; counts[r][m] are the points of each series. */
static int write_script(const char *script, const char *tmp, const plot_args *a,
                        const run_log *logs, int32_t counts[][PLOT_MAX_METRICS], ct_error *err) {
    outfile o;
    if (outfile_open(&o, script, err) != CT_OK) return 0;
    FILE *f = outfile_stream(&o, err);
    if (!f) {
        outfile_abort(&o);
        return 0;
    }
    int cols = a->n_metrics == 1 ? 1 : 2;
    int rows = (a->n_metrics + cols - 1) / cols;
    int w = 820 * cols, h = 460 * rows + (a->title ? 40 : 0);
    fprintf(f, "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
               "    set terminal pngcairo noenhanced size %d,%d font ',10'\n"
               "} else {\n"
               "    set terminal png noenhanced size %d,%d\n"
               "}\n", w, h, w, h);
    char picture[4200];
    snprintf(picture, sizeof picture, "%s/plot.png", tmp);
    fputs("set output ", f);
    gp_quote(f, picture);
    fputs("\nset grid\nset key top right\nset xlabel 'step'\n", f);
    fprintf(f, "set multiplot layout %d,%d", rows, cols);
    if (a->title) {
        fputs(" title ", f);
        gp_quote(f, a->title);
    }
    fputc('\n', f);
    if (a->logy) fputs("set logscale y\n", f);
    for (int32_t m = 0; m < a->n_metrics; m++) {
        fputs("set title ", f);
        gp_quote(f, a->metrics[m]);
        fputs("\nplot ", f);
        int first = 1;
        for (int32_t r = 0; r < a->n_runs; r++) {
            if (!counts[r][m]) continue;
            if (!first) fputs(", \\\n     ", f);
            first = 0;
            char data[4200];
            snprintf(data, sizeof data, "%s/r%d_m%d.dat", tmp, (int)r, (int)m);
            gp_quote(f, data);
            fprintf(f, " using 1:2 with %s lw 2 title ", counts[r][m] > 40 ? "lines" : "linespoints");
            gp_quote(f, logs[r].name);
        }
        fputc('\n', f);
    }
    fputs("unset multiplot\n", f);
    return outfile_commit(&o, err) == CT_OK;
}

/* Run gnuplot on script as a child with an argument vector (no shell: paths are bytes); its
 * stdout and stderr come back through a pipe and are echoed on failure. 0 on success. */
static int run_gnuplot(const char *gnuplot, const char *script) {
    int fds[2];
    if (pipe(fds) != 0) {
        fprintf(stderr, "ctrain plot: cannot run %s: pipe: %s\n", gnuplot, strerror(errno));
        return 1;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "ctrain plot: cannot run %s: fork: %s\n", gnuplot, strerror(errno));
        close(fds[0]);
        close(fds[1]);
        return 1;
    }
    if (pid == 0) { /* the child: stdin at end of file, stdout and stderr into the pipe */
        int empty[2];
        if (pipe(empty) == 0) {
            close(empty[1]);
            dup2(empty[0], 0);
            close(empty[0]);
        }
        dup2(fds[1], 1);
        dup2(fds[1], 2);
        close(fds[0]);
        close(fds[1]);
        char *const argv[] = {(char *)"gnuplot", (char *)script, NULL};
        execv(gnuplot, argv);
        dprintf(2, "cannot execute %s: %s\n", gnuplot, strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    char out[8192];
    size_t n = 0;
    for (;;) { /* keep the first 8 KB, drain the rest so the child never blocks */
        char sink[512];
        char *dst = n < sizeof out - 1 ? out + n : sink;
        size_t room = n < sizeof out - 1 ? sizeof out - 1 - n : sizeof sink;
        ssize_t k = read(fds[0], dst, room);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        if (dst == out + n) n += (size_t)k;
    }
    out[n] = '\0';
    close(fds[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) {
            status = -1;
            break;
        }
    if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "%sctrain plot: gnuplot failed (%s %d)\n", out,
                status != -1 && WIFSIGNALED(status) ? "signal" : "status",
                status == -1 ? -1 : WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
        return 1;
    }
    return 0;
}

/* Every string that reaches the script: no control characters (see the file's comment). */
static int check_strings(const plot_args *a, const run_log *logs, int32_t n) {
    char shown_buf[160];
    const char *what = NULL, *bad = NULL;
    if (a->title && has_control_chars(a->title)) what = "--title", bad = a->title;
    for (int32_t m = 0; !what && m < a->n_metrics; m++)
        if (has_control_chars(a->metrics[m])) what = "--metric", bad = a->metrics[m];
    for (int32_t r = 0; !what && r < n; r++)
        if (has_control_chars(logs[r].name)) what = "the run name", bad = logs[r].name;
    if (!what) return 0;
    fprintf(stderr, "ctrain plot: %s '%s' holds a control character (a newline, a tab, an "
            "escape) ---> plot labels are one line of printable text%s\n", what,
            printable(bad, shown_buf, sizeof shown_buf),
            !strcmp(what, "the run name") ? ": fix [run] name in the run's config.ini" : "");
    return 1;
}

int cmd_plot(int argc, char **argv) {
    plot_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc) return rc;

    char gnuplot[4096];
    if (!find_in_path("gnuplot", gnuplot, sizeof gnuplot)) {
        fprintf(stderr, "ctrain plot: gnuplot not found in PATH ---> install gnuplot-nox "
                "(apt-get install gnuplot-nox)\n");
        return 1;
    }

    run_log logs[PLOT_MAX_RUNS];
    int32_t n_loaded = 0;
    int32_t (*counts)[PLOT_MAX_METRICS] = calloc(PLOT_MAX_RUNS, sizeof *counts);
    char tmp[] = "/tmp/ctrain-plot-XXXXXX";
    int made_tmp = 0;
    rc = 1;
    if (!counts) goto out_free_logs;
    for (int32_t r = 0; r < a.n_runs; r++) {
        ct_error err = {.struct_size = sizeof err};
        if (run_log_load(a.runs[r], &logs[r], &err) != CT_OK) {
            print_message_line(stderr, "ctrain plot: ", err.message);
            goto out_free_logs;
        }
        n_loaded++;
    }
    run_log_disambiguate(logs, n_loaded);
    if (check_strings(&a, logs, n_loaded)) goto out_free_logs;
    for (int32_t m = 0; m < a.n_metrics; m++)
        if (!any_run_has(logs, n_loaded, a.metrics[m])) {
            report_unknown_metric(logs, n_loaded, a.metrics[m]);
            goto out_free_logs;
        }

    if (!mkdtemp(tmp)) {
        fprintf(stderr, "ctrain plot: cannot make a temporary folder: %s\n", strerror(errno));
        goto out_free_logs;
    }
    made_tmp = 1;
    for (int32_t m = 0; m < a.n_metrics; m++) {
        int32_t total = 0;
        for (int32_t r = 0; r < a.n_runs; r++) {
            char path[4200];
            snprintf(path, sizeof path, "%s/r%d_m%d.dat", tmp, (int)r, (int)m);
            ct_error err = {.struct_size = sizeof err};
            if (!write_series(path, &logs[r], a.metrics[m], a.logy, &counts[r][m], &err)) {
                print_message_line(stderr, "ctrain plot: ", err.message);
                goto out_remove_tmp;
            }
            if (!counts[r][m])
                fprintf(stderr, "ctrain plot: note: run '%s' has no %s%s values of %s\n",
                        logs[r].name, "finite", a.logy ? " positive" : "", a.metrics[m]);
            total += counts[r][m];
        }
        if (!total) {
            fprintf(stderr, "ctrain plot: metric '%s' has no %s values in any run ---> nothing "
                    "to draw%s\n", a.metrics[m], a.logy ? "finite positive" : "finite",
                    a.logy ? " (drop --logy?)" : "");
            goto out_remove_tmp;
        }
    }
    char script[4200];
    snprintf(script, sizeof script, "%s/plot.gp", tmp);
    ct_error err = {.struct_size = sizeof err};
    if (!write_script(script, tmp, &a, logs, counts, &err)) {
        print_message_line(stderr, "ctrain plot: ", err.message);
        goto out_remove_tmp;
    }
    if (run_gnuplot(gnuplot, script) != 0) {
        fprintf(stderr, "ctrain plot: the script and data are kept in %s\n", tmp);
        made_tmp = 0; /* keep them for the user */
        goto out_free_logs;
    }
    char picture[4200];
    snprintf(picture, sizeof picture, "%s/plot.png", tmp);
    struct stat st;
    if (stat(picture, &st) != 0 || st.st_size == 0) {
        fprintf(stderr, "ctrain plot: gnuplot wrote no picture (%s)\n", picture);
        goto out_remove_tmp;
    }
    if (outfile_copy(picture, a.out, OUTFILE_USER | (a.force ? OUTFILE_FORCE : 0), &err) !=
        CT_OK) {
        print_message_line(stderr, "ctrain plot: ", err.message);
        goto out_remove_tmp;
    }
    printf("wrote %s (%d run%s, %d panel%s)\n", a.out, (int)a.n_runs, a.n_runs == 1 ? "" : "s",
           (int)a.n_metrics, a.n_metrics == 1 ? "" : "s");
    rc = 0;

out_remove_tmp:
    if (made_tmp) remove_tmp(tmp, &a);
out_free_logs:
    for (int32_t r = 0; r < n_loaded; r++) run_log_free(&logs[r]);
    free(counts);
    return rc;
}
