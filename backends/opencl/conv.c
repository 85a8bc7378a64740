/* conv.c — the opencl backend's 2-D convolution, two ways:
 *  - direct (CPU devices, stride 1): ragtag's own register-tiled kernels
 *    (kernels/conv.cl) on a zero-padded copy of the input; see below;
 *  - GEMM (GPUs, and any stride): batched im2col + one CLBlast GEMM per
 *    chunk of images, described here.
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

#include <stdlib.h>
#include <string.h>

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

/* nb images a chunk, or fewer where RAGTAG_OPENCL_CONV_CHUNK=N says at
 * most N (test_backend_ops runs the chunked paths at small shapes so) */
static size_t chunk_knob(size_t nb)
{
    const char *env = getenv("RAGTAG_OPENCL_CONV_CHUNK");
    long most = env ? atol(env) : 0;
    return most > 0 && (size_t)most < nb ? (size_t)most : nb;
}

static int conv_chunk(rt_dev *d, const struct rt_conv_shape *s)
{
    size_t cap = OCL_CONV_WS_MAX, alloc = ocl(d)->sh->max_alloc / sizeof(float) / 2;
    if (alloc && alloc < cap)
        cap = alloc;
    size_t nb = chunk_knob(cap / conv_per_image(s));
    if (nb > (size_t)s->n)
        nb = (size_t)s->n;
    return nb < 1 ? 1 : (int)nb;
}

static size_t gemm_workspace(rt_dev *d, const struct rt_conv_shape *s)
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

enum { FWD, BWD_DATA, BWD_FILTER };

/* Images i0 .. i0+nb-1 of one direction, as drawn above; in and in2 are x
 * and w (forward), dy and w (backward data), x and dy (backward filter);
 * out is y, dx or dw. One image needs no permutation. */
static int gemm_chunk(rt_dev *d, const struct rt_conv_shape *s, int dir, int i0, int nb,
                      rt_view in, rt_view in2, rt_view out, rt_view ws)
{
    const int crs = (int)conv_crs(s), np = nb * (int)conv_ohw(s);
    const size_t xs = (size_t)s->c * s->h * s->w, ys = (size_t)s->k * conv_ohw(s);
    rt_view col = ws, t = rt_view_at(ws, (size_t)crs * np);
    if (dir != BWD_DATA) /* x's columns */
        RT_TRY(conv_im2col(d, s, nb, rt_view_at(in, i0 * xs), col));
    if (dir == FWD) {
        rt_view yc = rt_view_at(out, i0 * ys);
        if (nb == 1)
            t = yc;
        RT_TRY(ocl_sgemm(d, false, false, s->k, np, crs, 1.0f, in2, crs, col, np, 0.0f, t, np));
        return nb > 1 ? conv_to_nkp(d, s, nb, t, yc) : RT_OK;
    }
    rt_view dyc = rt_view_at(dir == BWD_DATA ? in : in2, i0 * ys);
    if (nb == 1)
        t = dyc;
    else
        RT_TRY(conv_to_knp(d, s, nb, dyc, t));
    if (dir == BWD_DATA) {
        RT_TRY(ocl_sgemm(d, true, false, crs, np, s->k, 1.0f, in2, crs, t, np, 0.0f, col, np));
        return conv_col2im(d, s, nb, col, rt_view_at(out, i0 * xs));
    }
    return ocl_sgemm(d, false, true, s->k, crs, np, 1.0f, t, np, col, np, i0 ? 1.0f : 0.0f, out,
                     crs);
}

static int gemm_run(rt_dev *d, const struct rt_conv_shape *s, int dir, rt_view in, rt_view in2,
                    rt_view out, rt_view ws)
{
    if (dir == BWD_FILTER && s->n == 0) /* no samples, no gradient; x, dy, ws are unchecked */
        return ocl_sgemm(d, false, true, s->k, (int)conv_crs(s), 0, 1.0f, out, 0, out, 0, 0.0f,
                         out, (int)conv_crs(s));
    const int chunk = conv_chunk(d, s);
    for (int i0 = 0; i0 < s->n; i0 += chunk) {
        const int nb = s->n - i0 < chunk ? s->n - i0 : chunk;
        RT_TRY(gemm_chunk(d, s, dir, i0, nb, in, in2, out, ws));
    }
    return RT_OK;
}

