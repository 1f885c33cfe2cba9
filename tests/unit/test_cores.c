/* test_cores.c — claims about host/base/cores.c: auto threads are the CPUs this process may use,
 * capped at the node's share of one process and divided among the ranks in this process, never
 * below 1; the start-up text says what was seen. Not for: the end-to-end start-up line under
 * mpirun (tests/cli/test_kernels.sh). */
#include "ct_test.h"
#include "base/cores.h"

#include <sched.h>
#include <string.h>
#include <unistd.h>

static int usable_cpus(void) {
    cpu_set_t set;
    CPU_ZERO(&set);
    return sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
}

CT_TEST(cores_auto_divides_the_usable_cpus_among_ranks_and_node_processes) {
    int usable = usable_cpus(), online = (int)sysconf(_SC_NPROCESSORS_ONLN);
    host_launch alone = {.world = 1, .local_size = 1};
    cores_choice c = cores_auto(&alone, 1);
    CT_CHECK_INT(c.threads, usable);
    CT_CHECK_INT(c.usable, usable);
    c = cores_auto(&alone, 2);
    CT_CHECK_INT(c.threads, usable / 2 > 0 ? usable / 2 : 1);
    c = cores_auto(&alone, 100000); /* more ranks than cores: one thread each */
    CT_CHECK_INT(c.threads, 1);
    host_launch node = {.world = 8, .local_size = 2};
    c = cores_auto(&node, 1);
    int share = online / 2 < usable ? online / 2 : usable;
    CT_CHECK_INT(c.threads, share > 0 ? share : 1);
    host_launch silent = {.world = 8, .local_size = 0}; /* the launcher did not say */
    c = cores_auto(&silent, 1);
    CT_CHECK_INT(c.threads, usable);
    char text[256];
    cores_describe(&c, 0, text, sizeof text);
    CT_CHECK_MSG(strstr(text, "not given by the launcher") != NULL, "text: %s", text);
    cores_describe(&c, 3, text, sizeof text);
    CT_CHECK_MSG(strstr(text, "3 threads per rank ([device] threads = 3)") != NULL, "text: %s", text);
}
