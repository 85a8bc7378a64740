/* bench_ops.c — speed of the cpu backend's hot ops: SGEMM GFLOP/s at a few
 * sizes, and time per call of conv2d forward / bwd-data / bwd-filter (plus
 * pooling and relu) for the LeNet and seedcnn layer shapes, at 1 and 2
 * threads. Prints figures; never fails on speed.
 *
 *   bench/bench_ops [backend [threads...]]     default: cpu 1 2
 *   BENCH_ONLY=seedcnn bench/bench_ops        only the conv layers so named
 *                                             (also lenet, c64, resnet8)
 *   BENCH_ONLY=step bench/bench_ops           only whole training steps
 *   BENCH_BATCH=32 BENCH_ONLY=step ...        their batch (default 64): a
 *                                             worker of 2 trains at half
 *   BENCH_ONLY=bn bench/bench_ops             only batch norm and relu (resnet8)
 *   BENCH_ONLY=sgemm bench/bench_ops          only SGEMM
 *   BENCH_ONLY=optim bench/bench_ops          only the optimiser steps (sgd, adamw)
 *   BENCH_CLOCK=cpu bench/bench_ops cpu 1     CPU time, not wall time: for
 *                                             1-thread figures on a busy machine
 *
 * Each figure is the best of 5 runs of a timed loop of >= 0.15 s: the
 * machines this runs on are shared, and the best run is the one least
 * disturbed by the neighbours. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "rng.h"
#include "status.h"

/* BENCH_CLOCK=cpu: the process's CPU time instead of the wall clock. On a
 * machine shared with other jobs a 1-thread figure then counts only the
 * time this process ran (at 2 threads it is the sum of both threads). */
