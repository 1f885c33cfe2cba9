/* whatif_scan.c — the exponent of N fitted to a scan's figures (see whatif_scan.h). */
#include "whatif/whatif_scan.h"

#include <math.h>
#include <stddef.h>

whatif_fit whatif_fit_power(int32_t n, const double *N, const double *y, const double *se) {
    whatif_fit f = {NAN, NAN, 0, 0};
    int weighted = se != NULL;
    for (int32_t i = 0; i < n; i++) {
        if (!(y[i] > 0) || !isfinite(y[i]) || !(N[i] > 0)) { f.left++; continue; }
        f.used++;
        if (!(se && se[i] > 0 && isfinite(se[i]))) weighted = 0;
    }
    if (f.used < 2) return f;
    double sw = 0, sx = 0, sy = 0;
    for (int32_t i = 0; i < n; i++) {
        if (!(y[i] > 0) || !isfinite(y[i]) || !(N[i] > 0)) continue;
        double w = weighted ? 1.0 / ((se[i] / y[i]) * (se[i] / y[i])) : 1.0;
        sw += w, sx += w * log(N[i]), sy += w * log(y[i]);
    }
    double mx = sx / sw, my = sy / sw, sxx = 0, sxy = 0;
    for (int32_t i = 0; i < n; i++) {
        if (!(y[i] > 0) || !isfinite(y[i]) || !(N[i] > 0)) continue;
        double w = weighted ? 1.0 / ((se[i] / y[i]) * (se[i] / y[i])) : 1.0;
        double dx = log(N[i]) - mx;
        sxx += w * dx * dx, sxy += w * dx * (log(y[i]) - my);
    }
    if (!(sxx > 0)) return f;
    f.a = sxy / sxx;
    if (weighted) {
        f.se = sqrt(1.0 / sxx);
    } else if (f.used > 2) {
        double rss = 0;
        for (int32_t i = 0; i < n; i++) {
            if (!(y[i] > 0) || !isfinite(y[i]) || !(N[i] > 0)) continue;
            double r = log(y[i]) - my - f.a * (log(N[i]) - mx);
            rss += r * r;
        }
        f.se = sqrt(rss / (f.used - 2) / sxx);
    }
    return f;
}
