/* nn.cl — bias, pooling, softmax + cross-entropy and batch norm (maths in
 * backends/backend.h). Per-channel sums run one work-group per channel with
 * a tree reduction in local memory; the rest are row kernels (one
 * work-item per row of the output), so no kernel needs atomics for data and
 * results do not depend on scheduling. */

/* Row kernel: one (image, channel) plane per work-item. */
kernel void rt_bias_add(ulong planes, int c, int hw, global const float *b, ulong bo,
                        global float *y, ulong yo)
{
    RT_ELEM(p, planes);
    const float v = b[bo + p % c];
    global float *q = y + yo + p * hw;
    for (int i = 0; i < hw; i++)
        q[i] += v;
}

/* The index of element t of channel j's n*hw values. */
#define RT_CH_INDEX(t, j) ((((t) / hw) * c + (j)) * hw + (t) % hw)

/* Sum of channel j's values of x (n images of c planes of hw), by one work
 * group: planes of at least a group's width run division-free. */
acc_t rt_channel_sum(local acc_t *scratch, global const float *x, int n, int c, int hw, int j)
{
    const uint t0 = get_local_id(0), L = get_local_size(0);
    acc_t s = 0;
    if (hw >= (int)L) {
        for (int i = 0; i < n; i++) {
            global const float *p = x + ((ulong)i * c + j) * hw;
            for (int k = t0; k < hw; k += L)
                s += p[k];
        }
    } else {
        const ulong cnt = (ulong)n * hw;
        for (ulong t = t0; t < cnt; t += L)
            s += x[RT_CH_INDEX(t, j)];
    }
    return rt_group_sum(scratch, s);
}

/* Reduction: one group per channel j, db[j] = sum over images and positions. */
kernel void rt_bias_grad(int n, int c, int hw, global const float *dy, ulong dyo,
                         global float *db, ulong dbo)
{
    local acc_t scratch[RT_RED];
    const int j = get_group_id(0);
    const acc_t s = rt_channel_sum(scratch, dy + dyo, n, c, hw, j);
    if (get_local_id(0) == 0)
        db[dbo + j] = (float)s;
}

/* For CPU devices, one work-item per channel (kind S: small groups), each
 * summing its n planes with vector loads; double accumulators where the
 * device has them, like rt_bias_grad. */
#if RT_FP64
typedef double8 acc8_t;
#define rt_convert_acc8 convert_double8
#else
typedef float8 acc8_t;
#define rt_convert_acc8 convert_float8
#endif

kernel void rt_bias_grad_cpu(int n, int c, int hw, global const float *dy, ulong dyo,
                             global float *db, ulong dbo)
{
    RT_ELEM(j, c);
    acc8_t s8 = (acc8_t)0;
    acc_t s = 0;
    for (int i = 0; i < n; i++) {
        global const float *p = dy + dyo + ((ulong)i * c + j) * hw;
        int k = 0;
        for (; k + 8 <= hw; k += 8)
            s8 += rt_convert_acc8(vload8(0, p + k));
        for (; k < hw; k++)
            s += p[k];
    }
    const acc_t t = ((s8.s0 + s8.s1) + (s8.s2 + s8.s3)) + ((s8.s4 + s8.s5) + (s8.s6 + s8.s7));
    db[dbo + j] = (float)(s + t);
}

/* bias_add then rt_act_fwd_lin in one pass over each plane: relu, leaky
 * and identity (the same values: t = y + b, then the same select). */
kernel void rt_bias_act_lin(ulong planes, int c, int hw, int kind, float alpha,
                            global const float *b, ulong bo, global float *y, ulong yo)
{
    RT_ELEM(p, planes);
    const float v = b[bo + p % c];
    global float *q = y + yo + p * hw;
    for (int i = 0; i < hw; i++) {
        const float t = q[i] + v;
        const float neg = kind == RT_ACT_RELU ? 0.0f : kind == RT_ACT_LEAKY ? alpha * t : t;
        q[i] = t > 0.0f ? t : neg;
    }
}

/* rt_act_bwd_lin with y for x, then rt_bias_grad_cpu of dx, in one pass:
 * channel j's dx written and summed in rt_bias_grad_cpu's order. dx may
 * be dy. CPU devices. */