static double now(void)
{
    static int cpu = -1;
    if (cpu < 0) {
        const char *e = getenv("BENCH_CLOCK");
        cpu = e && strcmp(e, "cpu") == 0;
    }
    struct timespec ts;
    clock_gettime(cpu ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static rt_buf *buf_rand(rt_dev *d, size_t n, uint64_t seed)
{
    rt_buf *b = rt_buf_new(d, (n ? n : 1) * sizeof(float));
    if (!b) {
        fprintf(stderr, "bench_ops: %s\n", rt_error_detail());
        exit(1);
    }
    float *h = malloc((n ? n : 1) * sizeof(float));
    rt_rng r;
    rt_rng_seed(&r, seed, 1);
    for (size_t i = 0; i < n; i++)
        h[i] = (float)rt_rng_uniform(&r) * 2.0f - 1.0f;
    rt_upload(d, rt_buf_view(b), h, n * sizeof(float));
    free(h);
    return b;
}

/* Seconds per call of `fn`, best of 5 timed loops. */
typedef void (*bench_fn)(void *ctx);

static double time_per_call(bench_fn fn, void *ctx)
{
    fn(ctx); /* warm caches, first-touch pages */
    fn(ctx);
    double best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        long calls = 0;
        double t0 = now(), t;
        do {
            fn(ctx);
            calls++;
            t = now() - t0;
        } while (t < 0.15);
        if (t / calls < best)
            best = t / calls;
    }
    return best;
}

/* ---- gemm ------------------------------------------------------------------------ */

struct gemm_ctx {
    rt_dev *d;
    int m, n, k;
    bool tb; /* C = A B^T, B held n x k (a dense layer's forward) */
    bool ta; /* C = A^T B, A held k x m (a dense layer's weight gradient) */
    rt_buf *a, *b, *c;
};

static void run_gemm(void *p)
{
    struct gemm_ctx *g = p;
    rt_op_gemm(g->d, g->ta, g->tb, g->m, g->n, g->k, 1.0f, rt_buf_view(g->a), g->ta ? g->m : g->k,
               rt_buf_view(g->b), g->tb ? g->k : g->n, 0.0f, rt_buf_view(g->c), g->n);
    rt_sync(g->d);
}

static void bench_gemm(rt_dev *d, int threads)
{
    /* m, n, k, 1: B transposed, 2: A transposed: square; a conv's;
     * seedcnn's dense backward (data) and forward, for a whole batch and a
     * worker's half; lenet's 400 -> 120 layer forward, data and weight
     * gradients, and its 120 -> 84 layer's */
    static const int sizes[][4] = {{128, 128, 128, 0},  {256, 256, 256, 0},
                                   {512, 512, 512, 0},  {1024, 1024, 1024, 0},
                                   {32, 576, 288, 0},   {64, 4608, 225, 0},
                                   {32, 4608, 225, 0},  {64, 225, 4608, 1},
                                   {32, 225, 4608, 1},  {64, 120, 400, 1},
                                   {64, 400, 120, 0},   {120, 400, 64, 2},
                                   {64, 84, 120, 1},    {64, 120, 84, 0},
                                   {84, 120, 64, 2},    {64, 120, 400, 0},
                                   {64, 84, 120, 0}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        struct gemm_ctx g = {d, sizes[i][0], sizes[i][1], sizes[i][2], sizes[i][3] & 1,
                             (sizes[i][3] & 2) != 0, NULL, NULL, NULL};
        g.a = buf_rand(d, (size_t)g.m * g.k, 1);
        g.b = buf_rand(d, (size_t)g.k * g.n, 2);
        g.c = buf_rand(d, (size_t)g.m * g.n, 3);
        double t = time_per_call(run_gemm, &g);
        printf("  sgemm    %4dx%4dx%4d%s  threads %d  %9.1f us  %7.1f GFLOP/s\n", g.m, g.n, g.k,
               g.tb ? " B^T" : g.ta ? " A^T" : "    ", threads, t * 1e6,
               2.0 * g.m * g.n * g.k / t * 1e-9);
        rt_buf_destroy(&g.a);
        rt_buf_destroy(&g.b);
        rt_buf_destroy(&g.c);
    }
}

/* ---- conv ------------------------------------------------------------------------ */

struct conv_ctx {
    rt_dev *d;
    struct rt_conv_shape s;
    int which; /* 0 fwd, 1 bwd-data, 2 bwd-filter */
    rt_buf *x, *w, *y, *ws;
};

static void run_conv(void *p)
{
    struct conv_ctx *c = p;
    rt_view x = rt_buf_view(c->x), w = rt_buf_view(c->w), y = rt_buf_view(c->y),
            ws = rt_buf_view(c->ws);
    if (c->which == 0)
        rt_op_conv2d_fwd(c->d, &c->s, x, w, y, ws);
    else if (c->which == 1)
        rt_op_conv2d_bwd_data(c->d, &c->s, y, w, x, ws);
    else
        rt_op_conv2d_bwd_filter(c->d, &c->s, x, y, w, ws);
    rt_sync(c->d);
}

static struct rt_conv_shape conv_shape(int n, int c, int h, int w, int k, int r, int stride,
                                       int pad)
{
    struct rt_conv_shape s = {n, c, h, w, k, r, r, stride, stride, pad, pad, 0, 0};
    s.oh = (h + 2 * pad - r) / stride + 1;
    s.ow = (w + 2 * pad - r) / stride + 1;
    return s;
}

/* ---- pool / relu ------------------------------------------------------------------- */

struct nn_ctx {
    rt_dev *d;
    struct rt_pool_shape p;
    int which; /* 0 pool fwd, 1 pool bwd, 2 relu fwd, 3 relu bwd */
    rt_buf *x, *y, *dy, *dx;
};

static void run_nn(void *p)
{
    struct nn_ctx *c = p;
    rt_view x = rt_buf_view(c->x), y = rt_buf_view(c->y), dy = rt_buf_view(c->dy),
            dx = rt_buf_view(c->dx);
    size_t n = (size_t)c->p.n * c->p.c * c->p.h * c->p.w;
    switch (c->which) {
    case 0:
        rt_op_pool_fwd(c->d, &c->p, x, y);
        break;
    case 1:
        rt_op_pool_bwd(c->d, &c->p, x, y, dy, dx);
        break;
    case 2:
        rt_op_act_fwd(c->d, RT_ACT_RELU, 0, n, x, dx);
        break;
    default:
        rt_op_act_bwd(c->d, RT_ACT_RELU, 0, n, x, x, dx, dx);
    }
    rt_sync(c->d);
}

static void bench_layers(rt_dev *d, int threads)
{
    static const struct {
        const char *name;
        int c, h, k, r, stride, pad;
    } layers[] = {
        {"lenet conv1 ", 1, 28, 6, 5, 1, 2},
        {"lenet conv2 ", 6, 14, 16, 5, 1, 0},
        {"seedcnn conv1", 1, 28, 32, 3, 1, 0},
        {"seedcnn conv2", 32, 26, 32, 3, 1, 0},
        {"3x3 c64 pad1 ", 64, 14, 64, 3, 1, 1}, /* a deeper net's layer (Winograd) */
        {"resnet8 stem ", 1, 28, 16, 3, 1, 1},  /* examples/resnet8.cfg's layers */
        {"resnet8 c16  ", 16, 28, 16, 3, 1, 1},
        {"resnet8 c16s2", 16, 28, 32, 3, 2, 1}, /* the stride-2 convs between stages */
        {"resnet8 c32  ", 32, 14, 32, 3, 1, 1},
        {"resnet8 c32s2", 32, 14, 64, 3, 2, 1},
        {"resnet8 c64  ", 64, 7, 64, 3, 1, 1},
    };
    static const char *what[] = {"fwd", "bwd-data", "bwd-filter"};
    const char *only = getenv("BENCH_ONLY"); /* e.g. BENCH_ONLY=seedcnn */
    for (size_t i = 0; i < sizeof layers / sizeof layers[0]; i++) {
        if (only && !strstr(layers[i].name, only))
            continue;
        struct conv_ctx c = {d, conv_shape(64, layers[i].c, layers[i].h, layers[i].h,
                                           layers[i].k, layers[i].r, layers[i].stride,
                                           layers[i].pad),
                             0, NULL, NULL, NULL, NULL};
        c.x = buf_rand(d, (size_t)c.s.n * c.s.c * c.s.h * c.s.w, 1);
        c.w = buf_rand(d, (size_t)c.s.k * c.s.c * c.s.r * c.s.s, 2);
        c.y = buf_rand(d, (size_t)c.s.n * c.s.k * c.s.oh * c.s.ow, 3);
        c.ws = buf_rand(d, rt_conv2d_workspace(d, &c.s), 4);
        double flop = 2.0 * c.s.n * c.s.k * c.s.oh * c.s.ow * c.s.c * c.s.r * c.s.s;
        double total = 0;
        for (c.which = 0; c.which < 3; c.which++) {
            double t = time_per_call(run_conv, &c);
            total += t;
            printf("  %s %-10s batch 64  threads %d  %9.1f us  %7.1f GFLOP/s\n",
                   layers[i].name, what[c.which], threads, t * 1e6, flop / t * 1e-9);
        }
        printf("  %s all three           threads %d  %9.1f us\n", layers[i].name, threads,
               total * 1e6);
        rt_buf_destroy(&c.x);
        rt_buf_destroy(&c.w);
        rt_buf_destroy(&c.y);
        rt_buf_destroy(&c.ws);
    }
    /* the pool and relu of LeNet conv1 and seedcnn conv2 */
    static const int pools[][3] = {{6, 28, 28}, {32, 24, 24}};
    static const char *nnwhat[] = {"maxpool fwd", "maxpool bwd", "relu fwd", "relu bwd"};
    for (int i = 0; i < 2 && !only; i++) {
        struct nn_ctx c = {d, {RT_POOL_MAX, 64, pools[i][0], pools[i][1], pools[i][2], 2, 2, 2,
                               2, 0, 0, pools[i][1] / 2, pools[i][2] / 2},
                           0, NULL, NULL, NULL, NULL};
        size_t xs = (size_t)64 * pools[i][0] * pools[i][1] * pools[i][2], ys = xs / 4;
        c.x = buf_rand(d, xs, 1);
        c.dx = buf_rand(d, xs, 2);
        c.y = buf_rand(d, ys, 3);
        c.dy = buf_rand(d, ys, 4);
        for (c.which = 0; c.which < 4; c.which++) {
            double t = time_per_call(run_nn, &c);
            printf("  %-11s 64x%dx%dx%d  threads %d  %9.1f us\n", nnwhat[c.which], pools[i][0],
                   pools[i][1], pools[i][2], threads, t * 1e6);
        }
        rt_buf_destroy(&c.x);
        rt_buf_destroy(&c.dx);
        rt_buf_destroy(&c.y);
        rt_buf_destroy(&c.dy);
    }
}


/* ---- batch norm at resnet8's three stages (BENCH_ONLY=bn) ---------------------------- */

struct bn_ctx {
    rt_dev *d;
    struct rt_bn_shape s;
    int which; /* 0 bn fwd (training), 1 bn bwd, 2-3 relu fwd, bwd, 4-5 bn + relu fwd, bwd */
    rt_buf *x, *y, *dy, *dx, *ch; /* ch: gamma, beta, mean, invstd, run mean, run var, dg, db */
};

static void run_bn(void *p)
{
    struct bn_ctx *c = p;
    rt_view x = rt_buf_view(c->x), y = rt_buf_view(c->y), dy = rt_buf_view(c->dy),
            dx = rt_buf_view(c->dx), ch = rt_buf_view(c->ch);
    const size_t C = (size_t)c->s.c;
    c->s.act = c->which >= 4 ? RT_ACT_RELU : RT_ACT_IDENTITY; /* a [conv]'s, fused */
    rt_view g = rt_view_at(ch, 0), b = rt_view_at(ch, C), m = rt_view_at(ch, 2 * C),
            is = rt_view_at(ch, 3 * C), rm = rt_view_at(ch, 4 * C), rv = rt_view_at(ch, 5 * C),
            dg = rt_view_at(ch, 6 * C), db = rt_view_at(ch, 7 * C);
    const size_t n = (size_t)c->s.n * C * c->s.hw;
    switch (c->which) {
    case 0:
    case 4:
        rt_op_bn_fwd_train(c->d, &c->s, x, g, b, y, m, is, rm, rv);
        break;
    case 1:
    case 5:
        rt_op_bn_bwd(c->d, &c->s, x, y, dy, g, m, is, dx, dg, db);
        break;
    case 2:
        rt_op_act_fwd(c->d, RT_ACT_RELU, 0, n, y, dx);
        break;
    default:
        rt_op_act_bwd(c->d, RT_ACT_RELU, 0, n, y, y, dy, dx);
    }
    rt_sync(c->d);
}

static void bench_bn(rt_dev *d, int threads)
{
    static const int stages[][2] = {{16, 28 * 28}, {32, 14 * 14}, {64, 7 * 7}};
    static const char *what[] = {"bn fwd",   "bn bwd",      "relu fwd",
                                 "relu bwd", "bn+relu fwd", "bn+relu bwd"};
    for (int i = 0; i < 3; i++) {
        struct bn_ctx c = {d, {64, stages[i][0], stages[i][1], 1e-5f, 0.1f, RT_ACT_IDENTITY, 0},
                           0, NULL, NULL, NULL, NULL, NULL};
        size_t xs = (size_t)64 * stages[i][0] * stages[i][1];
        c.x = buf_rand(d, xs, 1);
        c.y = buf_rand(d, xs, 2);
        c.dy = buf_rand(d, xs, 3);
        c.dx = buf_rand(d, xs, 4);
        c.ch = buf_rand(d, 8 * (size_t)stages[i][0], 5);
        run_bn(&c); /* mean and invstd for bn bwd */
        for (c.which = 0; c.which < 6; c.which++) {
            double t = time_per_call(run_bn, &c);
            printf("  resnet8 %-11s 64x%dx%d  threads %d  %9.1f us\n", what[c.which], stages[i][0],
                   stages[i][1], threads, t * 1e6);
        }
        rt_buf *all[] = {c.x, c.y, c.dy, c.dx, c.ch};
        for (size_t j = 0; j < sizeof all / sizeof all[0]; j++)
            rt_buf_destroy(&all[j]);
    }
}

/* ---- optimiser steps over lenet's and seedcnn's parameters (BENCH_ONLY=optim) ---- */

struct optim_ctx {
    rt_dev *d;
    size_t n;
    bool adam;
    rt_buf *w, *g, *m, *v;
};

static void run_optim(void *p)
{
    struct optim_ctx *c = p;
    rt_view w = rt_buf_view(c->w), g = rt_buf_view(c->g), m = rt_buf_view(c->m);
    if (c->adam) {
        /* AdamW's scalars at step 10, lr 0.003 */
        struct rt_adam_scalars a = {0.003f, 0.9f, 0.999f, 1e-8f, 0.0f, 0.003f * 0.01f,
                                    1.0f / (1.0f - 0.99004f), 1.0f / (1.0f - 0.3487f), 0.0f};
        rt_op_adam_step(c->d, c->n, &a, w, g, m, rt_buf_view(c->v));
    } else {
        struct rt_sgd_params sp = {0.01f, 0.9f, 0.0f, false};
        rt_op_sgd_step(c->d, c->n, &sp, w, g, m);
    }
    rt_sync(c->d);
}

static void bench_optim(rt_dev *d, int threads)
{
    static const struct { const char *name; size_t n; } models[] = {{"lenet", 61706},
                                                                    {"seedcnn", 1048853}};
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        struct optim_ctx c = {d, models[i].n, false, buf_rand(d, models[i].n, 1),
                              buf_rand(d, models[i].n, 2), buf_rand(d, models[i].n, 3),
                              buf_rand(d, models[i].n, 4)};
        for (int a = 0; a < 2; a++) {
            c.adam = a;
            if (a) /* the second moment is never negative */
                rt_op_act_fwd(d, RT_ACT_RELU, 0.0f, c.n, rt_buf_view(c.v), rt_buf_view(c.v));
            double t = time_per_call(run_optim, &c);
            printf("  %-8s %-5s step  %8zu params  threads %d  %9.1f us\n", models[i].name,
                   a ? "adamw" : "sgd", models[i].n, threads, t * 1e6);
        }
        rt_buf *all[] = {c.w, c.g, c.m, c.v};
        for (size_t j = 0; j < sizeof all / sizeof all[0]; j++)
            rt_buf_destroy(&all[j]);
    }
}

