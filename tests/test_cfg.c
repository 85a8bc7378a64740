/* test_cfg.c — the model file: every error names FILE:LINE and what is
 * wrong; the examples load with their exact parameter counts; tensor names,
 * summary, seeded init, deterministic inference. */
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

/* ---- errors ------------------------------------------------------------- */

#define NET "[net]\ninput = 7x5x3\nclasses = 4\n" /* lines 1-3 */

struct bad {
    const char *text;
    const char *where; /* "t.cfg:LINE:" */
    const char *what;  /* a substring of the message */
};

static const struct bad bad_files[] = {
    /* syntax */
    {"", "t.cfg:1:", "no sections"},
    {"# only a comment\n", "t.cfg:1:", "no sections"},
    {"input = 5x5x1\n[net]\n", "t.cfg:1:", "before any section"},
    {NET "[conv\n", "t.cfg:4:", "a section header is '[name]'"},
    {NET "[]\n", "t.cfg:4:", "bad section name"},
    {NET "[dense]\nunits 4\n", "t.cfg:5:", "expected 'key = value'"},
    {NET "[dense]\nunits =\n", "t.cfg:5:", "key 'units' has no value"},
    {NET "[dense]\n= 4\n", "t.cfg:5:", "bad key"},
    {NET "[dense]\nunits = 4\nunits = 4\n[softmax]\n", "t.cfg:6:",
     "duplicate key 'units' in [dense] (first set at line 5"},
    /* sections */
    {"[dense]\nunits = 4\n", "t.cfg:1:", "[dense] before [net]"},
    {NET "[convolutional]\n", "t.cfg:4:", "unknown section [convolutional] (known: net, train, conv"},
    {NET "[net]\n", "t.cfg:4:", "second [net] section (first at line 1"},
    {NET "[train]\nlr = 1\n[train]\n", "t.cfg:6:", "second [train] section (first at line 4"},
    {NET "[dense]\nunits = 4\n", "t.cfg:5:", "no [softmax] layer"},
    {NET "[dense]\nunits = 4\n[softmax]\n[dense]\nunits = 4\n", "t.cfg:7:",
     "[dense] after [softmax]"},
    /* [net] */
    {"[net]\ninput = 28x28\nclasses = 4\n", "t.cfg:2:", "input = 28x28: not a shape (accepted: WxHxC"},
    {"[net]\ninput = 28x0x1\nclasses = 4\n", "t.cfg:2:", "not a shape"},
    {"[net]\ninput = 5x5x1\nwidth = 5\nclasses = 4\n", "t.cfg:2:", "both input and width"},
    {"[net]\nclasses = 4\n", "t.cfg:1:", "[net] needs input = WxHxC"},
    {"[net]\ninput = 5x5x1\n", "t.cfg:1:", "[net] needs 'classes'"},
    {"[net]\ninput = 5x5x1\nclasses = 0\n", "t.cfg:3:", "classes = 0: out of range"},
    {"[net]\ninput = 5x5x1\nclasses = 4\nbatch = 3\n", "t.cfg:4:",
     "unknown key 'batch' in [net] (accepted: input, width"},
    {"[net]\nwidth = 5\nclasses = 4\n", "t.cfg:1:", "[net] needs 'height'"},
    /* keys and values */
    {NET "[conv]\nfilter = 3\n", "t.cfg:5:",
     "unknown key 'filter' in [conv] (accepted: filters, size, stride, pad, activation, batch_normalize, freeze)"},
    {NET "[conv]\nfilters = abc\nsize = 3\n", "t.cfg:5:", "[conv] filters = abc: not a whole number"},
    {NET "[conv]\nfilters = 3.5\nsize = 3\n", "t.cfg:5:", "filters = 3.5: not a whole number"},
    {NET "[conv]\nfilters = 3\nsize = -3\n", "t.cfg:6:", "[conv] size = -3: out of range (accepted: 1 to"},
    {NET "[conv]\nsize = 3\n", "t.cfg:4:", "[conv] needs 'filters'"},
    {NET "[conv]\nfilters = 2\nsize = 3\nstride = 0\n", "t.cfg:7:", "stride = 0: out of range"},
    {NET "[conv]\nfilters = 2\nsize = 3\nbatch_normalize = 2\n", "t.cfg:7:",
     "batch_normalize = 2: out of range (accepted: 0 to 1)"},
    {NET "[conv]\nfilters = 2\nsize = 3\nactivation = swish\n", "t.cfg:7:",
     "activation = swish: unknown value (accepted: linear, relu, leaky, sigmoid, tanh)"},
    {NET "[dense]\nunits = 0\n", "t.cfg:5:", "units = 0: out of range"},
    {NET "[dense]\nunits = 99999999999999999999\n", "t.cfg:5:", "out of range"},
    {NET "[dropout]\nrate = 1\n", "t.cfg:5:", "rate = 1: out of range (accepted: a number >= 0 and < 1)"},
    {NET "[dropout]\nrate = -0.1\n", "t.cfg:5:", "rate = -0.1: out of range"},
    {NET "[dropout]\nrate = half\n", "t.cfg:5:", "rate = half: not a number"},
    {NET "[dropout]\nrate = nan\n", "t.cfg:5:", "rate = nan: not a number"},
    {NET "[leaky]\nalpha = 2\n", "t.cfg:5:", "alpha = 2: out of range"},
    {NET "[batchnorm]\neps = 0\n", "t.cfg:5:", "eps = 0: out of range"},
    {NET "[batchnorm]\nmomentum = 1.5\n", "t.cfg:5:", "momentum = 1.5: out of range"},
    {NET "[maxpool]\nstride = 2\n", "t.cfg:4:", "[maxpool] needs 'size'"},
    {NET "[flatten]\nsize = 2\n", "t.cfg:5:", "unknown key 'size' in [flatten] (accepted: freeze)"},
    {NET "[softmax]\nclasses = 4\n", "t.cfg:5:", "unknown key 'classes' in [softmax]"},
    /* shapes */
    {NET "[conv]\nfilters = 2\nsize = 7\n", "t.cfg:4:",
     "[conv] size = 7 does not fit its 7x5 input with pad = 0"},
    {NET "[conv]\nfilters = 2\nsize = 3\npad = 3\n", "t.cfg:4:",
     "[conv] pad = 3 must be smaller than size = 3"},
    {NET "[maxpool]\nsize = 6\n", "t.cfg:4:", "[maxpool] size = 6 does not fit"},
    {NET "[avgpool]\nsize = 2\npad = 2\n", "t.cfg:4:", "[avgpool] pad = 2 must be smaller"},
    {NET "[conv]\nfilters = 2\nsize = 3\n[conv]\nfilters = 2\nsize = 3\nstride = 2\n"
         "[shortcut]\nfrom = -2\n",
     "t.cfg:11:", "[shortcut] from = -2: conv1 (line 4) outputs 5x3x2 but the previous layer "
                  "outputs 2x1x2 (the shapes must match)"},
    {NET "[relu]\n[shortcut]\nfrom = -2\n", "t.cfg:5:",
     "[shortcut] from = -2 reaches before the first layer"},
    {NET "[shortcut]\nfrom = -1\n", "t.cfg:4:", "[shortcut] cannot be the first layer"},
    {NET "[relu]\n[shortcut]\nfrom = 0\n", "t.cfg:6:", "from = 0: out of range (accepted: -1000000 to -1)"},
    {NET "[relu]\n[shortcut]\n", "t.cfg:5:", "[shortcut] needs 'from'"},
    {NET "[dense]\nunits = 5\n[softmax]\n", "t.cfg:6:",
     "[softmax] gets 5 values per sample (1x1x5) but [net] classes = 4"},
    {NET "[softmax]\n", "t.cfg:4:", "gets 105 values per sample (7x5x3) but [net] classes = 4"},
};

