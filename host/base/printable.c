/* printable.c — control characters of outside strings escaped for printing (see printable.h). */
#include "base/printable.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

int has_control_chars(const char *s) {
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || (unsigned char)*s == 0x7f) return 1;
    return 0;
}

/* The escape of byte c into out (at least 5 bytes); its length, 0 for a byte printed as is. */
static size_t escape_of(unsigned char c, char *out) {
    static const char hex[] = "0123456789abcdef";
    const char *named = c == '\n' ? "\\n" : c == '\t' ? "\\t" : c == '\r' ? "\\r"
                        : c == 0x1b ? "\\e" : NULL;
    if (named) {
        memcpy(out, named, 3);
        return 2;
    }
    if (c >= 0x20 && c != 0x7f) return 0;
    out[0] = '\\';
    out[1] = 'x';
    out[2] = hex[c >> 4];
    out[3] = hex[c & 15];
    out[4] = '\0';
    return 4;
}

const char *printable(const char *s, char *buf, size_t cap) {
    if (!cap) return buf;
    size_t n = 0;
    for (; *s; s++) {
        char esc[5];
        size_t k = escape_of((unsigned char)*s, esc);
        size_t need = k ? k : 1;
        if (n + need + 1 > cap) { /* does not fit: end with "..." */
            if (cap >= 4) {
                while (n + 4 > cap) n--;
                memcpy(buf + n, "...", 3);
                n += 3;
            }
            break;
        }
        if (k) memcpy(buf + n, esc, k);
        else buf[n] = *s;
        n += need;
    }
    buf[n < cap ? n : cap - 1] = '\0';
    return buf;
}

void fputs_printable(const char *s, FILE *f) {
    for (; *s; s++) {
        char esc[5];
        if (escape_of((unsigned char)*s, esc)) fputs(esc, f);
        else fputc(*s, f);
    }
}

/* ---- stderr through the escaping --------------------------------------------------------- */

/* fopencookie's write: buf with its control characters escaped (but newline, tab and the
 * carriage return of progress lines) to the descriptor `cookie`. Returns n (all taken). */
static ssize_t escaped_write(void *cookie, const char *buf, size_t n) {
    int fd = (int)(intptr_t)cookie;
    char out[1024];
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)buf[i];
        char esc[5];
        size_t e = c == '\n' || c == '\t' || c == '\r' ? 0 : escape_of(c, esc);
        if (k + 5 > sizeof out) {
            if (write(fd, out, k) < 0 && errno != EINTR) return -1;
            k = 0;
        }
        if (e) {
            memcpy(out + k, esc, e);
            k += e;
        } else {
            out[k++] = (char)c;
        }
    }
    if (k && write(fd, out, k) < 0) return -1;
    return (ssize_t)n;
}

int printable_stderr(void) {
    cookie_io_functions_t io = {.write = escaped_write};
    FILE *f = fopencookie((void *)(intptr_t)STDERR_FILENO, "w", io);
    if (!f) return -1;
    setvbuf(f, NULL, _IONBF, 0); /* unbuffered, as stderr is: nothing waits for an _exit */
    stderr = f;
    return 0;
}
