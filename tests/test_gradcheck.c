/* test_gradcheck.c — finite-difference gradient checks of every layer.
 *
 * Each case is a small model from text on odd shapes (7x5x3 inputs, stride
 * 2, padding). The loss is the real one: summed softmax cross-entropy of a
 * few samples. Every trainable tensor is probed (all elements of small
 * ones, a seeded sample of big ones) with a double-sided difference
 *   (L(p + eps) - L(p - eps)) / (2 eps)
 * and compared with rt_model_backward's gradient. The layer under test
 * sits after a 1x1 convolution, so that convolution's weight gradient
 * checks the layer's input gradient (dx) path too. Smooth activations are
 * used around kinks (relu, max) where possible, so a probe does not cross
 * one; the seeds are fixed. */
#include "config.h"

#include "testutil.h"

#include "layer.h"
#include "model.h"
#include "status.h"

static rt_dev *dev;

static int setup_dev(void **state)
{
    dev = rt_dev_open("cpu", 0, 2);
    return dev ? 0 : -1;
}

static int teardown_dev(void **state)
{
    rt_dev_close(&dev);
    return 0;
}

#define EPS 1e-3
#define RTOL 1e-2
#define ATOL 1e-3
#define PROBES 24 /* per tensor, beyond which a tensor is sampled */

struct gc {
    rt_model *m;
    rt_buf *x, *labels;
    int n;
    bool train;
    uint64_t seed;
};

static double loss_now(struct gc *g)
{
    double loss = 0.0;
    long correct = 0;
    if (rt_model_forward(g->m, rt_buf_view(g->x), g->n, g->train, g->seed) < 0 ||
        rt_model_loss(g->m, rt_buf_view(g->labels), g->n, &loss, &correct, NULL) < 0)
        fail_msg("forward: %s", rt_error_detail());
    return loss;
}

static void gc_open(struct gc *g, const char *text, int n, bool train)
{
    memset(g, 0, sizeof *g);
    g->m = rt_model_load_string(text, "gc.cfg", dev, n);
    if (!g->m)
        fail_msg("load: %s", rt_error_detail());
    assert_int_equal(rt_model_init(g->m, 1234), 0);
    g->n = n;
    g->train = train;
    g->seed = 77;
    size_t in = rt_shape_count(rt_model_input_shape(g->m)) * (size_t)n;
    float *x = malloc(in * sizeof *x);
    tu_fill_uniform(x, in, -1.0f, 1.0f, 4242);
    int32_t *lab = malloc((size_t)n * sizeof *lab);
    for (int i = 0; i < n; i++)
        lab[i] = (int32_t)((i * 7 + 3) % rt_model_classes(g->m));
    g->x = rt_buf_new(dev, in * sizeof *x);
    g->labels = rt_buf_new(dev, (size_t)n * sizeof *lab);
    assert_int_equal(rt_upload(dev, rt_buf_view(g->x), x, in * sizeof *x), 0);
    assert_int_equal(rt_upload(dev, rt_buf_view(g->labels), lab, (size_t)n * sizeof *lab), 0);
    free(x);
    free(lab);
}

static void gc_close(struct gc *g)
{
    rt_buf_destroy(&g->x);
    rt_buf_destroy(&g->labels);
    rt_model_destroy(&g->m);
}

/* Analytic gradients (scale 1: the summed loss) into a fresh host array. */
static float *gc_backward(struct gc *g, float scale)
{
    size_t np = rt_model_param_count(g->m);
    loss_now(g);
    if (rt_model_backward(g->m, rt_buf_view(g->x), rt_buf_view(g->labels), g->n, scale) < 0)
        fail_msg("backward: %s", rt_error_detail());
    float *grad = malloc(np * sizeof *grad);
    assert_int_equal(rt_download(dev, grad, rt_model_grads(g->m), np * sizeof *grad), 0);
    return grad;
}

/* Compare every probed element; fail with the worst offender. Returns the
 * number of elements probed. */
