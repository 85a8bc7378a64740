/* plot.c — `ragtag plot METRICS.jsonl... [-o OUT.png|.svg|.pdf]`: the
 * curves of one or more --metrics files, drawn with cairo (Debian's
 * libcairo2): loss and accuracy (train/val/test per epoch, the --log-every
 * windows thinner), images/s, and each worker's share of the batch when
 * the file has the coordinator's plans. One panel each, axes with round
 * ticks and a legend; several files share the panels, one dash pattern
 * per file, so runs compare at a glance. Series colours are the palette
 * below in the order of the panel's series (tests/test_plot.sh reads
 * them back from the SVG). */
#include "config.h"

#include "plot.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"

#ifdef RT_HAVE_CAIRO
#include <cairo-pdf.h>
#include <cairo-svg.h>
#include <cairo.h>

#define PANEL_W 600.0
#define PANEL_H 380.0
#define MAX_FILES 8

static const double palette[10][3] = {
    {0.122, 0.467, 0.706}, {1.000, 0.498, 0.055}, {0.173, 0.627, 0.173}, {0.839, 0.153, 0.157},
    {0.580, 0.404, 0.741}, {0.549, 0.337, 0.294}, {0.890, 0.467, 0.761}, {0.498, 0.498, 0.498},
    {0.737, 0.741, 0.133}, {0.090, 0.745, 0.812},
};

/* A panel: which series of each file it draws (-1 ends), or the shares. */
struct panel {
    const char *title, *xlabel, *ylabel;
    int series[5];
    const char *label[5];
    bool shares;
};
static const struct panel panels[] = {
    {"loss", "epoch", "loss", {0, 1, 2, 3, -1}, {"train", "val", "test", "train (window)"}, false},
    {"accuracy", "epoch", "accuracy", {4, 5, 6, 7, -1},
     {"train", "val", "test", "train (window)"}, false},
    {"images/s", "epoch", "images/s", {8, 9, -1}, {"epoch", "window"}, false},
    {"share of the batch per worker", "step", "samples", {-1}, {NULL}, true},
};
#define NPANELS (int)(sizeof panels / sizeof panels[0])

struct frame {
    double x0, y0, w, h;          /* the plot area on the page */
    double xmin, xmax, ymin, ymax; /* the data range */
};

static void range_of(const struct plot_curve *c, double *r)
{
    for (int i = 0; i < c->n; i++) {
        r[0] = fmin(r[0], c->xy[2 * i]);
        r[1] = fmax(r[1], c->xy[2 * i]);
        r[2] = fmin(r[2], c->xy[2 * i + 1]);
        r[3] = fmax(r[3], c->xy[2 * i + 1]);
    }
}

/* The curves of panel p in file f: the i-th, or NULL past the last. */
static const struct plot_curve *panel_curve(const struct panel *p, const struct plot_file *f,
                                            int i)
{
    if (p->shares)
        return i < f->nworkers ? &f->share[i] : NULL;
    return i < 5 && p->series[i] >= 0 ? &f->curve[p->series[i]] : NULL;
}

static bool panel_has_data(const struct panel *p, const struct plot_file *f, int nf)
{
    for (int j = 0; j < nf; j++)
        for (int i = 0; panel_curve(p, &f[j], i); i++)
            if (panel_curve(p, &f[j], i)->n > 0)
                return true;
    return false;
}

/* A round tick step: 1, 2 or 5 x 10^k, about n ticks over span. */
static double tick_step(double span, int n)
{
    double raw = span / n, mag = pow(10.0, floor(log10(raw)));
    double r = raw / mag;
    return (r < 1.5 ? 1.0 : r < 3.5 ? 2.0 : r < 7.5 ? 5.0 : 10.0) * mag;
}

static double px(const struct frame *fr, double x)
{
    return fr->x0 + (x - fr->xmin) / (fr->xmax - fr->xmin) * fr->w;
}
static double py(const struct frame *fr, double y)
{
    return fr->y0 + fr->h - (y - fr->ymin) / (fr->ymax - fr->ymin) * fr->h;
}

static void text_at(cairo_t *cr, double x, double y, const char *s, double align)
{
    cairo_text_extents_t e;
    cairo_text_extents(cr, s, &e);
    cairo_move_to(cr, x - align * e.width - e.x_bearing, y);
    cairo_show_text(cr, s);
}