static void test_errors(void **state)
{
    for (size_t i = 0; i < sizeof bad_files / sizeof bad_files[0]; i++) {
        const struct bad *b = &bad_files[i];
        rt_model *m = (rt_model *)1;
        rt_error_clear();
        int rc = rt_model_open_string(b->text, "t.cfg", dev, 4, &m);
        const char *msg = rt_error_detail();
        if (rc != RT_ERR_CONFIG || m != NULL || strncmp(msg, b->where, strlen(b->where)) != 0 ||
            !strstr(msg, b->what))
            fail_msg("case %zu:\n%s\n  status %d (want %d), message:\n  %s\n  want %s ... %s",
                     i, b->text, rc, RT_ERR_CONFIG, msg, b->where, b->what);
        /* the plain constructor agrees */
        assert_null(rt_model_load_string(b->text, "t.cfg", dev, 4));
    }
}

static void test_bad_args(void **state)
{
    rt_model *m;
    assert_int_equal(rt_model_open_string(NET "[dense]\nunits = 4\n[softmax]\n", "t.cfg", dev, 0,
                                          &m), RT_ERR_ARG);
    assert_null(m);
    assert_null(rt_model_load("/nonexistent/model.cfg", dev, 4));
    assert_non_null(strstr(rt_error_detail(), "/nonexistent/model.cfg"));
}