kernel void rt_act_bias_grad_cpu(int kind, float alpha, int n, int c, int hw,
                                 global const float *y, ulong yo, global const float *dy,
                                 ulong dyo, global float *dx, ulong dxo, global float *db,
                                 ulong dbo)
{
    RT_ELEM(j, c);
    acc8_t s8 = (acc8_t)0;
    acc_t s = 0;
    const float8 a8 = (float8)(kind == RT_ACT_RELU ? 0.0f : kind == RT_ACT_LEAKY ? alpha : 1.0f);
    const float a1 = kind == RT_ACT_RELU ? 0.0f : kind == RT_ACT_LEAKY ? alpha : 1.0f;
    for (int i = 0; i < n; i++) {
        const ulong o = ((ulong)i * c + j) * hw;
        global const float *yp = y + yo + o, *gp = dy + dyo + o;
        global float *dp = dx + dxo + o;
        int k = 0;
        for (; k + 8 <= hw; k += 8) {
            const float8 g = vload8(0, gp + k);
            const float8 d = select(kind == RT_ACT_IDENTITY ? g : a8 * g, g,
                                    vload8(0, yp + k) > (float8)0.0f);
            vstore8(d, 0, dp + k);
            s8 += rt_convert_acc8(d);
        }
        for (; k < hw; k++) {
            const float g = gp[k];
            const float d = yp[k] > 0.0f ? g : kind == RT_ACT_IDENTITY ? g : a1 * g;
            dp[k] = d;
            s += d;
        }
    }
    const acc_t t = ((s8.s0 + s8.s1) + (s8.s2 + s8.s3)) + ((s8.s4 + s8.s5) + (s8.s6 + s8.s7));
    db[dbo + j] = (float)(s + t);
}

/* The two input rows (r0, and r0 + 2*ow) of windows ox..ox+7 of an output
 * row whose first input row starts `at` floats into x (end floats in all),
 * nv of the windows real: whole vectors where x holds them, reading into
 * the rows after (lanes never stored), lane by lane near its end. */
void rt_pool2_rows(global const float *r0, ulong at, int ow, int ox, int nv, ulong end,
                   float16 *u, float16 *v)
{
    global const float *a0 = r0 + 2 * ox, *a1 = a0 + 2 * ow;
    const bool room = at + 2 * ow + 2 * ox + 16 <= end;
    *u = room ? vload16(0, a0) : rt_vload_part(2 * nv, a0);
    *v = room ? vload16(0, a1) : rt_vload_part(2 * nv, a1);
}

/* 2x2 max pooling with stride 2 on planes that the windows tile exactly
 * (h = 2*oh, w = 2*ow), for CPU devices: one work-item per plane (a row
 * was too little work for a work-item), row after row, 8 windows per step
 * as float16 vectors (even and odd lanes). A row's
 * last partial step loads whole vectors too, reading into the rows after
 * it (those lanes are never stored); only near the buffer's end, where no
 * rows follow, does it load lane by lane. The arg-max rule of
 * rt_pool_argmax: the first maximal element in row-major order (strict
 * '>'). */
kernel void rt_maxpool2_fwd(ulong planes, int oh, int ow, global const float *x, ulong xo,
                            global float *y, ulong yo)
{
    RT_ELEM(p, planes);
    const ulong end = planes * oh * 4 * ow; /* x's floats */
    for (int ry = 0; ry < oh; ry++) {
        const ulong t = p * oh + ry;
        global const float *r0 = x + xo + t * 4 * ow;
        global float *yr = y + yo + t * ow;
        for (int ox = 0; ox < ow; ox += 8) {
            const int nv = min(ow - ox, 8);
            float16 u, v;
            rt_pool2_rows(r0, t * 4 * ow, ow, ox, nv, end, &u, &v);
            float8 b = u.even;
            b = select(b, u.odd, u.odd > b);
            b = select(b, v.even, v.even > b);
            b = select(b, v.odd, v.odd > b);
            rt_vstore_part8(b, nv, yr + ox);
        }
    }
}

