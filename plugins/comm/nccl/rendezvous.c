/* rendezvous.c — rank 0's blob to every rank over TCP (see rendezvous.h). One listening socket
 * on rank 0, one connection per other rank, poll() against one deadline for every step, so no
 * call blocks past timeout_s.
 */
#include "rendezvous.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define HDR_WORDS 5 /* magic, version, world, rank, blob length: network byte order */

static double rdv_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* milliseconds left before deadline, at least 0 */
static int ms_left(double deadline) {
    double left = deadline - rdv_now();
    return left <= 0 ? 0 : left > 1e6 ? 1000000000 : (int)(left * 1000.0) + 1;
}

static int fail(char *msg, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (msg && cap) vsnprintf(msg, cap, fmt, ap);
    va_end(ap);
    return -1;
}

static void set_nonblock(int fd) {
    int fl = fcntl(fd, F_GETFL, 0);
    if (fl >= 0) fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* Write or read exactly n bytes on a non-blocking fd before deadline. 0 done; -1 with errno
 * (ETIMEDOUT at the deadline, EPIPE when the peer closed before n bytes were read). */
static int io_all(int fd, void *buf, size_t n, int writing, double deadline) {
    char *p = buf;
    while (n) {
        ssize_t k = writing ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
        if (k > 0) {
            p += k;
            n -= (size_t)k;
            continue;
        }
        if (k == 0) {
            errno = EPIPE;
            return -1;
        }
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
        struct pollfd pf = {.fd = fd, .events = writing ? POLLOUT : POLLIN};
        int ms = ms_left(deadline);
        if (ms == 0) {
            errno = ETIMEDOUT;
            return -1;
        }
        if (poll(&pf, 1, ms) < 0 && errno != EINTR) return -1;
    }
    return 0;
}

static void put_header(uint32_t h[HDR_WORDS], int world, int rank, size_t len) {
    h[0] = htonl(RDV_MAGIC);
    h[1] = htonl(RDV_VERSION);
    h[2] = htonl((uint32_t)world);
    h[3] = htonl((uint32_t)rank);
    h[4] = htonl((uint32_t)len);
}

/* Rank 0: listen, gather world-1 checked headers, send the blob to each. */
static int serve(const char *addr, int port, int world, const void *blob, size_t len,
                 double timeout_s, double deadline, char *msg, size_t cap) {
    char svc[16];
    snprintf(svc, sizeof svc, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    int g = getaddrinfo(addr, svc, &hints, &res);
    if (g != 0)
        return fail(msg, cap, "rendezvous on MASTER_ADDR:MASTER_PORT = %s:%d: cannot resolve "
                    "%s: %s ---> set MASTER_ADDR to this host's name or address (rank 0 "
                    "listens there)", addr, port, addr, gai_strerror(g));
    int lfd = -1, bind_errno = 0;
    for (struct addrinfo *a = res; a && lfd < 0; a = a->ai_next) {
        int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
            bind_errno = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, world) == 0) {
            lfd = fd;
            break;
        }
        bind_errno = errno;
        close(fd);
    }
    freeaddrinfo(res);
    if (lfd < 0)
        return fail(msg, cap, "rendezvous on MASTER_ADDR:MASTER_PORT = %s:%d: rank 0 cannot "
                    "listen there: %s ---> %s", addr, port, strerror(bind_errno),
                    bind_errno == EADDRINUSE ? "the port is in use (another job, or a run "
                    "that has not ended): pick another MASTER_PORT"
                    : "MASTER_ADDR must be an address of rank 0's host");
    set_nonblock(lfd);

    int rc = -1;
    int *fds = malloc((size_t)world * sizeof *fds);
    if (!fds) {
        fail(msg, cap, "rendezvous on %s:%d: out of memory", addr, port);
        goto out;
    }
    for (int r = 0; r < world; r++) fds[r] = -1;
    int joined = 0;
    while (joined < world - 1) {
        struct pollfd pf = {.fd = lfd, .events = POLLIN};
        int ms = ms_left(deadline);
        if (ms == 0 || (poll(&pf, 1, ms) == 0 && ms_left(deadline) == 0)) {
            char missing[160] = "";
            size_t m = 0;
            for (int r = 1; r < world && m + 16 < sizeof missing; r++)
                if (fds[r] < 0) m += (size_t)snprintf(missing + m, sizeof missing - m, "%s%d",
                                                      m ? " " : "", r);
            fail(msg, cap, "rendezvous on MASTER_ADDR:MASTER_PORT = %s:%d: rank 0 waited "
                 "%.1f s and %d of %d ranks never connected (missing: %s) ---> start every "
                 "rank with the same MASTER_ADDR, MASTER_PORT and WORLD_SIZE, check that they "
                 "reach %s:%d (firewall), or raise [comm] timeout_s", addr, port, timeout_s,
                 world - 1 - joined, world - 1, missing, addr, port);
            goto out;
        }
        int cfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (cfd < 0) continue; /* EAGAIN / EINTR / a connection gone before accept */
        uint32_t h[HDR_WORDS];
        if (io_all(cfd, h, sizeof h, 0, deadline) != 0) {
            fail(msg, cap, "rendezvous on MASTER_ADDR:MASTER_PORT = %s:%d: reading a peer's "
                 "header failed: %s ---> something other than a ctrain rank connected, or a "
                 "rank died during start-up; pick an unused MASTER_PORT", addr, port,
                 errno == EPIPE ? "it closed the connection" : strerror(errno));
            close(cfd);
            goto out;
        }
        uint32_t magic = ntohl(h[0]), ver = ntohl(h[1]), pw = ntohl(h[2]), pr = ntohl(h[3]);
        uint32_t pl = ntohl(h[4]);
        const char *bad = NULL;
        char why[200];
        if (magic != RDV_MAGIC) {
            snprintf(why, sizeof why, "a peer sent a bad magic 0x%08x (expected 0x%08x)", magic,
                     RDV_MAGIC);
            bad = "something other than a ctrain rank connected: pick an unused MASTER_PORT";
        } else if (ver != RDV_VERSION) {
            snprintf(why, sizeof why, "rank %u speaks rendezvous version %u, rank 0 speaks %u",
                     pr, ver, RDV_VERSION);
            bad = "run the same ctrain build on every rank";
        } else if (pw != (uint32_t)world) {
            snprintf(why, sizeof why, "rank %u says WORLD_SIZE=%u, rank 0 has WORLD_SIZE=%d",
                     pr, pw, world);
            bad = "start every rank with the same WORLD_SIZE";
        } else if (pr == 0 || pr >= (uint32_t)world) {
            snprintf(why, sizeof why, "a peer says it is rank %u (RANK must be 1..%d for "
                     "peers)", pr, world - 1);
            bad = "give each process its own RANK, 0 for the one on MASTER_ADDR";
        } else if (fds[pr] >= 0) {
            snprintf(why, sizeof why, "rank %u connected twice (duplicate RANK=%u)", pr, pr);
            bad = "give each process its own RANK";
        } else if (pl != (uint32_t)len) {
            snprintf(why, sizeof why, "rank %u expects a %u-byte id, rank 0 has %zu", pr, pl,
                     len);
            bad = "run the same ctrain build on every rank";
        }
        if (bad) {
            fail(msg, cap, "rendezvous on MASTER_ADDR:MASTER_PORT = %s:%d: %s ---> %s", addr,
                 port, why, bad);
            close(cfd);
            goto out;
        }
        fds[pr] = cfd;
        joined++;
    }
    for (int r = 1; r < world; r++)
        if (io_all(fds[r], (void *)blob, len, 1, deadline) != 0) {
            fail(msg, cap, "rendezvous on MASTER_ADDR:MASTER_PORT = %s:%d: sending the id to "
                 "rank %d failed: %s ---> rank %d died during start-up; see its log", addr, port,
                 r, strerror(errno), r);
            goto out;
        }
    rc = 0;
out:
    if (fds)
        for (int r = 0; r < world; r++)
            if (fds[r] >= 0) close(fds[r]);
    free(fds);
    close(lfd);
    return rc;
}