/* CRLF line ends, tabs, comments everywhere, width/height/channels. */
static void test_syntax_variants(void **state)
{
    const char *text = "# header\r\n[net]   # the input\r\n\twidth = 6\r\nheight=4\r\n"
                       "channels = 2\r\nclasses = 3 # three\r\n\r\n[ dense ]\r\nunits = 3\r\n"
                       "[softmax]";
    rt_model *m = rt_model_load_string(text, "crlf.cfg", dev, 2);
    assert_non_null(m);
    struct rt_shape in = rt_model_input_shape(m);
    assert_int_equal(in.c, 2);
    assert_int_equal(in.h, 4);
    assert_int_equal(in.w, 6);
    assert_int_equal(rt_model_classes(m), 3);
    assert_int_equal(rt_model_param_count(m), 48 * 3 + 3);
    assert_int_equal(rt_model_train_option_count(m), 0);
    rt_model_destroy(&m);
    assert_null(m);
}

/* ---- examples -------------------------------------------------------------- */

static rt_model *load_example(const char *name, int max_batch)
{
    char path[512];
    snprintf(path, sizeof path, "%s/examples/%s", TOP_SRCDIR, name);
    rt_model *m = rt_model_load(path, dev, max_batch);
    if (!m)
        fail_msg("%s: %s", path, rt_error_detail());
    return m;
}

static void test_examples(void **state)
{
    rt_model *m = load_example("lenet.cfg", 8);
    assert_int_equal(rt_model_param_count(m), 61706);
    assert_int_equal(rt_model_state_count(m), 0);
    rt_model_destroy(&m);

    m = load_example("seedcnn.cfg", 8);
    assert_int_equal(rt_model_param_count(m), 1048853);
    rt_model_destroy(&m);

    m = load_example("resnet8.cfg", 8);
    /* 9 convs (no bias) + their batch norms + dense 64 -> 10 */
    size_t convs = 144 + 2 * 2304 + 4608 + 2 * 9216 + 18432 + 2 * 36864;
    size_t bn = 2 * (3 * 16 + 3 * 32 + 3 * 64);
    assert_int_equal(rt_model_param_count(m), convs + bn + 650);
    assert_int_equal(rt_model_state_count(m), bn);
    assert_int_equal(rt_model_param_count(m), 121274);
    rt_model_destroy(&m);
}

static void test_train_options(void **state)
{
    rt_model *m = load_example("seedcnn.cfg", 2);
    int n = rt_model_train_option_count(m);
    assert_int_equal(n, 5);
    struct rt_train_option o = rt_model_train_option(m, 0);
    assert_string_equal(o.key, "epochs");
    assert_string_equal(o.value, "10");
    assert_non_null(strstr(o.file, "examples/seedcnn.cfg"));
    assert_int_equal(o.line, 10);
    o = rt_model_train_option(m, 4);
    assert_string_equal(o.key, "momentum");
    assert_string_equal(o.value, "0.9");
    assert_int_equal(o.line, 14);
    rt_model_destroy(&m);

    /* [train] keys are kept as written, not judged here */
    m = rt_model_load_string(NET "[train]\nwhatever = some thing\n[dense]\nunits = 4\n"
                                 "[softmax]\n", "t.cfg", dev, 2);
    assert_non_null(m);
    assert_int_equal(rt_model_train_option_count(m), 1);
    o = rt_model_train_option(m, 0);
    assert_string_equal(o.key, "whatever");
    assert_string_equal(o.value, "some thing");
    assert_string_equal(o.file, "t.cfg");
    assert_int_equal(o.line, 5);
    rt_model_destroy(&m);
}

