/* test_checkpoint.c — safetensors files and checkpoints: round trips bit for
 * bit, a reader outside ragtag (Python), every kind of corrupt file refused
 * with RT_ERR_FORMAT naming the file, atomic replacement when a write fails,
 * and a model + optimiser saved and restored exactly. */
#include "config.h"

#include "testutil.h"

#include <sys/wait.h>

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "backend.h"
#include "checkpoint.h"
#include "model.h"
#include "optim.h"
#include "status.h"

/* ---- helpers ------------------------------------------------------------------------ */

static char *path_in(const char *dir, const char *name)
{
    static char buf[8][512];
    static int next;
    char *p = buf[next++ % 8];
    snprintf(p, sizeof buf[0], "%s/%s", dir, name);
    return p;
}

static void write_bytes(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static unsigned char *read_bytes(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)len + 1);
    assert_int_equal(fread(b, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    *n = (size_t)len;
    return b;
}

/* A safetensors file from a header text and `ndata` bytes of data, for
 * crafting broken files by hand. */
static void write_st(const char *path, const char *header, const void *data, size_t ndata)
{
    size_t hl = strlen(header);
    size_t n = 8 + hl + ndata;
    unsigned char *b = calloc(1, n);
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(b + 8, header, hl);
    if (ndata)
        memcpy(b + 8 + hl, data, ndata);
    write_bytes(path, b, n);
    free(b);
}

/* Files in `dir` other than `keep`; fails on any leftover temporary file. */
static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (strstr(e->d_name, ".tmp"))
            fail_msg("temporary file left behind: %s/%s", dir, e->d_name);
        n++;
    }
    closedir(d);
    return n;
}

/* The expected failure: RT_ERR_FORMAT, the path and `what` in the message. */
static void expect_format_error(const char *path, const char *what)
{
    rt_st_file *f = (rt_st_file *)0x1;
    int rc = rt_safetensors_read(path, &f);
    if (rc != RT_ERR_FORMAT)
        fail_msg("%s: expected a format error about '%s', got %d (%s)", path, what, rc,
                 rt_error_detail());
    assert_null(f);
    const char *msg = rt_error_detail();
    if (!strstr(msg, path) || !strstr(msg, what))
        fail_msg("message '%s' should name %s and say '%s'", msg, path, what);
}

/* ---- a sample file -------------------------------------------------------------------- */

static float sample_a[6], sample_b[4], sample_s[1];

static void make_sample(void)
{
    for (int i = 0; i < 6; i++)
        sample_a[i] = 0.25f * (float)(i - 2); /* exact in binary: comparable in Python */
    uint32_t bits[4] = {0x80000000u /* -0 */, 0x00000001u /* denormal */,
                        0x7fc01234u /* NaN with payload */, 0xff800000u /* -inf */};
    memcpy(sample_b, bits, sizeof bits);
    sample_s[0] = 3.5f;
}

static const struct rt_st_meta sample_meta[] = {
    {"format", "test"},
    {"quote\"and\\slash/", "caf\xc3\xa9 \"x\"\n\ttab"},
    {"empty", ""},
};

static int write_sample(const char *path)
{
    make_sample();
    struct rt_st_tensor t[] = {
        {.name = "layer1.weight", .ndim = 2, .dims = {2, 3}, .data = sample_a},
        {.name = "weird/name \"q\"", .ndim = 1, .dims = {4}, .data = sample_b},
        {.name = "scalar", .ndim = 0, .data = sample_s},
        {.name = "empty", .ndim = 2, .dims = {0, 5}, .data = NULL},
    };
    return rt_safetensors_write(path, t, 4, sample_meta, 3);
}

