/* test_transfer.c — transfer learning (docs/transfer.md), with real files:
 *
 *   - --init loads the tensors of a checkpoint whose name and shape match,
 *     keeps the others as they were, and says which were skipped and why
 *     (another shape, not in the file) and which of the file's went unused;
 *     a truncated file and a file of which nothing fits are errors naming
 *     the file;
 *   - --freeze: names, numbers and ranges, `freeze = 1` in the model file,
 *     and clear errors for anything else;
 *   - with layers frozen, backward never writes below the lowest trainable
 *     layer (a NaN sentinel stays), a frozen layer above it gets a zero
 *     gradient, and every trainable tensor's gradient is bitwise the one
 *     without freezing;
 *   - a run with frozen layers leaves their weights bitwise as --init gave
 *     them while the others change, its checkpoint holds optimiser state
 *     for the trainable parameters only, and a resumed run ends with the
 *     weights of the uninterrupted one, bit for bit;
 *   - --classes keeps the images of the listed labels, renumbered.
 * Uses Fashion-MNIST (skipped when the Debian package is absent). */
#include "testutil.h"
#include "tu_weights.h"

#include <sys/stat.h>

#include "checkpoint.h"
#include "data.h"
#include "layer.h"
#include "status.h"
#include "train.h"
#include "transfer.h"

static rt_dev *cpu_dev(void)
{
    static rt_dev *d;
    if (!d)
        d = rt_dev_open("cpu", 0, 1);
    assert_non_null(d);
    return d;
}

static rt_model *load(const char *example, int max_batch)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/examples/%s", TOP_SRCDIR, example);
    rt_model *m = rt_model_load(path, cpu_dev(), max_batch);
    if (!m)
        fail_msg("%s: %s", path, rt_error_detail());
    return m;
}

/* The log lines the code under test says, one buffer. */
struct log {
    char text[16384];
};

static int note(void *arg, const char *line)
{
    struct log *l = arg;
    size_t n = strlen(l->text);
    snprintf(l->text + n, sizeof l->text - n, "%s\n", line);
    return RT_OK;
}

static void assert_contains(const char *hay, const char *needle)
{
    if (!strstr(hay, needle))
        fail_msg("'%s' not in:\n%s", needle, hay);
}

/* A host copy of a model tensor. */
static float *tensor(rt_model *m, const char *name, size_t *count)
{
    for (int i = 0; i < rt_model_tensor_count(m); i++) {
        struct rt_tensor_info ti;
        assert_int_equal(rt_model_tensor_info(m, i, &ti), RT_OK);
        if (strcmp(ti.name, name) != 0)
            continue;
        float *h = malloc(ti.count * sizeof *h);
        assert_non_null(h);
        rt_view v = ti.state ? rt_model_state(m) : rt_model_params(m);
        assert_int_equal(rt_download(cpu_dev(), h, rt_view_at(v, ti.offset),
                                     ti.count * sizeof *h), RT_OK);
        *count = ti.count;
        return h;
    }
    fail_msg("no tensor %s", name);
    return NULL;
}

static bool tensor_is(rt_model *m, const char *name, const float *want)
{
    size_t n;
    float *h = tensor(m, name, &n);
    bool same = memcmp(h, want, n * sizeof *h) == 0;
    free(h);
    return same;
}

/* ---- --init -------------------------------------------------------------------------- */

