/* test_launcher.c — claims about host/base/launcher.c: each launcher's variables give rank, local
 * rank and world; launchers found together must agree; incomplete, non-integer or out-of-range
 * values and contradictions are errors naming the variables; CTRAIN_LAUNCHER picks one; several
 * launched processes refuse the local and in-process engines; torchrun-style worlds start nccl
 * only, with MASTER_ADDR/MASTER_PORT checked; auto picks mpi / nccl / threads.
 * Not for: the end-to-end refusals of `ctrain train` (tests/cli/test_launchers.sh).
 */
#include "ct_test.h"
#include "base/launcher.h"

#include <string.h>

/* The fake environment: NULL-terminated NAME=value pairs, set per test. */
static const char *const *fake_env;

static const char *fake_getenv(const char *name) {
    size_t n = strlen(name);
    for (const char *const *e = fake_env; e && *e; e++)
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=') return *e + n + 1;
    return NULL;
}

static int32_t read_env(const char *const *env, host_launch *l, ct_error *err) {
    fake_env = env;
    err->struct_size = sizeof *err;
    err->code = CT_OK;
    err->message[0] = 0;
    return launcher_read(fake_getenv, l, err);
}

CT_TEST(launcher_no_variables_is_a_world_of_one) {
    static const char *const env[] = {"HOME=/root", NULL};
    host_launch l;
    ct_error e;
    CT_CHECK_INT(read_env(env, &l, &e), CT_OK);
    CT_CHECK_INT(l.launcher, HOST_LAUNCHER_NONE);
    CT_CHECK_INT(l.rank, 0);
    CT_CHECK_INT(l.world, 1);
}

CT_TEST(launcher_reads_each_launchers_rank_local_rank_and_world) {
    static const char *const ompi[] = {"OMPI_COMM_WORLD_RANK=3", "OMPI_COMM_WORLD_SIZE=4",
                                       "OMPI_COMM_WORLD_LOCAL_RANK=1", NULL};
    static const char *const slurm[] = {"SLURM_PROCID=5", "SLURM_NTASKS=8", "SLURM_LOCALID=2",
                                        NULL};
    static const char *const slurm_nprocs[] = {"SLURM_PROCID=1", "SLURM_NPROCS=2", NULL};
    static const char *const torch[] = {"RANK=6", "WORLD_SIZE=7", "LOCAL_RANK=3",
                                        "MASTER_ADDR=10.0.0.1", "MASTER_PORT=29500", NULL};
    struct { const char *const *env; host_launcher who; int rank, local, world; } cases[] = {
        {ompi, HOST_LAUNCHER_OPENMPI, 3, 1, 4},
        {slurm, HOST_LAUNCHER_SLURM, 5, 2, 8},
        {slurm_nprocs, HOST_LAUNCHER_SLURM, 1, 0, 2},
        {torch, HOST_LAUNCHER_TORCHRUN, 6, 3, 7},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        host_launch l;
        ct_error e;
        CT_CHECK_MSG(read_env(cases[i].env, &l, &e) == CT_OK, "case %zu: %s", i, e.message);
        CT_CHECK_INT(l.launcher, cases[i].who);
        CT_CHECK_INT(l.rank, cases[i].rank);
        CT_CHECK_INT(l.local_rank, cases[i].local);
        CT_CHECK_INT(l.world, cases[i].world);
    }
}

CT_TEST(launcher_agreeing_launchers_are_accepted) {
    static const char *const env[] = {"OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=2",
                                      "SLURM_PROCID=1", "SLURM_NTASKS=2", NULL};
    host_launch l;
    ct_error e;
    CT_CHECK_MSG(read_env(env, &l, &e) == CT_OK, "%s", e.message);
    CT_CHECK_INT(l.launcher, HOST_LAUNCHER_OPENMPI);
    CT_CHECK_INT(l.world, 2);
}