/* ---- the direct path ------------------------------------------------------------------
 * On a CPU device (PoCL) the GEMMs above have 6 to 32 rows, where CLBlast's
 * tiles waste most of their work (3-17 GFLOP/s at LeNet's shapes). The
 * direct kernels instead hold a tile of 2 rows x 8 columns x 6 (or 4)
 * output channels in vector registers, or, for the filter gradient, 3 or 2
 * channels x 3-5 window columns of flat dot products over whole planes
 * (tiles that fit AVX2's 16 vector registers),
 * split over groups of images whose partial sums a last kernel adds in a
 * fixed order. They need stride 1 and (for the backward-data pass, a
 * forward convolution of dy with the flipped filters) padding below the
 * window. RAGTAG_OPENCL_CONV=direct|gemm forces one path where both apply
 * (the tests run both). */

#define DIRECT_V 16 /* packed planes: a multiple of 16 floats (of every kernel's vector) */

static size_t up(size_t a, size_t b) { return (a + b - 1) / b * b; }

/* A packed plane for a direct convolution with output oh x ow and window
 * r x s: rows of wp = ow + s - 1 floats, enough spare rows for every
 * overrunning load, plane stride a multiple of 16 floats. */
struct pack {
    int wp, pr, ps;
};

static struct pack pack_for(int oh, int ow, int r, int s)
{
    struct pack p;
    p.wp = ow + s - 1;
    p.pr = (int)up((size_t)oh, 2) + r + (15 + p.wp - 1) / p.wp;
    p.ps = (int)up((size_t)p.pr * p.wp, DIRECT_V);
    return p;
}

static struct pack pack_fwd(const struct rt_conv_shape *s) { return pack_for(s->oh, s->ow, s->r, s->s); }
static struct pack pack_bwd(const struct rt_conv_shape *s) { return pack_for(s->h, s->w, s->r, s->s); }

/* dy in rows of the forward pack's wp, zeros past ow and up to a multiple
 * of 16 floats: the flat dot products of the filter gradient. */
static int dy_plane(const struct rt_conv_shape *s)
{
    return (int)up((size_t)s->oh * pack_fwd(s).wp, DIRECT_V);
}

/* Groups of images whose filter-gradient partials are summed separately:
 * enough work-items for every core, at most one group per image. */
static int bwdf_groups(rt_dev *d, int nb)
{
    int g = 8 * (ocl(d)->sh->compute_units > 0 ? ocl(d)->sh->compute_units : 1);
    return g < nb ? g : nb;
}

/* Output channels a work-item of the direct kernel: 6 (12 accumulators),
 * or 4 where that leaves fewer idle channels (16, 32, 64: 4 divides them,
 * 6 does not). */
static int direct_kt(int ko)
{
    return up((size_t)ko, 4) < up((size_t)ko, 6) ? 4 : 6;
}

static size_t wpack_size(int ko, int ci, int r, int s)
{
    return up((size_t)ko, (size_t)direct_kt(ko)) * ci * r * s;
}

/* Floats of workspace per image and fixed, for every op of the shape. */
static void direct_ws(const struct rt_conv_shape *s, size_t *per_image, size_t *fixed)
{
    const size_t crs = conv_crs(s);
    const size_t f = (size_t)s->c * pack_fwd(s).ps, b = (size_t)s->k * pack_bwd(s).ps;
    /* (the filter gradient: x and dy packed, <= one group of partials and
     * the bias gradient's plane sums each) */
    const size_t g = f + (size_t)s->k * dy_plane(s) + (size_t)s->k * crs + (size_t)s->k;
    *per_image = f > b ? f : b;
    if (g > *per_image)
        *per_image = g;
    const size_t wf = wpack_size(s->k, s->c, s->r, s->s), wb = wpack_size(s->c, s->k, s->r, s->s);
    *fixed = wf > wb ? wf : wb;
}