/* lenet (10 classes) into lenet-finetune (5): all but the classifier. */
static void test_init_from_checkpoint(void **state)
{
    (void)state;
    char file[512];
    snprintf(file, sizeof file, "%s/lenet.safetensors", tu_tmpdir());
    rt_model *a = load("lenet.cfg", 1), *b = load("lenet-finetune.cfg", 1);
    assert_int_equal(rt_model_init(a, 1), RT_OK);
    assert_int_equal(rt_model_init(b, 2), RT_OK);
    assert_int_equal(rt_checkpoint_save(file, a, NULL, NULL), RT_OK);
    size_t n;
    float *head = tensor(b, "dense7.weight", &n), *conv = tensor(a, "conv3.weight", &n);
    assert_false(tensor_is(b, "conv3.weight", conv));
    struct log l = {{0}};
    assert_int_equal(rt_transfer_init(file, b, note, &l), RT_OK);
    assert_true(tensor_is(b, "conv3.weight", conv));
    assert_true(tensor_is(b, "dense7.weight", head)); /* skipped: kept */
    assert_contains(l.text, "loaded 8 tensors (60856 values): conv1.weight, conv1.bias, "
                            "conv3.weight, conv3.bias, dense5.weight");
    assert_contains(l.text, "skipped 2 tensors of the model, which keep their initialisation: "
                            "dense7.weight (shape [10, 84] in the file, [5, 84] here), "
                            "dense7.bias (shape [10] in the file, [5] here)");
    free(head);
    free(conv);
    rt_model_destroy(&a);
    rt_model_destroy(&b);
}

/* A file with one fitting tensor, one of another shape, one unknown: the
 * model's tensors that are not in it are named too. */
static void test_init_names_every_skip(void **state)
{
    (void)state;
    char file[512];
    snprintf(file, sizeof file, "%s/some.safetensors", tu_tmpdir());
    static float w1[6 * 25], w7[3 * 84], other[4];
    for (size_t i = 0; i < sizeof w1 / sizeof w1[0]; i++)
        w1[i] = 0.001f * (float)i;
    struct rt_st_tensor t[3] = {
        {.name = "conv1.weight", .ndim = 4, .dims = {6, 1, 5, 5}, .data = w1},
        {.name = "dense7.weight", .ndim = 2, .dims = {3, 84}, .data = w7},
        {.name = "head.weight", .ndim = 1, .dims = {4}, .data = other},
    };
    assert_int_equal(rt_safetensors_write(file, t, 3, NULL, 0), RT_OK);
    rt_model *b = load("lenet-finetune.cfg", 1);
    assert_int_equal(rt_model_init(b, 2), RT_OK);
    struct log l = {{0}};
    assert_int_equal(rt_transfer_init(file, b, note, &l), RT_OK);
    assert_true(tensor_is(b, "conv1.weight", w1));
    assert_contains(l.text, "loaded 1 tensor (150 values): conv1.weight\n");
    assert_contains(l.text, "skipped 9 tensors of the model");
    assert_contains(l.text, "conv1.bias (not in the file)");
    assert_contains(l.text, "dense7.weight (shape [3, 84] in the file, [5, 84] here)");
    assert_contains(l.text, "1 tensor of the file not in the model: head.weight");
    rt_model_destroy(&b);
}

static void test_init_bad_files(void **state)
{
    (void)state;
    const char *dir = tu_tmpdir();
    char file[512], none[512];
    snprintf(file, sizeof file, "%s/cut.safetensors", dir);
    snprintf(none, sizeof none, "%s/none.safetensors", dir);
    rt_model *a = load("lenet.cfg", 1);
    assert_int_equal(rt_model_init(a, 1), RT_OK);
    assert_int_equal(rt_checkpoint_save(file, a, NULL, NULL), RT_OK);
    struct stat st;
    assert_int_equal(stat(file, &st), 0);
    assert_int_equal(truncate(file, st.st_size / 2), 0);
    float before[150];
    size_t n;
    float *w = tensor(a, "conv1.weight", &n);
    memcpy(before, w, sizeof before);
    free(w);
    struct log l = {{0}};
    assert_int_equal(rt_transfer_init(file, a, note, &l), RT_ERR_FORMAT);
    assert_contains(rt_error_detail(), file);
    assert_contains(rt_error_detail(), "--init");
    assert_true(tensor_is(a, "conv1.weight", before)); /* untouched */
    static float x[4];
    struct rt_st_tensor t = {.name = "other", .ndim = 1, .dims = {4}, .data = x};
    assert_int_equal(rt_safetensors_write(none, &t, 1, NULL, 0), RT_OK);
    assert_int_equal(rt_transfer_init(none, a, note, &l), RT_ERR_SHAPE);
    assert_contains(rt_error_detail(), "none of its tensors");
    assert_int_equal(rt_transfer_init("/nonexistent/x.safetensors", a, note, &l) < 0, 1);
    assert_contains(rt_error_detail(), "/nonexistent/x.safetensors");
    rt_model_destroy(&a);
}