/* dx of rt_maxpool2_fwd: each window's arg-max gets dy, the rest zeros. */
kernel void rt_maxpool2_bwd(ulong planes, int oh, int ow, global const float *x, ulong xo,
                            global const float *dy, ulong dyo, global float *dx, ulong dxo)
{
    RT_ELEM(p, planes);
    const ulong rows = planes * oh, end = rows * 4 * ow; /* dy's rows, x's floats */
    const uint16 mix = (uint16)(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
    for (int ry = 0; ry < oh; ry++) {
        const ulong t = p * oh + ry;
        global const float *r0 = x + xo + t * 4 * ow;
        global const float *g = dy + dyo + t * ow;
        global float *d0 = dx + dxo + t * 4 * ow, *d1 = d0 + 2 * ow;
        for (int ox = 0; ox < ow; ox += 8) {
            const int nv = min(ow - ox, 8);
            float16 u, v;
            rt_pool2_rows(r0, t * 4 * ow, ow, ox, nv, end, &u, &v);
            const float8 gv = t * ow + ox + 8 <= rows * ow ? vload8(0, g + ox)
                                                           : rt_vload_part(nv, g + ox).lo;
            float8 b = u.even;
            int8 idx = (int8)0;
            int8 m = u.odd > b;
            b = select(b, u.odd, m);
            idx = select(idx, (int8)1, m);
            m = v.even > b;
            b = select(b, v.even, m);
            idx = select(idx, (int8)2, m);
            m = v.odd > b;
            idx = select(idx, (int8)3, m);
            const float8 z = (float8)0.0f;
            const float16 o0 = shuffle2(select(z, gv, idx == 0), select(z, gv, idx == 1), mix);
            const float16 o1 = shuffle2(select(z, gv, idx == 2), select(z, gv, idx == 3), mix);
            rt_vstore_part16(o0, 2 * nv, d0 + 2 * ox);
            rt_vstore_part16(o1, 2 * nv, d1 + 2 * ox);
        }
    }
}

/* Pooling modes: enum rt_pool_mode. Windows are clipped to the input; max
 * takes the FIRST maximal element in row-major order (strict '>'), average
 * divides by the full window area r*s. */
#define RT_POOL_MAX 0

/* Index in the plane of the window's arg-max, the cpu backend's rule. */
int rt_pool_argmax(global const float *x, int w, int h0, int h1, int w0, int w1)
{
    int best = h0 * w + w0;
    float bv = x[best];
    for (int ih = h0; ih < h1; ih++)
        for (int iw = w0; iw < w1; iw++) {
            const float v = x[ih * w + iw];
            if (v > bv) {
                bv = v;
                best = ih * w + iw;
            }
        }
    return best;
}

/* Row kernel: one output row (plane, oy) per work-item. */
kernel void rt_pool_fwd(ulong rows, int mode, int h, int w, int r, int s, int sh, int sw, int ph,
                        int pw, int oh, int ow, global const float *x, ulong xo, global float *y,
                        ulong yo)
{
    RT_ELEM(t, rows);
    const ulong plane = t / oh;
    const int oy = (int)(t % oh);
    global const float *xp = x + xo + plane * h * w;
    global float *yr = y + yo + t * ow;
    const float inv_area = 1.0f / (float)(r * s);
    const int hs = oy * sh - ph, h0 = max(hs, 0), h1 = min(hs + r, h);
    for (int ox = 0; ox < ow; ox++) {
        const int ws = ox * sw - pw, w0 = max(ws, 0), w1 = min(ws + s, w);
        float v;
        if (mode == RT_POOL_MAX) {
            v = xp[rt_pool_argmax(xp, w, h0, h1, w0, w1)];
        } else {
            float sum = 0.0f;
            for (int ih = h0; ih < h1; ih++)
                for (int iw = w0; iw < w1; iw++)
                    sum += xp[ih * w + iw];
            v = sum * inv_area;
        }
        yr[ox] = v;
    }
}

/* Row kernel: one input row (plane, iy) per work-item, gathering from the
 * windows that contain each element in (oy, ox) order — the order in which
 * the cpu backend adds into dx, so the sums agree. Max re-finds each
 * window's arg-max from x (ties as in the forward). */
kernel void rt_pool_bwd(ulong rows, int mode, int h, int w, int r, int s, int sh, int sw, int ph,
                        int pw, int oh, int ow, global const float *x, ulong xo,
                        global const float *dy, ulong dyo, global float *dx, ulong dxo)
{
    RT_ELEM(t, rows);
    const ulong plane = t / h;
    const int iy = (int)(t % h);
    global const float *xp = x + xo + plane * h * w;
    global const float *g = dy + dyo + plane * oh * ow;
    global float *dr = dx + dxo + t * w;
    const float inv_area = 1.0f / (float)(r * s);
    /* windows oy with oy*sh - ph <= iy < oy*sh - ph + r */
    const int ty = iy + ph - r + 1;
    const int oy0 = ty > 0 ? (ty + sh - 1) / sh : 0, oy1 = min((iy + ph) / sh, oh - 1);
    for (int ix = 0; ix < w; ix++) {
        const int tx = ix + pw - s + 1, e = iy * w + ix;
        const int ox0 = tx > 0 ? (tx + sw - 1) / sw : 0, ox1 = min((ix + pw) / sw, ow - 1);
        float acc = 0.0f;
        for (int oy = oy0; oy <= oy1; oy++) {
            const int hs = oy * sh - ph, h0 = max(hs, 0), h1 = min(hs + r, h);
            for (int ox = ox0; ox <= ox1; ox++) {
                const float gv = g[oy * ow + ox];
                if (mode == RT_POOL_MAX) {
                    const int ws = ox * sw - pw;
                    if (rt_pool_argmax(xp, w, h0, h1, max(ws, 0), min(ws + s, w)) == e)
                        acc += gv;
                } else {
                    acc += gv * inv_area;
                }
            }
        }
        dr[ix] = acc;
    }
}

/* Row kernel for windows that tile the input (stride = window, no
 * padding): one row of windows (plane, oy) per work-item, which writes its
 * dx rows whole — each window's arg-max gets dy (avg: every element gets
 * dy/(r*s)), the rest zeros, including the columns right of the last window
 * and, for the last row of windows, the rows below it. Four times less
 * arg-max work than the gather above, and no division in the loops. */
kernel void rt_pool_bwd_tile(ulong rows, int mode, int h, int w, int r, int s, int oh, int ow,
                             global const float *x, ulong xo, global const float *dy, ulong dyo,
                             global float *dx, ulong dxo)
{
    RT_ELEM(t, rows);
    const ulong plane = t / oh;
    const int oy = (int)(t % oh);
    global const float *xp = x + xo + plane * h * w;
    global const float *g = dy + dyo + plane * oh * ow + oy * ow;
    global float *dp = dx + dxo + plane * h * w;
    const float inv_area = 1.0f / (float)(r * s);
    const int h0 = oy * r, h1 = h0 + r, hend = oy == oh - 1 ? h : h1;
    for (int ox = 0; ox < ow; ox++) {
        const int w0 = ox * s, w1 = w0 + s;
        const float gv = g[ox];
        if (mode == RT_POOL_MAX) {
            const int a = rt_pool_argmax(xp, w, h0, h1, w0, w1);
            for (int ih = h0; ih < h1; ih++)
                for (int iw = w0; iw < w1; iw++)
                    dp[ih * w + iw] = ih * w + iw == a ? gv : 0.0f;
        } else {
            for (int ih = h0; ih < h1; ih++)
                for (int iw = w0; iw < w1; iw++)
                    dp[ih * w + iw] = gv * inv_area;
        }
    }
    for (int ih = h0; ih < h1; ih++)
        for (int iw = ow * s; iw < w; iw++)
            dp[ih * w + iw] = 0.0f;
    for (int ih = h1; ih < hend; ih++)
        for (int iw = 0; iw < w; iw++)
            dp[ih * w + iw] = 0.0f;
}

/* Row kernel: classes are few next to samples. bad[0] receives the
 * smallest sample index whose label is outside [0, c). */
kernel void rt_softmax_xent_fwd(int n, int c, global const float *logits, ulong lo,
                                global const int *labels, ulong labo, global float *probs,
                                ulong po, global float *losses, ulong losso, global int *bad)
{
    RT_ELEM(i, n);
    global const float *l = logits + lo + i * c;
    global float *p = probs + po + i * c;
    float m = l[0];
    for (int j = 1; j < c; j++)
        m = l[j] > m ? l[j] : m;
    float sum = 0.0f;
    for (int j = 0; j < c; j++) {
        p[j] = exp(l[j] - m);
        sum += p[j];
    }
    const float inv = 1.0f / sum;
    for (int j = 0; j < c; j++)
        p[j] *= inv;
    const int lab = labels[labo + i];
    if (lab < 0 || lab >= c) {
        atomic_min(bad, (int)i);
        losses[losso + i] = NAN;
        return;
    }
    const float pl = p[lab];
    losses[losso + i] = -log(pl > 1e-30f ? pl : 1e-30f);
}

kernel void rt_softmax_xent_bwd(int n, int c, float scale, global const float *probs, ulong po,
                                global const int *labels, ulong labo, global float *dl, ulong dlo,
                                global int *bad)
{
    RT_ELEM(i, n);
    global const float *p = probs + po + i * c;
    global float *g = dl + dlo + i * c;
    const int lab = labels[labo + i];
    if (lab < 0 || lab >= c)
        atomic_min(bad, (int)i);
    for (int j = 0; j < c; j++)
        g[j] = scale * (p[j] - (j == lab ? 1.0f : 0.0f));
}

/* Reduction: one group per channel: mean, then the sum of squared
 * deviations (two passes, like the cpu backend, so a large mean does not
 * eat the variance), then y; work-item 0 updates the statistics. */
kernel void rt_bn_fwd_train(int n, int c, int hw, float eps, float mom, global const float *x,
                            ulong xo, global const float *gamma, ulong go,
                            global const float *beta, ulong bo, global float *y, ulong yo,
                            global float *save_mean, ulong smo, global float *save_invstd,
                            ulong sio, global float *run_mean, ulong rmo, global float *run_var,
                            ulong rvo)
{
    local acc_t scratch[RT_RED];
    x += xo;
    y += yo;
    const int j = get_group_id(0);
    const ulong cnt = (ulong)n * hw;
    const uint t0 = get_local_id(0), L = get_local_size(0);
    const acc_t mean = rt_channel_sum(scratch, x, n, c, hw, j) / (acc_t)cnt;
    acc_t q = 0;
    for (ulong t = t0; t < cnt; t += L) {
        const acc_t e = x[RT_CH_INDEX(t, j)] - mean;
        q += e * e;
    }
    const acc_t sq = rt_group_sum(scratch, q);
    const acc_t var = sq / (acc_t)cnt;
    /* One value per channel has no unbiased variance: use the biased one. */
    const acc_t uvar = cnt > 1 ? sq / (acc_t)(cnt - 1) : var;
    const float invstd = (float)((acc_t)1 / sqrt(var + (acc_t)eps));
    const float fm = (float)mean, a = gamma[go + j] * invstd, b = beta[bo + j];
    for (ulong t = t0; t < cnt; t += L) {
        const ulong k = RT_CH_INDEX(t, j);
        y[k] = a * (x[k] - fm) + b;
    }
    if (t0 == 0) {
        save_mean[smo + j] = fm;
        save_invstd[sio + j] = invstd;
        run_mean[rmo + j] = (1.0f - mom) * run_mean[rmo + j] + mom * fm;
        run_var[rvo + j] = (1.0f - mom) * run_var[rvo + j] + mom * (float)uvar;
    }
}

/* Row kernel: one (image, channel) plane per work-item. */
kernel void rt_bn_fwd_infer(ulong planes, int c, int hw, float eps, global const float *x, ulong xo,
                            global const float *gamma, ulong go, global const float *beta,
                            ulong bo, global const float *run_mean, ulong rmo,
                            global const float *run_var, ulong rvo, global float *y, ulong yo)
{
    RT_ELEM(p, planes);
    const int j = (int)(p % c);
    const float invstd = 1.0f / sqrt(run_var[rvo + j] + eps);
    const float a = gamma[go + j] * invstd, m = run_mean[rmo + j], b = beta[bo + j];
    global const float *xp = x + xo + p * hw;
    global float *yp = y + yo + p * hw;
    for (int k = 0; k < hw; k++)
        yp[k] = a * (xp[k] - m) + b;
}

/* Reduction: dbeta = sum dy, dgamma = sum dy*xhat,
 * dx = gamma*invstd * (dy - dbeta/M - xhat*dgamma/M), M = n*hw. */
kernel void rt_bn_bwd(int n, int c, int hw, global const float *x, ulong xo,
                      global const float *dy, ulong dyo, global const float *gamma, ulong go,
                      global const float *save_mean, ulong smo, global const float *save_invstd,
                      ulong sio, global float *dx, ulong dxo, global float *dgamma, ulong dgo,
                      global float *dbeta, ulong dbo)
{
    local acc_t scratch[RT_RED];
    x += xo;
    dy += dyo;
    dx += dxo;
    const int j = get_group_id(0);
    const ulong cnt = (ulong)n * hw;
    const uint t0 = get_local_id(0), L = get_local_size(0);
    const float mean = save_mean[smo + j], invstd = save_invstd[sio + j];
    acc_t sdy = 0, sdyx = 0;
    for (ulong t = t0; t < cnt; t += L) {
        const ulong k = RT_CH_INDEX(t, j);
        sdy += dy[k];
        sdyx += (acc_t)dy[k] * ((x[k] - mean) * invstd);
    }
    const float db = (float)rt_group_sum(scratch, sdy);
    const float dg = (float)rt_group_sum(scratch, sdyx);
    const float k1 = gamma[go + j] * invstd, mdb = db / (float)cnt, mdg = dg / (float)cnt;
    for (ulong t = t0; t < cnt; t += L) {
        const ulong k = RT_CH_INDEX(t, j);
        const float xhat = (x[k] - mean) * invstd;
        dx[k] = k1 * (dy[k] - mdb - xhat * mdg);
    }
    if (t0 == 0) {
        dgamma[dgo + j] = dg;
        dbeta[dbo + j] = db;
    }
}