static int direct_chunk(rt_dev *d, const struct rt_conv_shape *s)
{
    size_t per, fixed, cap = OCL_CONV_WS_MAX, alloc = ocl(d)->sh->max_alloc / sizeof(float) / 2;
    direct_ws(s, &per, &fixed);
    if (alloc && alloc < cap)
        cap = alloc;
    size_t nb = chunk_knob(cap > fixed ? (cap - fixed) / per : 0);
    if (nb > (size_t)s->n)
        nb = (size_t)s->n;
    return nb < 1 ? 1 : (int)nb;
}

static bool conv_direct(rt_dev *d, const struct rt_conv_shape *s)
{
    if (s->stride_h != 1 || s->stride_w != 1 || s->pad_h > s->r - 1 || s->pad_w > s->s - 1)
        return false;
    const char *env = getenv("RAGTAG_OPENCL_CONV");
    if (env && strcmp(env, "direct") == 0)
        return true;
    if (env && strcmp(env, "gemm") == 0)
        return false;
    return ocl(d)->sh->is_cpu;
}

size_t ocl_conv2d_workspace(rt_dev *d, const struct rt_conv_shape *s)
{
    if (!conv_direct(d, s))
        return gemm_workspace(d, s);
    size_t per, fixed;
    direct_ws(s, &per, &fixed);
    return fixed + (size_t)direct_chunk(d, s) * per;
}

/* planes of h x w from src into packed planes at dst, shifted to (top, left) */
struct plane_job {
    size_t planes;
    int h, w, top, left;
    struct pack p;
    rt_view src, dst;
};

/* the direct kernel's filters w' (ko x ci x r x s; flip: the backward-data
 * pass's) from w into wt */
struct filter_job {
    int ko, ci, r, s, flip;
    rt_view w, wt;
};

static const struct plane_job no_planes = {0, 0, 0, 0, 0, {0, 0, 0}, {NULL, 0}, {NULL, 0}};

/* What the first plane job packs instead of src (dy): g = dy * f'(y) for
 * relu, leaky or identity (kind -1: src itself), and where sums.buf, each
 * plane's sum of g into sums (the planes lie whole in the pack). */
struct plane_act {
    rt_view y;
    int kind;
    float alpha;
    rt_view sums;
};

static const struct plane_act no_act = {{NULL, 0}, -1, 0.0f, {NULL, 0}};

/* act for a chunk's images, off floats into y, with those sums */
static struct plane_act act_chunk(const struct plane_act *act, size_t off, rt_view sums)
{
    struct plane_act a = *act;
    a.y = rt_view_at(a.y, off);
    a.sums = sums;
    return a;
}

/* Up to two plane jobs and a filter job (NULL: none) in one launch; act
 * (NULL: none) applies to the first. */
static int run_packs(rt_dev *d, const struct plane_job *a, const struct plane_act *act,
                     const struct plane_job *b, const struct filter_job *f)
{
    if (!a)
        a = &no_planes;
    if (!b)
        b = &no_planes;
    if (!act)
        act = &no_act;
    const struct filter_job none = {1, 0, 1, 1, 0, {NULL, 0}, {NULL, 0}};
    if (!f)
        f = &none;
    const size_t wblocks = (size_t)(f->ko + direct_kt(f->ko) - 1) / direct_kt(f->ko) * f->ci;
    return ocl_run_n(d, OCL_K_conv_pack, a->planes + b->planes + wblocks,
                     "liiiiiiivvifvivliiiiiiivvliiiiiivv", a->planes, a->h, a->w, a->top,
                     a->left, a->p.pr, a->p.wp, a->p.ps, a->src, a->dst, act->kind,
                     (double)act->alpha, act->y, act->sums.buf != NULL, act->sums, b->planes,
                     b->h, b->w, b->top, b->left, b->p.pr, b->p.wp, b->p.ps, b->src, b->dst,
                     wblocks, f->ko, f->ci, f->r, f->s, f->flip, direct_kt(f->ko), f->w, f->wt);
}

/* Channel bias and a piecewise-linear activation the direct kernel applies
 * as it stores (kind < 0: none). */
struct epilogue {
    rt_view b;
    int kind;
    float alpha;
};

static const struct epilogue no_epilogue = {{NULL, 0}, -1, 0.0f};

/* y[nb][ko][oh][ow] = direct convolution of packed xp (ci channels) with wt,
 * then the epilogue. */
