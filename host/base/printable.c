/* printable.c — control characters of outside strings escaped for printing (see printable.h). */
#include "base/printable.h"

#include "base/utf8.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

/* The bytes of s before its NUL, at most 4: what a UTF-8 character there may span. */
static size_t avail(const char *s) {
    size_t n = 0;
    while (n < 4 && s[n]) n++;
    return n;
}

/* 1 when the n bytes at s open with the UTF-8 form of a C1 control (U+0080..U+009F: 0xC2
 * then 0x80..0x9F), which a terminal may act on as it does on ESC (U+009B is CSI). */
static int is_c1(const unsigned char *s, size_t n) {
    return n >= 2 && s[0] == 0xC2 && s[1] >= 0x80 && s[1] <= 0x9F;
}

int has_control_chars(const char *s) {
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || (unsigned char)*s == 0x7f ||
            is_c1((const unsigned char *)s, avail(s)))
            return 1;
    return 0;
}

/* The escape of byte c below 0x80 into out (at least 5 bytes); its length, 0 for a byte
 * printed as is. */
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

/* The escape of what starts at s (n > 0 bytes available) into out (at least 7 bytes), with
 * *used set to the bytes it stands for; 0 when those *used bytes print as they are.
 * ASCII controls as escape_of; a C1 control as \u0080..\u009f; a byte of no well-formed UTF-8
 * character as \xHH (a lone 0x9B is CSI to a terminal in 8-bit mode); any other well-formed
 * character as it is. With n too short for the character at s, its bytes are ill-formed. */
static size_t escape_at(const unsigned char *s, size_t n, char *out, size_t *used) {
    static const char hex[] = "0123456789abcdef";
    *used = 1;
    if (s[0] < 0x80) return escape_of(s[0], out);
    if (is_c1(s, n)) {
        *used = 2;
        memcpy(out, "\\u00", 4);
        out[4] = hex[s[1] >> 4];
        out[5] = hex[s[1] & 15];
        out[6] = '\0';
        return 6;
    }
    size_t k = utf8_char_len(s, n, NULL);
    if (k) {
        *used = k;
        return 0;
    }
    out[0] = '\\';
    out[1] = 'x';
    out[2] = hex[s[0] >> 4];
    out[3] = hex[s[0] & 15];
    out[4] = '\0';
    return 4;
}

const char *printable(const char *s, char *buf, size_t cap) {
    if (!cap) return buf;
    size_t n = 0;
    while (*s) {
        char esc[8];
        size_t used, k = escape_at((const unsigned char *)s, avail(s), esc, &used);
        size_t need = k ? k : used;
        if (n + need + 1 > cap) { /* does not fit: end with "..." */
            if (cap >= 4) {
                while (n + 4 > cap) n--;
                memcpy(buf + n, "...", 3);
                n += 3;
            }
            break;
        }
        memcpy(buf + n, k ? esc : s, need);
        n += need;
        s += used;
    }
    buf[n < cap ? n : cap - 1] = '\0';
    return buf;
}

void fputs_printable(const char *s, FILE *f) {
    while (*s) {
        char esc[8];
        size_t used, k = escape_at((const unsigned char *)s, avail(s), esc, &used);
        if (k) fputs(esc, f);
        else fwrite(s, 1, used, f);
        s += used;
    }
}

void print_message_line(FILE *f, const char *prefix, const char *message) {
    char shown[4096]; /* a ct_error message (512 bytes) escaped, or "..." */
    fprintf(f, "%s%s\n", prefix, printable(message, shown, sizeof shown));
}

/* ---- stderr through the escaping --------------------------------------------------------- */

/* A character cut by the end of one write, completed by the next (fputc writes byte by byte
 * to an unbuffered stream). The stream's lock serialises the writes. */
static unsigned char carry[4];
static size_t n_carry;

typedef struct sink {
    int    fd;
    char   out[1024];
    size_t k;
    int    failed;
} sink;

static void sink_put(sink *o, const char *b, size_t n) {
    if (o->k + n > sizeof o->out) {
        if (write(o->fd, o->out, o->k) < 0 && errno != EINTR) o->failed = 1;
        o->k = 0;
    }
    memcpy(o->out + o->k, b, n);
    o->k += n;
}

/* The character at s (n bytes available) escaped into o, as escape_at, but newline, tab and
 * the carriage return of progress lines pass. Returns the bytes consumed, or 0 when s holds
 * the start of a character that n cuts short and more may follow (`more`). */
static size_t sink_char(sink *o, const unsigned char *s, size_t n, int more) {
    char esc[8];
    size_t bad = 0;
    if (more && s[0] >= 0x80 && !utf8_char_len(s, n, &bad) && bad == n && n < 4) return 0;
    if (s[0] == '\n' || s[0] == '\t' || s[0] == '\r') {
        sink_put(o, (const char *)s, 1);
        return 1;
    }
    size_t used, e = escape_at(s, n, esc, &used);
    sink_put(o, e ? esc : (const char *)s, e ? e : used);
    return used;
}

/* fopencookie's write: buf with its control characters escaped (see sink_char) to the
 * descriptor `cookie`. Returns n (all taken). */
static ssize_t escaped_write(void *cookie, const char *buf, size_t n) {
    sink o = {.fd = (int)(intptr_t)cookie};
    const unsigned char *b = (const unsigned char *)buf;
    size_t i = 0;
    while (n_carry && i < n) { /* complete the character the last write cut */
        carry[n_carry++] = b[i++];
        size_t used = sink_char(&o, carry, n_carry, 1);
        if (!used) continue;
        /* bytes of the carry not consumed (after an ill-formed start) go again */
        size_t left = n_carry - used;
        unsigned char rest[4];
        memcpy(rest, carry + used, left);
        n_carry = 0;
        for (size_t j = 0; j < left;) {
            size_t u = sink_char(&o, rest + j, left - j, 1);
            if (!u) {
                memcpy(carry, rest + j, left - j);
                n_carry = left - j;
                break;
            }
            j += u;
        }
    }
    while (i < n) {
        size_t used = sink_char(&o, b + i, n - i < 4 ? n - i : 4, 1);
        if (!used) { /* cut short by the end of this write: wait for the next */
            memcpy(carry, b + i, n - i);
            n_carry = n - i;
            break;
        }
        i += used;
    }
    if (o.k && write(o.fd, o.out, o.k) < 0) o.failed = 1;
    return o.failed ? -1 : (ssize_t)n;
}

int printable_stderr(void) {
    cookie_io_functions_t io = {.write = escaped_write};
    FILE *f = fopencookie((void *)(intptr_t)STDERR_FILENO, "w", io);
    if (!f) return -1;
    setvbuf(f, NULL, _IONBF, 0); /* unbuffered, as stderr is: nothing waits for an _exit */
    stderr = f;
    return 0;
}
