/* fatal.c — fatal signals, their names and async-signal-safe reporting (see fatal.h). */
#include "base/fatal.h"

#include <signal.h>
#include <string.h>
#include <unistd.h>

const int fatal_signals[FATAL_SIGNAL_COUNT] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};

const char *fatal_signal_abbrev(int sig) {
    switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGILL: return "SIGILL";
    case SIGFPE: return "SIGFPE";
    case SIGABRT: return "SIGABRT";
    case SIGALRM: return "SIGALRM";
    case SIGKILL: return "SIGKILL";
    case SIGTERM: return "SIGTERM";
    default: return NULL;
    }
}

const char *fatal_signal_label(int sig) {
    switch (sig) {
    case SIGSEGV: return "Segmentation fault";
    case SIGBUS: return "Bus error";
    case SIGFPE: return "Floating point exception";
    case SIGILL: return "Illegal instruction";
    case SIGABRT: return "Aborted";
    default: return "fatal signal";
    }
}

size_t fatal_put_str(char *buf, size_t n, size_t cap, const char *s) {
    while (*s && n < cap) buf[n++] = *s++;
    return n;
}

size_t fatal_put_int(char *buf, size_t n, size_t cap, long v) {
    char digits[24];
    int k = 0;
    if (v < 0) {
        n = fatal_put_str(buf, n, cap, "-");
        v = -v;
    }
    do digits[k++] = (char)('0' + v % 10); while ((v /= 10) > 0 && k < 23);
    while (k > 0 && n < cap) buf[n++] = digits[--k];
    return n;
}

void fatal_write(const char *s) {
    size_t n = strlen(s);
    while (n > 0) {
        ssize_t w = write(STDERR_FILENO, s, n);
        if (w <= 0) return;
        s += w;
        n -= (size_t)w;
    }
}

void fatal_install(void (*handler)(int), void *old, int keep_foreign) {
    struct sigaction *saved = old;
    for (int i = 0; i < FATAL_SIGNAL_COUNT; i++) {
        struct sigaction prev;
        if (sigaction(fatal_signals[i], NULL, &prev) != 0) continue;
        if (saved) saved[i] = prev;
        if (keep_foreign && (prev.sa_handler != SIG_DFL || (prev.sa_flags & SA_SIGINFO)))
            continue;
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = handler;
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = SA_RESETHAND | SA_NODEFER;
        sigaction(fatal_signals[i], &sa, NULL);
    }
}

void fatal_restore(void (*handler)(int), const void *old) {
    const struct sigaction *saved = old;
    for (int i = 0; i < FATAL_SIGNAL_COUNT; i++) {
        struct sigaction now;
        if (sigaction(fatal_signals[i], NULL, &now) == 0 && now.sa_handler == handler)
            sigaction(fatal_signals[i], &saved[i], NULL);
    }
}
