/* test_dist.c — synchronous data-parallel training through the real
 * command (`ragtag train --workers N`, local worker processes):
 *   - 2 workers with 32 images each give the weights of 1 process with
 *     batch 64 after 20 steps, within 1e-5 relative per tensor (not
 *     bitwise: one GEMM over 64 images and two over 32 then a sum round
 *     differently);
 *   - 3 workers (shares 22/21/21, shared memory; and again over TCP) end
 *     50 steps with bitwise identical replicas: the coordinator compares
 *     every worker's parameter hash and fails the run otherwise;
 *   - 3 workers reach the single-process test accuracy within 1 point on
 *     the settings of test_e2e.sh;
 *   - a 1-worker run is bitwise the single-process run.
 * Uses Fashion-MNIST (skipped when absent). */
#include "config.h"

#include "testutil.h"

#include <sys/stat.h>

#include "checkpoint.h"
#include "status.h"

static const char *ragtag;
static char tmp[256];

static int run(const char *log, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int run(const char *log, const char *fmt, ...)
{
    char args[2048], cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "%s %s > %s/%s 2>&1", ragtag, args, tmp, log);
    int st = system(cmd);
    char show[512];
    snprintf(show, sizeof show, "tail -n 12 %s/%s", tmp, log);
    if (st != 0 && system(show) != 0)
        fprintf(stderr, "(no log)\n");
    return st;
}

static bool log_has(const char *log, const char *needle)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", tmp, log);
    FILE *f = fopen(p, "r");
    if (!f)
        return false;
    char line[4096];
    bool found = false;
    while (!found && fgets(line, sizeof line, f))
        found = strstr(line, needle) != NULL;
    fclose(f);
    return found;
}

static double log_number(const char *log, const char *key)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", tmp, log);
    FILE *f = fopen(p, "r");
    if (!f)
        return NAN;
    char line[4096];
    double v = NAN;
    while (fgets(line, sizeof line, f)) {
        const char *s = strstr(line, key);
        if (s)
            v = strtod(s + strlen(key), NULL);
    }
    fclose(f);
    return v;
}

/* Largest over tensors of max|a-b| / max|b|. */
static double tensor_rel_err(const char *a_name, const char *b_name, bool *bitwise)
{
    char pa[512], pb[512];
    snprintf(pa, sizeof pa, "%s/%s", tmp, a_name);
    snprintf(pb, sizeof pb, "%s/%s", tmp, b_name);
    rt_st_file *a = NULL, *b = NULL;
    assert_int_equal(rt_safetensors_read(pa, &a), 0);
    assert_int_equal(rt_safetensors_read(pb, &b), 0);
    assert_int_equal(rt_st_count(a), rt_st_count(b));
    double worst = 0.0;
    *bitwise = true;
    for (int i = 0; i < rt_st_count(a); i++) {
        struct rt_st_tensor ta, tb;
        assert_int_equal(rt_st_get(a, i, &ta), 0);
        assert_int_equal(rt_st_find(b, ta.name, &tb), 0);
        size_t n = 1;
        for (int d = 0; d < ta.ndim; d++)
            n *= (size_t)ta.dims[d];
        double diff = 0.0, scale = 0.0;
        for (size_t k = 0; k < n; k++) {
            diff = fmax(diff, fabs((double)ta.data[k] - (double)tb.data[k]));
            scale = fmax(scale, fabs((double)tb.data[k]));
        }
        if (memcmp(ta.data, tb.data, n * sizeof(float)) != 0)
            *bitwise = false;
        double rel = scale > 0 ? diff / scale : diff;
        if (!(rel <= worst))
            worst = isnan(rel) ? INFINITY : rel;
    }
    rt_st_file_destroy(&a);
    rt_st_file_destroy(&b);
    return worst;
}

#define LENET TOP_SRCDIR "/examples/lenet.cfg"