/* One connection attempt to a before deadline (at most 1 s): the fd, or -1 with errno. */
static int try_connect(const struct addrinfo *a, double deadline) {
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                    a->ai_protocol);
    if (fd < 0) return -1;
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) return fd;
    if (errno != EINPROGRESS) goto bad;
    struct pollfd pf = {.fd = fd, .events = POLLOUT};
    int ms = ms_left(deadline);
    if (ms > 1000) ms = 1000;
    if (poll(&pf, 1, ms) <= 0) {
        errno = ETIMEDOUT;
        goto bad;
    }
    int soerr = 0;
    socklen_t sl = sizeof soerr;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0) goto bad;
    if (soerr == 0) return fd;
    errno = soerr;
bad:;
    int e = errno;
    close(fd);
    errno = e;
    return -1;
}

/* Ranks > 0: connect with retries, send the header, read the blob. */
static int join(const char *addr, int port, int rank, int world, void *blob, size_t len,
                double timeout_s, double deadline, char *msg, size_t cap) {
    char svc[16];
    snprintf(svc, sizeof svc, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV};
    int fd = -1, last = 0, tries = 0;
    while (fd < 0) {
        struct addrinfo *res = NULL;
        int g = getaddrinfo(addr, svc, &hints, &res);
        if (g != 0 && g != EAI_AGAIN)
            return fail(msg, cap, "rendezvous on MASTER_ADDR:MASTER_PORT = %s:%d: rank %d "
                        "cannot resolve %s: %s ---> set MASTER_ADDR to rank 0's host name or "
                        "address", addr, port, rank, addr, gai_strerror(g));
        for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
            fd = try_connect(a, deadline);
            if (fd < 0) last = errno;
        }
        if (res) freeaddrinfo(res);
        tries++;
        if (fd >= 0) break;
        if (ms_left(deadline) == 0)
            return fail(msg, cap, "rendezvous on MASTER_ADDR:MASTER_PORT = %s:%d: rank %d could "
                        "not connect after %.1f s (%d tries, last: %s) ---> %s", addr, port,
                        rank, timeout_s, tries, last ? strerror(last) : "name not resolved",
                        last == ECONNREFUSED ? "rank 0 is not listening there: start it with "
                        "RANK=0 on MASTER_ADDR and the same MASTER_PORT, or raise [comm] "
                        "timeout_s" : "check that MASTER_ADDR is reachable from this host "
                        "(firewall, interface)");
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    uint32_t h[HDR_WORDS];
    put_header(h, world, rank, len);
    int rc = -1;
    if (io_all(fd, h, sizeof h, 1, deadline) != 0) {
        fail(msg, cap, "rendezvous on MASTER_ADDR:MASTER_PORT = %s:%d: rank %d could not send "
             "its header: %s ---> see rank 0's log", addr, port, rank, strerror(errno));
        goto out;
    }
    if (io_all(fd, blob, len, 0, deadline) != 0) {
        int e = errno;
        fail(msg, cap, "rendezvous on MASTER_ADDR:MASTER_PORT = %s:%d: rank %d did not receive "
             "the id: %s ---> %s", addr, port, rank,
             e == EPIPE ? "rank 0 closed the connection" : e == ETIMEDOUT ?
             "timed out waiting for the other ranks" : strerror(e),
             e == EPIPE ? "rank 0 refused this rank or failed; its log says why" :
             "start every rank with the same WORLD_SIZE, or raise [comm] timeout_s");
        goto out;
    }
    rc = 0;
out:
    close(fd);
    return rc;
}

int rdv_share(const char *addr, int port, int rank, int world, void *blob, size_t len,
              double timeout_s, char *msg, size_t cap) {
    if (msg && cap) msg[0] = 0;
    if (world <= 1) return 0;
    if (!addr || !*addr || port < 1 || port > 65535)
        return fail(msg, cap, "rendezvous: MASTER_ADDR:MASTER_PORT = %s:%d is not an address "
                    "and a port 1..65535 ---> set both for every rank", addr ? addr : "(unset)",
                    port);
    if (rank < 0 || rank >= world || len > RDV_BLOB_MAX || !(timeout_s > 0))
        return fail(msg, cap, "rendezvous on %s:%d: rank %d of %d, %zu bytes, timeout %g s is "
                    "not a valid request ---> a bug in the caller", addr, port, rank, world, len,
                    timeout_s);
    double deadline = rdv_now() + timeout_s;
    return rank == 0 ? serve(addr, port, world, blob, len, timeout_s, deadline, msg, cap)
                     : join(addr, port, rank, world, blob, len, timeout_s, deadline, msg, cap);
}