static void expect_tensor(rt_model *m, int i, const char *name, int ndim, const int *dims,
                          bool st)
{
    struct rt_tensor_info t;
    assert_int_equal(rt_model_tensor_info(m, i, &t), 0);
    assert_string_equal(t.name, name);
    assert_int_equal(t.ndim, ndim);
    size_t count = 1;
    for (int k = 0; k < ndim; k++) {
        assert_int_equal(t.dims[k], dims[k]);
        count *= (size_t)dims[k];
    }
    assert_int_equal(t.count, count);
    assert_int_equal(t.state, st);
}

static void test_tensor_names(void **state)
{
    rt_model *m = load_example("lenet.cfg", 2);
    assert_int_equal(rt_model_tensor_count(m), 10);
    expect_tensor(m, 0, "conv1.weight", 4, (int[]){6, 1, 5, 5}, false);
    expect_tensor(m, 1, "conv1.bias", 1, (int[]){6}, false);
    expect_tensor(m, 2, "conv3.weight", 4, (int[]){16, 6, 5, 5}, false);
    expect_tensor(m, 4, "dense5.weight", 2, (int[]){120, 400}, false);
    expect_tensor(m, 9, "dense7.bias", 1, (int[]){10}, false);
    /* offsets tile the parameter buffer in order */
    size_t off = 0;
    for (int i = 0; i < rt_model_tensor_count(m); i++) {
        struct rt_tensor_info t;
        rt_model_tensor_info(m, i, &t);
        assert_int_equal(t.offset, off);
        off += t.count;
    }
    assert_int_equal(off, rt_model_param_count(m));
    struct rt_tensor_info t;
    assert_int_equal(rt_model_tensor_info(m, 10, &t), RT_ERR_ARG);
    rt_model_destroy(&m);

    m = rt_model_load_string(NET "[conv]\nfilters = 2\nsize = 3\nbatch_normalize = 1\n"
                                 "[batchnorm]\n[dense]\nunits = 4\n[softmax]\n", "t.cfg", dev, 2);
    assert_non_null(m);
    expect_tensor(m, 0, "conv1.weight", 4, (int[]){2, 3, 3, 3}, false);
    expect_tensor(m, 1, "conv1.bn.weight", 1, (int[]){2}, false);
    expect_tensor(m, 2, "conv1.bn.bias", 1, (int[]){2}, false);
    expect_tensor(m, 3, "conv1.bn.running_mean", 1, (int[]){2}, true);
    expect_tensor(m, 4, "conv1.bn.running_var", 1, (int[]){2}, true);
    expect_tensor(m, 5, "bn2.weight", 1, (int[]){2}, false);
    expect_tensor(m, 6, "bn2.bias", 1, (int[]){2}, false);
    expect_tensor(m, 7, "bn2.running_mean", 1, (int[]){2}, true);
    expect_tensor(m, 8, "bn2.running_var", 1, (int[]){2}, true);
    expect_tensor(m, 9, "dense3.weight", 2, (int[]){4, 30}, false);
    assert_int_equal(rt_model_state_count(m), 8);
    rt_model_destroy(&m);
}

static char *summary_of(rt_model *m)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    assert_int_equal(rt_model_summary(m, f), 0);
    fclose(f);
    return buf;
}