static void test_round_trip(void **state)
{
    (void)state;
    const char *dir = tu_tmpdir();
    const char *path = path_in(dir, "rt.safetensors");
    assert_int_equal(write_sample(path), RT_OK);
    assert_int_equal(count_entries(dir), 1);

    size_t n;
    unsigned char *raw = read_bytes(path, &n);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--)
        hl = hl << 8 | raw[i];
    assert_int_equal((8 + hl) % 8, 0); /* the data starts aligned */
    assert_int_equal(n, 8 + hl + (6 + 4 + 1) * 4);
    free(raw);

    rt_st_file *f = NULL;
    assert_int_equal(rt_safetensors_read(path, &f), RT_OK);
    assert_int_equal(rt_st_count(f), 4);
    struct rt_st_tensor t;
    assert_int_equal(rt_st_get(f, 0, &t), RT_OK);
    assert_string_equal(t.name, "layer1.weight");
    assert_int_equal(t.ndim, 2);
    assert_int_equal(t.dims[0], 2);
    assert_int_equal(t.dims[1], 3);
    assert_memory_equal(t.data, sample_a, sizeof sample_a);
    assert_int_equal(rt_st_get(f, 1, &t), RT_OK);
    assert_string_equal(t.name, "weird/name \"q\"");
    assert_int_equal(t.ndim, 1);
    assert_int_equal(t.dims[0], 4);
    assert_memory_equal(t.data, sample_b, sizeof sample_b); /* bits: -0, NaN payload */
    assert_int_equal(rt_st_find(f, "scalar", &t), RT_OK);
    assert_int_equal(t.ndim, 0);
    assert_true(t.data[0] == 3.5f);
    assert_int_equal(rt_st_find(f, "empty", &t), RT_OK);
    assert_int_equal(t.ndim, 2);
    assert_int_equal(t.dims[0], 0);
    assert_int_equal(t.dims[1], 5);
    assert_int_equal(rt_st_find(f, "nope", &t), RT_ERR_NOTFOUND);
    for (int i = 0; i < 3; i++)
        assert_string_equal(rt_st_meta_get(f, sample_meta[i].key), sample_meta[i].value);
    assert_null(rt_st_meta_get(f, "absent"));
    rt_st_file_destroy(&f);
    assert_null(f);

    /* overwrite in place: the new contents replace the old */
    float one = 1.0f;
    struct rt_st_tensor t1 = {.name = "x", .ndim = 1, .dims = {1}, .data = &one};
    assert_int_equal(rt_safetensors_write(path, &t1, 1, NULL, 0), RT_OK);
    assert_int_equal(rt_safetensors_read(path, &f), RT_OK);
    assert_int_equal(rt_st_count(f), 1);
    assert_null(rt_st_meta_get(f, "format"));
    rt_st_file_destroy(&f);
    assert_int_equal(count_entries(dir), 1);
}

static void test_write_rejects_bad_args(void **state)
{
    (void)state;
    const char *dir = tu_tmpdir();
    const char *path = path_in(dir, "bad.safetensors");
    float x = 0;
    struct rt_st_tensor dup[2] = {{.name = "a", .ndim = 1, .dims = {1}, .data = &x},
                                  {.name = "a", .ndim = 1, .dims = {1}, .data = &x}};
    assert_int_equal(rt_safetensors_write(path, dup, 2, NULL, 0), RT_ERR_ARG);
    assert_non_null(strstr(rt_error_detail(), "twice"));
    struct rt_st_tensor res = {.name = "__metadata__", .ndim = 1, .dims = {1}, .data = &x};
    assert_int_equal(rt_safetensors_write(path, &res, 1, NULL, 0), RT_ERR_ARG);
    struct rt_st_tensor neg = {.name = "n", .ndim = 1, .dims = {-1}, .data = &x};
    assert_int_equal(rt_safetensors_write(path, &neg, 1, NULL, 0), RT_ERR_ARG);
    assert_int_equal(count_entries(dir), 0);
}

/* ---- read by Python --------------------------------------------------------------------- */

