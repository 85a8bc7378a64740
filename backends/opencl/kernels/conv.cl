/* conv.cl — the batched im2col / col2im of the opencl backend's convolution
 * and the two permutations between image-major and channel-major layouts.
 *
 * For a chunk of nb images the column matrix is crs x (nb*ohw): row
 * (ch*r + i)*s + j, column (ni*oh + oy)*ow + ox. One GEMM then covers the
 * whole chunk (backends/opencl/conv.c). All four are row kernels: one
 * work-item writes one row of ow (or w) consecutive values, so the index
 * arithmetic is paid per row, not per element. */

/* col[row][ni][oy][0..ow) for every (row, ni, oy). */
kernel void rt_im2col(int nb, int c, int h, int w, int r, int s, int sh, int sw, int ph, int pw,
                      int oh, int ow, global const float *x, ulong xo, global float *col,
                      ulong co)
{
    RT_ELEM(t, (ulong)c * r * s * nb * oh);
    const int oy = (int)(t % oh);
    const ulong u = t / oh;
    const int ni = (int)(u % nb), row = (int)(u / nb);
    const int ch = row / (r * s), rs = row % (r * s), i = rs / s, j = rs % s;
    const int iy = oy * sh - ph + i;
    global float *dst = col + co + t * ow;
    if (iy < 0 || iy >= h) {
        for (int ox = 0; ox < ow; ox++)
            dst[ox] = 0.0f;
        return;
    }
    global const float *src = x + xo + (((ulong)ni * c + ch) * h + iy) * w;
    /* [lo, hi): the columns whose input lies inside the row */
    const int a = pw - j, lo = a <= 0 ? 0 : min((a + sw - 1) / sw, ow);
    const int b = w - 1 + pw - j, hi = b < 0 ? 0 : clamp(b / sw + 1, lo, ow);
    for (int ox = 0; ox < lo; ox++)
        dst[ox] = 0.0f;
    for (int ox = lo; ox < hi; ox++)
        dst[ox] = src[ox * sw - pw + j];
    for (int ox = hi; ox < ow; ox++)
        dst[ox] = 0.0f;
}

/* dx[ni][ch][iy][0..w) = the sum of the column entries im2col copied from
 * each element. The windows are walked in (i, j) order — the order in which
 * the cpu backend's col2im adds them, so the sums agree. Overwrites dx. */
kernel void rt_col2im(int nb, int c, int h, int w, int r, int s, int sh, int sw, int ph, int pw,
                      int oh, int ow, global const float *col, ulong co, global float *dx,
                      ulong dxo)
{
    RT_ELEM(t, (ulong)nb * c * h);
    const int iy = (int)(t % h);
    const ulong u = t / h;
    const int ch = (int)(u % c), ni = (int)(u / c);
    const ulong np = (ulong)nb * oh * ow;
    global const float *cb = col + co + (ulong)ch * r * s * np + (ulong)ni * oh * ow;
    global float *dst = dx + dxo + t * w;
    /* output rows oy with 0 <= iy + ph - oy*sh < r, highest first (i rising) */
    const int ty = iy + ph;
    const int oy_hi = min(ty / sh, oh - 1), oy_lo = ty < r ? 0 : (ty - r) / sh + 1;
    for (int ix = 0; ix < w; ix++) {
        const int tx = ix + pw;
        const int ox_hi = min(tx / sw, ow - 1), ox_lo = tx < s ? 0 : (tx - s) / sw + 1;
        float acc = 0.0f;
        for (int oy = oy_hi; oy >= oy_lo; oy--) {
            const int i = ty - oy * sh;
            for (int ox = ox_hi; ox >= ox_lo; ox--) {
                const int j = tx - ox * sw;
                acc += cb[((ulong)i * s + j) * np + oy * ow + ox];
            }
        }
        dst[ix] = acc;
    }
}

