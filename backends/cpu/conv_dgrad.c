/* conv_dgrad.c — a convolution's data gradient as sh x sw stride-1
 * convolutions over dy, one per phase of dx, each a GEMM that reads dy's
 * rows in place (cpu_gemm_small_rows) and writes its phase of dx once.
 *
 * Padded pixel (sh i + a, sw j + b) of dx, phase (a, b) at (i, j), gets
 *   sum over k, u < nu(a), v < nv(b) of
 *       W[k, c, a + sh u, b + sw v] * dy[k, i - u, j - v]
 * (the taps r = a + sh u, q = b + sw v are the ones of that phase; dy is
 * zero outside oh x ow). So, as the forward's wide layout does for x, dy
 * is copied once into zero-padded planes (dyp) whose rows are wd floats
 * apart, and the phase's output rows, wd wide, are runs of them: row
 * (k, u, v) of the phase's "column matrix" starts u rows and v columns
 * back. Only the rows and columns of the phase that land inside dx are
 * computed (the padding's are not wanted), plus wd - nj garbage columns a
 * row, dropped.
 *
 * col2im did it as W^T dy into a c r s x oh wq column matrix, then added
 * its rows into the padded image one by one (with the image zeroed
 * first, dy widened, and the planes joined at the end): resnet8's stride-2
 * layers spent more time in those passes than in the GEMM. Here each
 * element of dx is written once, one FMA chain over (k, u, v). The result
 * depends on the shape only: each image is summed alone, on one thread.
 *
 * Where neither of the rows GEMM's kernels runs (no AVX2 and FMA), the
 * runs are copied out and an ordinary GEMM takes them. */
#include "config.h"

#include <string.h>

#include "cpu-impl.h"
#include "status.h"

static int imax(int a, int b) { return a > b ? a : b; }

static size_t zmax(size_t a, size_t b) { return a > b ? a : b; }

static int ceil_div(int a, int b) { return a <= 0 ? 0 : (a + b - 1) / b; }

/* Phase a's rows that land in dx (0 <= sh i + a - pad < h): i in [i0, i0 + ni). */
static void phase_rows(int a, int stride, int pad, int in, int *i0, int *ni)
{
    *i0 = ceil_div(pad - a, stride);
    const int i1 = ceil_div(in + pad - a, stride);
    *ni = i1 > *i0 ? i1 - *i0 : 0;
}

/* Taps of phase a along one axis: r = a + stride u < size. */
static int phase_taps(int a, int stride, int size) { return ceil_div(size - a, stride); }

void cpu_dgrad_plan(const struct rt_conv_shape *s, struct cpu_dgrad *g)
{
    memset(g, 0, sizeof *g);
    g->sh = s->stride_h;
    g->sw = s->stride_w;
    RT_ASSERT(g->sh <= CPU_DGRAD_MAX_STRIDE && g->sw <= CPU_DGRAD_MAX_STRIDE);
    int top = 0, bot = 0, left = 0, right = 0, widest = 0, tallest = 0, j0max = 0;
    for (int a = 0; a < g->sh; a++) {
        phase_rows(a, g->sh, s->pad_h, s->h, &g->i0[a], &g->ni[a]);
        g->nu[a] = phase_taps(a, g->sh, s->r);
        if (g->ni[a] && g->nu[a]) { /* dy rows read: i - u, over [i0 - nu + 1, i0 + ni) */
            top = imax(top, g->nu[a] - 1 - g->i0[a]);
            bot = imax(bot, g->i0[a] + g->ni[a] - s->oh);
        }
        tallest = imax(tallest, g->ni[a]);
    }
    for (int b = 0; b < g->sw; b++) {
        phase_rows(b, g->sw, s->pad_w, s->w, &g->j0[b], &g->nj[b]);
        g->nv[b] = phase_taps(b, g->sw, s->s);
        if (g->nj[b] && g->nv[b]) {
            left = imax(left, g->nv[b] - 1 - g->j0[b]);
            right = imax(right, g->j0[b] + g->nj[b] - s->ow);
        }
        widest = imax(widest, g->nj[b]);
        j0max = imax(j0max, g->j0[b]);
    }
    /* one run of pc zeros between rows is the right padding of one row and
     * the left of the next; wd holds a phase's whole row too */
    g->pc = imax(imax(left, right), widest - s->ow);
    g->top = top;
    g->wd = s->ow + g->pc;
    /* a garbage column reads up to j0 + wd - 1 columns into the last row */
    g->plane = cpu_align16((size_t)(s->oh + top + bot + 1) * g->wd + g->pc + j0max);
    g->ps = cpu_align16((size_t)tallest * g->wd + j0max);
    size_t filt = 0, at = 0, col = 0;
    for (int a = 0; a < g->sh; a++)
        for (int b = 0; b < g->sw; b++) {
            const int ph = a * g->sw + b, kin = s->k * g->nu[a] * g->nv[b];
            g->filt_at[ph] = filt;
            g->row_at[ph] = at;
            filt += (size_t)s->c * kin;
            at += (size_t)kin;
            col = zmax(col, (size_t)kin * g->ni[a] * g->wd);
        }
    g->filt = cpu_align16(filt);
    g->at = cpu_align16(at);
    g->off_out = cpu_align16((size_t)s->k * g->plane);
    g->off_col = g->off_out + cpu_align16((size_t)s->c * g->sh * g->sw * g->ps);
    g->slice = g->off_col + cpu_align16(col);
}

/* Phase (a, b)'s filters, channels [c0, c1): filt[c][(k nu + u) nv + v] =
 * W[k, c, a + sh u, b + sw v]; and its row starts in dyp (from thread 0). */