static const char *py_script =
    "import json, struct, sys, math\n"
    "raw = open(sys.argv[1], 'rb').read()\n"
    "n = struct.unpack('<Q', raw[:8])[0]\n"
    "hdr = json.loads(raw[8:8 + n].decode('utf-8'))\n"
    "data = raw[8 + n:]\n"
    "md = hdr.pop('__metadata__')\n"
    "assert md == {'format': 'test', 'quote\"and\\\\slash/': 'caf\\u00e9 \"x\"\\n\\ttab', 'empty': ''}, md\n"
    "try:\n"
    "    import numpy as np\n"
    "    def load(e):\n"
    "        b, end = e['data_offsets']\n"
    "        return np.frombuffer(data[b:end], dtype='<f4').reshape(e['shape']).ravel().tolist()\n"
    "    how = 'numpy'\n"
    "except ImportError:\n"
    "    import array\n"
    "    def load(e):\n"
    "        b, end = e['data_offsets']\n"
    "        a = array.array('f'); a.frombytes(data[b:end])\n"
    "        if sys.byteorder != 'little': a.byteswap()\n"
    "        return a.tolist()\n"
    "    how = 'array (numpy not installed)'\n"
    "assert sorted(hdr) == sorted(['layer1.weight', 'weird/name \"q\"', 'scalar', 'empty']), hdr\n"
    "for k, e in hdr.items(): assert e['dtype'] == 'F32', e\n"
    "assert hdr['layer1.weight']['shape'] == [2, 3]\n"
    "assert load(hdr['layer1.weight']) == [-0.5, -0.25, 0.0, 0.25, 0.5, 0.75]\n"
    "b = load(hdr['weird/name \"q\"'])\n"
    "assert b[0] == 0.0 and math.copysign(1, b[0]) < 0 and 0 < b[1] < 1e-44\n"
    "assert math.isnan(b[2]) and b[3] == -math.inf, b\n"
    "assert hdr['scalar']['shape'] == [] and load(hdr['scalar']) == [3.5]\n"
    "assert hdr['empty']['shape'] == [0, 5] and load(hdr['empty']) == []\n"
    "print('python read the file with', how)\n";

static void test_python_reads_it(void **state)
{
    (void)state;
    if (access("/usr/bin/python3", X_OK) != 0) {
        print_message("skipped: /usr/bin/python3 not available\n");
        skip();
    }
    const char *dir = tu_tmpdir();
    const char *path = path_in(dir, "py.safetensors");
    const char *script = path_in(dir, "check.py");
    assert_int_equal(write_sample(path), RT_OK);
    write_bytes(script, py_script, strlen(py_script));
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s' '%s'", script, path);
    int st = system(cmd);
    if (st != 0)
        fail_msg("python could not read %s (status %d)", path, st);
}

/* ---- corrupt files ------------------------------------------------------------------------ */

static void test_truncated(void **state)
{
    (void)state;
    const char *dir = tu_tmpdir();
    const char *good = path_in(dir, "good.safetensors");
    assert_int_equal(write_sample(good), RT_OK);
    size_t n;
    unsigned char *raw = read_bytes(good, &n);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--)
        hl = hl << 8 | raw[i];

    const struct {
        size_t len;
        const char *what;
    } cuts[] = {
        {0, "too short"},
        {5, "too short"},
        {8, "past the end of the file"},
        {8 + hl / 2, "past the end of the file"},
        {8 + hl - 1, "past the end of the file"},
        {8 + hl, "past the end of the data"},
        {8 + hl + 10, "past the end of the data"},
        {n - 1, "past the end of the data"},
    };
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        char name[64];
        snprintf(name, sizeof name, "cut%zu.safetensors", cuts[i].len);
        const char *p = path_in(dir, name);
        write_bytes(p, raw, cuts[i].len);
        expect_format_error(p, cuts[i].what);
    }

    /* one byte too many is as wrong as one too few */
    unsigned char *longer = malloc(n + 4);
    memcpy(longer, raw, n);
    memset(longer + n, 0, 4);
    const char *p = path_in(dir, "long.safetensors");
    write_bytes(p, longer, n + 4);
    expect_format_error(p, "cover only");
    free(longer);

    /* header length past the end of the file */
    raw[0] = (unsigned char)(n & 0xff);
    raw[1] = (unsigned char)(n >> 8);
    p = path_in(dir, "hlen.safetensors");
    write_bytes(p, raw, n);
    expect_format_error(p, "header length");
    memset(raw, 0xff, 8); /* a huge length must not make it allocate or crash */
    write_bytes(p, raw, n);
    expect_format_error(p, "header length");
    free(raw);

    rt_st_file *f = NULL;
    assert_int_equal(rt_safetensors_read(path_in(dir, "absent.safetensors"), &f),
                     RT_ERR_NOTFOUND);
}