static size_t gc_check(struct gc *g, const char *what)
{
    rt_model *m = g->m;
    size_t np = rt_model_param_count(m), probed = 0;
    float *grad = gc_backward(g, 1.0f);
    float *p = malloc(np * sizeof *p);
    assert_int_equal(rt_download(dev, p, rt_model_params(m), np * sizeof *p), 0);
    rt_rng r;
    rt_rng_seed(&r, 99, 1);
    double worst = 0.0;
    char worst_at[160] = "";
    for (int t = 0; t < rt_model_tensor_count(m); t++) {
        struct rt_tensor_info ti;
        rt_model_tensor_info(m, t, &ti);
        if (ti.state)
            continue;
        size_t probes = ti.count <= PROBES ? ti.count : PROBES;
        for (size_t k = 0; k < probes; k++) {
            size_t i = ti.count <= PROBES ? k : (size_t)rt_rng_below(&r, ti.count);
            rt_view at = rt_view_at(rt_model_params(m), ti.offset + i);
            float orig = p[ti.offset + i], v;
            v = orig + (float)EPS;
            rt_upload(dev, at, &v, sizeof v);
            double lp = loss_now(g);
            v = orig - (float)EPS;
            rt_upload(dev, at, &v, sizeof v);
            double lm = loss_now(g);
            rt_upload(dev, at, &orig, sizeof orig);
            double num = (lp - lm) / (2.0 * EPS), ana = grad[ti.offset + i];
            double big = fabs(num) > fabs(ana) ? fabs(num) : fabs(ana);
            double excess = fabs(num - ana) / (ATOL + RTOL * big);
            if (!(excess <= worst)) {
                worst = isnan(excess) ? INFINITY : excess;
                snprintf(worst_at, sizeof worst_at, "%s[%zu]: numeric %.6g, analytic %.6g",
                         ti.name, i, num, ana);
            }
            probed++;
        }
    }
    if (worst > 1.0)
        fail_msg("%s: gradient mismatch at %s (%.2f x tolerance)", what, worst_at, worst);
    free(p);
    free(grad);
    return probed;
}

static void run_case(const char *what, const char *text, int n, bool train)
{
    struct gc g;
    gc_open(&g, text, n, train);
    size_t probed = gc_check(&g, what);
    assert_true(probed > 0);
    gc_close(&g);
}

/* 7x5x3 input; a 1x1 conv first (smooth: tanh) so its weight gradient
 * checks the input gradient of the layer under test. */
#define NET "[net]\ninput = 7x5x3\nclasses = 4\n"
#define PRE "[conv]\nfilters = 3\nsize = 1\nactivation = tanh\n"
#define HEAD "[dense]\nunits = 4\n[softmax]\n"

static void test_dense(void **state)
{
    run_case("dense tanh", NET PRE "[dense]\nunits = 6\nactivation = tanh\n" HEAD, 3, true);
    run_case("dense sigmoid", NET "[dense]\nunits = 5\nactivation = sigmoid\n" HEAD, 3, true);
    run_case("dense leaky", NET PRE "[dense]\nunits = 6\nactivation = leaky\n" HEAD, 3, true);
    run_case("dense relu", NET "[dense]\nunits = 6\nactivation = relu\n" HEAD, 2, true);
    run_case("dense linear", NET "[dense]\nunits = 4\n[softmax]\n", 3, true);
}

static void test_conv(void **state)
{
    run_case("conv s2 p1 leaky",
             NET PRE "[conv]\nfilters = 4\nsize = 3\nstride = 2\npad = 1\nactivation = leaky\n" HEAD,
             3, true);
    run_case("conv s1 p0 relu",
             NET "[conv]\nfilters = 2\nsize = 3\nactivation = relu\n" HEAD, 2, true);
    run_case("conv 2x2 s2 tanh",
             NET PRE "[conv]\nfilters = 3\nsize = 2\nstride = 2\nactivation = tanh\n" HEAD, 3, true);
    run_case("conv linear", NET PRE "[conv]\nfilters = 2\nsize = 3\npad = 2\n" HEAD, 2, true);
}

