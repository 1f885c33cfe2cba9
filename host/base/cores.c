/* cores.c — the automatic thread count per rank and OpenMP's wait policy (see cores.h). */
#include "base/cores.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

cores_choice cores_auto(const host_launch *l, int32_t in_process) {
    cores_choice c = {.in_process = in_process > 0 ? in_process : 1};
    cpu_set_t set;
    CPU_ZERO(&set);
    c.usable = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    c.online = online > 0 && online < INT32_MAX ? (int32_t)online : 1;
    if (c.usable < 1) c.usable = c.online;
    c.node_procs = l ? l->local_size : 1;
    int32_t share = c.usable;
    if (c.node_procs > 1 && c.online / c.node_procs < share) share = c.online / c.node_procs;
    c.threads = share / c.in_process;
    if (c.threads < 1) c.threads = 1;
    return c;
}

void cores_describe(const cores_choice *c, int32_t configured, char *buf, size_t cap) {
    if (configured > 0) {
        snprintf(buf, cap, "%d thread%s per rank ([device] threads = %d)", (int)configured,
                 configured == 1 ? "" : "s", (int)configured);
        return;
    }
    char procs[64];
    if (c->node_procs > 0)
        snprintf(procs, sizeof procs, "%d process%s on this node", (int)c->node_procs,
                 c->node_procs == 1 ? "" : "es");
    else
        snprintf(procs, sizeof procs, "processes on this node not given by the launcher");
    snprintf(buf, cap, "%d thread%s per rank (auto: %d of %d CPUs usable, %s, %d rank%s in this "
             "process; [device.cpu] threads sets it)", (int)c->threads,
             c->threads == 1 ? "" : "s",
             (int)c->usable, (int)c->online, procs, (int)c->in_process,
             c->in_process == 1 ? "" : "s");
}

static const char *policy = "OpenMP runtime default";

const char *cores_wait_policy_init(void) {
    const char *user = getenv("OMP_WAIT_POLICY");
    if (user || getenv("GOMP_SPINCOUNT")) {
        policy = user ? "OMP_WAIT_POLICY as set" : "GOMP_SPINCOUNT as set";
        return policy;
    }
    if (setenv("OMP_WAIT_POLICY", "PASSIVE", 0) == 0) policy = "idle threads sleep (OMP_WAIT_POLICY=PASSIVE)";
    return policy;
}

const char *cores_wait_policy(void) { return policy; }
