/* launcher.c — rank, local rank and world from the launcher's environment, and the checks that
 * refuse contradictions (see launcher.h). Reads variables only; starts nothing, and never
 * decides a world of one when a launcher says otherwise.
 */
#include "base/launcher.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One launcher's variables. local may be NULL (torchrun-style LOCAL_RANK is optional). */
typedef struct launcher_vars {
    host_launcher launcher;
    const char   *key;   /* CTRAIN_LAUNCHER value naming it */
    const char   *rank, *local, *world, *world_alt;
    const char   *local_size; /* processes on this node (a hint for threads: launcher.h) */
} launcher_vars;

static const launcher_vars all_vars[] = {
    {HOST_LAUNCHER_OPENMPI, "openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_SIZE", NULL, "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {HOST_LAUNCHER_SLURM, "slurm", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS",
     "SLURM_NPROCS", "SLURM_NTASKS_PER_NODE"},
    {HOST_LAUNCHER_TORCHRUN, "torchrun", "RANK", "LOCAL_RANK", "WORLD_SIZE", NULL,
     "LOCAL_WORLD_SIZE"},
};
#define N_LAUNCHERS ((int)(sizeof all_vars / sizeof *all_vars))

static host_launch current = {.launcher = HOST_LAUNCHER_NONE, .world = 1, .local_size = 1};

const char *launcher_getenv(const char *name) { return getenv(name); }

const char *launcher_name(host_launcher l) {
    switch (l) {
    case HOST_LAUNCHER_OPENMPI: return "mpirun (OpenMPI)";
    case HOST_LAUNCHER_SLURM: return "srun (SLURM)";
    case HOST_LAUNCHER_TORCHRUN: return "torchrun-style";
    default: return "no launcher";
    }
}

/* "NAME=value " appended to buf (cut at its size). */
static void note_var(char *buf, size_t cap, const char *name, const char *value) {
    size_t n = strlen(buf);
    if (n < cap) snprintf(buf + n, cap - n, "%s%s=%s", n ? " " : "", name, value);
}

/* A decimal integer in [0, 2^31): the whole text, no sign, no spaces. */
static int32_t parse_count(const char *name, const char *text, int32_t *out, ct_error *err) {
    char *end = NULL;
    errno = 0;
    long long v = text[0] >= '0' && text[0] <= '9' ? strtoll(text, &end, 10) : -1;
    if (v < 0 || errno || !end || *end || v > INT32_MAX)
        return ct_error_set(err, CT_ERR_INVALID, "launcher variable %s=%s is not a count "
                            "(a decimal integer >= 0) ---> check the launcher command line or "
                            "unset it", name, text);
    *out = (int32_t)v;
    return CT_OK;
}

/* SLURM's per-node task counts in its compact form, "2(x3),1": the count of node `node`
 * (SLURM_NODEID), or 0 when the text does not say. */
static int32_t slurm_tasks_on_node(const char *text, long node) {
    const char *p = text;
    while (p && *p && node >= 0) {
        char *end = NULL;
        long count = strtol(p, &end, 10), times = 1;
        if (end == p || count < 1 || count > INT32_MAX) return 0;
        p = end;
        if (*p == '(') {
            if (p[1] != 'x') return 0;
            times = strtol(p + 2, &end, 10);
            if (end == p + 2 || *end != ')' || times < 1) return 0;
            p = end + 1;
        }
        if (node < times) return (int32_t)count;
        node -= times;
        if (*p == ',') p++;
        else if (*p) return 0;
    }
    return 0;
}

/* The launcher's count of processes on this node; 0 when it gives none or garbage (a hint for
 * the automatic thread count only, said as unknown in its start-up line). */
static int32_t read_local_size(host_getenv_fn env, const launcher_vars *v) {
    const char *text = v->local_size ? env(v->local_size) : NULL;
    if (v->launcher == HOST_LAUNCHER_SLURM && (!text || strchr(text, ',') || strchr(text, '('))) {
        const char *per = env("SLURM_STEP_TASKS_PER_NODE"), *node = env("SLURM_NODEID");
        if (!per) per = env("SLURM_TASKS_PER_NODE");
        char *end = NULL;
        long id = node ? strtol(node, &end, 10) : 0;
        if (!per || (node && (end == node || *end))) return 0;
        return slurm_tasks_on_node(per, id);
    }
    int32_t n = 0;
    ct_error scratch = {.struct_size = sizeof scratch};
    if (!text || parse_count(v->local_size, text, &n, &scratch) != CT_OK) return 0;
    return n;
}

