/* cmdout.h — the command's own standard output, kept apart from whatever plugins write: a
 * command that loads plugins moves the real stdout to a descriptor of its own and points fd 1
 * at stderr, so a plugin's printf (or a constructor's) lands on stderr and never inside what
 * the command prints (validate's resolved INI, a listing, check-plugin's verdicts).
 * Not for: error messages (stderr) or files (outfile.h).
 */
#ifndef CTRAIN_HOST_CMDOUT_H
#define CTRAIN_HOST_CMDOUT_H

#include <stdio.h>

/* Where the command prints its own output: stdout until cmdout_separate(), then the stream on
 * the moved descriptor (line-buffered on a terminal, as stdout is). */
FILE *cmdout(void);

/* Move the command's output off fd 1 and point fd 1 at stderr (call before any plugin is
 * loaded). 0, or -1 when a descriptor could not be duplicated (then nothing changed and
 * cmdout() stays stdout). Streams are flushed by exit() as usual. */
int cmdout_separate(void);

#endif /* CTRAIN_HOST_CMDOUT_H */
