/* whatif_scan.h — the exponent of N in a scan of world sizes (`ctrain what-if` with two or more
 * --world-sizes, --scan global or per-rank): a figure y(N) > 0 fitted as y = c N^a by least
 * squares on (ln N, ln y), each point weighted by 1 / (its standard error / y)^2 when every
 * point has one (else unweighted, the slope's error from the residuals with n - 2 degrees of
 * freedom, none for n = 2). Points whose figure is not above 0 are left out and counted.
 * Not for: the replay or the tables (cli/what_if.c).
 */
#ifndef CTRAIN_HOST_WHATIF_SCAN_H
#define CTRAIN_HOST_WHATIF_SCAN_H

#include <stdint.h>

typedef struct whatif_fit {
    double  a, se;      /* the exponent and its standard error (NAN: not estimable) */
    int32_t used, left; /* points fitted; points left out (figure <= 0 or not finite) */
} whatif_fit;

/* n points (N[i], y[i], se[i]); se may be NULL or hold zeros (then unweighted). */
whatif_fit whatif_fit_power(int32_t n, const double *N, const double *y, const double *se);

#endif /* CTRAIN_HOST_WHATIF_SCAN_H */