/* One launcher: *found 0 when none of its variables is set; else *l filled and checked. */
static int32_t read_one(host_getenv_fn env, const launcher_vars *v, int *found, host_launch *l,
                        ct_error *err) {
    const char *rank = env(v->rank), *local = env(v->local), *world = env(v->world);
    const char *world_name = v->world;
    const char *alt = v->world_alt ? env(v->world_alt) : NULL;
    if (world && alt && strcmp(world, alt) != 0)
        return ct_error_set(err, CT_ERR_INVALID, "%s variables contradict each other: %s=%s but "
                            "%s=%s (both give the world size) ---> unset the stale one, or start "
                            "ctrain with the launcher", launcher_name(v->launcher), v->world,
                            world, v->world_alt, alt);
    if (!world && alt) {
        world = alt;
        world_name = v->world_alt;
    }
    *found = rank || local || world;
    if (!*found) return CT_OK;
    memset(l, 0, sizeof *l);
    l->launcher = v->launcher;
    if (rank) note_var(l->vars, sizeof l->vars, v->rank, rank);
    if (local) note_var(l->vars, sizeof l->vars, v->local, local);
    if (world) note_var(l->vars, sizeof l->vars, world_name, world);
    if (!rank || !world)
        return ct_error_set(err, CT_ERR_INVALID, "%s variables are incomplete (%s): %s and %s "
                            "must both be set ---> start ctrain with the launcher, or unset "
                            "the stray variable", launcher_name(v->launcher), l->vars, v->rank,
                            world_name);
    int32_t rc = parse_count(v->rank, rank, &l->rank, err);
    if (rc == CT_OK) rc = parse_count(world_name, world, &l->world, err);
    if (rc == CT_OK && local) rc = parse_count(v->local, local, &l->local_rank, err);
    if (rc != CT_OK) return rc;
    l->local_size = read_local_size(env, v);
    if (l->local_size > l->world) l->local_size = 0; /* not a count of this job's processes */
    if (l->world < 1 || l->rank >= l->world || l->local_rank >= l->world)
        return ct_error_set(err, CT_ERR_INVALID, "%s variables contradict each other (%s): the "
                            "rank and local rank must be below the world size %d ---> check "
                            "the launcher command line", launcher_name(v->launcher), l->vars,
                            (int)l->world);
    return CT_OK;
}

int32_t launcher_read(host_getenv_fn env, host_launch *out, ct_error *err) {
    memset(out, 0, sizeof *out);
    out->launcher = HOST_LAUNCHER_NONE;
    out->world = 1;
    out->local_size = 1;
    const char *only = env("CTRAIN_LAUNCHER");
    int only_index = -1;
    if (only && *only) {
        for (int i = 0; i < N_LAUNCHERS; i++)
            if (strcmp(only, all_vars[i].key) == 0) only_index = i;
        if (only_index < 0 && strcmp(only, "none") != 0)
            return ct_error_set(err, CT_ERR_INVALID, "CTRAIN_LAUNCHER=%s is not a launcher "
                                "---> use openmpi, slurm, torchrun or none", only);
        if (only_index < 0) return CT_OK; /* none: a world of one, whatever is set */
    }
    int have = 0;
    for (int i = 0; i < N_LAUNCHERS; i++) {
        if (only_index >= 0 && i != only_index) continue;
        host_launch l;
        int found = 0;
        int32_t rc = read_one(env, &all_vars[i], &found, &l, err);
        if (rc != CT_OK) return rc;
        if (!found) continue;
        if (l.launcher == HOST_LAUNCHER_TORCHRUN) {
            const char *addr = env("MASTER_ADDR"), *port = env("MASTER_PORT");
            snprintf(l.master_addr, sizeof l.master_addr, "%s", addr ? addr : "");
            snprintf(l.master_port_text, sizeof l.master_port_text, "%s", port ? port : "");
            int32_t p = 0;
            ct_error scratch = {.struct_size = sizeof scratch};
            if (port && parse_count("MASTER_PORT", port, &p, &scratch) == CT_OK && p >= 1 &&
                p <= 65535)
                l.master_port = p;
            /* checked whenever they are set, at any world size: a value that would be refused
             * on more ranks is a mistake on one too */
            if (port && !l.master_port)
                return ct_error_set(err, CT_ERR_INVALID, "MASTER_PORT=%s is not a port 1..65535 "
                                    "(%s) ---> set MASTER_PORT to a free port, the same on every "
                                    "rank, or unset it", port, l.vars);
            if (addr && !*addr)
                return ct_error_set(err, CT_ERR_INVALID, "MASTER_ADDR is set but empty (%s) ---> "
                                    "set it to rank 0's host, or unset it", l.vars);
        }
        if (!have) {
            *out = l;
            have = 1;
            continue;
        }
        if (l.world != out->world || l.rank != out->rank)
            return ct_error_set(err, CT_ERR_INVALID, "the launchers' variables contradict each "
                                "other: %s says rank %d of %d (%s), %s says rank %d of %d (%s) "
                                "---> unset the stale ones; if one launcher runs inside another "
                                "(mpirun inside an sbatch allocation), set CTRAIN_LAUNCHER=%s to "
                                "read only the inner one's", launcher_name(out->launcher),
                                (int)out->rank, (int)out->world, out->vars,
                                launcher_name(l.launcher), (int)l.rank, (int)l.world, l.vars,
                                all_vars[out->launcher - 1].key);
    }
    return CT_OK;
}

