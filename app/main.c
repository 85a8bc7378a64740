/* main.c — `ragtag`: the only place that decides to exit. */
#include "config.h"

#include <stdlib.h>
#include <unistd.h>

#include "cli.h"

/* OpenMP threads that spin-wait forever collapse training on a shared or
 * oversubscribed node (a container with a busy neighbour): measured on lenet
 * with 2 threads and one core taken, 313 img/s with libgomp's default spin,
 * 4,210 with GOMP_SPINCOUNT=20000, and no loss on a quiet machine. libgomp
 * reads the variable when it loads, before main, so ragtag sets it and
 * re-executes itself once, unless the user chose a policy. */
static void bound_openmp_spinning(char **argv)
{
    if (getenv("GOMP_SPINCOUNT") || getenv("OMP_WAIT_POLICY"))
        return;
    if (setenv("GOMP_SPINCOUNT", "20000", 1) != 0)
        return;
    execv("/proc/self/exe", argv);
    /* no /proc: carry on with the default policy */
}

int main(int argc, char **argv)
{
    bound_openmp_spinning(argv);
    return rt_cli_main(argc, argv);
}