/* ---- whole training steps ------------------------------------------------------------
 * The op sequence a trainer runs for one SGD step of LeNet and of seedcnn at
 * batch 64 (forward, backward without the first layer's bwd-data, one fused
 * SGD step over the flat parameter buffer), timed end to end: an upper bound
 * on what ragtag can train at with this backend, to compare with PyTorch's
 * images/s on the same machine. Layers are conv (+bias, relu, optional 2x2
 * max pool) then dense (+bias, relu except the last). */

struct net_conv {
    int k, r, pad;
    bool pool;
};

struct net_def {
    const char *name;
    int c, h;
    int nconv;
    struct net_conv conv[2];
    int ndense;
    int dense[3];
};

static const struct net_def nets[] = {
    {"lenet  ", 1, 28, 2, {{6, 5, 2, true}, {16, 5, 0, true}}, 3, {120, 84, 10}},
    {"seedcnn", 1, 28, 2, {{32, 3, 0, false}, {32, 3, 0, true}}, 2, {225, 10}},
};

struct net_run {
    rt_dev *d;
    const struct net_def *def;
    int n;
    struct rt_conv_shape cs[2];
    struct rt_pool_shape ps[2];
    int din[3], dout[3];
    /* activations: per conv: pre-act z, post-act a, pooled p; per dense: z, a */
    rt_buf *x, *cz[2], *ca[2], *cp[2], *dz[3], *da[3], *g1, *g2, *ws, *labels, *probs, *loss;
    rt_buf *params, *grads, *mom;
    size_t woff[5], boff[5], nparams;
};