/* dst[k][ni*p + i] = src[ni][k][i]: image-major to channel-major. */
kernel void rt_nkp_to_knp(int nb, int k, int p, global const float *src, ulong so,
                          global float *dst, ulong dso)
{
    RT_ELEM(t, (ulong)nb * k);
    const int ni = (int)(t / k), kk = (int)(t % k);
    global const float *a = src + so + t * p;
    global float *b = dst + dso + ((ulong)kk * nb + ni) * p;
    for (int i = 0; i < p; i++)
        b[i] = a[i];
}

/* dst[ni][k][i] = src[k][ni*p + i]: channel-major back to image-major. */
kernel void rt_knp_to_nkp(int nb, int k, int p, global const float *src, ulong so,
                          global float *dst, ulong dso)
{
    RT_ELEM(t, (ulong)nb * k);
    const int ni = (int)(t / k), kk = (int)(t % k);
    global const float *a = src + so + ((ulong)kk * nb + ni) * p;
    global float *b = dst + dso + t * p;
    for (int i = 0; i < p; i++)
        b[i] = a[i];
}

/* ---- direct convolution for CPU devices (PoCL) --------------------------------------
 * Stride-1 convolutions without a column matrix or a skinny GEMM. Every
 * work-item owns a register tile of explicit vectors of V floats, which
 * PoCL compiles to whole SIMD registers; the loops run over contiguous
 * memory. A tile must fit the registers with its operands: float8 for
 * AVX2's 16 (float16 tiles there were spilled and ran 2-4.6x slower), the
 * same tile in float16 where the device prefers 16-float vectors
 * (AVX-512's 32 registers: each instruction does twice the work; the host
 * picks, conv.c). Each kernel is built for both, suffixed _v16.
 * The input is first copied into a zero-padded layout ("packed": planes of
 * pr rows of wp floats, plane stride ps, with spare zero rows at the end),
 * so that no load needs a bounds test: lanes past a row's end read the next
 * row or the spare rows, and their results are never stored.
 *   forward     y  = direct(pack(x, pad), w)
 *   bwd-data    dx = direct(pack(dy, r-1-pad), w flipped and transposed)
 *   bwd-filter  dw = sum over images of pack(dy) (.) shifted pack(x),
 *               as flat dot products over the packed planes. */

/* n zeros from d */
void rt_zero_span(global float *d, int n)
{
    int j = 0;
    for (; j + 8 <= n; j += 8)
        vstore8((float8)0.0f, 0, d + j);
    for (; j < n; j++)
        d[j] = 0.0f;
}

/* Packed plane p, dst[p*ps + 0..ps), is src plane p (h x w) shifted to
 * (top, left) in rows of wp, zeros around it and in the tail [pr*wp, ps).
 * Each float is written once: the zero rows above and below, then each
 * image row between its margins' zeros (left + w <= wp: the direct
 * kernels' packs). Zeroing the whole plane first wrote lenet's conv1
 * planes almost twice.
 * kind >= 0: g = src * f'(y) is packed instead of src (relu, leaky or
 * identity from the activation's output y, as rt_act_bias_grad_cpu), and
 * where `sums`, the plane's sum of g goes to sum[p] (its part of the bias
 * gradient; the plane lies whole in the pack: 0 <= top, top + h <= pr). A
 * [conv]'s backward packs g straight from dy and y this way for both of its
 * gradients instead of writing g first and packing it twice. */