static void test_bad_headers(void **state)
{
    (void)state;
    const char *dir = tu_tmpdir();
    float d[4] = {1, 2, 3, 4};
    const struct {
        const char *header;
        size_t ndata;
        const char *what;
    } cases[] = {
        /* JSON syntax */
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}", 4, "ends early"},
        {"{\"a\": }", 0, "JSON invalid"},
        {"{\"a\": {\"dtype\": \"F32\",}}", 0, "JSON invalid"},
        {"{\"a\": 1} junk", 0, "JSON"},
        {"[1, 2]", 0, "start with '{'"},
        {"", 0, "start with '{'"},
        /* dtype */
        {"{\"a\": {\"dtype\": \"F16\", \"shape\": [2], \"data_offsets\": [0, 4]}}", 4,
         "dtype F16 is not supported (ragtag reads F32 only)"},
        {"{\"a\": {\"dtype\": \"BF16\", \"shape\": [2], \"data_offsets\": [0, 4]}}", 4, "BF16"},
        {"{\"a\": {\"dtype\": 32, \"shape\": [1], \"data_offsets\": [0, 4]}}", 4, "dtype"},
        /* structure */
        {"{\"a\": {\"shape\": [1], \"data_offsets\": [0, 4]}}", 4, "missing \"dtype\""},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4], \"x\": 1}}", 4,
         "unknown key"},
        {"{\"a\": [1]}", 0, "not a JSON object"},
        {"{\"__metadata__\": {\"k\": 1}}", 0, "not a string"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [-1], \"data_offsets\": [0, 4]}}", 4, "shape"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1.5], \"data_offsets\": [0, 4]}}", 4, "shape"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1,1,1,1,1], \"data_offsets\": [0, 4]}}", 4,
         "dimensions"},
        /* offsets */
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [100], \"data_offsets\": [0, 400]}}", 16,
         "past the end of the data"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4]}}", 4,
         "data_offsets"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [0], \"data_offsets\": [8, 4]}}", 8,
         "backwards"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
         " \"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}", 12,
         "overlap"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}", 8,
         "belong to no tensor"},
        /* shape against size */
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [3], \"data_offsets\": [0, 8]}}", 8,
         "span 8 bytes"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [4611686018427387904, 4], \"data_offsets\": [0, 8]}}",
         8, "impossibly large"},
        /* duplicates, which json-c alone would merge silently */
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]},"
         " \"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}", 8,
         "repeats a key"},
        {"{\"a\": {\"dtype\": \"F32\", \"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}",
         4, "repeats a key"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char name[64];
        snprintf(name, sizeof name, "bad%zu.safetensors", i);
        const char *p = path_in(dir, name);
        write_st(p, cases[i].header, d, cases[i].ndata);
        expect_format_error(p, cases[i].what);
    }

    /* and the hand-made writer makes valid files when asked to */
    const char *p = path_in(dir, "ok.safetensors");
    write_st(p, "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}, "
                "\"b\": {\"dtype\": \"F32\", \"shape\": [], \"data_offsets\": [0, 4]}}  ",
             d, 8);
    rt_st_file *f = NULL;
    assert_int_equal(rt_safetensors_read(p, &f), RT_OK);
    struct rt_st_tensor t;
    assert_int_equal(rt_st_find(f, "a", &t), RT_OK);
    assert_true(t.data[0] == 2.0f);
    rt_st_file_destroy(&f);
}

/* A header whose length is not a multiple of 4 leaves the floats unaligned:
 * the reader must still hand out usable, correct data. */