/* Grid, ticks, their labels and the axis titles. */
static void draw_axes(cairo_t *cr, const struct frame *fr, const struct panel *p)
{
    char s[32];
    cairo_set_font_size(cr, 11);
    cairo_set_line_width(cr, 1.0);
    double xs = tick_step(fr->xmax - fr->xmin, 6), ys = tick_step(fr->ymax - fr->ymin, 5);
    for (double x = ceil(fr->xmin / xs) * xs; x <= fr->xmax + 1e-9 * xs; x += xs) {
        cairo_set_source_rgb(cr, 0.9, 0.9, 0.9);
        cairo_move_to(cr, px(fr, x), fr->y0);
        cairo_line_to(cr, px(fr, x), fr->y0 + fr->h);
        cairo_stroke(cr);
        cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
        snprintf(s, sizeof s, "%g", fabs(x) < 1e-12 * xs ? 0.0 : x);
        text_at(cr, px(fr, x), fr->y0 + fr->h + 15, s, 0.5);
    }
    for (double y = ceil(fr->ymin / ys) * ys; y <= fr->ymax + 1e-9 * ys; y += ys) {
        cairo_set_source_rgb(cr, 0.9, 0.9, 0.9);
        cairo_move_to(cr, fr->x0, py(fr, y));
        cairo_line_to(cr, fr->x0 + fr->w, py(fr, y));
        cairo_stroke(cr);
        cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
        snprintf(s, sizeof s, "%g", fabs(y) < 1e-12 * ys ? 0.0 : y);
        text_at(cr, fr->x0 - 6, py(fr, y) + 4, s, 1.0);
    }
    cairo_rectangle(cr, fr->x0, fr->y0, fr->w, fr->h);
    cairo_stroke(cr);
    text_at(cr, fr->x0 + fr->w / 2, fr->y0 + fr->h + 32, p->xlabel, 0.5);
    cairo_save(cr);
    cairo_move_to(cr, fr->x0 - 50, fr->y0 + fr->h / 2);
    cairo_rotate(cr, -M_PI / 2);
    text_at(cr, 0, 0, p->ylabel, 0.5);
    cairo_restore(cr);
    cairo_set_font_size(cr, 13);
    text_at(cr, fr->x0 + fr->w / 2, fr->y0 - 10, p->title, 0.5);
}

static void set_style(cairo_t *cr, int colour, int file, bool thin)
{
    static const double dashes[][2] = {{1, 0}, {7, 4}, {2, 3}, {9, 3}};
    const double *c = palette[colour % 10];
    cairo_set_source_rgb(cr, c[0], c[1], c[2]);
    cairo_set_line_width(cr, thin ? 1.0 : 2.0);
    cairo_set_dash(cr, dashes[file % 4], file % 4 ? 2 : 0, 0);
}

/* stepped: a share holds until the next plan */
static void draw_curve(cairo_t *cr, const struct frame *fr, const struct plot_curve *c,
                       bool stepped)
{
    for (int i = 0; i < c->n; i++) {
        double x = px(fr, c->xy[2 * i]), y = py(fr, c->xy[2 * i + 1]);
        if (i == 0)
            cairo_move_to(cr, x, y);
        else if (stepped)
            cairo_line_to(cr, x, py(fr, c->xy[2 * i - 1])), cairo_line_to(cr, x, y);
        else
            cairo_line_to(cr, x, y);
    }
    if (c->n == 1) /* one epoch: a dot */
        cairo_rel_line_to(cr, 0.5, 0);
    cairo_stroke(cr);
}

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* The curves and their legend (top right, one line per curve drawn). */
static void draw_series(cairo_t *cr, const struct frame *fr, const struct panel *p,
                        const struct plot_file *f, int nf)
{
    double ly = fr->y0 + 14;
    for (int j = 0; j < nf; j++)
        for (int i = 0; panel_curve(p, &f[j], i); i++) {
            const struct plot_curve *c = panel_curve(p, &f[j], i);
            if (c->n == 0)
                continue;
            bool thin = !p->shares && (p->series[i] == 3 || p->series[i] == 7 || p->series[i] == 9);
            set_style(cr, i, j, thin);
            draw_curve(cr, fr, c, p->shares);
            char label[160];
            snprintf(label, sizeof label, "%s%s%s", p->shares ? f[j].worker[i] : p->label[i],
                     nf > 1 ? "  " : "", nf > 1 ? base_name(f[j].path) : "");
            cairo_move_to(cr, fr->x0 + fr->w - 190, ly - 4);
            cairo_rel_line_to(cr, 22, 0);
            cairo_stroke(cr);
            cairo_set_dash(cr, NULL, 0, 0);
            cairo_set_source_rgb(cr, 0.15, 0.15, 0.15);
            cairo_set_font_size(cr, 11);
            text_at(cr, fr->x0 + fr->w - 162, ly, label, 0.0);
            ly += 15;
        }
}

static void draw_panel(cairo_t *cr, double x, double y, const struct panel *p,
                       const struct plot_file *f, int nf)
{
    double r[4] = {INFINITY, -INFINITY, INFINITY, -INFINITY};
    for (int j = 0; j < nf; j++)
        for (int i = 0; panel_curve(p, &f[j], i); i++)
            range_of(panel_curve(p, &f[j], i), r);
    if (p->shares || !strcmp(p->title, "images/s"))
        r[2] = fmin(r[2], 0.0); /* speeds and shares from zero */
    double padx = r[1] > r[0] ? 0.02 * (r[1] - r[0]) : 0.5;
    double pady = r[3] > r[2] ? 0.08 * (r[3] - r[2]) : fmax(0.5, 0.1 * fabs(r[3]));
    struct frame fr = {x + 75, y + 35, PANEL_W - 100, PANEL_H - 85, r[0] - padx, r[1] + padx,
                       r[2] - (r[2] == 0.0 ? 0.0 : pady), r[3] + pady};
    draw_axes(cr, &fr, p);
    cairo_save(cr);
    cairo_rectangle(cr, fr.x0, fr.y0, fr.w, fr.h);
    cairo_clip(cr);
    draw_series(cr, &fr, p, f, nf);
    cairo_restore(cr);
}