static void test_conv_batchnorm(void **state)
{
    run_case("conv+bn tanh (train)",
             NET PRE "[conv]\nfilters = 4\nsize = 3\nstride = 2\npad = 1\nbatch_normalize = 1\n"
                     "activation = tanh\n" HEAD,
             4, true);
    run_case("conv+bn linear (train)",
             NET PRE "[conv]\nfilters = 3\nsize = 3\npad = 1\nbatch_normalize = 1\n" HEAD, 3,
             true);
}

static void test_pool(void **state)
{
    run_case("maxpool 3 s2 p1",
             NET PRE "[maxpool]\nsize = 3\nstride = 2\npad = 1\n" HEAD, 3, true);
    run_case("maxpool 2", NET PRE "[maxpool]\nsize = 2\n" HEAD, 3, true);
    run_case("avgpool 2 s1 p1", NET PRE "[avgpool]\nsize = 2\nstride = 1\npad = 1\n" HEAD, 3,
             true);
    run_case("avgpool 3 s2", NET PRE "[avgpool]\nsize = 3\nstride = 2\n" HEAD, 3, true);
    run_case("globalavgpool", NET PRE "[globalavgpool]\n" HEAD, 3, true);
}

static void test_flatten(void **state)
{
    /* its output is the conv's memory (output_is_input) */
    run_case("flatten", NET PRE "[flatten]\n" HEAD, 3, true);
    /* twice: the second one's output is the conv's memory too */
    run_case("flatten twice", NET PRE "[flatten]\n[flatten]\n" HEAD, 3, true);
    /* the network input is the caller's: copied */
    run_case("flatten first", NET "[flatten]\n" HEAD, 3, true);
    /* the dense layer's output has a second reader, the shortcut: copied */
    run_case("flatten beside a shortcut",
             NET PRE "[dense]\nunits = 6\nactivation = tanh\n[flatten]\n"
                     "[shortcut]\nfrom = -2\n" HEAD,
             3, true);
}

/* Device bytes a model holds at max batch 16. */
static size_t model_live_bytes(const char *text)
{
    size_t before = rt_dev_live_bytes(dev);
    rt_model *m = rt_model_load_string(text, "flatten.cfg", dev, 16);
    assert_non_null(m);
    size_t bytes = rt_dev_live_bytes(dev) - before;
    rt_model_destroy(&m);
    return bytes;
}

/* A [flatten] after a layer holds no activation or gradient of its own;
 * as the first layer it copies the caller's input into its own. */
static void test_flatten_memory(void **state)
{
    const size_t plain = model_live_bytes(NET PRE HEAD);
    assert_int_equal(model_live_bytes(NET PRE "[flatten]\n" HEAD), plain);
    assert_int_equal(model_live_bytes(NET PRE "[flatten]\n[flatten]\n" HEAD), plain);
    const size_t first = model_live_bytes(NET "[flatten]\n" HEAD);
    assert_true(first >= model_live_bytes(NET HEAD) + 2 * 16 * 105 * sizeof(float));
    const size_t beside = model_live_bytes(NET PRE "[dense]\nunits = 6\n[flatten]\n"
                                               "[shortcut]\nfrom = -2\n" HEAD);
    assert_true(beside >= model_live_bytes(NET PRE "[dense]\nunits = 6\n[shortcut]\nfrom = -1\n" HEAD) +
                              2 * 16 * 6 * sizeof(float));
}

static void test_activations(void **state)
{
    run_case("relu", NET PRE "[relu]\n" HEAD, 3, true);
    run_case("leaky", NET PRE "[leaky]\nalpha = 0.2\n" HEAD, 3, true);
    run_case("sigmoid", NET PRE "[sigmoid]\n" HEAD, 3, true);
    run_case("tanh", NET PRE "[tanh]\n" HEAD, 3, true);
}

