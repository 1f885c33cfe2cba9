/* test_rendezvous.c — claims about comm nccl's TCP rendezvous (plugins/comm/nccl/rendezvous.c),
 * with real processes on loopback: 4 fork()ed ranks (rank 0 started last, so the others retry)
 * all receive rank 0's 128-byte blob bit for bit; a world of one needs no socket; a peer of
 * another world size, a duplicate rank, a bad magic and a port in use are errors naming them;
 * a rank 0 whose peer never comes, and a peer whose rank 0 never comes, fail within the
 * timeout. Every child runs under alarm(), so a hang is a failure, not a stuck suite.
 * Not for: NCCL itself (the blob is opaque here; tests/gpu runs comm nccl on a GPU).
 */
#include "ct_test.h"

#include "../../plugins/comm/nccl/rendezvous.c"

#include <signal.h>
#include <sys/wait.h>

#define BLOB 128

/* One process of a rendezvous: its rank, the world it claims, a delay before it starts. A
 * rank of -1 is a stranger that connects and sends 20 bytes of garbage. */
typedef struct rdv_proc {
    int rank, world, delay_ms;
} rdv_proc;

typedef struct rdv_result {
    int           rc;      /* rdv_share's return; 99 when the child died or hung */
    double        secs;    /* how long the call took */
    unsigned char blob[BLOB];
    char          msg[600];
} rdv_result;

/* A port on 127.0.0.1 that was free a moment ago (bind port 0, read it, close). */
static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &sl) != 0) {
        if (fd >= 0) close(fd);
        return -1;
    }
    close(fd);
    return ntohs(a.sin_port);
}

/* rank 0's blob: bytes that differ from the receivers' initial fill */
static void fill(unsigned char *b, int seed) {
    for (int i = 0; i < BLOB; i++) b[i] = (unsigned char)(i * 37 + seed * 11 + 1);
}