static int run_direct(rt_dev *d, int nb, int ci, int ko, int r, int s, struct pack p, int oh,
                      int ow, rt_view xp, rt_view wt, rt_view y, const struct epilogue *e)
{
    const int kt = direct_kt(ko), v = ocl(d)->conv_v;
    const int nseg = (ow + v - 1) / v, nkb = (ko + kt - 1) / kt;
    size_t items = (size_t)nb * ((oh + 1) / 2) * nseg * nkb;
    const enum ocl_kernel kern = kt == 4 ? (v == 16 ? OCL_K_conv_direct4_v16 : OCL_K_conv_direct4)
                                         : (v == 16 ? OCL_K_conv_direct6_v16 : OCL_K_conv_direct6);
    return ocl_run_n(d, kern, items, "liiiiiiiiiivvvvif", items, ci, ko, r, s, p.wp, p.ps, oh,
                     ow, nseg, nkb, xp, wt, y, e->b, e->kind, (double)e->alpha);
}

/* How far past an unpadded image's start (floats) the forward kernel's
 * loads reach, and the filter gradient's. */
static size_t reach_fwd(rt_dev *d, const struct rt_conv_shape *s)
{
    const int v = ocl(d)->conv_v, nseg = (s->ow + v - 1) / v;
    return (size_t)(s->c - 1) * s->h * s->w + ((size_t)up((size_t)s->oh, 2) + s->r - 2) * s->w +
           (size_t)(nseg - 1) * v + s->s - 1 + v;
}

static size_t reach_bwf(const struct rt_conv_shape *s)
{
    return (size_t)(s->c - 1) * s->h * s->w + (size_t)dy_plane(s) + (size_t)(s->r - 1) * s->w +
           s->s - 1;
}

/* Without padding, the direct kernels can read x where it lies (rows of w,
 * planes of h*w) instead of a packed copy: their loads past a plane's end
 * land in the next image, whose values only reach discarded lanes (forward)
 * or meet zeros of the packed dy (filter gradient). The batch's last image
 * has no next one: both read it in place too where their loads stay inside
 * the buffer's memory (opencl.c allocates every buffer with spare bytes for
 * this), the forward whatever they find there, the filter gradient keeping
 * zeros in those lanes (what lies there need not be finite); otherwise
 * they pack it. */
static bool direct_in_place(rt_dev *d, const struct rt_conv_shape *s, struct pack *xp)
{
    if (s->pad_h != 0 || s->pad_w != 0 || s->n < 2)
        return false;
    const size_t img = (size_t)s->c * s->h * s->w;
    if (reach_fwd(d, s) > 2 * img || reach_bwf(s) > 2 * img)
        return false;
    xp->wp = s->w;
    xp->pr = s->h;
    xp->ps = s->h * s->w;
    return true;
}

/* Whether loads reaching `reach` floats past the start of the batch's last
 * image of x stay inside x's memory object (its spare bytes included). */
static bool tail_readable(rt_dev *d, const struct rt_conv_shape *s, rt_view x, size_t reach)
{
    const size_t last = x.off + (size_t)(s->n - 1) * s->c * s->h * s->w;
    return last + reach <= ocl_buf_readable(d, x.buf) / sizeof(float);
}