static void test_dropout(void **state)
{
    run_case("dropout 0.3 (train, fixed seed)", NET PRE "[dropout]\nrate = 0.3\n" HEAD, 3, true);
    run_case("dropout (inference)", NET PRE "[dropout]\nrate = 0.5\n" HEAD, 3, false);
}

/* The mask follows the seed: another seed drops other values, the same
 * seed the same ones, and inference drops nothing. */
static void test_dropout_seed(void **state)
{
    struct gc g;
    gc_open(&g, NET "[dropout]\nrate = 0.5\n" HEAD, 3, true);
    double a = loss_now(&g), b = loss_now(&g);
    assert_true(a == b);
    g.seed = 78;
    double c = loss_now(&g);
    assert_true(a != c);
    g.train = false;
    g.seed = 1;
    double d = loss_now(&g);
    g.seed = 2;
    assert_true(d == loss_now(&g));
    gc_close(&g);
}

static void test_batchnorm(void **state)
{
    run_case("batchnorm after conv (train)",
             NET PRE "[conv]\nfilters = 3\nsize = 3\npad = 1\n[batchnorm]\n[tanh]\n" HEAD, 4, true);
    run_case("batchnorm on dense (train)",
             NET PRE "[dense]\nunits = 6\n[batchnorm]\nmomentum = 0.5\neps = 0.001\n[leaky]\n" HEAD,
             5, true);
}

/* Train mode updates the running statistics; inference uses them. */
static void test_batchnorm_modes(void **state)
{
    struct gc g;
    gc_open(&g, NET "[batchnorm]\nmomentum = 1\n" HEAD, 4, false);
    size_t ns = rt_model_state_count(g.m);
    assert_int_equal(ns, 6);
    float st[6];
    double inf0 = loss_now(&g);
    rt_download(dev, st, rt_model_state(g.m), sizeof st);
    for (int i = 0; i < 3; i++)
        assert_true(st[i] == 0.0f && st[3 + i] == 1.0f); /* inference left them */
    g.train = true;
    double tr = loss_now(&g);
    rt_download(dev, st, rt_model_state(g.m), sizeof st);
    /* momentum 1: running = this batch's mean and unbiased variance */
    float x[4 * 105];
    rt_download(dev, x, rt_buf_view(g.x), sizeof x);
    for (int c = 0; c < 3; c++) {
        double s = 0, s2 = 0;
        for (int n = 0; n < 4; n++)
            for (int i = 0; i < 35; i++) {
                double v = x[n * 105 + c * 35 + i];
                s += v;
                s2 += v * v;
            }
        double mean = s / 140, var = (s2 - 140 * mean * mean) / 139;
        assert_true(fabs(st[c] - mean) < 1e-5);
        assert_true(fabs(st[3 + c] - var) < 1e-4);
    }
    g.train = false;
    double inf1 = loss_now(&g);
    assert_true(inf0 != inf1); /* inference now normalises with them */
    /* batch norm's gradient is of the batch statistics: no backward after
     * an inference forward */
    assert_int_equal(rt_model_backward(g.m, rt_buf_view(g.x), rt_buf_view(g.labels), 4, 1.0f),
                     RT_ERR_ARG);
    assert_true(fabs(inf1 - tr) < 1e-2 * fabs(tr)); /* nearly the batch's own */
    gc_close(&g);
}

static void test_shortcut(void **state)
{
    /* conv1 feeds conv2 and the shortcut: its gradient is a sum */
    run_case("shortcut from -2 leaky",
             NET PRE "[conv]\nfilters = 3\nsize = 3\npad = 1\nactivation = tanh\n"
                     "[shortcut]\nfrom = -2\nactivation = leaky\n" HEAD,
             3, true);
    /* from = -1 adds the previous output to itself: both gradients land on
     * the same activation in one backward call */
    run_case("shortcut from -1", NET PRE "[shortcut]\nfrom = -1\n" HEAD, 3, true);
    /* two shortcuts reading the same early activation (three consumers) */
    run_case("shortcut chain",
             NET PRE "[tanh]\n[shortcut]\nfrom = -2\nactivation = tanh\n"
                     "[shortcut]\nfrom = -3\n[sigmoid]\n" HEAD,
             2, true);
}

