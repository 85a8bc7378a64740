/* test_train.c — the training driver: resume gives the same weights as an
 * uninterrupted run (bitwise, one thread), early stopping restores the best
 * weights, metrics lines carry their fields, options are validated. Uses a
 * slice of Fashion-MNIST (skipped when the Debian package is absent). */
#include "testutil.h"
#include "tu_weights.h"

#include <sys/stat.h>

#include "checkpoint.h"
#include "status.h"
#include "train.h"
#include "train-testing.h"

static const char *model_path(const char *name)
{
    static char p[2][1024];
    static int k;
    k ^= 1;
    snprintf(p[k], sizeof p[k], "%s/examples/%s", TOP_SRCDIR, name);
    return p[k];
}

static void base_config(struct rt_train_config *c, const char *dir)
{
    rt_train_config_defaults(c);
    assert_int_equal(rt_train_config_from_model(c, model_path("lenet.cfg")), 0);
    c->limit = 1200;
    c->val_frac = 0.1f;
    c->epochs = 3;
    c->batch = 32;
    c->threads = 1;
    c->seed = 7;
    /* plain SGD whatever the file's recipe, so the test's numbers stay put */
    c->optim.kind = RT_OPT_SGD;
    c->optim.lr = 0.02f;
    c->optim.momentum = 0.9f;
    c->optim.weight_decay = 0.0f;
    c->optim.schedule = RT_SCHED_CONSTANT;
    c->warmup_epochs = 0.0f;
    c->progress = RT_PROGRESS_OFF;
    if (dir) {
        snprintf(c->checkpoint_dir, sizeof c->checkpoint_dir, "%s", dir);
        snprintf(c->save_path, sizeof c->save_path, "%s/final.safetensors", dir);
    }
}

static void subdir(char *out, size_t n, const char *root, const char *name)
{
    snprintf(out, n, "%s/%s", root, name);
}

static void test_resume_mid_epoch_is_bitwise(void **state)
{
    (void)state;
    const char *root = tu_tmpdir();
    char full[512], part[512];
    subdir(full, sizeof full, root, "full");
    subdir(part, sizeof part, root, "part");
    struct rt_train_config c;
    struct rt_train_result r;

    base_config(&c, full);
    assert_int_equal(rt_train_run(&c, &r), 0);
    assert_int_equal(r.epochs_run, 3);

    /* 1080 training images / 32 = 34 steps per epoch: step 40 is mid epoch 2. */
    base_config(&c, part);
    struct rt_train_testing interrupt = {.stop_at_step = 40};
    c.testing = &interrupt;
    assert_int_equal(rt_train_run(&c, &r), RT_ERR_INTERRUPTED);
    base_config(&c, part);
    c.resume = true;
    assert_int_equal(rt_train_run(&c, &r), 0);
    assert_int_equal(r.steps, 3 * 34);

    char fa[600], fb[600];
    snprintf(fa, sizeof fa, "%s/final.safetensors", full);
    snprintf(fb, sizeof fb, "%s/final.safetensors", part);
    tu_assert_same_weights(fa, fb);
    snprintf(fa, sizeof fa, "%s/last.safetensors", full);
    snprintf(fb, sizeof fb, "%s/last.safetensors", part);
    tu_assert_same_weights(fa, fb); /* optimiser state too */
}

static void test_resume_at_epoch_boundary_is_bitwise(void **state)
{
    (void)state;
    const char *root = tu_tmpdir();
    char full[512], part[512];
    subdir(full, sizeof full, root, "full");
    subdir(part, sizeof part, root, "part");
    struct rt_train_config c;
    struct rt_train_result r;
    base_config(&c, full);
    c.epochs = 2;
    c.optim.kind = RT_OPT_ADAM;
    c.optim.lr = 1e-3f;
    assert_int_equal(rt_train_run(&c, &r), 0);

    base_config(&c, part);
    c.epochs = 1;
    c.optim.kind = RT_OPT_ADAM;
    c.optim.lr = 1e-3f;
    assert_int_equal(rt_train_run(&c, &r), 0);
    c.epochs = 2;
    c.resume = true;
    assert_int_equal(rt_train_run(&c, &r), 0);
    assert_int_equal(r.epochs_run, 2);

    char fa[600], fb[600];
    snprintf(fa, sizeof fa, "%s/last.safetensors", full);
    snprintf(fb, sizeof fb, "%s/last.safetensors", part);
    tu_assert_same_weights(fa, fb);
}

