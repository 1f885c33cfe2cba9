/* cmdout.c — the command's own standard output on a descriptor of its own (see cmdout.h). */
#include "base/cmdout.h"

#include <fcntl.h>
#include <unistd.h>

static FILE *out; /* NULL: stdout */

FILE *cmdout(void) { return out ? out : stdout; }

int cmdout_separate(void) {
    if (out) return 0;
    fflush(stdout);
    int keep = fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
    if (keep < 0) return -1;
    FILE *f = fdopen(keep, "w");
    if (!f) {
        close(keep);
        return -1;
    }
    if (dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
        fclose(f);
        return -1;
    }
    if (isatty(keep)) setvbuf(f, NULL, _IOLBF, 0);
    out = f;
    return 0;
}