void rt_pack_plane(ulong p, int h, int w, int top, int left, int pr, int wp, int ps,
                   global const float *src, global const float *y, int kind, float alpha,
                   int sums, global float *sum, global float *dst)
{
    global float *d = dst + p * ps;
    global const float *sp = src + p * h * w, *yp = y + p * h * w;
    const int y0 = max(top, 0), y1 = max(min(top + h, pr), y0);
    const float a1 = kind == RT_ACT_RELU ? 0.0f : kind == RT_ACT_LEAKY ? alpha : 1.0f;
    const float8 a8 = (float8)a1;
    acc8_t s8 = (acc8_t)0;
    acc_t s1 = 0;
    rt_zero_span(d, y0 * wp);
    rt_zero_span(d + y1 * wp, ps - y1 * wp);
    for (int row = y0; row < y1; row++) {
        global const float *g = sp + (ulong)(row - top) * w, *m = yp + (ulong)(row - top) * w;
        global float *e = d + (ulong)row * wp;
        for (int j = 0; j < left; j++)
            e[j] = 0.0f;
        e += left;
        int j = 0;
        if (kind < 0) {
            for (; j + 8 <= w; j += 8)
                vstore8(vload8(0, g + j), 0, e + j);
            for (; j < w; j++)
                e[j] = g[j];
        } else {
            for (; j + 8 <= w; j += 8) {
                const float8 v = vload8(0, g + j);
                const float8 t = select(a8 * v, v, vload8(0, m + j) > (float8)0.0f);
                vstore8(t, 0, e + j);
                if (sums)
                    s8 += rt_convert_acc8(t);
            }
            for (; j < w; j++) {
                const float t = m[j] > 0.0f ? g[j] : a1 * g[j];
                e[j] = t;
                s1 += t;
            }
        }
        for (j = left + w; j < wp; j++)
            e[j - left] = 0.0f;
    }
    if (sums)
        sum[p] = (float)(s1 + (((s8.s0 + s8.s1) + (s8.s2 + s8.s3)) +
                               ((s8.s4 + s8.s5) + (s8.s6 + s8.s7))));
}

/* The direct kernel's weights of output channels kb*kt .. kb*kt+kt-1 and
 * input channel ch: wt[kb][ch][i][j][q] = w'[kb*kt + q][ch][i][j] (zero for
 * channels past ko), where w' = w (flip 0) or w with k and c swapped and
 * the window flipped (flip 1, the backward-data convolution). ko, ci:
 * output and input channels of w'. */
void rt_pack_filters(int kb, int ch, int ko, int ci, int r, int s, int flip, int kt,
                     global const float *w, global float *wt)
{
    global float *o = wt + ((ulong)kb * ci + ch) * r * s * kt;
    for (int i = 0; i < r; i++)
        for (int j = 0; j < s; j++)
            for (int q = 0; q < kt; q++) {
                const int kk = kb * kt + q;
                float v = 0.0f;
                if (kk < ko)
                    v = flip ? w[(((ulong)ch * ko + kk) * r + (r - 1 - i)) * s + (s - 1 - j)]
                             : w[(((ulong)kk * ci + ch) * r + i) * s + j];
                *o++ = v;
            }
}

/* Everything a direct convolution packs, in one launch (on PoCL each
 * launch costs tens of microseconds of waiting): `planes` packed planes
 * (rt_pack_plane) of one tensor, then `planes2` of another (their own
 * geometry), then `wblocks` = nkb * ci blocks of filters (rt_pack_filters).
 * Any of the three may be empty. A work-item a plane or a block: rows of
 * 20-40 floats were too little work for a work-item on a CPU device. */
kernel void rt_conv_pack(ulong planes, int h, int w, int top, int left, int pr, int wp, int ps,
                         global const float *src, ulong so, global float *dst, ulong dso,
                         int kind, float alpha, global const float *y, ulong yo, int sums,
                         global float *sum, ulong sumo,
                         ulong planes2, int h2, int w2, int top2, int left2, int pr2, int wp2,
                         int ps2, global const float *src2, ulong so2, global float *dst2,
                         ulong dso2, ulong wblocks, int ko, int ci, int r, int s, int flip,
                         int kt, global const float *wf, ulong wfo, global float *wt, ulong wto)
{
    RT_ELEM(p, planes + planes2 + wblocks);
    if (p < planes)
        rt_pack_plane(p, h, w, top, left, pr, wp, ps, src + so, y + yo, kind, alpha, sums,
                      sum + sumo, dst + dso);
    else if (p < planes + planes2)
        rt_pack_plane(p - planes, h2, w2, top2, left2, pr2, wp2, ps2, src2 + so2, src2 + so2,
                      -1, 0.0f, 0, dst2 + dso2, dst2 + dso2);
    else
        rt_pack_filters((int)((p - planes - planes2) / ci), (int)((p - planes - planes2) % ci),
                        ko, ci, r, s, flip, kt, wf + wfo, wt + wto);
}