static void net_setup(struct net_run *r)
{
    const struct net_def *def = r->def;
    int c = def->c, h = def->h, n = r->n;
    size_t off = 0, wsmax = 0, amax = (size_t)n * c * h * h;
    for (int i = 0; i < def->nconv; i++) {
        const struct net_conv *L = &def->conv[i];
        r->cs[i] = (struct rt_conv_shape){n, c, h, h, L->k, L->r, L->r, 1, 1, L->pad, L->pad,
                                          h + 2 * L->pad - L->r + 1, h + 2 * L->pad - L->r + 1};
        size_t outsz = (size_t)n * L->k * r->cs[i].oh * r->cs[i].ow;
        r->cz[i] = buf_rand(r->d, outsz, 10 + i);
        r->ca[i] = buf_rand(r->d, outsz, 20 + i);
        r->woff[i] = off;
        off += (size_t)L->k * c * L->r * L->r;
        r->boff[i] = off;
        off += L->k;
        size_t w = rt_conv2d_workspace(r->d, &r->cs[i]);
        wsmax = w > wsmax ? w : wsmax;
        amax = outsz > amax ? outsz : amax;
        c = L->k;
        h = r->cs[i].oh;
        r->cp[i] = NULL;
        if (L->pool) {
            r->ps[i] = (struct rt_pool_shape){RT_POOL_MAX, n, c, h, h, 2, 2, 2, 2, 0, 0, h / 2, h / 2};
            r->cp[i] = buf_rand(r->d, outsz / 4, 30 + i);
            h /= 2;
        }
    }
    int in = c * h * h;
    for (int i = 0; i < def->ndense; i++) {
        r->din[i] = in;
        r->dout[i] = def->dense[i];
        r->dz[i] = buf_rand(r->d, (size_t)n * def->dense[i], 40 + i);
        r->da[i] = buf_rand(r->d, (size_t)n * def->dense[i], 50 + i);
        r->woff[def->nconv + i] = off;
        off += (size_t)in * def->dense[i];
        r->boff[def->nconv + i] = off;
        off += def->dense[i];
        in = def->dense[i];
    }
    r->nparams = off;
    r->x = buf_rand(r->d, (size_t)n * def->c * def->h * def->h, 1);
    r->g1 = buf_rand(r->d, amax, 2);
    r->g2 = buf_rand(r->d, amax, 3);
    r->ws = buf_rand(r->d, wsmax, 4);
    r->params = buf_rand(r->d, off, 5);
    rt_op_scale(r->d, off, 0.05f, rt_buf_view(r->params));
    r->grads = buf_rand(r->d, off, 6);
    r->mom = buf_rand(r->d, off, 7);
    r->probs = buf_rand(r->d, (size_t)n * in, 8);
    r->loss = buf_rand(r->d, (size_t)n, 9);
    r->labels = rt_buf_new(r->d, (size_t)n * 4);
    int32_t lab[1024];
    for (int i = 0; i < n && i < 1024; i++)
        lab[i] = i % in;
    rt_upload(r->d, rt_buf_view(r->labels), lab, (size_t)n * 4);
}

