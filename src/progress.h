/* progress.h — the training progress display: a redrawn bar on a terminal,
 * plain lines otherwise. */
#ifndef RT_PROGRESS_H
#define RT_PROGRESS_H

#include <stdbool.h>
#include <stdio.h>

enum rt_progress_mode { RT_PROGRESS_AUTO, RT_PROGRESS_BAR, RT_PROGRESS_LINES, RT_PROGRESS_OFF };

typedef struct rt_progress {
    FILE *out;
    bool bar;          /* redraw one line with \r */
    bool quiet;
    double last_draw;  /* seconds, monotonic */
    int width;         /* bar cells */
} rt_progress;

void rt_progress_init(rt_progress *p, FILE *out, enum rt_progress_mode mode);
/* Within an epoch: done/total batches, running loss/acc, img/s, ETA seconds. */
void rt_progress_step(rt_progress *p, int epoch, int epochs, long done, long total,
                      double loss, double acc, double img_s, double eta_s);
/* End-of-epoch line (always printed unless quiet). */
void rt_progress_epoch(rt_progress *p, const char *line);

#endif
