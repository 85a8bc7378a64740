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