static int direct_fwd(rt_dev *d, const struct rt_conv_shape *s, rt_view x, rt_view w, rt_view y,
                      rt_view ws, const struct epilogue *e)
{
    const struct pack p = pack_fwd(s);
    struct pack in;
    const bool in_place = direct_in_place(d, s, &in);
    const bool all = in_place && tail_readable(d, s, x, reach_fwd(d, s));
    const int chunk = all ? s->n : direct_chunk(d, s);
    const size_t xs = (size_t)s->c * s->h * s->w, ys = (size_t)s->k * conv_ohw(s);
    rt_view wt = ws, xp = rt_view_at(ws, wpack_size(s->k, s->c, s->r, s->s));
    const struct filter_job filters = {s->k, s->c, s->r, s->s, 0, w, wt};
    const struct filter_job *unpacked = &filters; /* packed with the first planes */
    for (int i0 = 0; i0 < s->n; i0 += chunk) {
        int nb = s->n - i0 < chunk ? s->n - i0 : chunk;
        if (in_place && i0 + nb == s->n) {
            /* every image straight from x, or all but the batch's last */
            const int direct = all ? nb : nb - 1;
            if (unpacked)
                RT_TRY(run_packs(d, NULL, NULL, NULL, unpacked));
            unpacked = NULL;
            RT_TRY(run_direct(d, direct, s->c, s->k, s->r, s->s, in, s->oh, s->ow,
                              rt_view_at(x, i0 * xs), wt, rt_view_at(y, i0 * ys), e));
            if (all)
                break;
            i0 += nb - 1;
            nb = 1;
        }
        const struct plane_job xj = {(size_t)nb * s->c, s->h, s->w, s->pad_h, s->pad_w, p,
                                     rt_view_at(x, i0 * xs), xp};
        RT_TRY(run_packs(d, &xj, NULL, NULL, unpacked));
        unpacked = NULL;
        RT_TRY(run_direct(d, nb, s->c, s->k, s->r, s->s, p, s->oh, s->ow, xp, wt,
                          rt_view_at(y, i0 * ys), e));
    }
    return RT_OK;
}

/* act (NULL: none): dy stands for the gradient through the activation,
 * made as it is packed (its sums unused here). */
static int direct_bwd_data(rt_dev *d, const struct rt_conv_shape *s, rt_view dy, rt_view w,
                           rt_view dx, rt_view ws, const struct plane_act *act)
{
    const int chunk = direct_chunk(d, s);
    const struct pack p = pack_bwd(s);
    const size_t xs = (size_t)s->c * s->h * s->w, ys = (size_t)s->k * conv_ohw(s);
    rt_view wt = ws, dyp = rt_view_at(ws, wpack_size(s->c, s->k, s->r, s->s));
    const struct filter_job filters = {s->c, s->k, s->r, s->s, 1, w, wt};
    for (int i0 = 0; i0 < s->n; i0 += chunk) {
        const int nb = s->n - i0 < chunk ? s->n - i0 : chunk;
        const struct plane_job dyj = {(size_t)nb * s->k, s->oh, s->ow, s->r - 1 - s->pad_h,
                                      s->s - 1 - s->pad_w, p, rt_view_at(dy, i0 * ys), dyp};
        const struct plane_act a = act_chunk(act ? act : &no_act, i0 * ys, no_act.sums);
        RT_TRY(run_packs(d, &dyj, &a, NULL, i0 == 0 ? &filters : NULL));
        RT_TRY(run_direct(d, nb, s->k, s->c, s->r, s->s, p, s->h, s->w, dyp, wt,
                          rt_view_at(dx, i0 * xs), &no_epilogue));
    }
    return RT_OK;
}

/* One launch of the filter-gradient kernel: the partials of `groups`
 * groups of `per` images (nb in all) into part; x's values from xlim
 * floats on are never used (conv.cl). */
static int run_bwdf(rt_dev *d, const struct rt_conv_shape *s, int nb, int per, int groups,
                    struct pack p, int dps, size_t xlim, rt_view xp, rt_view dyp, rt_view part)
{
    /* window columns a work-item (SJ) by the vector width; channels a
     * work-item: the kernels' KT in conv.cl */
    static const enum ocl_kernel kerns[2][3] = {
        {OCL_K_conv_bwdf5, OCL_K_conv_bwdf3, OCL_K_conv_bwdf4},
        {OCL_K_conv_bwdf5_v16, OCL_K_conv_bwdf3_v16, OCL_K_conv_bwdf4_v16}};
    const int sj = s->s % 5 == 0 ? 0 : s->s % 3 == 0 ? 1 : 2;
    const enum ocl_kernel kern = kerns[ocl(d)->conv_v == 16][sj];
    static const int kts[2][3] = {{2, 3, 2}, {4, 6, 4}};
    const int kt = kts[ocl(d)->conv_v == 16][sj], nkb = (s->k + kt - 1) / kt;
    size_t items = (size_t)nkb * s->c * s->r * groups;
    return ocl_run_n(d, kern, items, "liiiiiiiiiilvvv", items, per, nb, s->c, s->k, s->r, s->s,
                     p.wp, p.ps, dps, nkb, xlim, xp, dyp, part);
}