/* ---- --freeze ------------------------------------------------------------------------ */

static void test_freeze_spec(void **state)
{
    (void)state;
    rt_model *m = load("lenet.cfg", 1);
    assert_int_equal(rt_model_freeze(m, "conv1, 3-4,dense6", "--freeze"), RT_OK);
    bool want[8] = {true, false, true, true, false, true, false, false};
    for (int i = 0; i < 8; i++)
        assert_int_equal(rt_model_layer_frozen(m, i), want[i]);
    assert_int_equal(rt_model_lowest_trainable(m), 4); /* dense5 */
    assert_int_equal(rt_model_trainable_from(m), 2572);
    assert_int_equal(rt_model_trainable_count(m), 61706 - 2572 - 10164);
    struct rt_span sp[8];
    assert_int_equal(rt_model_trainable_spans(m, sp, 8), 2); /* dense5 | dense7 */
    assert_int_equal(sp[0].off, 2572);
    assert_int_equal(sp[0].len, 48120);
    assert_int_equal(sp[1].off, 2572 + 48120 + 10164);
    assert_int_equal(sp[1].len, 850);
    const char *bad[] = {"conv9", "0-3", "5-2", "1-99", "conv1,,dense5", "x-1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(rt_model_freeze(m, bad[i], "--freeze"), RT_ERR_CONFIG);
        assert_contains(rt_error_detail(), "--freeze");
    }
    assert_int_equal(rt_model_freeze(m, "conv9", "--freeze"), RT_ERR_CONFIG);
    assert_contains(rt_error_detail(), "no layer 'conv9' in the model (its layers: conv1, "
                                       "maxpool2, conv3");
    rt_model_destroy(&m);

    m = load("lenet-finetune.cfg", 1); /* freeze = 1 on both convolutions */
    assert_true(rt_model_layer_frozen(m, 0) && rt_model_layer_frozen(m, 2));
    assert_false(rt_model_layer_frozen(m, 1) || rt_model_layer_frozen(m, 4));
    rt_model_destroy(&m);
    const char *cfg = "[net]\ninput = 4x4x1\nclasses = 2\n[dense]\nunits = 2\nfreeze = 2\n"
                      "[softmax]\n";
    assert_null(rt_model_load_string(cfg, "f.cfg", cpu_dev(), 1));
    assert_contains(rt_error_detail(), "f.cfg:6");
}

/* One batch through lenet frozen as `spec` and unfrozen: every trainable
 * tensor's gradient is bitwise the same; frozen ones above the lowest
 * trainable layer are zero; nothing below it is ever written. */