static void test_resnet_like(void **state)
{
    run_case("resnet-like",
             "[net]\ninput = 9x7x2\nclasses = 3\n"
             "[conv]\nfilters = 4\nsize = 3\npad = 1\nbatch_normalize = 1\nactivation = leaky\n"
             "[conv]\nfilters = 4\nsize = 3\npad = 1\nbatch_normalize = 1\nactivation = tanh\n"
             "[conv]\nfilters = 4\nsize = 3\npad = 1\nbatch_normalize = 1\n"
             "[shortcut]\nfrom = -3\nactivation = leaky\n"
             "[conv]\nfilters = 6\nsize = 3\nstride = 2\npad = 1\nbatch_normalize = 1\n"
             "activation = tanh\n"
             "[conv]\nfilters = 6\nsize = 3\npad = 1\n"
             "[batchnorm]\n"
             "[shortcut]\nfrom = -3\n"
             "[avgpool]\nsize = 2\n"
             "[dropout]\nrate = 0.2\n"
             "[globalavgpool]\n"
             "[dense]\nunits = 5\nactivation = sigmoid\n"
             "[dense]\nunits = 3\n[softmax]\n",
             4, true);
}

/* Backward overwrites (never accumulates) and scales linearly. */
static void test_backward_contract(void **state)
{
    struct gc g;
    gc_open(&g, NET PRE "[conv]\nfilters = 3\nsize = 3\npad = 1\nactivation = tanh\n"
                        "[shortcut]\nfrom = -2\n" HEAD, 3, true);
    size_t np = rt_model_param_count(g.m);
    float *a = gc_backward(&g, 1.0f), *b = gc_backward(&g, 1.0f), *c = gc_backward(&g, 0.25f);
    assert_memory_equal(a, b, np * sizeof *a);
    for (size_t i = 0; i < np; i++)
        assert_true(fabs(c[i] - 0.25f * a[i]) <= 1e-6 + 1e-5 * fabs(a[i]));
    /* backward of no samples contributes zeros */
    assert_int_equal(rt_model_forward(g.m, rt_buf_view(g.x), 0, true, 1), 0);
    assert_int_equal(rt_model_backward(g.m, rt_buf_view(g.x), rt_buf_view(g.labels), 0, 1.0f), 0);
    rt_download(dev, b, rt_model_grads(g.m), np * sizeof *b);
    for (size_t i = 0; i < np; i++)
        assert_true(b[i] == 0.0f);
    free(a);
    free(b);
    free(c);
    gc_close(&g);
}

/* ---- a large layer's weight gradient deferred to the end of backward ---- */

struct final_check {
    rt_model *m;
    const float *ref; /* the whole backward's gradient */
    size_t np;
    int calls;
    size_t last_lo;
    int below_stale; /* at the second call (the large layer's): how many of the
                        gradients below its range still held the stale value */
};

/* The hook's contract: when told [lo, hi), everything from lo on is final. */
static int check_final(void *arg, size_t lo, size_t hi)
{
    struct final_check *f = arg;
    assert_true(hi <= f->np && lo < hi);
    assert_true(f->calls == 0 ? hi == f->np : hi == f->last_lo);
    float *g = malloc((f->np - lo) * sizeof *g);
    assert_int_equal(rt_download(dev, g, rt_view_at(rt_model_grads(f->m), lo),
                                 (f->np - lo) * sizeof *g), 0);
    assert_memory_equal(g, f->ref + lo, (f->np - lo) * sizeof *g);
    free(g);
    if (f->calls == 1) { /* below: the first layer's, computed after the large one's backward */
        float *b = malloc(lo * sizeof *b);
        assert_int_equal(rt_download(dev, b, rt_model_grads(f->m), lo * sizeof *b), 0);
        f->below_stale = 0;
        for (size_t i = 0; i < lo; i++)
            f->below_stale += b[i] == 12345.0f;
        free(b);
    }
    f->calls++;
    f->last_lo = lo;
    return 0;
}