static void test_early_stopping_restores_best(void **state)
{
    (void)state;
    const char *root = tu_tmpdir();
    char metrics[600];
    snprintf(metrics, sizeof metrics, "%s/m.jsonl", root);
    struct rt_train_config c;
    struct rt_train_result r;
    base_config(&c, root);
    c.epochs = 5;
    c.patience = 2;
    /* No later epoch can beat the first by a whole unit of accuracy, so the
     * run must stop after epoch 3 and come back to epoch 1's weights. */
    c.min_delta = 1.0f;
    snprintf(c.metrics_path, sizeof c.metrics_path, "%s", metrics);
    assert_int_equal(rt_train_run(&c, &r), 0);
    assert_true(r.stopped_early);
    assert_int_equal(r.epochs_run, 3);
    assert_int_equal(r.best_epoch, 1);

    FILE *f = fopen(metrics, "r");
    assert_non_null(f);
    char line[4096];
    int lines = 0;
    double val_acc_1 = -1;
    while (fgets(line, sizeof line, f)) {
        lines++;
        for (const char *k = "epoch\0train_loss\0train_acc\0val_loss\0val_acc\0test_loss\0"
                             "test_acc\0images_per_s\0seconds\0";
             *k; k += strlen(k) + 1) {
            char key[64];
            snprintf(key, sizeof key, "\"%s\": ", k);
            if (!strstr(line, key))
                fail_msg("metrics line %d lacks %s: %s", lines, k, line);
        }
        if (lines == 1)
            val_acc_1 = atof(strstr(line, "\"val_acc\": ") + 11);
    }
    fclose(f);
    assert_int_equal(lines, 3);
    /* the restored weights give epoch 1's validation accuracy */
    assert_true(fabs(r.val_acc - val_acc_1) < 1e-5);
}

static void test_log_every_lines(void **state)
{
    (void)state;
    const char *root = tu_tmpdir();
    struct rt_train_config c;
    struct rt_train_result r;
    base_config(&c, NULL);
    c.epochs = 1;
    c.log_every = 10;
    snprintf(c.metrics_path, sizeof c.metrics_path, "%s/m.jsonl", root);
    assert_int_equal(rt_train_run(&c, &r), 0);
    FILE *f = fopen(c.metrics_path, "r");
    assert_non_null(f);
    char line[4096];
    int steps = 0, epochs = 0;
    while (fgets(line, sizeof line, f)) {
        if (strstr(line, "\"train_loss\""))
            epochs++;
        else if (strstr(line, "\"step\"") && strstr(line, "\"loss\""))
            steps++;
    }
    fclose(f);
    assert_int_equal(epochs, 1);
    assert_int_equal(steps, 34 / 10);
}

static void test_option_errors(void **state)
{
    (void)state;
    struct rt_train_config c;
    rt_train_config_defaults(&c);
    assert_int_equal(rt_train_config_set(&c, "lr", "abc", "--lr"), RT_ERR_CONFIG);
    assert_non_null(strstr(rt_error_detail(), "--lr: lr: 'abc'"));
    assert_int_equal(rt_train_config_set(&c, "optimizer", "sgdd", "x.cfg:4"), RT_ERR_CONFIG);
    assert_non_null(strstr(rt_error_detail(), "x.cfg:4"));
    assert_non_null(strstr(rt_error_detail(), "sgd, adam, adamw or nadam"));
    assert_int_equal(rt_train_config_set(&c, "epochs", "0", "--epochs"), RT_ERR_CONFIG);
    assert_int_equal(rt_train_config_set(&c, "batch", "12x", "--batch"), RT_ERR_CONFIG);
    assert_int_equal(rt_train_config_set(&c, "val", "1.5", "--val"), RT_ERR_CONFIG);
    assert_int_equal(rt_train_config_set(&c, "momentum", "nan", "--momentum"), RT_ERR_CONFIG);
    assert_int_equal(rt_train_config_set(&c, "bogus", "1", "--bogus"), RT_ERR_CONFIG);
    assert_int_equal(rt_train_config_set(&c, "weight-decay", "0.001", "--weight-decay"), 0);
    assert_true(fabsf(c.optim.weight_decay - 0.001f) < 1e-9f);
    assert_int_equal(rt_train_config_set(&c, "monitor", "val_loss", "--monitor"), 0);
    assert_int_equal(c.monitor, RT_MONITOR_VAL_LOSS);

    /* a run that cannot start says why */
    struct rt_train_result r;
    base_config(&c, NULL);
    c.patience = 2;
    c.val_frac = 0.0f;
    assert_int_equal(rt_train_run(&c, &r), RT_ERR_CONFIG);
    assert_non_null(strstr(rt_error_detail(), "--val"));
    base_config(&c, NULL);
    snprintf(c.backend, sizeof c.backend, "nosuch");
    assert_true(rt_train_run(&c, &r) < 0);
    assert_non_null(strstr(rt_error_detail(), "nosuch"));
}

int main(void)
{
    TU_NEED_FASHION_MNIST();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_option_errors),
        cmocka_unit_test(test_log_every_lines),
        cmocka_unit_test(test_early_stopping_restores_best),
        cmocka_unit_test(test_resume_at_epoch_boundary_is_bitwise),
        cmocka_unit_test(test_resume_mid_epoch_is_bitwise),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