static cairo_surface_t *open_surface(const char *out, double w, double h, bool *png)
{
    const char *dot = strrchr(out, '.');
    *png = dot && !strcasecmp(dot, ".png");
    if (*png)
        return cairo_image_surface_create(CAIRO_FORMAT_RGB24, (int)w, (int)h);
    if (dot && !strcasecmp(dot, ".svg"))
        return cairo_svg_surface_create(out, w, h);
    if (dot && !strcasecmp(dot, ".pdf"))
        return cairo_pdf_surface_create(out, w, h);
    rt_error(RT_ERR_CONFIG, "-o %s: the name must end in .png, .svg or .pdf", out);
    return NULL;
}

/* Every panel that has data, two a row, into out. */
static int draw(const char *out, const struct plot_file *f, int nf)
{
    int use[NPANELS], n = 0;
    for (int i = 0; i < NPANELS; i++)
        if (panel_has_data(&panels[i], f, nf))
            use[n++] = i;
    if (n == 0)
        return rt_error(RT_ERR_FORMAT, "%s: no curves in it (is it a --metrics file?)", f[0].path);
    int cols = n > 1 ? 2 : 1, rows = (n + 1) / 2;
    bool png;
    cairo_surface_t *s = open_surface(out, cols * PANEL_W, rows * PANEL_H, &png);
    if (!s)
        return RT_ERR_CONFIG;
    cairo_t *cr = cairo_create(s);
    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_paint(cr);
    cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
    for (int i = 0; i < n; i++)
        draw_panel(cr, (i % cols) * PANEL_W, (i / cols) * PANEL_H, &panels[use[i]], f, nf);
    cairo_destroy(cr);
    cairo_surface_flush(s);
    cairo_status_t st = png ? cairo_surface_write_to_png(s, out) : cairo_surface_status(s);
    cairo_surface_destroy(s); /* writes and closes an SVG or PDF */
    if (st != CAIRO_STATUS_SUCCESS)
        return rt_error(RT_ERR_IO, "cannot write %s: %s", out, cairo_status_to_string(st));
    printf("wrote %s: %d panel%s (%.0f x %.0f)\n", out, n, n == 1 ? "" : "s", cols * PANEL_W,
           rows * PANEL_H);
    return RT_OK;
}

/* What each file gave, on stdout. */
static void describe(const struct plot_file *f)
{
    printf("%s:", f->path);
    for (int s = 0; s < PLOT_SERIES; s++)
        if (f->curve[s].n)
            printf(" %s %d", plot_series_names[s], f->curve[s].n);
    for (int i = 0; i < f->nworkers; i++)
        printf(" share[%s] %d", f->worker[i], f->share[i].n);
    if (f->skipped)
        printf(" (%ld lines skipped: not JSON objects)", f->skipped);
    printf("\n");
}

int rt_cli_plot(int argc, char **argv)
{
    const char *out = NULL, *in[MAX_FILES];
    int nf = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-o") || !strcmp(argv[i], "--output")) {
            if (++i == argc)
                return rt_error(RT_ERR_CONFIG, "-o needs a file name (.png, .svg or .pdf)");
            out = argv[i];
        } else if (argv[i][0] == '-') {
            return rt_error(RT_ERR_CONFIG, "unknown flag '%s'", argv[i]);
        } else if (nf == MAX_FILES) {
            return rt_error(RT_ERR_CONFIG, "at most %d metrics files on one plot", MAX_FILES);
        } else {
            in[nf++] = argv[i];
        }
    }
    if (nf == 0)
        return rt_error(RT_ERR_CONFIG, "needs a metrics file (ragtag train --metrics FILE)");
    struct plot_file *f = calloc((size_t)nf, sizeof *f);
    if (!f)
        return rt_error(RT_ERR_NOMEM, "out of memory");
    int rc = RT_OK;
    for (int j = 0; j < nf && rc == RT_OK; j++)
        if ((rc = plot_file_read(in[j], &f[j])) == RT_OK)
            describe(&f[j]);
    if (rc == RT_OK)
        rc = draw(out ? out : "plot.png", f, nf);
    for (int j = 0; j < nf; j++)
        plot_file_free(&f[j]);
    free(f);
    return rc;
}

#else /* no cairo */

int rt_cli_plot(int argc, char **argv)
{
    return rt_error(RT_ERR_UNSUPPORTED, "this ragtag was built without cairo: install the Debian "
                                        "package libcairo2-dev, then run ./configure and make "
                                        "again");
}

#endif