/* Each environment must be refused with a message containing both needles. */
CT_TEST(launcher_contradictions_are_errors_naming_the_variables) {
    static const char *const mixed[] = {"SLURM_NTASKS=8", "SLURM_PROCID=0",
                                        "OMPI_COMM_WORLD_SIZE=4", "OMPI_COMM_WORLD_RANK=0", NULL};
    static const char *const rank_big[] = {"RANK=4", "WORLD_SIZE=4", NULL};
    static const char *const local_big[] = {"SLURM_PROCID=0", "SLURM_NTASKS=2",
                                            "SLURM_LOCALID=2", NULL};
    static const char *const not_int[] = {"SLURM_PROCID=0", "SLURM_NTASKS=8x", NULL};
    static const char *const negative[] = {"RANK=-1", "WORLD_SIZE=2", NULL};
    static const char *const empty[] = {"RANK=", "WORLD_SIZE=2", NULL};
    static const char *const zero[] = {"OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=0", NULL};
    static const char *const half[] = {"WORLD_SIZE=2", NULL};
    static const char *const bad_pick[] = {"CTRAIN_LAUNCHER=pbs", NULL};
    struct { const char *const *env; const char *a, *b; } cases[] = {
        {mixed, "SLURM_NTASKS=8", "OMPI_COMM_WORLD_SIZE=4"},
        {rank_big, "RANK=4", "WORLD_SIZE=4"},
        {local_big, "SLURM_LOCALID=2", "SLURM_NTASKS=2"},
        {not_int, "SLURM_NTASKS=8x", "not a count"},
        {negative, "RANK=-1", "not a count"},
        {empty, "RANK=", "not a count"},
        {zero, "OMPI_COMM_WORLD_SIZE=0", "below the world size"},
        {half, "WORLD_SIZE=2", "RANK"},
        {bad_pick, "CTRAIN_LAUNCHER=pbs", "openmpi"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        host_launch l;
        ct_error e;
        CT_CHECK_MSG(read_env(cases[i].env, &l, &e) == CT_ERR_INVALID, "case %zu accepted", i);
        CT_CHECK_STR_CONTAINS(e.message, cases[i].a);
        CT_CHECK_STR_CONTAINS(e.message, cases[i].b);
    }
}

CT_TEST(launcher_ctrain_launcher_reads_only_the_named_one) {
    /* mpirun -np 4 inside an sbatch allocation of 8 tasks */
    static const char *const env[] = {"CTRAIN_LAUNCHER=openmpi", "SLURM_NTASKS=8",
                                      "SLURM_PROCID=0", "OMPI_COMM_WORLD_SIZE=4",
                                      "OMPI_COMM_WORLD_RANK=3", NULL};
    static const char *const none[] = {"CTRAIN_LAUNCHER=none", "SLURM_NTASKS=8",
                                       "SLURM_PROCID=0", NULL};
    host_launch l;
    ct_error e;
    CT_CHECK_MSG(read_env(env, &l, &e) == CT_OK, "%s", e.message);
    CT_CHECK_INT(l.rank, 3);
    CT_CHECK_INT(l.world, 4);
    CT_CHECK_MSG(read_env(none, &l, &e) == CT_OK, "%s", e.message);
    CT_CHECK_INT(l.world, 1);
}

CT_TEST(launcher_several_processes_refuse_local_and_in_process_engines) {
    host_launch l = {.launcher = HOST_LAUNCHER_SLURM, .rank = 0, .world = 8};
    snprintf(l.vars, sizeof l.vars, "SLURM_PROCID=0 SLURM_NTASKS=8");
    ct_error e = {.struct_size = sizeof e};
    CT_CHECK_INT(launcher_check_comm(&l, "local", 0, &e), CT_ERR_INVALID);
    CT_CHECK_STR_CONTAINS(e.message, "8 processes were launched");
    CT_CHECK_STR_CONTAINS(e.message, "SLURM_NTASKS=8");
    CT_CHECK_STR_CONTAINS(e.message, "use comm mpi");
    CT_CHECK_INT(launcher_check_comm(&l, "threads", 1, &e), CT_ERR_INVALID);
    CT_CHECK_STR_CONTAINS(e.message, "plugin = threads");
    CT_CHECK_INT(launcher_check_comm(&l, "mpi", 0, &e), CT_OK);
    CT_CHECK_INT(launcher_check_comm(&l, "nccl", 0, &e), CT_OK);
    l.launcher = HOST_LAUNCHER_TORCHRUN;
    CT_CHECK_INT(launcher_check_comm(&l, "mpi", 0, &e), CT_ERR_INVALID);
    CT_CHECK_STR_CONTAINS(e.message, "MASTER_ADDR");
    CT_CHECK_STR_CONTAINS(e.message, "only comm nccl can");
    CT_CHECK_STR_CONTAINS(e.message, "mpirun");
    l.world = 1;
    CT_CHECK_INT(launcher_check_comm(&l, "threads", 1, &e), CT_OK);
}

CT_TEST(launcher_comm_world_must_match_the_launchers) {
    host_launch l = {.launcher = HOST_LAUNCHER_SLURM, .rank = 3, .world = 8};
    ct_error e = {.struct_size = sizeof e};
    CT_CHECK_INT(launcher_check_comm_world(&l, "mpi", 3, 8, &e), CT_OK);
    CT_CHECK_INT(launcher_check_comm_world(&l, "mpi", 0, 1, &e), CT_ERR_INVALID);
    CT_CHECK_STR_CONTAINS(e.message, "comm mpi reports rank 0 of 1");
    CT_CHECK_STR_CONTAINS(e.message, "rank 3 of 8");
    host_launch none = {.launcher = HOST_LAUNCHER_NONE, .world = 1};
    CT_CHECK_INT(launcher_check_comm_world(&none, "local", 0, 1, &e), CT_OK);
}

CT_TEST(launcher_auto_comm_follows_launcher_and_device) {
    host_launch none = {.launcher = HOST_LAUNCHER_NONE, .world = 1};
    host_launch mpi1 = {.launcher = HOST_LAUNCHER_OPENMPI, .world = 1};
    host_launch srun4 = {.launcher = HOST_LAUNCHER_SLURM, .world = 4};
    host_launch srun1 = {.launcher = HOST_LAUNCHER_SLURM, .world = 1};
    CT_CHECK(!strcmp(launcher_auto_comm(&none, 0, 1), "local"));
    CT_CHECK(!strcmp(launcher_auto_comm(&none, 0, 4), "threads"));
    CT_CHECK(!strcmp(launcher_auto_comm(&mpi1, 0, 1), "mpi"));
    CT_CHECK(!strcmp(launcher_auto_comm(&srun4, 0, 1), "mpi"));
    CT_CHECK(!strcmp(launcher_auto_comm(&srun4, 1, 1), "nccl"));
    CT_CHECK(!strcmp(launcher_auto_comm(&srun1, 0, 1), "local"));
}

/* torchrun-style variables with a world above one start comm nccl (its rendezvous) when
 * MASTER_ADDR and MASTER_PORT are set and valid; missing or bad ones are errors naming them;
 * the host answers [comm] master_addr / master_port from them, and refuses for other launchers */
CT_TEST(launcher_torchrun_world_starts_nccl_with_master_addr_and_port) {
    static const char *const good[] = {"RANK=1", "WORLD_SIZE=4", "LOCAL_RANK=1",
                                       "MASTER_ADDR=node-a", "MASTER_PORT=29500", NULL};
    host_launch l;
    ct_error e;
    CT_CHECK_MSG(read_env(good, &l, &e) == CT_OK, "%s", e.message);
    CT_CHECK_INT(launcher_check_comm(&l, "nccl", 0, &e), CT_OK);
    const char *addr = NULL;
    int64_t port = 0;
    CT_CHECK_INT(launcher_master(&l, &addr, &port, &e), CT_OK);
    CT_CHECK_MSG(addr && !strcmp(addr, "node-a"), "expected node-a, got %s", addr ? addr : "NULL");
    CT_CHECK_INT(port, 29500);
    CT_CHECK_INT(launcher_check_comm(&l, "mpi", 0, &e), CT_ERR_INVALID);
    CT_CHECK_STR_CONTAINS(e.message, "comm mpi cannot bootstrap");
    CT_CHECK_INT(launcher_check_comm(&l, "threads", 1, &e), CT_ERR_INVALID);
    CT_CHECK_INT(launcher_check_comm(&l, "local", 0, &e), CT_ERR_INVALID);

    static const char *const no_addr[] = {"RANK=0", "WORLD_SIZE=2", "MASTER_PORT=29500", NULL};
    static const char *const empty_addr[] = {"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=",
                                             "MASTER_PORT=29500", NULL};
    static const char *const no_port[] = {"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=h", NULL};
    static const char *const port0[] = {"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=h",
                                        "MASTER_PORT=0", NULL};
    static const char *const port_big[] = {"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=h",
                                           "MASTER_PORT=65536", NULL};
    static const char *const port_text[] = {"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=h",
                                            "MASTER_PORT=29x", NULL};
    /* unset: refused when comm nccl needs them; set but wrong: refused as they are read, at
     * any world size (at_read) */
    struct { const char *const *env; const char *a, *b; int at_read; } cases[] = {
        {no_addr, "MASTER_ADDR=(unset)", "has no address", 0},
        {empty_addr, "MASTER_ADDR is set but empty", "rank 0's host", 1},
        {no_port, "MASTER_PORT=(unset)", "is not a port 1..65535", 0},
        {port0, "MASTER_PORT=0", "is not a port 1..65535", 1},
        {port_big, "MASTER_PORT=65536", "is not a port 1..65535", 1},
        {port_text, "MASTER_PORT=29x", "is not a port 1..65535", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        if (cases[i].at_read) {
            CT_CHECK_MSG(read_env(cases[i].env, &l, &e) == CT_ERR_INVALID, "case %zu accepted", i);
        } else {
            CT_CHECK_MSG(read_env(cases[i].env, &l, &e) == CT_OK, "case %zu: %s", i, e.message);
            CT_CHECK_MSG(launcher_check_comm(&l, "nccl", 0, &e) == CT_ERR_INVALID,
                         "case %zu accepted", i);
        }
        CT_CHECK_STR_CONTAINS(e.message, cases[i].a);
        CT_CHECK_STR_CONTAINS(e.message, cases[i].b);
        CT_CHECK_STR_CONTAINS(e.message, "WORLD_SIZE=2");
    }
    /* a world of one needs no rendezvous: no MASTER_* required */
    static const char *const one[] = {"RANK=0", "WORLD_SIZE=1", NULL};
    CT_CHECK_MSG(read_env(one, &l, &e) == CT_OK, "%s", e.message);
    CT_CHECK_INT(launcher_check_comm(&l, "nccl", 0, &e), CT_OK);
    /* another launcher: the host has no MASTER_ADDR to give */
    host_launch mpi = {.launcher = HOST_LAUNCHER_OPENMPI, .world = 2};
    CT_CHECK_INT(launcher_master(&mpi, &addr, &port, &e), CT_ERR_INVALID);
    CT_CHECK_STR_CONTAINS(e.message, "torchrun-style");
}

CT_TEST(launcher_reads_the_processes_on_this_node) {
    static const char *const none[] = {"HOME=/root", NULL};
    static const char *const ompi[] = {"OMPI_COMM_WORLD_RANK=3", "OMPI_COMM_WORLD_SIZE=8",
                                       "OMPI_COMM_WORLD_LOCAL_SIZE=4", NULL};
    static const char *const ompi_silent[] = {"OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=2",
                                              NULL};
    static const char *const ompi_garbage[] = {"OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=2",
                                               "OMPI_COMM_WORLD_LOCAL_SIZE=two", NULL};
    static const char *const ompi_too_many[] = {"OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=2",
                                                "OMPI_COMM_WORLD_LOCAL_SIZE=3", NULL};
    static const char *const slurm[] = {"SLURM_PROCID=5", "SLURM_NTASKS=8",
                                        "SLURM_NTASKS_PER_NODE=2", NULL};
    /* nodes 0-2 run 2 tasks each, node 3 runs 1: node 3 is this one */
    static const char *const slurm_compact[] = {"SLURM_PROCID=6", "SLURM_NTASKS=7", "SLURM_NODEID=3",
                                                "SLURM_STEP_TASKS_PER_NODE=2(x3),1", NULL};
    static const char *const slurm_second[] = {"SLURM_PROCID=2", "SLURM_NTASKS=7", "SLURM_NODEID=1",
                                               "SLURM_TASKS_PER_NODE=2(x3),1", NULL};
    static const char *const torch[] = {"RANK=1", "WORLD_SIZE=4", "LOCAL_WORLD_SIZE=2", NULL};
    struct { const char *const *env; int local_size; } cases[] = {
        {none, 1}, {ompi, 4}, {ompi_silent, 0}, {ompi_garbage, 0}, {ompi_too_many, 0},
        {slurm, 2}, {slurm_compact, 1}, {slurm_second, 2}, {torch, 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        host_launch l;
        ct_error e;
        CT_CHECK_MSG(read_env(cases[i].env, &l, &e) == CT_OK, "case %zu: %s", i, e.message);
        CT_CHECK_MSG(l.local_size == cases[i].local_size, "case %zu: local size %d, want %d", i,
                     (int)l.local_size, cases[i].local_size);
    }
}