static void test_unaligned_data(void **state)
{
    (void)state;
    const char *dir = tu_tmpdir();
    const char *p = path_in(dir, "odd.safetensors");
    float d[3] = {1.5f, -2.0f, 7.25f};
    write_st(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]}}", d, 12);
    rt_st_file *f = NULL;
    assert_int_equal(rt_safetensors_read(p, &f), RT_OK);
    struct rt_st_tensor t;
    assert_int_equal(rt_st_get(f, 0, &t), RT_OK);
    assert_int_equal((uintptr_t)t.data % _Alignof(float), 0);
    assert_memory_equal(t.data, d, sizeof d);
    rt_st_file_destroy(&f);
}

/* ---- atomic replacement ------------------------------------------------------------------- */

static void expect_intact(const char *path)
{
    rt_st_file *f = NULL;
    assert_int_equal(rt_safetensors_read(path, &f), RT_OK);
    struct rt_st_tensor t;
    assert_int_equal(rt_st_find(f, "layer1.weight", &t), RT_OK);
    assert_memory_equal(t.data, sample_a, sizeof sample_a);
    assert_string_equal(rt_st_meta_get(f, "format"), "test");
    rt_st_file_destroy(&f);
}

static void test_atomic_write_failure(void **state)
{
    (void)state;
    const char *dir = tu_tmpdir();
    const char *path = path_in(dir, "ck.safetensors");
    assert_int_equal(write_sample(path), RT_OK);

    /* 1. A write that fails half-way (the file-size limit stands in for a
     * full disk): the old file stays, the temporary file goes. */
    size_t big_n = 1 << 16;
    float *big = calloc(big_n, sizeof *big);
    struct rt_st_tensor t = {.name = "layer1.weight", .ndim = 1, .dims = {(int64_t)big_n},
                             .data = big};
    struct rlimit old;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    struct rlimit small = {.rlim_cur = 16384, .rlim_max = old.rlim_max};
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
    int rc = rt_safetensors_write(path, &t, 1, NULL, 0);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, old_handler);
    assert_int_equal(rc, RT_ERR_IO);
    assert_non_null(strstr(rt_error_detail(), path));
    expect_intact(path);
    assert_int_equal(count_entries(dir), 1);
    free(big);

    /* 2. The rename fails (the target name is a directory). */
    const char *sub = path_in(dir, "sub");
    assert_int_equal(mkdir(sub, 0755), 0);
    float x = 1.0f;
    struct rt_st_tensor one = {.name = "x", .ndim = 1, .dims = {1}, .data = &x};
    assert_int_equal(rt_safetensors_write(sub, &one, 1, NULL, 0), RT_ERR_IO);
    assert_non_null(strstr(rt_error_detail(), "renam"));
    struct stat st;
    assert_int_equal(stat(sub, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    assert_int_equal(count_entries(dir), 2);
    expect_intact(path);

    /* 3. The directory cannot be written (not testable as root, who may). */
    assert_int_equal(chmod(dir, 0555), 0);
    if (geteuid() != 0) {
        assert_int_equal(rt_safetensors_write(path, &one, 1, NULL, 0), RT_ERR_IO);
        assert_non_null(strstr(rt_error_detail(), "temporary"));
        expect_intact(path);
    } else {
        print_message("note: running as root: read-only directory case not testable\n");
    }
    assert_int_equal(chmod(dir, 0755), 0);
    assert_int_equal(count_entries(dir), 2);

    /* 4. A directory that does not exist. */
    assert_int_equal(rt_safetensors_write(path_in(dir, "no/such/dir/x.safetensors"), &one, 1,
                                          NULL, 0), RT_ERR_IO);
}

/* ---- checkpoints with a real model -------------------------------------------------------- */

/* conv (params) + batch norm (params and running statistics, the state
 * buffer) + dense: every kind of tensor a checkpoint carries. */
#define MODEL_CFG(filters, extra)                                              \
    "[net]\ninput = 4x4x1\nclasses = 3\n\n"                                       \
    "[conv]\nfilters = " filters "\nsize = 3\npad = 1\n\n"                       \
    "[batchnorm]\n\n[relu]\n\n[flatten]\n\n" extra                               \
    "[dense]\nunits = 3\n\n[softmax]\n"

static const char *cfg_small = MODEL_CFG("2", "");
static const char *cfg_wider = MODEL_CFG("3", "");
static const char *cfg_deeper = MODEL_CFG("2", "[dense]\nunits = 5\n\n");

static rt_dev *cpu_dev(void)
{
    static rt_dev *d;
    if (!d)
        d = rt_dev_open("cpu", 0, 1);
    if (!d)
        fail_msg("cannot open the cpu backend: %s", rt_error_detail());
    return d;
}

static rt_model *load_model(const char *cfg)
{
    rt_model *m = rt_model_load_string(cfg, "ckpt-test.cfg", cpu_dev(), 4);
    if (!m)
        fail_msg("cannot build the test model: %s", rt_error_detail());
    assert_int_equal(rt_model_init(m, 5), RT_OK);
    return m;
}

static float *download_view(rt_view v, size_t n)
{
    float *h = malloc((n ? n : 1) * sizeof *h);
    assert_int_equal(rt_download(cpu_dev(), h, v, n * sizeof *h), RT_OK);
    return h;
}

static void upload_random(rt_view v, size_t n, float lo, float hi, uint64_t seed)
{
    float *h = malloc((n ? n : 1) * sizeof *h);
    tu_fill_uniform(h, n, lo, hi, seed);
    assert_int_equal(rt_upload(cpu_dev(), v, h, n * sizeof *h), RT_OK);
    free(h);
}

static rt_optim *make_optim(enum rt_optim_kind kind, size_t n)
{
    struct rt_optim_config c;
    rt_optim_config_defaults(&c);
    c.kind = kind;
    c.lr = 0.01f;
    rt_optim *o = rt_optim_new(cpu_dev(), &c, n);
    assert_non_null(o);
    return o;
}

/* The same random gradient for both models, and one step. */
static void step_with(rt_model *m, rt_optim *o, uint64_t seed)
{
    size_t pc = rt_model_param_count(m);
    upload_random(rt_model_grads(m), pc, -1.0f, 1.0f, seed);
    assert_int_equal(rt_optim_step(o, rt_model_params(m), rt_model_grads(m), false), RT_OK);
}

static void assert_views_equal(rt_view a, rt_view b, size_t n, const char *what)
{
    float *x = download_view(a, n), *y = download_view(b, n);
    if (n && memcmp(x, y, n * sizeof *x) != 0)
        fail_msg("%s differ after the round trip", what);
    free(x);
    free(y);
}

static void test_checkpoint_round_trip(void **state)
{
    (void)state;
    const char *dir = tu_tmpdir();
    const char *path = path_in(dir, "model.ckpt");
    rt_model *m = load_model(cfg_small);
    size_t pc = rt_model_param_count(m), sc = rt_model_state_count(m);
    assert_true(pc > 0);
    assert_true(sc > 0); /* batch norm's running statistics */
    upload_random(rt_model_params(m), pc, -1.0f, 1.0f, 21);
    upload_random(rt_model_state(m), sc, 0.5f, 2.0f, 22);
    rt_optim *o = make_optim(RT_OPT_ADAM, pc);
    step_with(m, o, 31);
    step_with(m, o, 32);

    struct rt_train_pos pos = {.epoch = 3, .step = 17, .seed = 0xfedcba9876543210ull,
                               .best_metric = 0.1, .best_epoch = 2, .bad_epochs = 1};
    assert_int_equal(rt_checkpoint_save(path, m, o, &pos), RT_OK);
    assert_int_equal(count_entries(dir), 1);

    /* a different model of the same shape, a fresh optimiser */
    rt_model *m2 = load_model(cfg_small);
    upload_random(rt_model_params(m2), pc, -1.0f, 1.0f, 99);
    rt_optim *o2 = make_optim(RT_OPT_ADAM, pc);
    struct rt_train_pos got = {0};
    assert_int_equal(rt_checkpoint_load(path, m2, o2, &got), RT_OK);

    assert_views_equal(rt_model_params(m), rt_model_params(m2), pc, "parameters");
    assert_views_equal(rt_model_state(m), rt_model_state(m2), sc, "state buffers");
    for (int i = 0; i < rt_optim_state_count(o); i++)
        assert_views_equal(rt_optim_state(o, i), rt_optim_state(o2, i), pc,
                           rt_optim_state_name(o, i));
    assert_int_equal(rt_optim_steps(o2), 2);
    assert_int_equal(got.epoch, 3);
    assert_int_equal(got.step, 17);
    assert_true(got.seed == 0xfedcba9876543210ull);
    assert_true(got.best_metric == 0.1); /* bit-exact through %.17g */
    assert_int_equal(got.best_epoch, 2);
    assert_int_equal(got.bad_epochs, 1);

    /* resuming continues exactly where the first run was */
    step_with(m, o, 33);
    step_with(m2, o2, 33);
    assert_views_equal(rt_model_params(m), rt_model_params(m2), pc, "parameters after a step");

    /* the tensors are there under the model's names, for numpy / PyTorch */
    rt_st_file *f = NULL;
    assert_int_equal(rt_safetensors_read(path, &f), RT_OK);
    struct rt_tensor_info ti;
    assert_int_equal(rt_model_tensor_info(m, 0, &ti), RT_OK);
    struct rt_st_tensor t;
    assert_int_equal(rt_st_find(f, ti.name, &t), RT_OK);
    assert_int_equal(rt_st_find(f, "optimizer.adam_m", &t), RT_OK);
    assert_int_equal(t.dims[0], (int64_t)pc);
    assert_string_equal(rt_st_meta_get(f, "format"), "ragtag-checkpoint-1");
    assert_string_equal(rt_st_meta_get(f, "optimizer"), "adam");
    rt_st_file_destroy(&f);

    /* weights only: no optimiser, no position wanted */
    rt_model *m3 = load_model(cfg_small);
    assert_int_equal(rt_checkpoint_load(path, m3, NULL, NULL), RT_OK);
    rt_model_destroy(&m3);

    /* an optimiser of another kind is refused */
    rt_optim *sgd = make_optim(RT_OPT_SGD, pc);
    assert_int_equal(rt_checkpoint_load(path, m2, sgd, NULL), RT_ERR_CONFIG);
    assert_non_null(strstr(rt_error_detail(), "adam"));
    rt_optim_destroy(&sgd);

    /* infinities survive too; a save without optimiser says so */
    pos.best_metric = INFINITY;
    assert_int_equal(rt_checkpoint_save(path, m, NULL, &pos), RT_OK);
    assert_int_equal(rt_checkpoint_load(path, m2, NULL, &got), RT_OK);
    assert_true(isinf(got.best_metric) && got.best_metric > 0);
    pos.best_metric = NAN; /* the trainer's "no best yet" */
    assert_int_equal(rt_checkpoint_save(path, m, NULL, &pos), RT_OK);
    assert_int_equal(rt_checkpoint_load(path, m2, NULL, &got), RT_OK);
    assert_true(isnan(got.best_metric));
    assert_int_equal(rt_checkpoint_load(path, m2, o2, NULL), RT_ERR_CONFIG);
    assert_non_null(strstr(rt_error_detail(), "no optimizer state"));

    rt_optim_destroy(&o2);
    rt_optim_destroy(&o);
    rt_model_destroy(&m2);
    rt_model_destroy(&m);
}

/* A checkpoint of another architecture fails naming the tensor, and leaves
 * the model it was loaded into untouched. */
static void test_checkpoint_mismatch(void **state)
{
    (void)state;
    const char *dir = tu_tmpdir();
    const char *path = path_in(dir, "model.ckpt");
    rt_model *m = load_model(cfg_small);
    struct rt_train_pos pos = {0};
    assert_int_equal(rt_checkpoint_save(path, m, NULL, &pos), RT_OK);

    rt_model *wide = load_model(cfg_wider);
    size_t pc = rt_model_param_count(wide);
    float *before = download_view(rt_model_params(wide), pc);
    struct rt_tensor_info ti;
    assert_int_equal(rt_model_tensor_info(wide, 0, &ti), RT_OK); /* the conv's weight */
    assert_int_equal(rt_checkpoint_load(path, wide, NULL, NULL), RT_ERR_SHAPE);
    const char *msg = rt_error_detail();
    if (!strstr(msg, path) || !strstr(msg, ti.name) || !strstr(msg, "shape"))
        fail_msg("message '%s' should name %s and tensor %s", msg, path, ti.name);
    print_message("as expected: %s\n", msg);
    float *after = download_view(rt_model_params(wide), pc);
    assert_memory_equal(before, after, pc * sizeof *before);
    free(before);
    free(after);

    rt_model *deep = load_model(cfg_deeper);
    assert_int_equal(rt_checkpoint_load(path, deep, NULL, NULL), RT_ERR_SHAPE);
    print_message("as expected: %s\n", rt_error_detail());
    assert_non_null(strstr(rt_error_detail(), path));
    assert_non_null(strstr(rt_error_detail(), "dense"));

    /* a safetensors file that is no checkpoint */
    const char *other = path_in(dir, "plain.safetensors");
    assert_int_equal(write_sample(other), RT_OK);
    assert_int_equal(rt_checkpoint_load(other, m, NULL, NULL), RT_ERR_FORMAT);
    assert_non_null(strstr(rt_error_detail(), "not a ragtag checkpoint"));

    rt_model_destroy(&deep);
    rt_model_destroy(&wide);
    rt_model_destroy(&m);
}

/* A killed write leaves DIR/.NAME.tmp.PID.N behind: the next run in that
 * directory removes it when its writer is gone, and nothing else. */
static void test_stale_temp_files_removed(void **state)
{
    (void)state;
    const char *dir = tu_tmpdir();
    pid_t dead = fork();
    assert_true(dead >= 0);
    if (dead == 0)
        _exit(0);
    int st;
    assert_int_equal(waitpid(dead, &st, 0), dead);
    char names[6][128];
    snprintf(names[0], sizeof names[0], ".last.safetensors.tmp.%ld.0", (long)dead); /* stale */
    snprintf(names[1], sizeof names[1], ".best.safetensors.tmp.%ld.3", (long)dead); /* stale */
    snprintf(names[2], sizeof names[2], ".last.safetensors.tmp.%ld.1", (long)getpid()); /* live */
    snprintf(names[3], sizeof names[3], "last.safetensors");                   /* a checkpoint */
    snprintf(names[4], sizeof names[4], ".notes.tmp.%ld", (long)dead);         /* not ours */
    snprintf(names[5], sizeof names[5], "last.safetensors.tmp.%ld.0", (long)dead); /* no dot */
    char path[1024];
    for (int i = 0; i < 6; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fclose(f);
    }
    int removed = -1;
    assert_int_equal(rt_checkpoint_dir_open(dir, &removed), RT_OK);
    assert_int_equal(removed, 2);
    for (int i = 0; i < 6; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        assert_int_equal(access(path, F_OK) == 0, i >= 2);
    }
    /* a directory that is not there is made; a file in its place is refused */
    snprintf(path, sizeof path, "%s/new", dir);
    assert_int_equal(rt_checkpoint_dir_open(path, &removed), RT_OK);
    assert_int_equal(removed, 0);
    snprintf(path, sizeof path, "%s/last.safetensors", dir);
    assert_int_equal(rt_checkpoint_dir_open(path, &removed), RT_ERR_IO);
    assert_non_null(strstr(rt_error_detail(), "is not a directory"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_write_rejects_bad_args),
        cmocka_unit_test(test_python_reads_it),
        cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_bad_headers),
        cmocka_unit_test(test_unaligned_data),
        cmocka_unit_test(test_atomic_write_failure),
        cmocka_unit_test(test_checkpoint_round_trip),
        cmocka_unit_test(test_checkpoint_mismatch),
        cmocka_unit_test(test_stale_temp_files_removed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