/* rt_bias_act_lin's values, a vector at a time: t = y + b, then relu,
 * leaky or identity by the same select. */
float8 rt_bias_act_lin8(float8 y, float b, int kind, float alpha)
{
    const float8 t = y + (float8)b;
    const float8 neg = kind == RT_ACT_RELU ? (float8)0.0f : kind == RT_ACT_LEAKY ? alpha * t : t;
    return select(neg, t, t > (float8)0.0f);
}

float16 rt_bias_act_lin16(float16 y, float b, int kind, float alpha)
{
    return (float16)(rt_bias_act_lin8(y.lo, b, kind, alpha),
                     rt_bias_act_lin8(y.hi, b, kind, alpha));
}

/* y[ni][k][oy][ox] = sum_{ch,i,j} w[k][ch][i][j] * xp[ni][ch][oy+i][ox+j]
 * (stride 1; xp packed, planes of pr x wp at stride ps; wt from
 * rt_pack_filters with the same KT), then, where kind >= 0, channel k's bias
 * b[k] and the activation as rt_bias_act_lin (one pass fewer, one launch
 * fewer; the same values). One work-item: output rows oy, oy+1,
 * columns ox..ox+V-1, channels k0..k0+KT-1: 2 KT vector accumulators (KT 6:
 * 12, which with the two input vectors and a weight fill AVX2's 16
 * registers; KT 4 for channel counts that 4 divides and 6 does not).
 * Work-item order: channel block fastest, then column segment, row pair,
 * image, so that neighbours share their input rows. */
