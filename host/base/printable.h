/* printable.h — strings that came from outside (INI values, paths, names in a file), made safe
 * to print on a terminal: control characters escaped, so a hostile config cannot retitle,
 * clear or rewrite the terminal through `validate`, `inspect` or an error message.
 * Not for: quoting strings for another program (plot.c quotes for gnuplot).
 */
#ifndef CTRAIN_HOST_PRINTABLE_H
#define CTRAIN_HOST_PRINTABLE_H

#include <stddef.h>
#include <stdio.h>

/* 1 when s holds a control character: a byte below 0x20, 0x7f, or the UTF-8 form of a C1
 * control (U+0080..U+009F; U+009B is a terminal's CSI). */
int has_control_chars(const char *s);

/* s with every control character written as \n, \t, \r, \e or \xHH, a C1 control as
 * \u0080..\u009f and a byte of no well-formed UTF-8 character as \xHH (a backslash that would
 * make an escape ambiguous is left as it is), into buf (cap bytes, always terminated; cut short
 * with "..." when it does not fit). Returns buf. A message that embeds a path or a name from
 * outside prints it through this: a newline in it cannot start a fake line of the log. */
const char *printable(const char *s, char *buf, size_t cap);

/* fputs of s with its control characters escaped as printable() does, of any length. */
void fputs_printable(const char *s, FILE *f);

/* prefix, then message as printable() makes it, then a newline, in one write: an error message
 * on one line whatever path or name it holds (a newline in a path is printed \n, never a line
 * that looks like ctrain's own). prefix is ctrain's own text, printed as it is. */
void print_message_line(FILE *f, const char *prefix, const char *message);

/* Point `stderr` at a stream over file descriptor 2 that escapes control characters as
 * printable() does (newline, tab and carriage return pass: they are a message's own lines; a
 * newline inside a path is the printing site's to escape, with printable()): every message
 * ctrain prints about a config, a path or a plugin is then safe for the terminal. Unbuffered.
 * For main(), once; 0, or -1 when the stream cannot be made (stderr is left as it was). */
int printable_stderr(void);

#endif /* CTRAIN_HOST_PRINTABLE_H */