static void net_step(void *p)
{
    struct net_run *r = p;
    const struct net_def *def = r->def;
    rt_dev *d = r->d;
    const int n = r->n;
    rt_view P = rt_buf_view(r->params), G = rt_buf_view(r->grads), ws = rt_buf_view(r->ws);
    rt_view in = rt_buf_view(r->x);
    /* forward */
    for (int i = 0; i < def->nconv; i++) {
        const struct rt_conv_shape *s = &r->cs[i];
        size_t hw = (size_t)s->oh * s->ow, sz = (size_t)n * s->k * hw;
        rt_op_conv2d_fwd(d, s, in, rt_view_at(P, r->woff[i]), rt_buf_view(r->cz[i]), ws);
        rt_op_bias_add(d, n, s->k, (int)hw, rt_view_at(P, r->boff[i]), rt_buf_view(r->cz[i]));
        rt_op_act_fwd(d, RT_ACT_RELU, 0, sz, rt_buf_view(r->cz[i]), rt_buf_view(r->ca[i]));
        in = rt_buf_view(r->ca[i]);
        if (r->cp[i]) {
            rt_op_pool_fwd(d, &r->ps[i], in, rt_buf_view(r->cp[i]));
            in = rt_buf_view(r->cp[i]);
        }
    }
    for (int i = 0; i < def->ndense; i++) {
        int l = def->nconv + i, last = i == def->ndense - 1;
        rt_op_gemm(d, 0, 1, n, r->dout[i], r->din[i], 1.0f, in, r->din[i], rt_view_at(P, r->woff[l]),
                   r->din[i], 0.0f, rt_buf_view(r->dz[i]), r->dout[i]);
        rt_op_bias_add(d, n, r->dout[i], 1, rt_view_at(P, r->boff[l]), rt_buf_view(r->dz[i]));
        if (!last)
            rt_op_act_fwd(d, RT_ACT_RELU, 0, (size_t)n * r->dout[i], rt_buf_view(r->dz[i]),
                          rt_buf_view(r->da[i]));
        in = rt_buf_view(last ? r->dz[i] : r->da[i]);
    }
    int classes = r->dout[def->ndense - 1];
    rt_op_softmax_xent_fwd(d, n, classes, in, rt_buf_view(r->labels), rt_buf_view(r->probs),
                           rt_buf_view(r->loss));
    /* backward: g holds d(loss)/d(current output) */
    rt_view g = rt_buf_view(r->g1), g2 = rt_buf_view(r->g2), t;
    rt_op_softmax_xent_bwd(d, n, classes, rt_buf_view(r->probs), rt_buf_view(r->labels),
                           1.0f / n, g);
    for (int i = def->ndense - 1; i >= 0; i--) {
        int l = def->nconv + i;
        if (i != def->ndense - 1)
            rt_op_act_bwd(d, RT_ACT_RELU, 0, (size_t)n * r->dout[i], rt_buf_view(r->dz[i]),
                          rt_buf_view(r->da[i]), g, g);
        rt_view x = i ? rt_buf_view(r->da[i - 1])
                      : rt_buf_view(r->cp[def->nconv - 1] ? r->cp[def->nconv - 1]
                                                          : r->ca[def->nconv - 1]);
        rt_op_gemm(d, 1, 0, r->dout[i], r->din[i], n, 1.0f, g, r->dout[i], x, r->din[i], 0.0f,
                   rt_view_at(G, r->woff[l]), r->din[i]);
        rt_op_bias_grad(d, n, r->dout[i], 1, g, rt_view_at(G, r->boff[l]));
        rt_op_gemm(d, 0, 0, n, r->din[i], r->dout[i], 1.0f, g, r->dout[i],
                   rt_view_at(P, r->woff[l]), r->din[i], 0.0f, g2, r->din[i]);
        t = g, g = g2, g2 = t;
    }
    for (int i = def->nconv - 1; i >= 0; i--) {
        const struct rt_conv_shape *s = &r->cs[i];
        size_t hw = (size_t)s->oh * s->ow, sz = (size_t)n * s->k * hw;
        if (r->cp[i]) {
            rt_op_pool_bwd(d, &r->ps[i], rt_buf_view(r->ca[i]), rt_buf_view(r->cp[i]), g, g2);
            t = g, g = g2, g2 = t;
        }
        rt_op_act_bwd(d, RT_ACT_RELU, 0, sz, rt_buf_view(r->cz[i]), rt_buf_view(r->ca[i]), g, g);
        rt_op_bias_grad(d, n, s->k, (int)hw, g, rt_view_at(G, r->boff[i]));
        rt_view x = i ? rt_buf_view(r->cp[i - 1] ? r->cp[i - 1] : r->ca[i - 1]) : rt_buf_view(r->x);
        rt_op_conv2d_bwd_filter(d, s, x, g, rt_view_at(G, r->woff[i]), ws);
        if (i > 0) {
            rt_op_conv2d_bwd_data(d, s, g, rt_view_at(P, r->woff[i]), g2, ws);
            t = g, g = g2, g2 = t;
        }
    }
    struct rt_sgd_params sp = {0.01f, 0.9f, 0.0f, false};
    rt_op_sgd_step(d, r->nparams, &sp, P, G, rt_buf_view(r->mom));
    rt_sync(d);
}