void cpu_dgrad_filters(const struct rt_conv_shape *s, const struct cpu_dgrad *g, const float *w,
                       int c0, int c1, float *filt, int32_t *at)
{
    for (int a = 0; a < g->sh; a++)
        for (int b = 0; b < g->sw; b++) {
            const int ph = a * g->sw + b, nu = g->nu[a], nv = g->nv[b], kin = s->k * nu * nv;
            if (!g->ni[a] || !g->nj[b])
                continue; /* nothing of dx in this phase */
            float *f = filt + g->filt_at[ph];
            for (int c = c0; c < c1; c++)
                for (int k = 0; k < s->k; k++)
                    for (int u = 0; u < nu; u++)
                        for (int v = 0; v < nv; v++)
                            f[(size_t)c * kin + ((size_t)k * nu + u) * nv + v] =
                                w[(((size_t)k * s->c + c) * s->r + a + g->sh * u) * s->s + b +
                                  g->sw * v];
            if (c0 > 0)
                continue;
            int32_t *p = at + g->row_at[ph];
            for (int k = 0; k < s->k; k++)
                for (int u = 0; u < nu; u++)
                    for (int v = 0; v < nv; v++) { /* dy (i0 - u, j0 - v) */
                        const size_t o = (size_t)k * g->plane +
                                         (size_t)(g->i0[a] - u + g->top) * g->wd + g->pc +
                                         (size_t)g->j0[b] - (size_t)v;
                        RT_ASSERT(o < INT32_MAX);
                        *p++ = (int32_t)o;
                    }
        }
}

/* dyp's zeros, once a call: images write only its inner rows. */
void cpu_dgrad_begin(const struct rt_conv_shape *s, const struct cpu_dgrad *g, float *slice)
{
    memset(slice, 0, (size_t)s->k * g->plane * sizeof(float));
}

/* C (m x n, ldc) = A (m x k) B, B's row p the n floats at b + at[p]: in
 * place where a rows kernel runs, else through col. */
static void rows_gemm(int m, int n, int k, const float *a, const float *b, const int32_t *at,
                      float *c, int ldc, float *col)
{
    if (cpu_gemm_small_rows(m, n, k, a, k, b, at, c, ldc))
        return;
    for (int p = 0; p < k; p++)
        memcpy(col + (size_t)p * n, b + at[p], (size_t)n * sizeof(float));
    cpu_gemm_small(false, m, n, k, a, k, col, n, c, ldc);
}

/* One row of dx (w floats) from its phase rows: padded column pw + iw is
 * column (pw + iw) / sw of phase (pw + iw) % sw, whose row is at row + b
 * ps. Stride 2 interleaves two rows in one vector loop. */
CPU_CLONES
static void phase_join_row(const float *row, size_t ps, int w, int pw, int sw, float *dx)
{
    if (sw == 1) {
        cpu_copy_row(dx, row + pw, (size_t)w);
        return;
    }
    if (sw == 2) {
        const float *ev = row + (pw & 1) * ps + pw / 2,
                    *od = row + !(pw & 1) * ps + (pw + 1) / 2;
        const int m2 = w / 2;
        CPU_SIMD
        for (int m = 0; m < m2; m++) {
            dx[2 * m] = ev[m];
            dx[2 * m + 1] = od[m];
        }
        if (w & 1)
            dx[w - 1] = ev[m2];
        return;
    }
    for (int iw = 0; iw < w; iw++)
        dx[iw] = row[(size_t)((pw + iw) % sw) * ps + (size_t)((pw + iw) / sw)];
}

void cpu_dgrad_image(const struct rt_conv_shape *s, const struct cpu_dgrad *g, const float *filt,
                     const int32_t *at, const float *dy, float *dx, float *slice)
{
    float *dyp = slice, *out = slice + g->off_out, *col = slice + g->off_col;
    const size_t ldc = (size_t)g->sh * g->sw * g->ps;
    for (int k = 0; k < s->k; k++)
        for (int y = 0; y < s->oh; y++)
            cpu_copy_row(dyp + (size_t)k * g->plane + (size_t)(y + g->top) * g->wd + g->pc,
                         dy + ((size_t)k * s->oh + y) * s->ow, (size_t)s->ow);
    for (int a = 0; a < g->sh; a++)
        for (int b = 0; b < g->sw; b++) {
            const int ph = a * g->sw + b, kin = s->k * g->nu[a] * g->nv[b];
            const int n = g->ni[a] * g->wd;
            if (!g->ni[a] || !g->nj[b])
                continue;
            /* element j of a row at column j: the runs start at j0 */
            float *o = out + (size_t)ph * g->ps + g->j0[b];
            if (!kin) { /* no tap lands on this phase (stride > filter) */
                for (int c = 0; c < s->c; c++)
                    memset(o + (size_t)c * ldc, 0, (size_t)n * sizeof(float));
                continue;
            }
            rows_gemm(s->c, n, kin, filt + g->filt_at[ph], dyp, at + g->row_at[ph], o, (int)ldc,
                      col);
        }
    for (int c = 0; c < s->c; c++)
        for (int h = 0; h < s->h; h++) {
            const int p = h + s->pad_h, a = p % g->sh, i = p / g->sh;
            const float *row = out + (size_t)c * ldc + (size_t)a * g->sw * g->ps +
                               (size_t)(i - g->i0[a]) * g->wd;
            phase_join_row(row, g->ps, s->w, s->pad_w, g->sw, dx + ((size_t)c * s->h + h) * s->w);
        }
}