int32_t launcher_check_comm(const host_launch *l, const char *comm, int32_t in_process,
                            ct_error *err) {
    if (l->world <= 1) return CT_OK;
    int local = strcmp(comm, "local") == 0;
    if (local || in_process)
        return ct_error_set(err, CT_ERR_INVALID, "%d processes were launched (%s, %s) but [comm] "
                            "plugin = %s runs %s, so each would be a separate run writing the "
                            "same out_dir ---> use comm mpi (mpirun, or srun --mpi=pmix) or "
                            "nccl; or launch one process", (int)l->world,
                            launcher_name(l->launcher), l->vars, comm,
                            local ? "one rank per process" : "all its ranks inside one process");
    if (l->launcher != HOST_LAUNCHER_TORCHRUN) return CT_OK;
    if (strcmp(comm, "nccl") != 0)
        return ct_error_set(err, CT_ERR_INVALID, "%d processes were launched with torchrun-style "
                            "variables only (%s), but comm %s cannot bootstrap from "
                            "MASTER_ADDR/MASTER_PORT (only comm nccl can) ---> for GPUs use "
                            "--set comm.plugin=nccl --set device.type=cuda; for comm %s start "
                            "the processes with mpirun or srun --mpi=pmix", (int)l->world,
                            l->vars, comm, comm);
    if (!l->master_addr[0] || !l->master_port)
        return ct_error_set(err, CT_ERR_INVALID, "%d processes were launched with torchrun-style "
                            "variables (%s) for comm nccl, but MASTER_ADDR=%s MASTER_PORT=%s "
                            "%s ---> set MASTER_ADDR to rank 0's host and MASTER_PORT to a free "
                            "port 1..65535, the same on every rank", (int)l->world, l->vars,
                            l->master_addr[0] ? l->master_addr : "(unset)",
                            l->master_port_text[0] ? l->master_port_text : "(unset)",
                            !l->master_addr[0] ? "has no address" : "is not a port 1..65535");
    return CT_OK;
}

int32_t launcher_check_comm_world(const host_launch *l, const char *comm, int32_t comm_rank,
                                  int32_t comm_world, ct_error *err) {
    if (l->launcher == HOST_LAUNCHER_NONE) return CT_OK;
    if (comm_rank == l->rank && comm_world == l->world) return CT_OK;
    return ct_error_set(err, CT_ERR_INVALID, "comm %s reports rank %d of %d, but the launcher "
                        "says rank %d of %d (%s, %s) ---> start ctrain with one launcher whose "
                        "variables reach every process (for srun: srun --mpi=pmix)", comm,
                        (int)comm_rank, (int)comm_world, (int)l->rank, (int)l->world,
                        launcher_name(l->launcher), l->vars);
}

int32_t launcher_master(const host_launch *l, const char **addr, int64_t *port, ct_error *err) {
    if (l->launcher != HOST_LAUNCHER_TORCHRUN)
        return ct_error_set(err, CT_ERR_INVALID, "[comm] master_addr / master_port: only a "
                            "torchrun-style launch has them (this is %s) ---> use the MPI "
                            "bootstrap", launcher_name(l->launcher));
    if (addr) *addr = l->master_addr;
    if (port) *port = l->master_port;
    return CT_OK;
}

const char *launcher_auto_comm(const host_launch *l, int32_t cuda, int64_t world_size) {
    int launched = l->world > 1 || l->launcher == HOST_LAUNCHER_OPENMPI;
    if (launched && cuda) return "nccl";
    if (launched) return "mpi";
    return world_size > 1 ? "threads" : "local";
}

void launcher_set(const host_launch *l) { current = *l; }

const host_launch *launcher_current(void) { return &current; }
