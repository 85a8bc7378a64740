/* conv.c — the opencl backend's 2-D convolution: batched im2col + one
 * CLBlast GEMM per chunk of images.
 *
 * A CPU device (PoCL) or a GPU runs one large GEMM far better than one small
 * GEMM per image, so the column matrix covers a chunk of nb images side by
 * side (kernels/conv.cl), crs x (nb*ohw), and for each chunk:
 *   forward      col = im2col(x);  T  = W[k x crs] * col;     y  = T as n,k,ohw
 *   bwd-data     T = dy as k,n,ohw; col = W^T * T;            dx = col2im(col)
 *   bwd-filter   col = im2col(x);  T = dy as k,n,ohw;         dW (+)= T * col^T
 * The workspace holds col and T. The chunk is the whole batch unless its
 * columns would pass OCL_CONV_WS_MAX floats; a chunk of one image needs no
 * permutation (T is then y or dy itself). */
#include "config.h"

#include "ocl-impl.h"
#include "status.h"

/* Workspace cap: 32 Mi floats (128 MiB), or less where one allocation may
 * not hold twice that (the model allocates the workspace as one buffer). */
#define OCL_CONV_WS_MAX ((size_t)1 << 25)

static size_t conv_crs(const struct rt_conv_shape *s) { return (size_t)s->c * s->r * s->s; }
static size_t conv_ohw(const struct rt_conv_shape *s) { return (size_t)s->oh * s->ow; }

/* Floats of workspace one image needs: its columns and its T. */
static size_t conv_per_image(const struct rt_conv_shape *s)
{
    return (conv_crs(s) + (size_t)s->k) * conv_ohw(s);
}

static int conv_chunk(rt_dev *d, const struct rt_conv_shape *s)
{
    size_t cap = OCL_CONV_WS_MAX, alloc = ocl(d)->sh->max_alloc / sizeof(float) / 2;
    if (alloc && alloc < cap)
        cap = alloc;
    size_t nb = cap / conv_per_image(s);
    if (nb > (size_t)s->n)
        nb = (size_t)s->n;
    return nb < 1 ? 1 : (int)nb;
}

size_t ocl_conv2d_workspace(rt_dev *d, const struct rt_conv_shape *s)
{
    return (size_t)conv_chunk(d, s) * conv_per_image(s);
}

/* Arguments shared by im2col and col2im, after nb. */
#define CONV_GEOM(s)                                                                         \
    (s)->c, (s)->h, (s)->w, (s)->r, (s)->s, (s)->stride_h, (s)->stride_w, (s)->pad_h,        \
        (s)->pad_w, (s)->oh, (s)->ow

static int conv_im2col(rt_dev *d, const struct rt_conv_shape *s, int nb, rt_view x, rt_view col)
{
    size_t rows = conv_crs(s) * (size_t)nb * s->oh;
    return ocl_run_n(d, OCL_K_im2col, rows, "iiiiiiiiiiiivv", nb, CONV_GEOM(s), x, col);
}

static int conv_col2im(rt_dev *d, const struct rt_conv_shape *s, int nb, rt_view col, rt_view dx)
{
    size_t rows = (size_t)nb * s->c * s->h;
    return ocl_run_n(d, OCL_K_col2im, rows, "iiiiiiiiiiiivv", nb, CONV_GEOM(s), col, dx);
}

/* Image-major [nb][k][ohw] to channel-major [k][nb*ohw] and back. */
static int conv_to_knp(rt_dev *d, const struct rt_conv_shape *s, int nb, rt_view src, rt_view dst)
{
    return ocl_run_n(d, OCL_K_nkp_to_knp, (size_t)nb * s->k, "iiivv", nb, s->k, (int)conv_ohw(s),
                     src, dst);
}

