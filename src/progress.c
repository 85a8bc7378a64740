/* progress.c — progress bar on a terminal, plain lines elsewhere. The bar is
 * redrawn at most 10 times a second so it never costs a step's time. */
#include "progress.h"

#include <unistd.h>

#include "clock.h"

void rt_progress_init(rt_progress *p, FILE *out, enum rt_progress_mode mode)
{
    p->out = out;
    p->quiet = mode == RT_PROGRESS_OFF;
    p->bar = mode == RT_PROGRESS_BAR || (mode == RT_PROGRESS_AUTO && isatty(fileno(out)));
    p->last_draw = 0.0;
    p->width = 24;
}

static void fmt_eta(char *buf, size_t n, double s)
{
    if (s < 0 || s > 1e7)
        s = 0;
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(buf, n, "%ld:%02ld", t / 60, t % 60);
}

void rt_progress_step(rt_progress *p, int epoch, int epochs, long done, long total,
                      double loss, double acc, double img_s, double eta_s)
{
    if (p->quiet || !p->bar)
        return;
    double now = rt_now();
    if (done < total && now - p->last_draw < 0.1)
        return;
    p->last_draw = now;
    int fill = total > 0 ? (int)((double)p->width * (double)done / (double)total) : 0;
    char bar[64];
    for (int i = 0; i < p->width; i++)
        bar[i] = i < fill ? '=' : (i == fill ? '>' : ' ');
    bar[p->width] = '\0';
    char eta[32];
    fmt_eta(eta, sizeof eta, eta_s);
    fprintf(p->out, "\r\033[Kepoch %d/%d [%s] %ld/%ld loss %.4f acc %.2f%% %.0f img/s ETA %s",
            epoch, epochs, bar, done, total, loss, 100.0 * acc, img_s, eta);
    fflush(p->out);
}

void rt_progress_epoch(rt_progress *p, const char *line)
{
    if (p->quiet)
        return;
    if (p->bar)
        fputs("\r\033[K", p->out);
    fprintf(p->out, "%s\n", line);
    fflush(p->out);
}