static void test_summary(void **state)
{
    rt_model *m = load_example("lenet.cfg", 2);
    char *s = summary_of(m);
    static const char *const want[] = {
        "conv1 (conv+relu)", "(6, 28, 28)", "156",    "maxpool2 (maxpool)", "(6, 14, 14)",
        "conv3 (conv+relu)", "(16, 10, 10)", "2,416", "(16, 5, 5)",         "dense5 (dense+relu)",
        "(120)",             "48,120",       "dense7 (dense)", "850",       "softmax8 (softmax)",
        "Total params: 61,706", "Trainable params: 61,706", "Non-trainable params: 0",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!strstr(s, want[i]))
            fail_msg("summary lacks '%s':\n%s", want[i], s);
    free(s);
    rt_model_destroy(&m);

    m = load_example("resnet8.cfg", 2);
    s = summary_of(m);
    static const char *const want2[] = {
        "shortcut4 (shortcut+relu)", "(16, 28, 28)", "(32, 14, 14)", "(64, 7, 7)", "gap13",
        "(64)", "Total params: 121,946", "Trainable params: 121,274",
        "Non-trainable params: 672",
    };
    for (size_t i = 0; i < sizeof want2 / sizeof want2[0]; i++)
        if (!strstr(s, want2[i]))
            fail_msg("summary lacks '%s':\n%s", want2[i], s);
    free(s);
    rt_model_destroy(&m);
}

/* ---- init and inference ------------------------------------------------------ */

static float *download_params(rt_model *m)
{
    size_t n = rt_model_param_count(m);
    float *p = malloc(n * sizeof *p);
    assert_non_null(p);
    assert_int_equal(rt_download(dev, p, rt_model_params(m), n * sizeof *p), 0);
    return p;
}

static void test_init_seeded(void **state)
{
    rt_model *a = load_example("resnet8.cfg", 2), *b = load_example("resnet8.cfg", 2);
    size_t n = rt_model_param_count(a);
    assert_int_equal(rt_model_init(a, 42), 0);
    assert_int_equal(rt_model_init(b, 42), 0);
    float *pa = download_params(a), *pb = download_params(b);
    assert_memory_equal(pa, pb, n * sizeof *pa);
    assert_int_equal(rt_model_init(b, 43), 0);
    free(pb);
    pb = download_params(b);
    size_t differ = 0;
    for (size_t i = 0; i < n; i++)
        differ += pa[i] != pb[i];
    assert_true(differ > n / 2); /* weights differ; gammas (1) and betas (0) do not */

    /* the recipe: conv weights He-uniform within sqrt(6/fan_in), bn gamma 1,
     * beta 0, running var 1, mean 0, dense bias 0 */
    for (int i = 0; i < rt_model_tensor_count(a); i++) {
        struct rt_tensor_info t;
        rt_model_tensor_info(a, i, &t);
        if (t.state) {
            float *st = malloc(t.count * sizeof *st);
            rt_download(dev, st, rt_view_at(rt_model_state(a), t.offset), t.count * sizeof *st);
            float want = strstr(t.name, "running_var") ? 1.0f : 0.0f;
            for (size_t k = 0; k < t.count; k++)
                assert_true(st[k] == want);
            free(st);
            continue;
        }
        const float *v = pa + t.offset;
        if (strstr(t.name, "bn.weight")) {
            for (size_t k = 0; k < t.count; k++)
                assert_true(v[k] == 1.0f);
        } else if (strstr(t.name, "bias")) {
            for (size_t k = 0; k < t.count; k++)
                assert_true(v[k] == 0.0f);
        } else if (t.ndim == 4) {
            double limit = sqrt(6.0 / (t.dims[1] * t.dims[2] * t.dims[3])), sq = 0.0;
            for (size_t k = 0; k < t.count; k++) {
                assert_true(fabs(v[k]) <= limit);
                sq += (double)v[k] * v[k];
            }
            double var = sq / (double)t.count, want = 2.0 / (t.dims[1] * t.dims[2] * t.dims[3]);
            if (t.count >= 1000) /* He variance, within sampling error */
                assert_true(fabs(var - want) < 0.15 * want);
        }
    }
    free(pa);
    free(pb);
    rt_model_destroy(&a);
    rt_model_destroy(&b);
}