static void test_two_workers_equal_one_big_batch(void **state)
{
    (void)state;
    const char *common = "--data fashion-mnist --limit 1280 --val 0 --epochs 1 --batch 64 "
                         "--threads 1 --optimizer sgd --lr 0.05 --momentum 0.9 --weight-decay 0 "
                         "--schedule constant --warmup 0 --progress off";
    assert_int_equal(run("one.log", "train %s %s --save %s/one.st", LENET, common, tmp), 0);
    assert_int_equal(run("two.log", "train %s %s --workers 2 --save %s/two.st", LENET, common,
                         tmp), 0);
    assert_true(log_has("two.log", "20 steps"));
    assert_true(log_has("two.log", "replicas identical"));
    bool bitwise;
    double rel = tensor_rel_err("two.st", "one.st", &bitwise);
    printf("2 workers x 32 vs 1 x 64 after 20 steps: max relative difference %.3g per tensor%s\n",
           rel, bitwise ? " (bitwise equal)" : "");
    assert_true(rel <= 1e-5);
}

static void test_one_worker_is_single_process(void **state)
{
    (void)state;
    const char *common = "--data fashion-mnist --limit 640 --val 0.1 --epochs 2 --batch 32 "
                         "--threads 1 --progress off";
    assert_int_equal(run("s1.log", "train %s %s --save %s/s1.st", LENET, common, tmp), 0);
    assert_int_equal(run("w1.log", "train %s %s --workers 1 --save %s/w1.st", LENET, common,
                         tmp), 0);
    bool bitwise;
    tensor_rel_err("w1.st", "s1.st", &bitwise);
    assert_true(bitwise);
}

static void replicas(const char *extra, const char *log)
{
    /* 3200 images, batch 64: 50 steps; 64 = 22 + 21 + 21 */
    assert_int_equal(run(log, "train %s --data fashion-mnist --limit 3200 --val 0 --epochs 1 "
                              "--batch 64 --threads 1 --progress off --workers 3 %s",
                         LENET, extra),
                     0);
    assert_true(log_has(log, "50 steps"));
    assert_true(log_has(log, "replicas identical"));
    assert_true(log_has(log, "on all 3 workers"));
}

static void test_replicas_bitwise_shm(void **state)
{
    (void)state;
    replicas("", "rep_shm.log");
    assert_true(log_has("rep_shm.log", "shm -> 1"));
}

static void test_replicas_bitwise_tcp(void **state)
{
    (void)state;
    replicas("--no-shm --optimizer adam --lr 0.001 --clip-norm 1", "rep_tcp.log");
    assert_true(log_has("rep_tcp.log", "tcp -> 1"));
}

static void test_three_workers_reach_single_accuracy(void **state)
{
    (void)state;
    /* test_e2e.sh's settings: 82-83% after one epoch alone */
    const char *common = "--data fashion-mnist --limit 10000 --val 0 --epochs 1 --batch 32 "
                         "--optimizer adam --lr 0.004 --weight-decay 0 --schedule cosine --warmup 0.1 --seed 1 "
                         "--threads 1 --progress off";
    assert_int_equal(run("acc1.log", "train %s %s", LENET, common), 0);
    assert_int_equal(run("acc3.log", "train %s %s --workers 3", LENET, common), 0);
    double a1 = log_number("acc1.log", "test_acc "), a3 = log_number("acc3.log", "test_acc ");
    printf("test accuracy: 1 process %.2f%%, 3 workers %.2f%%\n", a1, a3);
    assert_true(isfinite(a1) && isfinite(a3));
    assert_true(fabs(a1 - a3) <= 1.0);
}

int main(void)
{
    if (!(ragtag = getenv("RAGTAG")))
        ragtag = "./src/ragtag";
    struct stat st;
    if (stat("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz", &st) != 0 &&
        !getenv("RAGTAG_DATA_DIR"))
        TU_SKIP_PROGRAM("Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)");
    snprintf(tmp, sizeof tmp, "%s", tu_tmpdir());
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_workers_equal_one_big_batch),
        cmocka_unit_test(test_one_worker_is_single_process),
        cmocka_unit_test(test_replicas_bitwise_shm),
        cmocka_unit_test(test_replicas_bitwise_tcp),
        cmocka_unit_test(test_three_workers_reach_single_accuracy),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    if (rc == 0 && system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmp);
    return rc;
}