static void stranger(const char *addr, int port) {
    char svc[16];
    snprintf(svc, sizeof svc, "%d", port);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
    for (int t = 0; t < 50; t++) {
        if (getaddrinfo(addr, svc, &hints, &res) == 0) {
            int fd = socket(res->ai_family, SOCK_STREAM, 0);
            if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
                char junk[20];
                memset(junk, 'x', sizeof junk);
                if (send(fd, junk, sizeof junk, MSG_NOSIGNAL) < 0) {}
                struct timespec ts = {0, 300 * 1000 * 1000};
                nanosleep(&ts, NULL);
                close(fd);
                freeaddrinfo(res);
                return;
            }
            if (fd >= 0) close(fd);
            freeaddrinfo(res);
        }
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

/* Run the processes (fork each), collect each one's result through a pipe. */
static void run_procs(const char *addr, int port, const rdv_proc *p, int n, double timeout_s,
                      rdv_result *out) {
    pid_t pids[16];
    int pipes[16][2];
    for (int i = 0; i < n; i++) {
        if (pipe(pipes[i]) != 0) pipes[i][0] = pipes[i][1] = -1;
        pids[i] = fork();
        if (pids[i] == 0) {
            alarm(8); /* the guard: a hung child dies, the parent sees rc 99 */
            close(pipes[i][0]);
            rdv_result r;
            memset(&r, 0, sizeof r);
            memset(r.blob, 0xAA, BLOB);
            if (p[i].delay_ms) {
                struct timespec ts = {0, (long)p[i].delay_ms * 1000 * 1000};
                nanosleep(&ts, NULL);
            }
            double t0 = rdv_now();
            if (p[i].rank < 0) {
                stranger(addr, port);
                r.rc = 0;
            } else {
                if (p[i].rank == 0) fill(r.blob, port);
                r.rc = rdv_share(addr, port, p[i].rank, p[i].world, r.blob, BLOB, timeout_s,
                                 r.msg, sizeof r.msg);
            }
            r.secs = rdv_now() - t0;
            if (write(pipes[i][1], &r, sizeof r) != (ssize_t)sizeof r) _exit(2);
            _exit(0);
        }
        close(pipes[i][1]);
    }
    for (int i = 0; i < n; i++) {
        memset(&out[i], 0, sizeof out[i]);
        out[i].rc = 99;
        rdv_result r;
        if (pids[i] > 0 && read(pipes[i][0], &r, sizeof r) == (ssize_t)sizeof r) out[i] = r;
        close(pipes[i][0]);
        if (pids[i] > 0) waitpid(pids[i], NULL, 0);
    }
}

CT_TEST(rendezvous_four_ranks_get_rank0s_blob_bit_for_bit_rank0_last) {
    int port = free_port();
    CT_CHECK_MSG(port > 0, "no free port on 127.0.0.1");
    rdv_proc p[4] = {{0, 4, 300}, {1, 4, 0}, {2, 4, 0}, {3, 4, 0}}; /* rank 0 starts last */
    rdv_result r[4];
    run_procs("127.0.0.1", port, p, 4, 3.0, r);
    unsigned char want[BLOB];
    fill(want, port);
    for (int i = 0; i < 4; i++) {
        CT_CHECK_MSG(r[i].rc == 0, "rank %d: expected rc 0, got %d: %s", i, r[i].rc, r[i].msg);
        CT_CHECK_MSG(memcmp(r[i].blob, want, BLOB) == 0, "rank %d: blob differs from rank 0's "
                     "(first byte expected %u, got %u)", i, want[0], r[i].blob[0]);
    }
    CT_CHECK_MSG(r[1].secs >= 0.2, "rank 1 should have waited for rank 0 (~0.3 s), took %.3f s",
                 r[1].secs);
}

CT_TEST(rendezvous_ipv6_loopback_when_available) {
    int fd = socket(AF_INET6, SOCK_STREAM, 0);
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    int have = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
    if (fd >= 0) close(fd);
    if (!have) return; /* no IPv6 loopback on this machine: nothing to claim */
    int port = free_port();
    rdv_proc p[2] = {{0, 2, 0}, {1, 2, 0}};
    rdv_result r[2];
    run_procs("::1", port, p, 2, 3.0, r);
    unsigned char want[BLOB];
    fill(want, port);
    for (int i = 0; i < 2; i++) {
        CT_CHECK_MSG(r[i].rc == 0, "rank %d on ::1: %s", i, r[i].msg);
        CT_CHECK(memcmp(r[i].blob, want, BLOB) == 0);
    }
}

CT_TEST(rendezvous_world_of_one_needs_no_socket) {
    unsigned char b[BLOB];
    fill(b, 5);
    char msg[200];
    /* port 0 would be refused for a world above one: a world of one never looks at it */
    CT_CHECK_INT(rdv_share("", 0, 0, 1, b, BLOB, 1.0, msg, sizeof msg), 0);
    unsigned char want[BLOB];
    fill(want, 5);
    CT_CHECK(memcmp(b, want, BLOB) == 0);
    CT_CHECK_INT(rdv_share("127.0.0.1", 0, 0, 2, b, BLOB, 1.0, msg, sizeof msg), -1);
    CT_CHECK_STR_CONTAINS(msg, "port 1..65535");
}

/* Each bad peer must make rank 0 fail with both needles, well within the timeout. */
CT_TEST(rendezvous_bad_peers_are_refused_naming_them) {
    struct { rdv_proc p[3]; int n; const char *a, *b; } cases[] = {
        {{{0, 3, 0}, {1, 3, 0}, {2, 4, 0}}, 3, "rank 2 says WORLD_SIZE=4", "WORLD_SIZE=3"},
        {{{0, 3, 0}, {1, 3, 0}, {1, 3, 0}}, 3, "rank 1 connected twice", "own RANK"},
        {{{0, 2, 0}, {-1, 0, 0}}, 2, "bad magic", "pick an unused MASTER_PORT"},
        {{{0, 2, 0}, {5, 6, 0}}, 2, "rank 5 says WORLD_SIZE=6", "same WORLD_SIZE"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        int port = free_port();
        rdv_result r[3];
        run_procs("127.0.0.1", port, cases[c].p, cases[c].n, 1.0, r);
        CT_CHECK_MSG(r[0].rc == -1, "case %zu: rank 0 accepted (rc %d)", c, r[0].rc);
        CT_CHECK_STR_CONTAINS(r[0].msg, cases[c].a);
        CT_CHECK_STR_CONTAINS(r[0].msg, cases[c].b);
        char where[64];
        snprintf(where, sizeof where, "127.0.0.1:%d", port);
        CT_CHECK_STR_CONTAINS(r[0].msg, where);
        CT_CHECK_MSG(r[0].secs < 0.8, "case %zu: rank 0 took %.2f s to refuse", c, r[0].secs);
    }
}

CT_TEST(rendezvous_missing_peer_or_missing_rank0_fails_within_the_timeout) {
    int port = free_port();
    rdv_proc alone0[1] = {{0, 3, 0}};
    rdv_result r[1];
    run_procs("127.0.0.1", port, alone0, 1, 0.5, r);
    CT_CHECK_INT(r[0].rc, -1);
    CT_CHECK_STR_CONTAINS(r[0].msg, "2 of 2 ranks never connected (missing: 1 2)");
    CT_CHECK_STR_CONTAINS(r[0].msg, "timeout_s");
    CT_CHECK_MSG(r[0].secs >= 0.45 && r[0].secs < 1.5, "rank 0 gave up after %.2f s, expected "
                 "0.5", r[0].secs);
    rdv_proc alone1[1] = {{1, 2, 0}};
    run_procs("127.0.0.1", port, alone1, 1, 0.5, r);
    CT_CHECK_INT(r[0].rc, -1);
    CT_CHECK_STR_CONTAINS(r[0].msg, "rank 1 could not connect after 0.5 s");
    CT_CHECK_STR_CONTAINS(r[0].msg, "Connection refused");
    CT_CHECK_STR_CONTAINS(r[0].msg, "start it with RANK=0");
    CT_CHECK_MSG(r[0].secs >= 0.45 && r[0].secs < 1.5, "rank 1 gave up after %.2f s, expected "
                 "0.5", r[0].secs);
}

CT_TEST(rendezvous_port_in_use_is_named) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof a;
    CT_CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && listen(fd, 1) == 0 &&
             getsockname(fd, (struct sockaddr *)&a, &sl) == 0);
    int port = ntohs(a.sin_port);
    unsigned char b[BLOB];
    char msg[600];
    CT_CHECK_INT(rdv_share("127.0.0.1", port, 0, 2, b, BLOB, 1.0, msg, sizeof msg), -1);
    CT_CHECK_STR_CONTAINS(msg, "port is in use");
    CT_CHECK_STR_CONTAINS(msg, "pick another MASTER_PORT");
    close(fd);
    CT_CHECK_INT(rdv_share("no-such-host.invalid", 29500, 0, 2, b, BLOB, 1.0, msg, sizeof msg),
                 -1);
    CT_CHECK_STR_CONTAINS(msg, "cannot resolve no-such-host.invalid");
}
