/* fatal.h — the signals that mean "this process is crashing" (SIGSEGV, SIGBUS, SIGILL, SIGFPE,
 * SIGABRT), their names, and async-signal-safe pieces for a handler that says what crashed
 * before the process dies of the signal. Used by the rank supervisor (supervise.c) and by the
 * plugin loader's backstop (registry.c). Not for: deciding what to do after a crash.
 */
#ifndef CTRAIN_HOST_FATAL_H
#define CTRAIN_HOST_FATAL_H

#include <stddef.h>

#define FATAL_SIGNAL_COUNT 5
extern const int fatal_signals[FATAL_SIGNAL_COUNT];

/* "SIGSEGV", ... for a fatal signal or SIGALRM/SIGKILL/SIGTERM; NULL for another. */
const char *fatal_signal_abbrev(int sig);
/* "Segmentation fault", ...; "fatal signal" for another. */
const char *fatal_signal_label(int sig);

/* Async-signal-safe: append s / the decimal v to buf[n..cap); return the new length. */
size_t fatal_put_str(char *buf, size_t n, size_t cap, const char *s);
size_t fatal_put_int(char *buf, size_t n, size_t cap, long v);
/* Async-signal-safe: write all of s to stderr (best effort). */
void fatal_write(const char *s);

/* Install handler for every fatal signal with SA_RESETHAND | SA_NODEFER (so the handler can
 * raise() the signal again and die of it); `old` (FATAL_SIGNAL_COUNT entries) receives the
 * previous actions when non-NULL. Signals someone else already handles (a sanitizer, a
 * debugger's runtime) are left alone when keep_foreign is non-zero. */
void fatal_install(void (*handler)(int), void *old, int keep_foreign);
/* Put back the actions saved by fatal_install where `handler` is still the one installed. */
void fatal_restore(void (*handler)(int), const void *old);

#endif /* CTRAIN_HOST_FATAL_H */