#define RT_CONV_DIRECT(NAME, KT, V)                                                                \
    kernel void NAME(ulong items, int c, int k, int r, int s, int wp, int ps, int oh, int ow,      \
                     int nseg, int nkb, global const float *xp, ulong xpo,                         \
                     global const float *wt, ulong wto, global float *y, ulong yo,                 \
                     global const float *b, ulong bo, int kind, float alpha)                       \
    {                                                                                              \
        RT_ELEM(t, items);                                                                         \
        const int kb = (int)(t % nkb);                                                             \
        ulong u = t / nkb;                                                                         \
        const int seg = (int)(u % nseg);                                                           \
        u /= nseg;                                                                                 \
        const int pairs = (oh + 1) / 2;                                                            \
        const int oy = (int)(u % pairs) * 2;                                                       \
        const ulong ni = u / pairs;                                                                \
        const int ox = seg * V, k0 = kb * KT;                                                      \
        global const float *xb = xp + xpo + ni * c * ps + (ulong)oy * wp + ox;                     \
        global const float *wb = wt + wto + (ulong)kb * c * r * s * KT;                            \
        float##V a0[KT], a1[KT];                                                                   \
        _Pragma("unroll")                                                                          \
        for (int q = 0; q < KT; q++)                                                               \
            a0[q] = a1[q] = (float##V)0.0f;                                                        \
        for (int ch = 0; ch < c; ch++) {                                                           \
            for (int i = 0; i < r; i++) {                                                          \
                global const float *x0 = xb + (ulong)ch * ps + i * wp;                             \
                for (int j = 0; j < s; j++) {                                                      \
                    const float##V v0 = vload##V(0, x0 + j), v1 = vload##V(0, x0 + wp + j);        \
                    /* a broadcast load per weight, not a shuffle of a                             \
                     * vector load: the shuffle port is the FMA port on x86 */                     \
                    _Pragma("unroll")                                                              \
                    for (int q = 0; q < KT; q++) {                                                 \
                        const float##V wv = (float##V)wb[q];                                       \
                        a0[q] = RT_MAD(wv, v0, a0[q]);                                             \
                        a1[q] = RT_MAD(wv, v1, a1[q]);                                             \
                    }                                                                              \
                    wb += KT;                                                                      \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
        const int nv = min(ow - ox, V);                                                            \
        const bool second = oy + 1 < oh;                                                           \
        _Pragma("unroll")                                                                          \
        for (int q = 0; q < KT; q++) {                                                             \
            if (k0 + q >= k)                                                                       \
                break;                                                                             \
            global float *yp = y + yo + ((ni * k + k0 + q) * oh + oy) * ow + ox;                   \
            if (kind >= 0) {                                                                       \
                const float bq = b[bo + k0 + q];                                                   \
                a0[q] = rt_bias_act_lin##V(a0[q], bq, kind, alpha);                                \
                a1[q] = rt_bias_act_lin##V(a1[q], bq, kind, alpha);                                \
            }                                                                                      \
            rt_vstore_part##V(a0[q], nv, yp);                                                      \
            if (second)                                                                            \
                rt_vstore_part##V(a1[q], nv, yp + ow);                                             \
        }                                                                                          \
    }

RT_CONV_DIRECT(rt_conv_direct6, 6, 8)
RT_CONV_DIRECT(rt_conv_direct4, 4, 8)
RT_CONV_DIRECT(rt_conv_direct6_v16, 6, 16)
RT_CONV_DIRECT(rt_conv_direct4_v16, 4, 16)

/* The lanes' own indices, 0 .. V-1. */
#define RT_IOTA8 ((int8)(0, 1, 2, 3, 4, 5, 6, 7))
#define RT_IOTA16 ((int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15))

/* acc[q][j] += dy's row q (at p) times xv[j], in RT_CONV_BWDF's loop */
#define RT_BWDF_MADS(KT, SJ, V)                                                                    \
    _Pragma("unroll")                                                                              \
    for (int q = 0; q < KT; q++) {                                                                 \
        const float##V dv = vload##V(0, dr + dq[q] + p);                                           \
        _Pragma("unroll")                                                                          \
        for (int j = 0; j < SJ; j++)                                                               \
            acc[q][j] = RT_MAD(dv, xv[j], acc[q][j]);                                              \
    }

/* Partial filter gradients of one group of images, by flat dot products:
 * part[g][k][ch][i][j] = sum over images ni of group g, and q < dps, of
 * dyp[ni][k][q] * xp[ni][ch][i*wp + j + q], where dyp holds dy in rows of
 * wp (zeros past ow and past oh*wp: those lanes add nothing). Values of xp
 * from xlim floats on (past the batch's last image, read in place) may be
 * anything, even NaN: the loads that reach them keep zeros there instead,
 * so every lane's product is that of a zero-padded copy. One work-item:
 * KT channels x SJ window columns of one (ch, i), for every j0 = 0, SJ, ..
 * (KT x SJ accumulators, SJ x vectors and one of dy fit AVX2's 16
 * registers in vectors of 8, and AVX-512's 32 in vectors of 16 with twice
 * the channels, so that each x load feeds twice the products: the loads,
 * not the FMAs, bound this loop; columns past s computed on a duplicate
 * and not stored). Work-item order: channel block fastest, then ch, i,
 * group. */
#define RT_CONV_BWDF(NAME, SJ, KT, V)                                                              \
    kernel void NAME(ulong items, int per, int n, int c, int k, int r, int s, int wp, int ps,      \
                     int dps, int nkb, ulong xlim, global const float *xp, ulong xpo,              \
                     global const float *dyp, ulong dyo, global float *part, ulong po)             \
    {                                                                                              \
        RT_ELEM(t, items);                                                                         \
        const int kb = (int)(t % nkb);                                                             \
        ulong u = t / nkb;                                                                         \
        const int ch = (int)(u % c);                                                               \
        u /= c;                                                                                    \
        const int i = (int)(u % r), g = (int)(u / r);                                              \
        const int n0 = g * per, n1 = min(n, n0 + per), k0 = kb * KT;                               \
        int dq[KT];                                                                                \
        _Pragma("unroll")                                                                          \
        for (int q = 0; q < KT; q++)                                                               \
            dq[q] = min(k0 + q, k - 1) * dps;                                                      \
        for (int j0 = 0; j0 < s; j0 += SJ) {                                                       \
            int jj[SJ];                                                                            \
            _Pragma("unroll")                                                                      \
            for (int j = 0; j < SJ; j++)                                                           \
                jj[j] = i * wp + min(j0 + j, s - 1);                                               \
            float##V acc[KT][SJ];                                                                  \
            _Pragma("unroll")                                                                      \
            for (int q = 0; q < KT; q++)                                                           \
                _Pragma("unroll")                                                                  \
                for (int j = 0; j < SJ; j++)                                                       \
                    acc[q][j] = (float##V)0.0f;                                                    \
            for (int ni = n0; ni < n1; ni++) {                                                     \
                const ulong xo = ((ulong)ni * c + ch) * ps;                                        \
                global const float *xr = xp + xpo + xo;                                            \
                global const float *dr = dyp + dyo + (ulong)ni * k * dps;                          \
                /* loads at xr + lim and on keep zeros (jj rises with j) */                        \
                const long lim = (long)xlim - (long)xo;                                            \
                if (jj[SJ - 1] + dps <= lim) {                                                     \
                    for (int p = 0; p < dps; p += V) {                                             \
                        float##V xv[SJ];                                                           \
                        _Pragma("unroll")                                                          \
                        for (int j = 0; j < SJ; j++)                                               \
                            xv[j] = vload##V(0, xr + jj[j] + p);                                   \
                        RT_BWDF_MADS(KT, SJ, V);                                                   \
                    }                                                                              \
                } else {                                                                           \
                    for (int p = 0; p < dps; p += V) {                                             \
                        float##V xv[SJ];                                                           \
                        _Pragma("unroll")                                                          \
                        for (int j = 0; j < SJ; j++)                                               \
                            xv[j] = select((float##V)0.0f, vload##V(0, xr + jj[j] + p),            \
                                           RT_IOTA##V + (jj[j] + p) < (int##V)(int)lim);           \
                        RT_BWDF_MADS(KT, SJ, V);                                                   \
                    }                                                                              \
                }                                                                                  \
            }                                                                                      \
            _Pragma("unroll")                                                                      \
            for (int q = 0; q < KT; q++)                                                           \
                _Pragma("unroll")                                                                  \
                for (int j = 0; j < SJ; j++) {                                                     \
                    if (k0 + q < k && j0 + j < s)                                                  \
                        part[po + (((ulong)g * k + k0 + q) * c + ch) * r * s + i * s + j0 +        \
                             j] = rt_hsum##V(acc[q][j]);                                           \
                }                                                                                  \
        }                                                                                          \
    }

RT_CONV_BWDF(rt_conv_bwdf3, 3, 3, 8)
RT_CONV_BWDF(rt_conv_bwdf5, 5, 2, 8)
RT_CONV_BWDF(rt_conv_bwdf4, 4, 2, 8)
RT_CONV_BWDF(rt_conv_bwdf3_v16, 3, 6, 16)
RT_CONV_BWDF(rt_conv_bwdf5_v16, 5, 4, 16)
RT_CONV_BWDF(rt_conv_bwdf4_v16, 4, 4, 16)

/* Element kernel: dw[e] (+)= the sum of the groups' partials, in group
 * order (a fixed order: a run repeats exactly). */
kernel void rt_conv_bwdf_sum(ulong n, int groups, int add, global const float *part, ulong po,
                             global float *dw, ulong dwo, int nb, int k,
                             global const float *sums, ulong so, global float *db, ulong dbo)
{
    RT_ELEM(e, n + (ulong)k);
    if (e >= n) { /* the bias gradient: channel e - n's plane sums, image by image */
        const int c = (int)(e - n);
        float v = add ? db[dbo + c] : 0.0f;
        for (int i = 0; i < nb; i++)
            v += sums[so + (ulong)i * k + c];
        db[dbo + c] = v;
        return;
    }
    float v = add ? dw[dwo + e] : 0.0f;
    for (int g = 0; g < groups; g++)
        v += part[po + (ulong)g * n + e];
    dw[dwo + e] = v;
}