/* Groups of about equal size for nb images: *per images each. */
static int split_groups(rt_dev *d, int nb, int *per)
{
    if (nb <= 0) {
        *per = 1;
        return 0;
    }
    const int g0 = bwdf_groups(d, nb);
    *per = (nb + g0 - 1) / g0;
    return (nb + *per - 1) / *per;
}

/* In place, the images of a chunk read x where it lies, all but the
 * batch's last unless the loads past it stay in the buffer's memory (the
 * kernel keeps zeros in their lanes); the others are packed. */
static int direct_bwd_filter(rt_dev *d, const struct rt_conv_shape *s, rt_view x, rt_view dy,
                             rt_view dw, rt_view ws, const struct plane_act *act, rt_view db)
{
    const int chunk = direct_chunk(d, s), dps = dy_plane(s);
    const struct pack p = pack_fwd(s);
    struct pack in;
    const bool in_place = direct_in_place(d, s, &in);
    const bool tail = in_place && tail_readable(d, s, x, reach_bwf(s));
    const size_t xs = (size_t)s->c * s->h * s->w, ys = (size_t)s->k * conv_ohw(s);
    const size_t nw = (size_t)s->k * conv_crs(s);
    for (int i0 = 0; i0 < s->n; i0 += chunk) {
        const int nb = s->n - i0 < chunk ? s->n - i0 : chunk;
        const int direct = !in_place ? 0 : i0 + nb < s->n || tail ? nb : nb - 1;
        const int packed = nb - direct;
        int per, pper = 1, pgroups = packed > 0; /* beside images in place: one group */
        const int groups = split_groups(d, direct, &per);
        if (direct == 0)
            pgroups = split_groups(d, packed, &pper);
        rt_view dyp = ws, xp = rt_view_at(dyp, (size_t)nb * s->k * dps);
        rt_view part = rt_view_at(xp, (size_t)packed * s->c * p.ps);
        const struct pack dp = {p.wp, s->oh, dps};
        const struct plane_job dyj = {(size_t)nb * s->k, s->oh, s->ow, 0, 0, dp,
                                      rt_view_at(dy, i0 * ys), dyp};
        const struct plane_job xj = {(size_t)packed * s->c, s->h, s->w, s->pad_h, s->pad_w, p,
                                     rt_view_at(x, (i0 + direct) * xs), xp};
        /* the bias gradient's plane sums after the partials */
        rt_view sums = rt_view_at(part, (size_t)(groups + pgroups) * nw);
        const struct plane_act a = act_chunk(act ? act : &no_act, i0 * ys,
                                             db.buf ? sums : no_act.sums);
        RT_TRY(run_packs(d, &dyj, &a, &xj, NULL));
        if (direct > 0)
            RT_TRY(run_bwdf(d, s, direct, per, groups, in, dps, (size_t)(s->n - i0) * xs,
                            rt_view_at(x, i0 * xs), dyp, part));
        if (packed > 0) {
            RT_TRY(run_bwdf(d, s, packed, pper, pgroups, p, dps, (size_t)packed * s->c * p.ps,
                            xp, rt_view_at(dyp, (size_t)direct * s->k * dps),
                            rt_view_at(part, (size_t)groups * nw)));
        }
        const int kb = act && db.buf ? s->k : 0;
        RT_TRY(ocl_run_n(d, OCL_K_conv_bwdf_sum, nw + (size_t)kb, "liivviivv", nw,
                         groups + pgroups, i0 > 0 ? 1 : 0, part, dw, nb, kb, sums, db));
    }
    return RT_OK;
}

/* ---- the ops ------------------------------------------------------------------------- */

int ocl_conv2d_fwd(rt_dev *d, const struct rt_conv_shape *s, rt_view x, rt_view w, rt_view y,
                   rt_view ws)
{
    double t0 = ocl_prof_begin(d);
    int rc = conv_direct(d, s) ? direct_fwd(d, s, x, w, y, ws, &no_epilogue)
                               : gemm_run(d, s, FWD, x, w, y, ws);
    ocl_prof_end(d, t0, "[conv2d_fwd]");
    return rc;
}

/* The direct kernel adds the bias and applies relu, leaky or identity as it
 * stores; otherwise conv2d_fwd, bias_add and act_fwd in sequence. The same
 * values either way. */
