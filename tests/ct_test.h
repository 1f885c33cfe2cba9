/* ct_test.h — the C test runner's assertions and registration.
 * A test is `CT_TEST(name_that_states_the_claim) { ... }` in any file of tests/unit/; the
 * runner (tests/unit/runner.c) runs every registered test, or those whose name contains an
 * argument, prints one line per failing check (file:line, expected, got, tolerance) and ends
 * with "N passed, N failed" counted in tests. Not for: benchmarks (bench/).
 */
#ifndef CT_TEST_H
#define CT_TEST_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>

typedef void (*ct_test_fn)(void);
void ct_test_register(const char *name, ct_test_fn fn);
void ct_test_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Path of the build folder's plugins (build/plugins), from $BUILD or the runner's location. */
const char *ct_test_plugin_dir(void);
/* A fresh empty temporary folder for this test (removed by the runner at exit). */
const char *ct_test_tmpdir(void);

#define CT_TEST(name)                                                                   \
    static void name(void);                                                             \
    __attribute__((constructor)) static void ct_register_##name(void) {                 \
        ct_test_register(#name, name);                                                  \
    }                                                                                   \
    static void name(void)

#define CT_CHECK(cond)                                                                  \
    do {                                                                                \
        if (!(cond)) ct_test_fail(__FILE__, __LINE__, "expected %s", #cond);            \
    } while (0)

#define CT_CHECK_MSG(cond, ...)                                                         \
    do {                                                                                \
        if (!(cond)) ct_test_fail(__FILE__, __LINE__, __VA_ARGS__);                     \
    } while (0)

#define CT_CHECK_INT(got, expected)                                                     \
    do {                                                                                \
        long long g_ = (long long)(got), e_ = (long long)(expected);                    \
        if (g_ != e_)                                                                   \
            ct_test_fail(__FILE__, __LINE__, "%s: expected %lld, got %lld", #got, e_, g_); \
    } while (0)

/* |got - expected| <= atol + rtol*|expected|; NaN never passes. */
#define CT_CHECK_CLOSE(got, expected, rtol, atol)                                       \
    do {                                                                                \
        double g_ = (double)(got), e_ = (double)(expected);                             \
        double tol_ = (double)(atol) + (double)(rtol) * fabs(e_);                       \
        if (!(fabs(g_ - e_) <= tol_))                                                   \
            ct_test_fail(__FILE__, __LINE__, "%s: expected %.9g, got %.9g (tolerance %.3g)", \
                         #got, e_, g_, tol_);                                           \
    } while (0)

#define CT_CHECK_STR_CONTAINS(haystack, needle)                                         \
    do {                                                                                \
        const char *h_ = (haystack), *n_ = (needle);                                    \
        if (!h_ || !strstr(h_, n_))                                                     \
            ct_test_fail(__FILE__, __LINE__, "expected \"%s\" to contain \"%s\"",       \
                         h_ ? h_ : "(null)", n_);                                       \
    } while (0)

#endif /* CT_TEST_H */
