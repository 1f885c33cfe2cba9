/* runner.c — runs the registered C tests (see tests/ct_test.h) and prints the summary line.
 * Usage: unit_tests [SUBSTRING...]  runs the tests whose names contain any SUBSTRING. */
#include "ct_test.h"

#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_TESTS 1024

static struct { const char *name; ct_test_fn fn; } tests[MAX_TESTS];
static int n_tests;
static int current_failed;
static const char *current_name;
static char tmp_root[256];
static int tmp_count;
static char tmp_path[PATH_MAX];

void ct_test_register(const char *name, ct_test_fn fn) {
    if (n_tests == MAX_TESTS) {
        fprintf(stderr, "runner: more than %d tests; raise MAX_TESTS\n", MAX_TESTS);
        exit(2);
    }
    tests[n_tests].name = name;
    tests[n_tests].fn = fn;
    n_tests++;
}

void ct_test_fail(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stdout, "FAIL %s (%s:%d): ", current_name, file, line);
    vfprintf(stdout, fmt, ap);
    fputc('\n', stdout);
    va_end(ap);
    current_failed = 1;
}

const char *ct_test_plugin_dir(void) {
    static char dir[PATH_MAX];
    if (!dir[0]) {
        const char *b = getenv("BUILD");
        snprintf(dir, sizeof dir, "%s/plugins", b && *b ? b : "build");
        char *abs = realpath(dir, NULL);
        if (abs) {
            snprintf(dir, sizeof dir, "%s", abs);
            free(abs);
        }
    }
    return dir;
}

const char *ct_test_tmpdir(void) {
    snprintf(tmp_path, sizeof tmp_path, "%s/t%d", tmp_root, ++tmp_count);
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", tmp_path);
    if (system(cmd) != 0) ct_test_fail(__FILE__, __LINE__, "cannot create %s", tmp_path);
    return tmp_path;
}

static void remove_tmp_root(void) {
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_root);
    if (system(cmd) != 0) fprintf(stderr, "runner: could not remove %s\n", tmp_root);
}

static int selected(const char *name, int argc, char **argv) {
    if (argc <= 1) return 1;
    for (int i = 1; i < argc; i++)
        if (strstr(name, argv[i])) return 1;
    return 0;
}

int main(int argc, char **argv) {
    snprintf(tmp_root, sizeof tmp_root, "/tmp/ctrain-tests-XXXXXX");
    if (!mkdtemp(tmp_root)) {
        perror("runner: mkdtemp");
        return 2;
    }
    atexit(remove_tmp_root);
    int passed = 0, failed = 0;
    for (int i = 0; i < n_tests; i++) {
        if (!selected(tests[i].name, argc, argv)) continue;
        current_name = tests[i].name;
        current_failed = 0;
        tests[i].fn();
        fflush(stdout);
        if (current_failed) failed++;
        else passed++;
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