int ocl_conv2d_fwd_bias_act(rt_dev *d, const struct rt_conv_shape *s, rt_view x, rt_view w,
                            rt_view b, enum rt_act kind, float alpha, rt_view y, rt_view ws)
{
    if (kind < RT_ACT_IDENTITY || kind > RT_ACT_TANH)
        return rt_error(RT_ERR_UNSUPPORTED, "opencl: unknown activation %d", (int)kind);
    if (conv_direct(d, s) && kind <= RT_ACT_LEAKY) {
        const struct epilogue e = {b, (int)kind, alpha};
        double t0 = ocl_prof_begin(d);
        int rc = direct_fwd(d, s, x, w, y, ws, &e);
        ocl_prof_end(d, t0, "[conv2d_fwd]");
        return rc;
    }
    RT_TRY(ocl_conv2d_fwd(d, s, x, w, y, ws));
    return ocl_bias_act_fwd(d, kind, alpha, s->n, s->k, s->oh * s->ow, b, y);
}

/* The direct convolutions: g = dy * f'(y) is made as each gradient's pack
 * reads dy (both packed it anyway), and the bias gradient from the filter
 * gradient's pack's plane sums: no pass of its own over y and dy, no g
 * written, two launches fewer. Otherwise the three ops it fuses, with g in
 * its scratch view. */
int ocl_conv2d_bwd_act(rt_dev *d, const struct rt_conv_shape *s, enum rt_act kind, float alpha,
                       rt_view x, rt_view y, rt_view dy, rt_view w, rt_view g, rt_view dx,
                       rt_view dw, rt_view db, rt_view ws)
{
    if (s->n > 0 && kind >= RT_ACT_IDENTITY && kind <= RT_ACT_LEAKY && conv_direct(d, s)) {
        const struct plane_act act = {y, (int)kind, alpha, {NULL, 0}};
        double t0 = ocl_prof_begin(d);
        int rc = direct_bwd_filter(d, s, x, dy, dw, ws, &act, db);
        if (rc == RT_OK && dx.buf)
            rc = direct_bwd_data(d, s, dy, w, dx, ws, &act);
        ocl_prof_end(d, t0, "[conv2d_bwd_act]");
        return rc;
    }
    const size_t hw = (size_t)s->oh * s->ow, yn = (size_t)s->n * s->k * hw;
    if (db.buf)
        RT_TRY(ocl_act_bias_bwd(d, kind, alpha, s->n, s->k, (int)hw, y, dy, g, db));
    else if (kind != RT_ACT_IDENTITY && yn > 0)
        RT_TRY(ocl_act_bwd(d, kind, alpha, yn, y, y, dy, g));
    const rt_view gd = db.buf || kind != RT_ACT_IDENTITY ? g : dy;
    RT_TRY(ocl_conv2d_bwd_filter(d, s, x, gd, dw, ws));
    return dx.buf && s->n > 0 ? ocl_conv2d_bwd_data(d, s, gd, w, dx, ws) : RT_OK;
}

int ocl_conv2d_bwd_data(rt_dev *d, const struct rt_conv_shape *s, rt_view dy, rt_view w,
                        rt_view dx, rt_view ws)
{
    double t0 = ocl_prof_begin(d);
    int rc = conv_direct(d, s) ? direct_bwd_data(d, s, dy, w, dx, ws, NULL)
                               : gemm_run(d, s, BWD_DATA, dy, w, dx, ws);
    ocl_prof_end(d, t0, "[conv2d_bwd_data]");
    return rc;
}

int ocl_conv2d_bwd_filter(rt_dev *d, const struct rt_conv_shape *s, rt_view x, rt_view dy,
                          rt_view dw, rt_view ws)
{
    double t0 = ocl_prof_begin(d);
    int rc;
    if (s->n == 0 || !conv_direct(d, s))
        rc = gemm_run(d, s, BWD_FILTER, x, dy, dw, ws);
    else
        rc = direct_bwd_filter(d, s, x, dy, dw, ws, NULL, (rt_view){NULL, 0});
    ocl_prof_end(d, t0, "[conv2d_bwd_filter]");
    return rc;
}