/* A loss started (rt_model_loss_start) on a device with a queue: its
 * collect gives the figures of the waiting rt_model_loss_host, and a model
 * destroyed before collecting waits for the download, whose bytes would
 * otherwise land in freed memory: a 25 ms forward queued first keeps the
 * read in flight past the destroy, and the block freed for the
 * probabilities, taken again by the next malloc of its size, must keep
 * what is written there after. Skips without an OpenCL device. */
static void test_loss_started_on_a_queue(void **state)
{
    rt_dev *od = rt_dev_open("opencl", 0, 0);
    if (!od) {
        print_message("skipped: no opencl device: %s\n", rt_error_detail());
        skip();
    }
    enum { B = 64, C = 10 };
    const char *cfg = "[net]\ninput = 28x28x1\nclasses = 10\n"
                      "[conv]\nfilters = 32\nsize = 5\npad = 2\nactivation = relu\n"
                      "[conv]\nfilters = 32\nsize = 5\npad = 2\nactivation = relu\n"
                      "[maxpool]\nsize = 4\n[dense]\nunits = 10\n[softmax]\n";
    float *x = malloc((size_t)B * 784 * sizeof *x);
    int32_t labels[B];
    assert_non_null(x);
    tu_fill_uniform(x, (size_t)B * 784, 0.0f, 1.0f, 5);
    for (int i = 0; i < B; i++)
        labels[i] = (i * 7) % C;
    rt_buf *xb = rt_buf_new(od, (size_t)B * 784 * sizeof *x), *lb = rt_buf_new(od, sizeof labels);
    assert_true(xb && lb);
    assert_int_equal(rt_upload(od, rt_buf_view(xb), x, (size_t)B * 784 * sizeof *x), RT_OK);
    assert_int_equal(rt_upload(od, rt_buf_view(lb), labels, sizeof labels), RT_OK);
    rt_model *m = rt_model_load_string(cfg, "t.cfg", od, B);
    assert_non_null(m);
    assert_int_equal(rt_model_init(m, 3), RT_OK);
    double l1 = 0, l2 = 0;
    long c1 = 0, c2 = 0;
    assert_int_equal(rt_model_forward(m, rt_buf_view(xb), B, true, 1), RT_OK);
    assert_int_equal(rt_model_loss_host(m, rt_buf_view(lb), labels, B, &l1, &c1, NULL), RT_OK);
    assert_int_equal(rt_model_forward(m, rt_buf_view(xb), B, true, 1), RT_OK);
    assert_int_equal(rt_model_loss_start(m, rt_buf_view(lb), labels, B), RT_OK);
    assert_int_equal(rt_model_backward(m, rt_buf_view(xb), rt_buf_view(lb), B, 1.0f / B), RT_OK);
    assert_int_equal(rt_model_loss_collect(m, &l2, &c2, NULL), RT_OK);
    assert_true(l1 == l2 && c1 == c2 && l1 > 0.0);
    /* started, never collected, destroyed */
    assert_int_equal(rt_model_forward(m, rt_buf_view(xb), B, true, 1), RT_OK);
    assert_int_equal(rt_model_loss_start(m, rt_buf_view(lb), labels, B), RT_OK);
    rt_model_destroy(&m);
    const size_t n = (size_t)B * (C + 1);
    float *probe = malloc(n * sizeof *probe);
    assert_non_null(probe);
    for (size_t i = 0; i < n; i++)
        probe[i] = 12345.0f;
    assert_int_equal(rt_sync(od), RT_OK);
    for (size_t i = 0; i < n; i++)
        if (probe[i] != 12345.0f)
            fail_msg("float %zu of memory freed with the model became %g after it", i, probe[i]);
    free(probe);
    free(x);
    rt_buf_destroy(&xb);
    rt_buf_destroy(&lb);
    rt_dev_close(&od);
}