static void bench_nets(rt_dev *d, int threads)
{
    for (size_t i = 0; i < sizeof nets / sizeof nets[0]; i++) {
        struct net_run r = {0};
        r.d = d;
        r.def = &nets[i];
        const char *b = getenv("BENCH_BATCH");
        r.n = b && atoi(b) > 0 && atoi(b) <= 1024 ? atoi(b) : 64;
        net_setup(&r);
        double t = time_per_call(net_step, &r);
        printf("  %s train step  batch %d  threads %d  %9.1f us  %8.0f images/s\n", nets[i].name,
               r.n, threads, t * 1e6, r.n / t);
        rt_buf *all[] = {r.x, r.cz[0], r.cz[1], r.ca[0], r.ca[1], r.cp[0], r.cp[1], r.dz[0],
                         r.dz[1], r.dz[2], r.da[0], r.da[1], r.da[2], r.g1, r.g2, r.ws,
                         r.labels, r.probs, r.loss, r.params, r.grads, r.mom};
        for (size_t j = 0; j < sizeof all / sizeof all[0]; j++)
            rt_buf_destroy(&all[j]);
    }
}

int main(int argc, char **argv)
{
    /* the OpenBLAS core the ragtag program runs (backends/cpu/blas_core.c) */
    if (rt_cpu_blas_core_setenv())
        execv("/proc/self/exe", argv);
    const char *backend = argc > 1 ? argv[1] : "cpu";
    int threads[16] = {1, 2}, nthreads = 2;
    if (argc > 2) {
        nthreads = 0;
        for (int i = 2; i < argc && nthreads < 16; i++)
            threads[nthreads++] = atoi(argv[i]);
    }
    struct rt_device_info info;
    if (rt_backend_device_info(backend, 0, &info) < 0) {
        fprintf(stderr, "bench_ops: %s\n", rt_error_detail());
        return 1;
    }
    printf("backend %s, device 0: %s (%s), %d compute units\n", backend, info.name,
           info.platform, info.compute_units);
    for (int i = 0; i < nthreads; i++) {
        rt_dev *d = rt_dev_open(backend, 0, threads[i]);
        if (!d) {
            fprintf(stderr, "bench_ops: %s\n", rt_error_detail());
            return 1;
        }
        const char *only = getenv("BENCH_ONLY");
        if (!only || strstr("sgemm", only))
            bench_gemm(d, threads[i]);
        if (!only || !strstr("sgemm step", only))
            bench_layers(d, threads[i]);
        if (!only || strstr("bn", only))
            bench_bn(d, threads[i]);
        if (!only || strstr("step", only))
            bench_nets(d, threads[i]);
        if (!only || strstr("optim", only))
            bench_optim(d, threads[i]);
        rt_dev_close(&d);
    }
    return 0;
}