static void grads_with_freeze(const char *spec)
{
    enum { N = 8 };
    rt_model *f = load("lenet.cfg", N), *u = load("lenet.cfg", N);
    assert_int_equal(rt_model_init(f, 5), RT_OK);
    assert_int_equal(rt_model_init(u, 5), RT_OK);
    assert_int_equal(rt_model_freeze(f, spec, "--freeze"), RT_OK);
    static float x[N * 784];
    int32_t y[N];
    tu_fill_uniform(x, N * 784, -1.0f, 1.0f, 9);
    for (int i = 0; i < N; i++)
        y[i] = (i * 7) % 10;
    rt_buf *xb = rt_buf_new(cpu_dev(), sizeof x), *yb = rt_buf_new(cpu_dev(), sizeof y);
    assert_int_equal(rt_upload(cpu_dev(), rt_buf_view(xb), x, sizeof x), RT_OK);
    assert_int_equal(rt_upload(cpu_dev(), rt_buf_view(yb), y, sizeof y), RT_OK);
    size_t np = rt_model_param_count(f);
    assert_int_equal(rt_op_fill(cpu_dev(), np, NAN, rt_model_grads(f)), RT_OK);
    rt_model *ms[2] = {f, u};
    for (int k = 0; k < 2; k++) {
        assert_int_equal(rt_model_forward(ms[k], rt_buf_view(xb), N, true, 3), RT_OK);
        assert_int_equal(rt_model_backward(ms[k], rt_buf_view(xb), rt_buf_view(yb), N,
                                           1.0f / N), RT_OK);
    }
    float *gf = malloc(np * sizeof *gf), *gu = malloc(np * sizeof *gu);
    assert_int_equal(rt_download(cpu_dev(), gf, rt_model_grads(f), np * 4), RT_OK);
    assert_int_equal(rt_download(cpu_dev(), gu, rt_model_grads(u), np * 4), RT_OK);
    int low = rt_model_lowest_trainable(f);
    for (int i = 0; i < rt_model_layer_count(f); i++) {
        const struct rt_layer *l = rt_model_layer_const(f, i);
        for (size_t j = l->param_off; j < l->param_off + l->params; j++) {
            if (i < low)
                assert_true(isnan(gf[j])); /* backward stopped above it */
            else if (l->frozen)
                assert_true(gf[j] == 0.0f);
            else if (memcmp(&gf[j], &gu[j], sizeof *gf) != 0)
                fail_msg("%s: gradient %zu is %g frozen, %g not", l->name, j, gf[j], gu[j]);
        }
    }
    free(gf);
    free(gu);
    rt_buf_destroy(&xb);
    rt_buf_destroy(&yb);
    rt_model_destroy(&f);
    rt_model_destroy(&u);
}

static void test_freeze_gradients(void **state)
{
    (void)state;
    grads_with_freeze("conv1,conv3");
    grads_with_freeze("1-5");
    grads_with_freeze("dense6");   /* in the middle: the layers below still learn */
    grads_with_freeze("conv1,dense7");
}

/* ---- runs ------------------------------------------------------------------------------ */

static void run_config(struct rt_train_config *c, const char *dir, const char *save)
{
    rt_train_config_defaults(c);
    snprintf(c->model_path, sizeof c->model_path, "%s/examples/lenet-finetune.cfg", TOP_SRCDIR);
    snprintf(c->classes, sizeof c->classes, "5-9");
    c->limit = 640;
    c->val_frac = 0.0f;
    c->epochs = 2;
    c->batch = 32;
    c->threads = 1;
    c->seed = 4;
    c->optim.kind = RT_OPT_ADAMW;
    c->optim.lr = 0.003f;
    c->optim.weight_decay = 0.05f; /* would move frozen weights if it reached them */
    c->progress = RT_PROGRESS_OFF;
    snprintf(c->save_path, sizeof c->save_path, "%s/%s", dir, save);
}

