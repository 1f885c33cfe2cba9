/* printable.h — strings that came from outside (INI values, paths, names in a file), made safe
 * to print on a terminal: control characters escaped, so a hostile config cannot retitle,
 * clear or rewrite the terminal through `validate`, `inspect` or an error message.
 * Not for: quoting strings for another program (plot.c quotes for gnuplot).
 */
#ifndef CTRAIN_HOST_PRINTABLE_H
#define CTRAIN_HOST_PRINTABLE_H

#include <stddef.h>
#include <stdio.h>

/* 1 when s holds a control character (a byte below 0x20, or 0x7f). */
int has_control_chars(const char *s);

/* s with every control character written as \n, \t, \r, \e or \xHH (and a backslash that
 * would make an escape ambiguous left as it is), into buf (cap bytes, always terminated; cut
 * short with "..." when it does not fit). Returns buf. */
const char *printable(const char *s, char *buf, size_t cap);

/* fputs of s with its control characters escaped as printable() does, of any length. */
void fputs_printable(const char *s, FILE *f);

/* Point `stderr` at a stream over file descriptor 2 that escapes control characters as
 * printable() does (newline, tab and carriage return pass): every message ctrain prints about
 * a config, a path or a plugin is then safe for the terminal. Unbuffered. For main(), once;
 * 0, or -1 when the stream cannot be made (stderr is left as it was). */
int printable_stderr(void);

#endif /* CTRAIN_HOST_PRINTABLE_H */
