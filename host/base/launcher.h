/* launcher.h — who started this process and what rank it is: rank, local rank and world size
 * from the launcher's environment (OpenMPI's mpirun, SLURM's srun, torchrun-style variables),
 * one reading for the whole process, and the checks that refuse a contradiction between
 * launchers, a world the chosen comm plugin cannot run, or an MPI world that disagrees.
 * Not for: starting ranks (train.c) or the comm plugins' own bootstrap (plugins/comm/).
 */
#ifndef CTRAIN_HOST_LAUNCHER_H
#define CTRAIN_HOST_LAUNCHER_H

#include <ctrain/ctrain.h>

#include <stdint.h>

/* Reads one environment variable (launcher_getenv, or a table in tests); NULL when unset. */
typedef const char *(*host_getenv_fn)(const char *name);

/* getenv, as a host_getenv_fn. */
const char *launcher_getenv(const char *name);

typedef enum host_launcher {
    HOST_LAUNCHER_NONE     = 0, /* no launcher variables: a world of one process */
    HOST_LAUNCHER_OPENMPI  = 1, /* OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK (mpirun) */
    HOST_LAUNCHER_SLURM    = 2, /* SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID (srun) */
    HOST_LAUNCHER_TORCHRUN = 3, /* RANK / WORLD_SIZE / LOCAL_RANK (+ MASTER_ADDR/PORT) */
} host_launcher;

/* The process's place in the job, as its launcher says. */
typedef struct host_launch {
    host_launcher launcher;   /* the launcher whose values these are (the first found in the
                               * order OpenMPI, SLURM, torchrun; the others agree with it) */
    int32_t       rank;       /* 0 .. world-1 */
    int32_t       local_rank; /* the process's index on its node (its GPU): 0 .. world-1 */
    int32_t       world;      /* processes in the job, >= 1 */
    int32_t       local_size; /* processes of the job on this node as the launcher says
                               * (OMPI_COMM_WORLD_LOCAL_SIZE, SLURM_NTASKS_PER_NODE or this
                               * node's entry of SLURM_TASKS_PER_NODE, LOCAL_WORLD_SIZE);
                               * 0 when it does not say; 1 without a launcher */
    char          vars[256];  /* the variables read, "NAME=value NAME=value", for messages */
    /* torchrun-style only: where rank 0 listens for the rendezvous of comm nccl */
    char          master_addr[256]; /* MASTER_ADDR ("" when unset) */
    char          master_port_text[32]; /* MASTER_PORT as given ("" when unset), for messages */
    int32_t       master_port;      /* MASTER_PORT when a decimal 1..65535, else 0 */
} host_launch;

/* Read every launcher's variables through env into *out. Each launcher counts when any of its
 * variables is set, and then its rank and world must both be set, be decimal integers with
 * 0 <= rank < world and 0 <= local rank < world. Launchers found together must agree on rank
 * and world. CTRAIN_LAUNCHER = openmpi | slurm | torchrun | none takes that launcher's
 * variables only (one launcher running inside another: mpirun inside an sbatch allocation).
 * CT_ERR_INVALID naming the variables and their values on any contradiction; never a silent
 * world of one. No launcher: rank 0, local rank 0, world 1. */
int32_t launcher_read(host_getenv_fn env, host_launch *out, ct_error *err);

/* "mpirun (OpenMPI)", "srun (SLURM)", "torchrun-style", "no launcher". */
const char *launcher_name(host_launcher l);

/* Whether the comm plugin `comm` (its descriptor name; in_process: it has world_create) can
 * run the launched world: several launched processes need a one-rank-per-process engine that
 * learns the world from the launcher (mpi, nccl, or a third-party one without world_create);
 * local and in-process engines (threads) would make every process a separate run writing one
 * out_dir. Torchrun-style variables alone (no mpirun, no srun) start comm nccl only (its TCP
 * rendezvous on MASTER_ADDR:MASTER_PORT, which must then be set: a non-empty address and a
 * port 1..65535); every other engine needs mpirun or srun. CT_ERR_INVALID with what was
 * launched and what to use instead. */
int32_t launcher_check_comm(const host_launch *l, const char *comm, int32_t in_process,
                            ct_error *err);

/* After the comm plugin is created: its rank and world (rank(), world_size()) must be the
 * launcher's when the launcher says more than one process; CT_ERR_INVALID naming both. */
int32_t launcher_check_comm_world(const host_launch *l, const char *comm, int32_t comm_rank,
                                  int32_t comm_world, ct_error *err);

/* What the host answers a plugin's get_string(host, "comm", "master_addr") and
 * get_int(host, "comm", "master_port") with: MASTER_ADDR and MASTER_PORT of a torchrun-style
 * launch (the rendezvous of comm nccl); CT_ERR_INVALID otherwise (another launcher or none). */
int32_t launcher_master(const host_launch *l, const char **addr, int64_t *port, ct_error *err);

/* [comm] plugin = auto: nccl when the device is cuda and several processes were launched; mpi
 * when launched by mpirun or srun with several processes (or mpirun with one); threads when
 * world_size > 1; else local. */
const char *launcher_auto_comm(const host_launch *l, int32_t cuda, int64_t world_size);

/* The process-wide reading: launcher_set once at start-up (train, validate), before any rank
 * starts; launcher_current afterwards from any thread (a world of one until set). */
void launcher_set(const host_launch *l);
const host_launch *launcher_current(void);

#endif /* CTRAIN_HOST_LAUNCHER_H */
