/* plot.h — `ragtag plot`: the curves of --metrics files drawn with cairo
 * (app/plot.c draws, app/plot_data.c reads). */
#ifndef RT_PLOT_H
#define RT_PLOT_H

#include <stdbool.h>

#define PLOT_SERIES 10
#define PLOT_WORKERS 32

/* The series of a file, in this order (plot_series_names): epoch loss
 * train/val/test, window loss, epoch acc train/val/test, window acc,
 * images/s per epoch, per window. x is the epoch (fractional for windows). */
extern const char *const plot_series_names[PLOT_SERIES];

struct plot_curve {
    double *xy; /* x0 y0 x1 y1 ... */
    int n, cap;
};

struct plot_file {
    char path[1024];
    struct plot_curve curve[PLOT_SERIES];
    /* shares of the batch by worker name, x the step (the plans) */
    char worker[PLOT_WORKERS][64];
    struct plot_curve share[PLOT_WORKERS];
    int nworkers;
    long skipped; /* lines that were not JSON objects */
};

int plot_file_read(const char *path, struct plot_file *f);
void plot_file_free(struct plot_file *f);

/* `ragtag plot FILE... [-o OUT.png|.svg|.pdf]` */
int rt_cli_plot(int argc, char **argv);

#endif
