/* main.c — `ragtag`: the only place that decides to exit. */
#include "config.h"

#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

#include "backend.h"
#include "cli.h"

/* OpenMP threads that spin-wait forever collapse training on a shared or
 * oversubscribed node (a container with a busy neighbour): measured on lenet
 * with 2 threads and one core taken, 313 img/s with libgomp's default spin,
 * 4,210 with GOMP_SPINCOUNT=20000, and no loss on a quiet machine. libgomp
 * reads the variable when it loads, before main: true when it was set here
 * (the program then runs itself again), unless the user chose a policy. */
static bool bound_openmp_spinning(void)
{
    if (getenv("GOMP_SPINCOUNT") || getenv("OMP_WAIT_POLICY"))
        return false;
    return setenv("GOMP_SPINCOUNT", "20000", 1) == 0;
}

int main(int argc, char **argv)
{
    bool again = bound_openmp_spinning();
    /* OpenBLAS's kernels for this CPU where it took the CPU for an older
     * one (backends/cpu/blas_core.c: SSE3 kernels on an AVX-512 Xeon,
     * seedcnn 34% slower); OpenBLAS reads the variable as it loads, too */
    if (rt_cpu_blas_core_setenv())
        again = true;
    if (again)
        execv("/proc/self/exe", argv);
    /* no /proc: carry on as loaded */
    return rt_cli_main(argc, argv);
}