static void test_frozen_run_and_resume(void **state)
{
    (void)state;
    TU_NEED_FASHION_MNIST();
    const char *dir = tu_tmpdir();
    char init[512], ck[512], last[600];
    snprintf(init, sizeof init, "%s/init.safetensors", dir);
    snprintf(ck, sizeof ck, "%s/ck", dir);
    snprintf(last, sizeof last, "%s/last.safetensors", ck);
    rt_model *a = load("lenet.cfg", 1);
    assert_int_equal(rt_model_init(a, 1), RT_OK);
    assert_int_equal(rt_checkpoint_save(init, a, NULL, NULL), RT_OK);

    struct rt_train_config c;
    struct rt_train_result r;
    run_config(&c, dir, "whole.safetensors");
    snprintf(c.init_path, sizeof c.init_path, "%s", init);
    assert_int_equal(rt_train_run(&c, &r), RT_OK);
    char whole[1100];
    snprintf(whole, sizeof whole, "%s", c.save_path);

    rt_model *b = load("lenet-finetune.cfg", 1);
    assert_int_equal(rt_checkpoint_load(whole, b, NULL, NULL), RT_OK);
    size_t n;
    const char *same[] = {"conv1.weight", "conv1.bias", "conv3.weight", "conv3.bias"};
    for (int i = 0; i < 4; i++) {
        float *w = tensor(a, same[i], &n);
        if (!tensor_is(b, same[i], w))
            fail_msg("frozen %s changed in training", same[i]);
        free(w);
    }
    float *w = tensor(a, "dense5.weight", &n);
    assert_false(tensor_is(b, "dense5.weight", w));
    free(w);

    /* one epoch with a checkpoint, then resumed to two: the same bits */
    run_config(&c, dir, "resumed.safetensors");
    snprintf(c.init_path, sizeof c.init_path, "%s", init);
    snprintf(c.checkpoint_dir, sizeof c.checkpoint_dir, "%s", ck);
    c.epochs = 1;
    c.optim.schedule = RT_SCHED_CONSTANT;
    assert_int_equal(rt_train_run(&c, &r), RT_OK);
    rt_st_file *f = NULL;
    assert_int_equal(rt_safetensors_read(last, &f), RT_OK);
    struct rt_st_tensor t;
    assert_int_equal(rt_st_find(f, "optimizer.adam_m", &t), RT_OK);
    assert_int_equal(t.dims[0], 61281 - 2572); /* no state for the frozen layers */
    rt_st_file_destroy(&f);
    c.epochs = 2;
    c.resume = true;
    assert_int_equal(rt_train_run(&c, &r), RT_OK);
    char resumed[1100];
    snprintf(resumed, sizeof resumed, "%s", c.save_path);
    run_config(&c, dir, "straight.safetensors");
    snprintf(c.init_path, sizeof c.init_path, "%s", init);
    c.optim.schedule = RT_SCHED_CONSTANT;
    assert_int_equal(rt_train_run(&c, &r), RT_OK);
    tu_assert_same_weights(resumed, c.save_path);
    /* resuming under other frozen layers is refused, saying why */
    run_config(&c, dir, "other.safetensors");
    snprintf(c.checkpoint_dir, sizeof c.checkpoint_dir, "%s", ck);
    snprintf(c.freeze, sizeof c.freeze, "dense5");
    c.epochs = 3;
    c.resume = true;
    assert_true(rt_train_run(&c, &r) < 0);
    assert_contains(rt_error_detail(), "--freeze");
    rt_model_destroy(&a);
    rt_model_destroy(&b);
}

/* ---- --classes ------------------------------------------------------------------------- */

static void test_classes(void **state)
{
    (void)state;
    TU_NEED_FASHION_MNIST();
    struct rt_data all, d;
    assert_int_equal(rt_data_open("fashion-mnist", 0.0f, 0, 1, &all), RT_OK);
    assert_int_equal(rt_data_open_classes("fashion-mnist", "7,5", 0.0f, 100, 1, &d), RT_OK);
    assert_int_equal(d.train->classes, 2);
    assert_int_equal(d.train->n, 100);
    assert_int_equal(d.test->n, 2000);
    /* the i-th image of the filtered set is the i-th of label 7 or 5, renumbered 0 or 1 */
    size_t v = rt_dataset_sample_values(all.train);
    long j = 0;
    for (long i = 0; i < d.train->n; i++, j++) {
        while (all.train->y[j] != 7 && all.train->y[j] != 5)
            j++;
        assert_int_equal(d.train->y[i], all.train->y[j] == 7 ? 0 : 1);
        assert_memory_equal(d.train->u8 + (size_t)i * v, all.train->u8 + (size_t)j * v, v);
    }
    rt_data_close(&d);
    rt_data_close(&all);
    const char *bad[] = {"3-12", "2,2", "a", "4-1", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(rt_data_open_classes("fashion-mnist", bad[i], 0.0f, 0, 1, &d) < 0 ||
                             !*bad[i], 1);
        if (*bad[i])
            assert_contains(rt_error_detail(), "--classes");
        else
            rt_data_close(&d);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init_from_checkpoint),
        cmocka_unit_test(test_init_names_every_skip),
        cmocka_unit_test(test_init_bad_files),
        cmocka_unit_test(test_freeze_spec),
        cmocka_unit_test(test_freeze_gradients),
        cmocka_unit_test(test_frozen_run_and_resume),
        cmocka_unit_test(test_classes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