/* A dense layer of 262,500 weights (past RT_LAYER_DEFER_MIN_PARAMS) between
 * a convolution and a small dense layer: deferred or not, the same bits,
 * the hook told of each range only once it is final (and, deferred, of the
 * large layer only after the layers below it ran), the finite differences
 * agreeing; frozen, its gradient zero either way. */
static void test_deferred_weight_grads(void **state)
{
    const char *text = NET PRE "[dense]\nunits = 2500\nactivation = tanh\n" HEAD;
    struct gc g;
    gc_open(&g, text, 3, true);
    size_t np = rt_model_param_count(g.m);
    rt_model_defer_weight_grads(g.m, false);
    float *ref = gc_backward(&g, 1.0f);
    rt_model_defer_weight_grads(g.m, true);
    float *got = gc_backward(&g, 1.0f);
    assert_memory_equal(got, ref, np * sizeof *ref);
    for (int defer = 0; defer < 2; defer++) {
        struct final_check f = {g.m, ref, np, 0, 0, -1};
        rt_model_defer_weight_grads(g.m, defer);
        /* stale values where the gradient goes: a range told too early shows them */
        assert_int_equal(rt_op_fill(dev, np, 12345.0f, rt_model_grads(g.m)), 0);
        rt_model_set_backward_hook(g.m, check_final, &f);
        loss_now(&g);
        assert_int_equal(rt_model_backward(g.m, rt_buf_view(g.x), rt_buf_view(g.labels), g.n,
                                           1.0f), 0);
        rt_model_set_backward_hook(g.m, NULL, NULL);
        assert_int_equal(f.calls, 3); /* conv1, dense2, dense3 */
        assert_int_equal(f.last_lo, 0);
        /* told of the large layer at once, before the first layer's backward;
         * deferred, only at the end, after it */
        if (defer)
            assert_int_equal(f.below_stale, 0);
        else
            assert_true(f.below_stale > 0);
    }
    assert_true(gc_check(&g, "deferred weight gradient") > 0);
    free(ref);
    free(got);
    gc_close(&g);

    /* frozen: nothing deferred, its gradient zero */
    gc_open(&g, NET PRE "[dense]\nunits = 2500\nactivation = tanh\nfreeze = 1\n" HEAD, 3, true);
    float *fz = gc_backward(&g, 1.0f);
    struct rt_tensor_info ti;
    for (int t = 0; t < rt_model_tensor_count(g.m); t++) {
        assert_int_equal(rt_model_tensor_info(g.m, t, &ti), 0);
        if (strncmp(ti.name, "dense2.", 7) == 0)
            for (size_t i = 0; i < ti.count; i++)
                assert_true(fz[ti.offset + i] == 0.0f);
    }
    free(fz);
    gc_close(&g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dense),          cmocka_unit_test(test_conv),
        cmocka_unit_test(test_conv_batchnorm), cmocka_unit_test(test_pool),
        cmocka_unit_test(test_flatten),        cmocka_unit_test(test_flatten_memory),
        cmocka_unit_test(test_activations),    cmocka_unit_test(test_dropout),
        cmocka_unit_test(test_dropout_seed),   cmocka_unit_test(test_batchnorm),
        cmocka_unit_test(test_batchnorm_modes), cmocka_unit_test(test_shortcut),
        cmocka_unit_test(test_resnet_like),    cmocka_unit_test(test_backward_contract),
        cmocka_unit_test(test_deferred_weight_grads),
    };
    return cmocka_run_group_tests(tests, setup_dev, teardown_dev);
}