static void test_inference_deterministic(void **state)
{
    rt_model *m = load_example("resnet8.cfg", 5);
    assert_int_equal(rt_model_init(m, 7), 0);
    size_t in = 28 * 28, n = 5;
    float *x = malloc(n * in * sizeof *x);
    tu_fill_uniform(x, n * in, 0.0f, 1.0f, 99);
    int32_t labels[5] = {0, 3, 9, 1, 1};
    rt_buf *xb = rt_buf_new(dev, n * in * sizeof *x), *lb = rt_buf_new(dev, sizeof labels);
    rt_upload(dev, rt_buf_view(xb), x, n * in * sizeof *x);
    rt_upload(dev, rt_buf_view(lb), labels, sizeof labels);
    float p1[50], p2[50], p3[10];
    double l1 = 0, l2 = 0;
    long c1 = 0, c2 = 0;
    assert_int_equal(rt_model_forward(m, rt_buf_view(xb), 5, false, 1), 0);
    assert_int_equal(rt_model_loss(m, rt_buf_view(lb), 5, &l1, &c1, p1), 0);
    /* a train step in between must not change inference (running stats are
     * only touched by train mode, and we do not run one here) */
    assert_int_equal(rt_model_forward(m, rt_buf_view(xb), 5, false, 12345), 0);
    assert_int_equal(rt_model_loss(m, rt_buf_view(lb), 5, &l2, &c2, p2), 0);
    assert_memory_equal(p1, p2, sizeof p1);
    assert_true(l1 == l2 && c1 == c2);
    assert_true(l1 > 0.0 && c1 >= 0 && c1 <= 5);
    /* the caller's host copy of the labels gives the same figures */
    float ph[50];
    double lh = 0;
    long ch = 0;
    assert_int_equal(rt_model_forward(m, rt_buf_view(xb), 5, false, 1), 0);
    assert_int_equal(rt_model_loss_host(m, rt_buf_view(lb), labels, 5, &lh, &ch, ph), 0);
    assert_memory_equal(p1, ph, sizeof p1);
    assert_true(l1 == lh && c1 == ch);
    for (int i = 0; i < 5; i++) {
        double s = 0;
        for (int k = 0; k < 10; k++)
            s += p1[i * 10 + k];
        assert_true(fabs(s - 1.0) < 1e-5);
    }
    /* a sample's result does not depend on its batch */
    assert_int_equal(rt_model_forward(m, rt_view_at(rt_buf_view(xb), 2 * in), 1, false, 0), 0);
    assert_int_equal(rt_model_loss(m, rt_view_at(rt_buf_view(lb), 2), 1, NULL, NULL, p3), 0);
    assert_true(tu_max_rel_err(p3, p1 + 20, 10, 1e-6) < 1e-4);

    /* bad calls are statuses, not crashes */
    assert_int_equal(rt_model_forward(m, rt_buf_view(xb), 6, false, 0), RT_ERR_ARG);
    assert_int_equal(rt_model_forward(m, rt_buf_view(xb), 2, false, 0), 0);
    assert_int_equal(rt_model_loss(m, rt_buf_view(lb), 3, NULL, NULL, NULL), RT_ERR_ARG);
    int32_t bad[2] = {0, 10};
    rt_upload(dev, rt_buf_view(lb), bad, sizeof bad);
    assert_int_equal(rt_model_loss(m, rt_buf_view(lb), 2, NULL, NULL, NULL), RT_ERR_ARG);
    assert_non_null(strstr(rt_error_detail(), "label 10"));
    /* a bad label in the host copy too */
    assert_int_equal(rt_model_forward(m, rt_buf_view(xb), 2, false, 0), 0);
    assert_int_equal(rt_model_loss_host(m, rt_buf_view(lb), bad, 2, NULL, NULL, NULL),
                     RT_ERR_ARG);
    assert_non_null(strstr(rt_error_detail(), "label 10 of sample 1"));

    rt_buf_destroy(&xb);
    rt_buf_destroy(&lb);
    free(x);
    rt_model_destroy(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_bad_args),
        cmocka_unit_test(test_syntax_variants),
        cmocka_unit_test(test_examples),
        cmocka_unit_test(test_train_options),
        cmocka_unit_test(test_tensor_names),
        cmocka_unit_test(test_summary),
        cmocka_unit_test(test_init_seeded),
        cmocka_unit_test(test_inference_deterministic),
        cmocka_unit_test(test_loss_started_on_a_queue),
    };
    return cmocka_run_group_tests(tests, setup_dev, teardown_dev);
}
