/* rendezvous.h — the TCP rendezvous of torchrun-style launches: rank 0 listens on
 * MASTER_ADDR:MASTER_PORT, every other rank connects and receives rank 0's opaque blob (comm
 * nccl's ncclUniqueId), so a world starts without MPI. Plain C and POSIX sockets (no CUDA, no
 * NCCL): the unit tests run it on a CPU (tests/unit/test_rendezvous.c).
 * Not for: anything after start-up (the collectives are NCCL's) or carrying more than one blob.
 */
#ifndef CTRAIN_RENDEZVOUS_H
#define CTRAIN_RENDEZVOUS_H

#include <stddef.h>

#define RDV_MAGIC   0x43545256u /* "CTRV" */
#define RDV_VERSION 1u
#define RDV_BLOB_MAX 4096       /* the largest blob rdv_share carries */

/* Share blob[0..len) from rank 0 with every rank of a world of `world` processes.
 * Rank 0 listens on addr:port (getaddrinfo: a host name, IPv4 or IPv6 literal; SO_REUSEADDR),
 * accepts world-1 connections, reads each one's header (magic, version, world size, rank, blob
 * length: all checked; a peer of another world size or blob length, a rank out of range, a
 * duplicate rank or a bad magic is an error naming it), then sends blob to each. Ranks > 0
 * connect, retrying every 0.1 s while refused (rank 0 may start later), send their header and
 * read len bytes into blob. Every step ends by timeout_s after the call began. world 1: returns
 * at once. Returns 0, or -1 with msg (cap bytes, NUL-terminated) naming addr:port, what failed
 * and a ---> hint. SIGPIPE is never raised (MSG_NOSIGNAL). */
int rdv_share(const char *addr, int port, int rank, int world, void *blob, size_t len,
              double timeout_s, char *msg, size_t cap);

#endif /* CTRAIN_RENDEZVOUS_H */