static int conv_to_nkp(rt_dev *d, const struct rt_conv_shape *s, int nb, rt_view src, rt_view dst)
{
    return ocl_run_n(d, OCL_K_knp_to_nkp, (size_t)nb * s->k, "iiivv", nb, s->k, (int)conv_ohw(s),
                     src, dst);
}

int ocl_conv2d_fwd(rt_dev *d, const struct rt_conv_shape *s, rt_view x, rt_view w, rt_view y,
                   rt_view ws)
{
    const int chunk = conv_chunk(d, s), crs = (int)conv_crs(s);
    const size_t xs = (size_t)s->c * s->h * s->w, ys = (size_t)s->k * conv_ohw(s);
    for (int i0 = 0; i0 < s->n; i0 += chunk) {
        const int nb = s->n - i0 < chunk ? s->n - i0 : chunk, np = nb * (int)conv_ohw(s);
        rt_view col = ws, t = rt_view_at(ws, (size_t)crs * np);
        rt_view yc = rt_view_at(y, i0 * ys);
        RT_TRY(conv_im2col(d, s, nb, rt_view_at(x, i0 * xs), col));
        if (nb == 1)
            t = yc;
        RT_TRY(ocl_sgemm(d, false, false, s->k, np, crs, 1.0f, w, crs, col, np, 0.0f, t, np));
        if (nb > 1)
            RT_TRY(conv_to_nkp(d, s, nb, t, yc));
    }
    return RT_OK;
}

int ocl_conv2d_bwd_data(rt_dev *d, const struct rt_conv_shape *s, rt_view dy, rt_view w,
                        rt_view dx, rt_view ws)
{
    const int chunk = conv_chunk(d, s), crs = (int)conv_crs(s);
    const size_t xs = (size_t)s->c * s->h * s->w, ys = (size_t)s->k * conv_ohw(s);
    for (int i0 = 0; i0 < s->n; i0 += chunk) {
        const int nb = s->n - i0 < chunk ? s->n - i0 : chunk, np = nb * (int)conv_ohw(s);
        rt_view col = ws, t = rt_view_at(ws, (size_t)crs * np);
        rt_view dyc = rt_view_at(dy, i0 * ys);
        if (nb == 1)
            t = dyc;
        else
            RT_TRY(conv_to_knp(d, s, nb, dyc, t));
        RT_TRY(ocl_sgemm(d, true, false, crs, np, s->k, 1.0f, w, crs, t, np, 0.0f, col, np));
        RT_TRY(conv_col2im(d, s, nb, col, rt_view_at(dx, i0 * xs)));
    }
    return RT_OK;
}

int ocl_conv2d_bwd_filter(rt_dev *d, const struct rt_conv_shape *s, rt_view x, rt_view dy,
                          rt_view dw, rt_view ws)
{
    const int crs = (int)conv_crs(s);
    if (s->n == 0) /* no samples, no gradient; x, dy, ws are unchecked */
        return ocl_sgemm(d, false, true, s->k, crs, 0, 1.0f, dw, 0, dw, 0, 0.0f, dw, crs);
    const int chunk = conv_chunk(d, s);
    const size_t xs = (size_t)s->c * s->h * s->w, ys = (size_t)s->k * conv_ohw(s);
    for (int i0 = 0; i0 < s->n; i0 += chunk) {
        const int nb = s->n - i0 < chunk ? s->n - i0 : chunk, np = nb * (int)conv_ohw(s);
        rt_view col = ws, t = rt_view_at(ws, (size_t)crs * np);
        rt_view dyc = rt_view_at(dy, i0 * ys);
        RT_TRY(conv_im2col(d, s, nb, rt_view_at(x, i0 * xs), col));
        if (nb == 1)
            t = dyc;
        else
            RT_TRY(conv_to_knp(d, s, nb, dyc, t));
        RT_TRY(ocl_sgemm(d, false, true, s->k, crs, np, 1.0f, t, np, col, np, i0 ? 1.0f : 0.0f,
                         dw, crs));
    }
    return RT_OK;
}
