/* test_data.c — data sets: IDX (raw and gzip), CIFAR-10, CSV readers on
 * files written here with known bytes; truncated and malformed files; the
 * seeded permutation, split, limit and normalisation of rt_data_open; the
 * prefetching loader; and the real Fashion-MNIST when it is installed. */
#include "testutil.h"

#include <stdbool.h>
#include <sys/stat.h>
#include <time.h>
#include <zlib.h>

#include "data.h"
#include "shards.h"
#include "status.h"

static char tmp[256];

/* ---- helpers -------------------------------------------------------------------- */

#define assert_detail_has(s)                                                   \
    do {                                                                       \
        if (!strstr(rt_error_detail(), (s)))                                   \
            fail_msg("error detail \"%s\" lacks \"%s\"", rt_error_detail(), (s)); \
    } while (0)

static void path_in(char *buf, size_t n, const char *dir, const char *name)
{
    snprintf(buf, n, "%s/%s", dir, name);
}

static void write_raw(const char *path, const unsigned char *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static void write_gz(const char *path, const unsigned char *b, size_t n)
{
    gzFile f = gzopen(path, "wb");
    assert_non_null(f);
    if (n)
        assert_int_equal(gzwrite(f, b, (unsigned)n), (int)n);
    assert_int_equal(gzclose(f), Z_OK);
}

static unsigned char *slurp(const char *path, size_t *n)
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

static void put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* The known pixel k of image i, and its label. */
static unsigned char pix(int i, int k) { return (unsigned char)(i * 31 + k * 7 + 3); }
static unsigned char lab(int i) { return (unsigned char)((i * 3 + 1) % 10); }

/* An IDX image file's bytes: n images of h x w; the caller frees. */
static unsigned char *idx_images(int n, int h, int w, size_t *len)
{
    *len = 16 + (size_t)n * h * w;
    unsigned char *b = malloc(*len);
    put_be32(b, 0x803);
    put_be32(b + 4, (uint32_t)n);
    put_be32(b + 8, (uint32_t)h);
    put_be32(b + 12, (uint32_t)w);
    for (int i = 0; i < n; i++)
        for (int k = 0; k < h * w; k++)
            b[16 + (size_t)i * h * w + k] = pix(i, k);
    return b;
}

static unsigned char *idx_labels(int n, unsigned char (*label)(int), size_t *len)
{
    *len = 8 + (size_t)n;
    unsigned char *b = malloc(*len);
    put_be32(b, 0x801);
    put_be32(b + 4, (uint32_t)n);
    for (int i = 0; i < n; i++)
        b[8 + i] = label(i);
    return b;
}

/* Write train-/t10k- files of n images into dir (gzip'ed when gz). */
static void write_idx_set(const char *dir, const char *set, int n, int h, int w, bool gz,
                          unsigned char (*label)(int))
{
    char p[512], name[128];
    size_t li, ll;
    unsigned char *im = idx_images(n, h, w, &li), *lb = idx_labels(n, label, &ll);
    snprintf(name, sizeof name, "%s-images-idx3-ubyte%s", set, gz ? ".gz" : "");
    path_in(p, sizeof p, dir, name);
    (gz ? write_gz : write_raw)(p, im, li);
    snprintf(name, sizeof name, "%s-labels-idx1-ubyte%s", set, gz ? ".gz" : "");
    path_in(p, sizeof p, dir, name);
    (gz ? write_gz : write_raw)(p, lb, ll);
    free(im);
    free(lb);
}

static const char *new_dir(const char *name)
{
    static char buf[8][512];
    static int k;
    char *d = buf[k++ % 8];
    path_in(d, 512, tmp, name);
    assert_int_equal(mkdir(d, 0700), 0);
    return d;
}

static void check_idx_contents(const rt_dataset *ds, int n, int h, int w)
{
    assert_int_equal(ds->n, n);
    assert_int_equal(ds->c, 1);
    assert_int_equal(ds->h, h);
    assert_int_equal(ds->w, w);
    assert_int_equal(ds->classes, 10);
    for (int i = 0; i < n; i++) {
        assert_int_equal(ds->y[i], lab(i));
        for (int k = 0; k < h * w; k++)
            assert_true(rt_dataset_value(ds, (size_t)i * h * w + k) == (float)pix(i, k) / 255.0f);
    }
}

/* ---- IDX -------------------------------------------------------------------------- */

static void test_idx_roundtrip(void **state)
{
    for (int gz = 0; gz < 2; gz++) {
        const char *d = new_dir(gz ? "idx-gz" : "idx-raw");
        write_idx_set(d, "train", 23, 3, 5, gz, lab);
        char ip[512], lp[512];
        path_in(ip, sizeof ip, d, gz ? "train-images-idx3-ubyte.gz" : "train-images-idx3-ubyte");
        path_in(lp, sizeof lp, d, gz ? "train-labels-idx1-ubyte.gz" : "train-labels-idx1-ubyte");
        rt_dataset *ds = NULL;
        assert_int_equal(rt_dataset_read_idx(ip, lp, &ds), RT_OK);
        check_idx_contents(ds, 23, 3, 5);
        rt_dataset_destroy(&ds);
        assert_null(ds);
    }
}

/* Files cut at several points: in the magic, in the sizes, mid-image, in
 * the last byte, in the labels. Raw and gzip'ed content both say exactly
 * where the data ended. */
static void test_idx_truncated(void **state)
{
    const char *d = new_dir("idx-cut");
    const int n = 6, h = 4, w = 3;
    size_t li, ll;
    unsigned char *im = idx_images(n, h, w, &li), *lb = idx_labels(n, lab, &ll);
    char ip[512], lp[512], off[64];
    const size_t cuts[] = {0, 2, 10, 16, 16 + 12 * 2 + 5, li - 1};
    for (int gz = 0; gz < 2; gz++) {
        path_in(lp, sizeof lp, d, gz ? "good-labels.gz" : "good-labels");
        (gz ? write_gz : write_raw)(lp, lb, ll);
        for (size_t c = 0; c < sizeof cuts / sizeof *cuts; c++) {
            snprintf(off, sizeof off, "cut-images-%zu%s", cuts[c], gz ? ".gz" : "");
            path_in(ip, sizeof ip, d, off);
            (gz ? write_gz : write_raw)(ip, im, cuts[c]);
            rt_dataset *ds = NULL;
            assert_int_equal(rt_dataset_read_idx(ip, lp, &ds), RT_ERR_FORMAT);
            assert_null(ds);
            assert_detail_has(ip);
            snprintf(off, sizeof off, "offset %zu", cuts[c]);
            assert_detail_has(off);
            assert_detail_has("truncated");
        }
        /* Mid-image names the image. */
        snprintf(off, sizeof off, "cut-images-%zu%s", (size_t)(16 + 12 * 2 + 5), gz ? ".gz" : "");
        path_in(ip, sizeof ip, d, off);
        rt_dataset *ds = NULL;
        assert_int_equal(rt_dataset_read_idx(ip, lp, &ds), RT_ERR_FORMAT);
        assert_detail_has("image 3 of 6");

        /* Labels cut in their header and in their data. */
        path_in(ip, sizeof ip, d, gz ? "good-images.gz" : "good-images");
        (gz ? write_gz : write_raw)(ip, im, li);
        const size_t lcuts[] = {6, 8 + 2};
        for (size_t c = 0; c < 2; c++) {
            snprintf(off, sizeof off, "cut-labels-%zu%s", lcuts[c], gz ? ".gz" : "");
            path_in(lp, sizeof lp, d, off);
            (gz ? write_gz : write_raw)(lp, lb, lcuts[c]);
            assert_int_equal(rt_dataset_read_idx(ip, lp, &ds), RT_ERR_FORMAT);
            assert_null(ds);
            assert_detail_has(lp);
            snprintf(off, sizeof off, "offset %zu", lcuts[c]);
            assert_detail_has(off);
        }
    }
    free(im);
    free(lb);
}

/* A gzip file itself cut short (a partial download): in its header, in the
 * deflate stream, in the CRC/length trailer. Never a silent short read. */
static void test_idx_gz_cut(void **state)
{
    const char *d = new_dir("gz-cut");
    const int n = 40, h = 7, w = 9;
    size_t li, ll;
    unsigned char *im = idx_images(n, h, w, &li), *lb = idx_labels(n, lab, &ll);
    char full[512], lp[512], cut[512];
    path_in(full, sizeof full, d, "full.gz");
    path_in(lp, sizeof lp, d, "labels");
    write_gz(full, im, li);
    write_raw(lp, lb, ll);
    size_t glen;
    unsigned char *g = slurp(full, &glen);
    const size_t cuts[] = {5, 12, glen / 2, glen - 8, glen - 4, glen - 1};
    for (size_t c = 0; c < sizeof cuts / sizeof *cuts; c++) {
        snprintf(cut, sizeof cut, "%s/cut-%zu.gz", d, cuts[c]);
        write_raw(cut, g, cuts[c]);
        rt_dataset *ds = NULL;
        int rc = rt_dataset_read_idx(cut, lp, &ds);
        if (rc != RT_ERR_FORMAT)
            fail_msg("cut at %zu of %zu: rc %d, detail \"%s\"", cuts[c], glen, rc,
                     rt_error_detail());
        assert_null(ds);
        assert_detail_has(cut);
        assert_detail_has("offset");
    }
    /* A flipped byte in the deflate data: corrupt, not a crash. */
    g[glen / 2] ^= 0x55;
    snprintf(cut, sizeof cut, "%s/corrupt.gz", d);
    write_raw(cut, g, glen);
    rt_dataset *ds = NULL;
    assert_int_equal(rt_dataset_read_idx(cut, lp, &ds), RT_ERR_FORMAT);
    assert_detail_has(cut);
    free(g);
    free(im);
    free(lb);
}

static void test_idx_malformed(void **state)
{
    const char *d = new_dir("idx-bad");
    size_t li, ll;
    unsigned char *im = idx_images(5, 2, 2, &li), *lb = idx_labels(5, lab, &ll);
    char ip[512], lp[512];
    path_in(ip, sizeof ip, d, "images");
    path_in(lp, sizeof lp, d, "labels");
    rt_dataset *ds = NULL;

    /* Labels given as images: bad magic. */
    write_raw(ip, lb, ll);
    write_raw(lp, lb, ll);
    assert_int_equal(rt_dataset_read_idx(ip, lp, &ds), RT_ERR_FORMAT);
    assert_detail_has(ip);
    assert_detail_has("magic");
    assert_detail_has("0x00000801");

    /* Images given as labels. */
    write_raw(ip, im, li);
    write_raw(lp, im, li);
    assert_int_equal(rt_dataset_read_idx(ip, lp, &ds), RT_ERR_FORMAT);
    assert_detail_has(lp);
    assert_detail_has("magic");

    /* Four labels for five images. */
    unsigned char *lb4 = idx_labels(4, lab, &ll);
    write_raw(lp, lb4, ll);
    assert_int_equal(rt_dataset_read_idx(ip, lp, &ds), RT_ERR_FORMAT);
    assert_detail_has("4 labels");
    assert_detail_has("5 images");
    free(lb4);

    /* Zero-sized images. */
    unsigned char *lb5 = idx_labels(5, lab, &ll);
    write_raw(lp, lb5, ll);
    unsigned char bad[16];
    memcpy(bad, im, 16);
    put_be32(bad + 8, 0);
    write_raw(ip, bad, 16);
    assert_int_equal(rt_dataset_read_idx(ip, lp, &ds), RT_ERR_FORMAT);
    assert_detail_has(ip);

    /* Bytes after the end the header promises. */
    unsigned char *longer = malloc(li + 3);
    memcpy(longer, im, li);
    memset(longer + li, 7, 3);
    write_raw(ip, longer, li + 3);
    assert_int_equal(rt_dataset_read_idx(ip, lp, &ds), RT_ERR_FORMAT);
    assert_detail_has(ip);
    char off[64];
    snprintf(off, sizeof off, "offset %zu", li);
    assert_detail_has(off);
    free(longer);

    /* Missing files. */
    path_in(ip, sizeof ip, d, "nope");
    assert_int_equal(rt_dataset_read_idx(ip, lp, &ds), RT_ERR_NOTFOUND);
    assert_detail_has(ip);
    assert_null(ds);
    free(lb5);
    free(im);
    free(lb);
}

/* ---- CIFAR-10 ------------------------------------------------------------------------ */

#define CREC 3073

static unsigned char *cifar_bytes(int n, int first, size_t *len)
{
    *len = (size_t)n * CREC;
    unsigned char *b = malloc(*len);
    for (int r = 0; r < n; r++) {
        b[(size_t)r * CREC] = lab(first + r);
        for (int k = 0; k < 3072; k++)
            b[(size_t)r * CREC + 1 + k] = pix(first + r, k);
    }
    return b;
}

static void check_cifar(const rt_dataset *ds, int n)
{
    assert_int_equal(ds->n, n);
    assert_int_equal(ds->c, 3);
    assert_int_equal(ds->h, 32);
    assert_int_equal(ds->w, 32);
    assert_int_equal(ds->classes, 10);
    for (int i = 0; i < n; i++) {
        assert_int_equal(ds->y[i], lab(i));
        for (int k = 0; k < 3072; k++)
            assert_true(rt_dataset_value(ds, (size_t)i * 3072 + k) == (float)pix(i, k) / 255.0f);
    }
    /* NCHW: the green plane of image 1 starts 1024 floats in. */
    assert_true(rt_dataset_value(ds, 3072 + 1024) == (float)pix(1, 1024) / 255.0f);
}

static void test_cifar(void **state)
{
    const char *d = new_dir("cifar");
    char p1[512], p2[512];
    size_t l1, l2;
    unsigned char *b1 = cifar_bytes(3, 0, &l1), *b2 = cifar_bytes(2, 3, &l2);
    path_in(p1, sizeof p1, d, "a.bin");
    path_in(p2, sizeof p2, d, "b.bin");
    write_raw(p1, b1, l1);
    write_raw(p2, b2, l2);
    const char *paths[2] = {p1, p2};
    rt_dataset *ds = NULL;
    assert_int_equal(rt_dataset_read_cifar10(paths, 2, &ds), RT_OK);
    check_cifar(ds, 5);
    rt_dataset_destroy(&ds);

    /* Cut mid-record, and right after a label. */
    const size_t cuts[] = {CREC + 100, CREC + 1, 1};
    char off[64];
    for (size_t c = 0; c < 3; c++) {
        write_raw(p2, b2, cuts[c]);
        assert_int_equal(rt_dataset_read_cifar10(paths, 2, &ds), RT_ERR_FORMAT);
        assert_null(ds);
        assert_detail_has(p2);
        snprintf(off, sizeof off, "offset %zu", cuts[c]);
        assert_detail_has(off);
    }
    write_raw(p2, b2, 0);
    assert_int_equal(rt_dataset_read_cifar10(paths, 2, &ds), RT_ERR_FORMAT);
    assert_detail_has(p2);

    /* Label 10 in record 2. */
    b2[CREC] = 10;
    write_raw(p2, b2, l2);
    assert_int_equal(rt_dataset_read_cifar10(paths, 2, &ds), RT_ERR_FORMAT);
    assert_detail_has(p2);
    snprintf(off, sizeof off, "offset %d", CREC);
    assert_detail_has(off);
    free(b1);
    free(b2);
}

/* ---- CSV ------------------------------------------------------------------------------ */

static void write_text(const char *path, const char *text)
{
    write_raw(path, (const unsigned char *)text, strlen(text));
}

static void test_csv(void **state)
{
    const char *d = new_dir("csv");
    char p[512];
    path_in(p, sizeof p, d, "ok.csv");
    /* Header, CRLF, blanks around fields, a decimal, an empty line. */
    write_text(p, "label,p0,p1,p2,p3\r\n"
                  "3,0,255,17,128\r\n"
                  "0, 1 ,2,3.0,4\r\n"
                  "\r\n"
                  "9,255,254,253,252");
    rt_dataset *ds = NULL;
    assert_int_equal(rt_dataset_read_csv(p, 1, 2, 2, &ds), RT_OK);
    assert_int_equal(ds->n, 3);
    assert_int_equal(ds->c, 1);
    assert_int_equal(ds->h, 2);
    assert_int_equal(ds->w, 2);
    assert_int_equal(ds->classes, 10);
    const int32_t ys[3] = {3, 0, 9};
    const int px[3][4] = {{0, 255, 17, 128}, {1, 2, 3, 4}, {255, 254, 253, 252}};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(ds->y[i], ys[i]);
        for (int k = 0; k < 4; k++)
            assert_true(rt_dataset_value(ds, (size_t)(i * 4 + k)) == (float)px[i][k] / 255.0f);
    }
    rt_dataset_destroy(&ds);

    /* No header. */
    write_text(p, "1,2,3,4,5\n2,3,4,5,6\n");
    assert_int_equal(rt_dataset_read_csv(p, 1, 2, 2, &ds), RT_OK);
    assert_int_equal(ds->n, 2);
    assert_int_equal(ds->y[1], 2);
    rt_dataset_destroy(&ds);

    /* Bad lines: each names file:line. */
    static const struct {
        const char *text, *line, *why;
    } bad[] = {
        {"label,a,b,c,d\n1,2,3,4,5\n1,2,3,4\n", ":3:", "found 4"},
        {"1,2,3,4,5\n1,2,3,4,5,6,7\n", ":2:", "found 7"},
        {"1,2,3,4,5\n\n1,2,x3,4,5\n", ":3:", "not a number"},
        {"1,2,3,4,5\n1,2,,4,5\n", ":2:", "empty"},
        {"1,2,3,4,256\n", ":1:", "0..255"},
        {"1,2,3,4,5\n1,-1,3,4,5\n", ":2:", "0..255"},
        {"1,2,3,4,5\n-1,1,3,4,5\n", ":2:", "label"},
        {"1,2,3,4,5\n2.5,1,3,4,5\n", ":2:", "label"},
        {"1,2,3,4,5\n1,2,nan,4,5\n", ":2:", "not a number"},
        {"label,a,b,c,d\n", ":1:", "no data"},
        {"1,2,3,4,5\n2,3,4\n", ":2:", "expected 5 fields"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        write_text(p, bad[i].text);
        int rc = rt_dataset_read_csv(p, 1, 2, 2, &ds);
        if (rc != RT_ERR_FORMAT)
            fail_msg("case %zu: rc %d (%s)", i, rc, rt_error_detail());
        assert_null(ds);
        char where[600];
        snprintf(where, sizeof where, "%s%s", p, bad[i].line);
        assert_detail_has(where);
        assert_detail_has(bad[i].why);
    }
    path_in(p, sizeof p, d, "missing.csv");
    assert_int_equal(rt_dataset_read_csv(p, 1, 2, 2, &ds), RT_ERR_NOTFOUND);
    assert_detail_has(p);

    /* Dist-Keras' layout at a size that makes the rows array grow several
     * times: a header, then label and 784 pixels a line. */
    enum { ROWS = 300, PX = 784 };
    path_in(p, sizeof p, d, "mnist.csv");
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fprintf(f, "label");
    for (int k = 0; k < PX; k++)
        fprintf(f, ",pixel%d", k);
    fprintf(f, "\n");
    for (int i = 0; i < ROWS; i++) {
        fprintf(f, "%d", lab(i));
        for (int k = 0; k < PX; k++)
            fprintf(f, ",%d", pix(i, k));
        fprintf(f, "\n");
    }
    assert_int_equal(fclose(f), 0);
    assert_int_equal(rt_dataset_read_csv(p, 1, 28, 28, &ds), RT_OK);
    check_idx_contents(ds, ROWS, 28, 28);
    rt_dataset_destroy(&ds);
}

/* ---- permutation, stats ---------------------------------------------------------------- */

static void test_permutation(void **state)
{
    enum { N = 1000 };
    static uint32_t a[N], b[N], c[N], e[N];
    rt_permutation(a, N, 42, 0);
    rt_permutation(b, N, 42, 0);
    rt_permutation(c, N, 42, 1);
    rt_permutation(e, N, 43, 0);
    static unsigned char seen[N];
    memset(seen, 0, sizeof seen);
    int fixed = 0;
    for (int i = 0; i < N; i++) {
        assert_true(a[i] < N);
        assert_int_equal(seen[a[i]], 0);
        seen[a[i]] = 1;
        fixed += a[i] == (uint32_t)i;
    }
    assert_true(fixed < 10); /* a shuffle, not the identity (expect ~1) */
    assert_memory_equal(a, b, sizeof a);
    assert_memory_not_equal(a, c, sizeof a);
    assert_memory_not_equal(a, e, sizeof a);
    /* Pinned values: the order must be the same on every machine and
     * every build; this catches a change to the rng or the shuffle. */
    static const uint32_t want0[8] = {4, 7, 0, 2, 1, 6, 3, 5};
    static const uint32_t want1[8] = {1, 3, 4, 7, 6, 2, 0, 5};
    uint32_t s[8];
    rt_permutation(s, 8, 1, 0);
    assert_memory_equal(s, want0, sizeof s);
    rt_permutation(s, 8, 1, 1);
    assert_memory_equal(s, want1, sizeof s);
    rt_permutation(NULL, 0, 1, 0);
    uint32_t one;
    rt_permutation(&one, 1, 9, 9);
    assert_int_equal(one, 0);
}

static void test_stats_normalize(void **state)
{
    rt_dataset *ds = rt_dataset_new(2, 1, 1, 2);
    assert_non_null(ds);
    const float v[4] = {0, 1, 2, 3};
    memcpy(ds->f32, v, sizeof v);
    float m, s;
    rt_dataset_stats(ds, &m, &s);
    assert_float_equal(m, 1.5, 1e-6);
    assert_float_equal(s, sqrt(1.25), 1e-6);
    rt_dataset_normalize(ds, m, s);
    for (int i = 0; i < 4; i++)
        assert_float_equal(ds->f32[i], (v[i] - 1.5) / sqrt(1.25), 1e-6);
    rt_dataset_destroy(&ds);
    assert_null(rt_dataset_new(-1, 1, 1, 1));
    assert_null(rt_dataset_new(1, 0, 1, 1));
    assert_null(rt_dataset_new(1 << 30, 1 << 16, 1 << 16, 1 << 16));
    rt_dataset *empty = rt_dataset_new(0, 1, 2, 2);
    assert_non_null(empty);
    rt_dataset_destroy(&empty);
}

/* Bytes and the float copy ragtag kept before issue 18 give the model the
 * same bits: statistics, normalisation and gathered batches. All 256 byte
 * values, in a set large enough for the eight-lane sums and a tail. */
static void test_bytes_equal_floats(void **state)
{
    (void)state;
    enum { N = 37, PER = 29 };
    rt_dataset *b = rt_dataset_new_u8(N, 1, 1, PER);
    assert_non_null(b);
    assert_null(b->f32);
    assert_int_equal(rt_dataset_value_size(b), 1);
    assert_int_equal(rt_dataset_bytes(b), (size_t)N * (PER + 4));
    for (size_t i = 0; i < (size_t)N * PER; i++)
        b->u8[i] = (uint8_t)((i * 97 + 13) % 256);
    for (int i = 0; i < N; i++)
        b->y[i] = i % 10;
    /* The float set as the readers made it: v / 255 in float. */
    rt_dataset *f = rt_dataset_new(N, 1, 1, PER);
    assert_non_null(f);
    for (size_t i = 0; i < (size_t)N * PER; i++)
        f->f32[i] = (float)b->u8[i] / 255.0f;
    float mb, sb, mf, sf;
    rt_dataset_stats(b, &mb, &sb);
    rt_dataset_stats(f, &mf, &sf);
    assert_memory_equal(&mb, &mf, sizeof mb);
    assert_memory_equal(&sb, &sf, sizeof sb);
    rt_dataset_normalize(b, mb, sb);
    rt_dataset_normalize(f, mf, sf);
    static float xb[N * PER], xf[N * PER];
    uint32_t idx[N];
    rt_permutation(idx, N, 5, 0);
    assert_int_equal(rt_dataset_gather(b, idx, N, xb, NULL), RT_OK);
    assert_int_equal(rt_dataset_gather(f, idx, N, xf, NULL), RT_OK);
    assert_memory_equal(xb, xf, sizeof xb);
    assert_int_equal(rt_dataset_rows(b, 3, 7, xb, NULL), RT_OK);
    assert_memory_equal(xb, f->f32 + 3 * PER, 7 * PER * sizeof(float));
    rt_dataset part;
    rt_dataset_slice(b, 10, 20, &part);
    assert_int_equal(part.n, 10);
    assert_true(rt_dataset_value(&part, 0) == f->f32[10 * PER]);
    /* Normalised once, batches compute the table's form 8 bytes at a time
     * (AVX2); normalised again, the form is no longer (v / 255 - a) / b
     * and they read the table: the same bits both ways. */
    assert_true(b->lut_affine);
    rt_dataset_normalize(b, 0.25f, 3.0f);
    rt_dataset_normalize(f, 0.25f, 3.0f);
    assert_false(b->lut_affine);
    assert_int_equal(rt_dataset_gather(b, idx, N, xb, NULL), RT_OK);
    assert_int_equal(rt_dataset_gather(f, idx, N, xf, NULL), RT_OK);
    assert_memory_equal(xb, xf, sizeof xb);
    /* Widening keeps the values. */
    assert_int_equal(rt_dataset_widen(b, N), RT_OK);
    assert_null(b->u8);
    assert_memory_equal(b->f32, f->f32, (size_t)N * PER * sizeof(float));
    rt_dataset_destroy(&b);
    rt_dataset_destroy(&f);
}

/* CSV: integer pixels are kept as bytes; one fraction (or a -0) keeps the
 * whole file as floats, the rows before it included. */
static void test_csv_storage(void **state)
{
    (void)state;
    char d[512], p[600];
    path_in(d, sizeof d, tmp, "csvstore");
    mkdir(d, 0755);
    path_in(p, sizeof p, d, "s.csv");
    rt_dataset *ds = NULL;
    write_text(p, "1,0,17,255,3\n2,4,5,6,7\n");
    assert_int_equal(rt_dataset_read_csv(p, 1, 2, 2, &ds), RT_OK);
    assert_non_null(ds->u8);
    assert_int_equal(ds->u8[2], 255);
    rt_dataset_destroy(&ds);
    write_text(p, "1,0,17,255,3\n2,4,5,6.5,7\n3,8,9,10,11\n");
    assert_int_equal(rt_dataset_read_csv(p, 1, 2, 2, &ds), RT_OK);
    assert_null(ds->u8);
    assert_int_equal(ds->n, 3);
    assert_true(ds->f32[1] == 17.0f / 255.0f);
    assert_true(ds->f32[6] == 6.5f / 255.0f);
    assert_true(ds->f32[11] == 11.0f / 255.0f);
    rt_dataset_destroy(&ds);
    write_text(p, "1,0,-0,2,3\n");
    assert_int_equal(rt_dataset_read_csv(p, 1, 2, 2, &ds), RT_OK);
    assert_null(ds->u8);
    assert_true(signbit(ds->f32[1]));
    rt_dataset_destroy(&ds);
}

/* ---- loader ---------------------------------------------------------------------------- */

/* Sample i holds x = {i, -i}, y = i, so a batch shows which samples it has
 * and that pixels and labels travel together. */
static rt_dataset *counting_set(int n)
{
    rt_dataset *ds = rt_dataset_new(n, 1, 1, 2);
    assert_non_null(ds);
    for (int i = 0; i < n; i++) {
        ds->f32[2 * i] = (float)i;
        ds->f32[2 * i + 1] = (float)-i;
        ds->y[i] = i;
    }
    ds->classes = n;
    return ds;
}

/* Run from the loader's current position to the end of the epoch and
 * record the order; returns the number of samples. */
static int drain(rt_loader *l, int32_t *order, int batch, int *last_n)
{
    const float *x;
    const int32_t *y;
    int n, total = 0;
    while (rt_loader_next(l, &x, &y, &n) == 1) {
        assert_true(n >= 1 && n <= batch);
        for (int i = 0; i < n; i++) {
            assert_true(x[2 * i] == (float)y[i]);
            assert_true(x[2 * i + 1] == (float)-y[i]);
            order[total++] = y[i];
        }
        *last_n = n;
    }
    assert_int_equal(rt_loader_next(l, &x, &y, &n), 0); /* stays at the end */
    return total;
}

static void test_loader(void **state)
{
    enum { N = 103, B = 10 };
    rt_dataset *ds = counting_set(N);
    rt_loader *l = rt_loader_new(ds, B, true, 7);
    assert_non_null(l);
    assert_int_equal(rt_loader_batches(l), 11);

    int32_t e0[N], e0b[N], e1[N], tail[N];
    int last = 0;
    assert_int_equal(rt_loader_start(l, 0, 0), RT_OK);
    assert_int_equal(drain(l, e0, B, &last), N);
    assert_int_equal(last, 3); /* the short last batch */
    int count[N] = {0};
    for (int i = 0; i < N; i++)
        count[e0[i]]++;
    for (int i = 0; i < N; i++)
        assert_int_equal(count[i], 1);
    /* The epoch order is the seeded permutation. */
    uint32_t perm[N];
    rt_permutation(perm, N, 7, 0);
    for (int i = 0; i < N; i++)
        assert_int_equal(e0[i], (int32_t)perm[i]);

    /* Another epoch: another order. Same epoch again, from a fresh loader:
     * the same order. */
    assert_int_equal(rt_loader_start(l, 1, 0), RT_OK);
    assert_int_equal(drain(l, e1, B, &last), N);
    assert_memory_not_equal(e0, e1, sizeof e0);
    rt_loader *l2 = rt_loader_new(ds, B, true, 7);
    assert_int_equal(rt_loader_start(l2, 0, 0), RT_OK);
    assert_int_equal(drain(l2, e0b, B, &last), N);
    assert_memory_equal(e0, e0b, sizeof e0);
    rt_loader_destroy(&l2);
    assert_null(l2);

    /* Resume at batch k: the tail of the full epoch. */
    for (long k = 0; k <= 11; k++) {
        assert_int_equal(rt_loader_start(l, 0, k), RT_OK);
        int got = drain(l, tail, B, &last);
        assert_int_equal(got, k == 11 ? 0 : N - (int)k * B);
        assert_memory_equal(tail, e0 + k * B, (size_t)got * sizeof *tail);
    }
    assert_int_equal(rt_loader_start(l, 0, 12), RT_ERR_ARG);
    assert_int_equal(rt_loader_start(l, -1, 0), RT_ERR_ARG);

    /* Restart while a prefetch is in flight, many times over. */
    for (long ep = 0; ep < 200; ep++) {
        const float *x;
        const int32_t *y;
        int n;
        assert_int_equal(rt_loader_start(l, ep, ep % 5), RT_OK);
        assert_int_equal(rt_loader_next(l, &x, &y, &n), 1);
        rt_permutation(perm, N, 7, ep);
        assert_int_equal(y[0], (int32_t)perm[(ep % 5) * B]);
    }
    /* Destroy with a gather outstanding. */
    rt_loader_destroy(&l);

    /* No shuffle: file order. */
    l = rt_loader_new(ds, 50, false, 7);
    assert_int_equal(rt_loader_start(l, 3, 0), RT_OK);
    assert_int_equal(drain(l, e0, 50, &last), N);
    for (int i = 0; i < N; i++)
        assert_int_equal(e0[i], i);
    rt_loader_destroy(&l);

    /* Bigger batch than the set, and a bad batch size. */
    l = rt_loader_new(ds, 1000, true, 1);
    assert_int_equal(rt_loader_batches(l), 1);
    assert_int_equal(rt_loader_start(l, 0, 0), RT_OK);
    assert_int_equal(drain(l, e0, 1000, &last), N);
    assert_int_equal(last, N);
    rt_loader_destroy(&l);
    assert_null(rt_loader_new(ds, 0, true, 1));
    rt_dataset_destroy(&ds);
}

/* ---- rt_data_open ------------------------------------------------------------------------ */

/* Labels that name the sample, so a split can be checked by label. */
static unsigned char ident(int i) { return (unsigned char)i; }

static void test_open_split_limit(void **state)
{
    const char *d = new_dir("open");
    write_idx_set(d, "train", 200, 4, 4, true, ident);
    write_idx_set(d, "t10k", 30, 4, 4, false, ident);
    char spec[600];
    snprintf(spec, sizeof spec, "mnist:%s", d);

    struct rt_data a, b, c;
    assert_int_equal(rt_data_open(spec, 0.25f, 0, 5, &a), RT_OK);
    assert_int_equal(a.train->n, 150);
    assert_non_null(a.val);
    assert_int_equal(a.val->n, 50);
    assert_int_equal(a.test->n, 30);
    assert_int_equal(a.train->classes, 200);
    assert_int_equal(a.val->classes, 200);
    assert_int_equal(a.test->classes, 200);
    assert_string_equal(a.train->name, "mnist/train");
    assert_string_equal(a.val->name, "mnist/val");
    assert_string_equal(a.test->name, "mnist/test");
    /* Disjoint, together all of train, each in file order. */
    int seen[200] = {0};
    for (int i = 0; i < a.train->n; i++) {
        seen[a.train->y[i]]++;
        if (i)
            assert_true(a.train->y[i] > a.train->y[i - 1]);
    }
    for (int i = 0; i < a.val->n; i++) {
        seen[a.val->y[i]]++;
        if (i)
            assert_true(a.val->y[i] > a.val->y[i - 1]);
    }
    for (int i = 0; i < 200; i++)
        assert_int_equal(seen[i], 1);
    /* Pixels travel with their labels: sample y's first pixel. */
    float m = a.mean, s = a.std;
    for (int i = 0; i < a.val->n; i++) {
        int id = a.val->y[i];
        assert_float_equal(rt_dataset_value(a.val, (size_t)i * 16), ((float)pix(id, 0) / 255.0f - m) / s, 1e-5);
    }

    /* Same seed: the same split; another seed: another. */
    assert_int_equal(rt_data_open(spec, 0.25f, 0, 5, &b), RT_OK);
    assert_int_equal(b.val->n, 50);
    assert_memory_equal(a.val->y, b.val->y, 50 * sizeof(int32_t));
    assert_memory_equal(a.train->u8, b.train->u8, 150 * 16);
    assert_memory_equal(a.train->lut, b.train->lut, sizeof a.train->lut);
    assert_int_equal(rt_data_open(spec, 0.25f, 0, 6, &c), RT_OK);
    assert_memory_not_equal(a.val->y, c.val->y, 50 * sizeof(int32_t));
    rt_data_close(&b);
    rt_data_close(&c);
    assert_null(b.train);

    /* Normalised with the train part's statistics: train has mean 0 and
     * std 1; a.mean / a.std are those of its raw pixels. */
    double sum = 0, sq = 0;
    for (int i = 0; i < a.train->n; i++)
        for (int k = 0; k < 16; k++) {
            double v = pix(a.train->y[i], k) / 255.0;
            sum += v;
            sq += v * v;
        }
    double rm = sum / (150 * 16), rs = sqrt(sq / (150 * 16) - rm * rm);
    assert_float_equal(a.mean, rm, 1e-5);
    assert_float_equal(a.std, rs, 1e-5);
    float tm, ts;
    rt_dataset_stats(a.train, &tm, &ts);
    assert_float_equal(tm, 0.0, 1e-5);
    assert_float_equal(ts, 1.0, 1e-5);
    assert_float_equal(rt_dataset_value(a.test, 5 * 16 + 3), ((float)pix(5, 3) / 255.0f - m) / s, 1e-5);
    rt_data_close(&a);
    assert_null(a.train);
    assert_null(a.test);

    /* No split; limit keeps the first images. */
    assert_int_equal(rt_data_open(spec, 0.0f, 40, 5, &a), RT_OK);
    assert_null(a.val);
    assert_int_equal(a.train->n, 40);
    for (int i = 0; i < 40; i++)
        assert_int_equal(a.train->y[i], i);
    assert_int_equal(a.train->classes, 200);
    rt_data_close(&a);
    assert_int_equal(rt_data_open(spec, 0.5f, 40, 5, &a), RT_OK);
    assert_int_equal(a.train->n + a.val->n, 40);
    assert_int_equal(a.val->n, 20);
    for (int i = 0; i < a.val->n; i++)
        assert_true(a.val->y[i] < 40);
    rt_data_close(&a);
    assert_int_equal(rt_data_open(spec, 0.0f, 100000, 5, &a), RT_OK);
    assert_int_equal(a.train->n, 200);
    rt_data_close(&a);

    /* A tiny fraction still gives one validation image. */
    assert_int_equal(rt_data_open(spec, 0.001f, 0, 5, &a), RT_OK);
    assert_int_equal(a.val->n, 1);
    rt_data_close(&a);

    /* Errors. */
    assert_int_equal(rt_data_open(spec, 1.0f, 0, 5, &a), RT_ERR_ARG);
    assert_int_equal(rt_data_open(spec, -0.1f, 0, 5, &a), RT_ERR_ARG);
    assert_int_equal(rt_data_open(spec, 0.1f, -1, 5, &a), RT_ERR_ARG);
    assert_int_equal(rt_data_open(spec, 0.5f, 1, 5, &a), RT_ERR_ARG);
    assert_int_equal(rt_data_open("imagenet", 0, 0, 5, &a), RT_ERR_CONFIG);
    assert_detail_has("fashion-mnist");
    assert_int_equal(rt_data_open("mnist:/nonexistent/dir", 0, 0, 5, &a), RT_ERR_NOTFOUND);
    assert_detail_has("/nonexistent/dir");
    assert_null(a.train);
}

static void test_open_other_formats(void **state)
{
    struct rt_data a;
    /* Train only, no test set. */
    const char *d = new_dir("open-notest");
    write_idx_set(d, "train", 12, 2, 3, false, lab);
    char spec[1400];
    snprintf(spec, sizeof spec, "idx:%s", d);
    assert_int_equal(rt_data_open(spec, 0, 0, 1, &a), RT_OK);
    assert_null(a.test);
    assert_int_equal(a.train->n, 12);
    rt_data_close(&a);

    /* Test set of another shape. */
    write_idx_set(d, "t10k", 3, 3, 2, false, lab);
    assert_int_equal(rt_data_open(spec, 0, 0, 1, &a), RT_ERR_FORMAT);

    /* CIFAR-10, in its cifar-10-batches-bin folder. */
    const char *cd = new_dir("cifar-open");
    char sub[600], p[700];
    snprintf(sub, sizeof sub, "%s/cifar-10-batches-bin", cd);
    assert_int_equal(mkdir(sub, 0700), 0);
    for (int i = 0; i < 5; i++) {
        size_t len;
        unsigned char *b = cifar_bytes(2, 2 * i, &len);
        snprintf(p, sizeof p, "%s/data_batch_%d.bin", sub, i + 1);
        write_raw(p, b, len);
        free(b);
    }
    snprintf(spec, sizeof spec, "cifar10:%s", cd);
    assert_int_equal(rt_data_open(spec, 0, 0, 1, &a), RT_OK);
    assert_int_equal(a.train->n, 10);
    assert_int_equal(a.train->c, 3);
    assert_null(a.test);
    for (int i = 0; i < 10; i++)
        assert_int_equal(a.train->y[i], lab(i));
    rt_data_close(&a);
    size_t len;
    unsigned char *b = cifar_bytes(4, 0, &len);
    snprintf(p, sizeof p, "%s/test_batch.bin", sub);
    write_raw(p, b, len);
    free(b);
    assert_int_equal(rt_data_open(spec, 0.2f, 0, 1, &a), RT_OK);
    assert_int_equal(a.train->n, 8);
    assert_int_equal(a.val->n, 2);
    assert_int_equal(a.test->n, 4);
    rt_data_close(&a);
    snprintf(p, sizeof p, "%s/data_batch_3.bin", sub);
    remove(p);
    assert_int_equal(rt_data_open(spec, 0, 0, 1, &a), RT_ERR_NOTFOUND);
    assert_detail_has("data_batch_3.bin");

    /* CSV, with a shape. */
    const char *vd = new_dir("csv-open");
    char tr[600], te[600];
    path_in(tr, sizeof tr, vd, "train.csv");
    path_in(te, sizeof te, vd, "test.csv");
    write_text(tr, "label,a,b,c,d,e,f\n1,0,1,2,3,4,5\n2,6,7,8,9,10,11\n0,1,1,1,1,1,1\n");
    write_text(te, "4,0,0,0,0,0,0\n");
    snprintf(spec, sizeof spec, "csv:%s,%s:shape=1x3x2", tr, te);
    assert_int_equal(rt_data_open(spec, 0, 0, 1, &a), RT_OK);
    assert_int_equal(a.train->n, 3);
    assert_int_equal(a.train->h, 1);
    assert_int_equal(a.train->w, 3);
    assert_int_equal(a.train->c, 2);
    assert_int_equal(a.test->n, 1);
    assert_int_equal(a.train->classes, 5);
    assert_string_equal(a.test->name, "csv/test");
    rt_data_close(&a);
    snprintf(spec, sizeof spec, "csv:%s:shape=2x2x1", tr); /* 4 pixels: 6 columns is wrong */
    assert_int_equal(rt_data_open(spec, 0, 0, 1, &a), RT_ERR_FORMAT);
    assert_detail_has(":2:");
    snprintf(spec, sizeof spec, "csv:%s:shape=2x2", tr);
    assert_int_equal(rt_data_open(spec, 0, 0, 1, &a), RT_ERR_CONFIG);
}

/* The finder takes $RAGTAG_DATA_DIR first. */
static void test_fashion_finder(void **state)
{
    const char *old = getenv("RAGTAG_DATA_DIR");
    char saved[1024] = "";
    if (old)
        snprintf(saved, sizeof saved, "%s", old);
    const char *root = new_dir("datadir");
    char fm[600];
    snprintf(fm, sizeof fm, "%s/fashion-mnist", root);
    assert_int_equal(mkdir(fm, 0700), 0);
    write_idx_set(fm, "train", 9, 2, 2, true, ident); /* labels 0..8 */
    write_idx_set(fm, "t10k", 4, 2, 2, true, ident);
    setenv("RAGTAG_DATA_DIR", root, 1);
    struct rt_data a;
    assert_int_equal(rt_data_open("fashion-mnist", 0, 0, 1, &a), RT_OK);
    assert_int_equal(a.train->n, 9);
    assert_int_equal(a.test->n, 4);
    assert_int_equal(a.train->classes, 10); /* Fashion-MNIST has 10, seen or not */
    assert_string_equal(a.train->name, "fashion-mnist/train");
    rt_data_close(&a);

    /* Nothing anywhere: the message says what to install. Only testable
     * where the Debian package is absent. */
    struct stat st;
    setenv("RAGTAG_DATA_DIR", new_dir("datadir-empty"), 1);
    if (stat("/usr/share/datasets/fashion-mnist", &st) != 0 &&
        stat("/usr/local/share/datasets/fashion-mnist", &st) != 0 &&
        stat("data/fashion-mnist", &st) != 0) {
        assert_int_equal(rt_data_open("fashion-mnist", 0, 0, 1, &a), RT_ERR_NOTFOUND);
        assert_detail_has("dataset-fashion-mnist");
        assert_detail_has("RAGTAG_DATA_DIR");
    }
    if (old)
        setenv("RAGTAG_DATA_DIR", saved, 1);
    else
        unsetenv("RAGTAG_DATA_DIR");
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static const char *real_dir(void)
{
    static const char *const dirs[] = {"/usr/share/datasets/fashion-mnist"};
    struct stat st;
    char p[512];
    for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
        snprintf(p, sizeof p, "%s/train-images-idx3-ubyte.gz", dirs[i]);
        if (stat(p, &st) == 0)
            return dirs[i];
    }
    return NULL;
}

static void test_fashion_real(void **state)
{
    const char *dir = real_dir();
    if (!dir) {
        printf("SKIP: Fashion-MNIST not installed (Debian package dataset-fashion-mnist)\n");
        skip();
    }
    char spec[600];
    snprintf(spec, sizeof spec, "fashion-mnist:%s", dir);
    struct rt_data a;
    double t0 = now_s();
    int rc = rt_data_open(spec, 0.0f, 0, 1, &a);
    double t1 = now_s();
    if (rc != RT_OK)
        fail_msg("%s: %s", spec, rt_error_detail());
    printf("fashion-mnist: 60000 + 10000 images read, normalised in %.3f s "
           "(mean %.4f, std %.4f)\n",
           t1 - t0, a.mean, a.std);
    assert_int_equal(a.train->n, 60000);
    assert_int_equal(a.test->n, 10000);
    assert_int_equal(a.train->c, 1);
    assert_int_equal(a.train->h, 28);
    assert_int_equal(a.train->w, 28);
    assert_int_equal(a.train->classes, 10);
    assert_int_equal(a.test->classes, 10);
    int per[10] = {0}, tper[10] = {0};
    for (int i = 0; i < 60000; i++)
        per[a.train->y[i]]++;
    for (int i = 0; i < 10000; i++)
        tper[a.test->y[i]]++;
    for (int k = 0; k < 10; k++) {
        assert_int_equal(per[k], 6000);
        assert_int_equal(tper[k], 1000);
    }
    /* Zalando's published pixel statistics: mean 0.2860, std 0.3530. */
    assert_float_equal(a.mean, 0.2860, 5e-4);
    assert_float_equal(a.std, 0.3530, 5e-4);
    rt_data_close(&a);

    /* The finder finds it too (unless RAGTAG_DATA_DIR points elsewhere),
     * with a split; and a loader runs an epoch over it. */
    if (!getenv("RAGTAG_DATA_DIR")) {
        assert_int_equal(rt_data_open("fashion-mnist", 0.1f, 0, 3, &a), RT_OK);
        assert_int_equal(a.train->n, 54000);
        assert_int_equal(a.val->n, 6000);
        rt_loader *l = rt_loader_new(a.train, 128, true, 3);
        assert_int_equal(rt_loader_start(l, 0, 0), RT_OK);
        const float *x;
        const int32_t *y;
        int n;
        long total = 0;
        t0 = now_s();
        while (rt_loader_next(l, &x, &y, &n) == 1)
            total += n;
        t1 = now_s();
        assert_int_equal(total, 54000);
        printf("loader: one epoch of 54000 images in batches of 128 in %.3f s\n", t1 - t0);
        rt_loader_destroy(&l);
        rt_data_close(&a);
    }
}

/* ---- shards ---------------------------------------------------------------------- */

/* The sets of spec `from` (train, and test) packed into dir as pack.c does. */
static void pack_into(const char *from, const char *dir, int nshards)
{
    struct rt_data d;
    assert_int_equal(rt_data_open(from, 0.0f, 0, 1, &d), RT_OK);
    rt_shards_writer *wr = rt_shards_writer_new(dir, d.train->c, d.train->h, d.train->w,
                                                d.train->classes);
    assert_non_null(wr);
    rt_dataset *sets[2] = {d.train, d.test};
    const char *names[2] = {"train", "test"};
    size_t per = rt_dataset_sample_values(d.train);
    for (int s = 0; s < 2 && sets[s]; s++) {
        assert_int_equal(rt_shards_writer_set(wr, names[s], sets[s]->n, nshards), RT_OK);
        for (int i = 0; i < sets[s]->n; i++)
            assert_int_equal(rt_shards_writer_add(wr, sets[s]->u8 + (size_t)i * per,
                                                  sets[s]->y[i]), RT_OK);
    }
    assert_int_equal(rt_shards_writer_finish(wr, d.mean, d.std), RT_OK);
    rt_shards_writer_destroy(&wr);
    rt_data_close(&d);
}

/* Every sample of a (in memory) and b (shards), floats and labels. */
static void assert_same_samples(const rt_dataset *a, const rt_dataset *b)
{
    assert_int_equal(a->n, b->n);
    size_t per = rt_dataset_sample_values(a);
    float *xa = malloc((size_t)a->n * per * sizeof(float));
    float *xb = malloc((size_t)a->n * per * sizeof(float));
    int32_t *ya = malloc((size_t)a->n * sizeof(int32_t)), *yb = malloc((size_t)a->n * sizeof(int32_t));
    assert_int_equal(rt_dataset_rows(a, 0, a->n, xa, ya), RT_OK);
    assert_int_equal(rt_dataset_rows(b, 0, b->n, xb, yb), RT_OK);
    assert_memory_equal(xa, xb, (size_t)a->n * per * sizeof(float));
    assert_memory_equal(ya, yb, (size_t)a->n * sizeof(int32_t));
    free(xa);
    free(xb);
    free(ya);
    free(yb);
}

static void test_shards_as_memory(void **state)
{
    const char *d = new_dir("shsrc"), *sh = new_dir("sh");
    write_idx_set(d, "train", 203, 4, 4, false, ident);
    write_idx_set(d, "t10k", 30, 4, 4, false, ident);
    char spec[600], sspec[600];
    snprintf(spec, sizeof spec, "idx:%s", d);
    snprintf(sspec, sizeof sspec, "shards:%s", sh);
    pack_into(spec, sh, 4);
    /* 203 records in 4 shards: 51, 51, 51, 50 */
    rt_shards *s = NULL;
    assert_int_equal(rt_shards_open(sh, "train", &s), RT_OK);
    assert_int_equal(rt_shards_info(s)->nshards, 4);
    assert_int_equal(rt_shards_info(s)->n, 203);
    uint64_t bytes = 0;
    assert_int_equal(rt_shards_verify(s, &bytes), RT_OK);
    assert_int_equal(bytes, 4 * 32 + 203 * (16 + 8));
    rt_shards_close(&s);

    /* without --val: the same floats and labels, test set too */
    struct rt_data a, b;
    assert_int_equal(rt_data_open(spec, 0.0f, 0, 5, &a), RT_OK);
    assert_int_equal(rt_data_open(sspec, 0.0f, 0, 5, &b), RT_OK);
    assert_true(b.train->shards && !b.train->u8 && !b.train->y);
    assert_int_equal(b.train->classes, a.train->classes);
    assert_true(a.mean == b.mean && a.std == b.std);
    assert_same_samples(a.train, b.train);
    assert_same_samples(a.test, b.test);
    assert_string_equal(b.train->name, "shards/train");
    rt_data_close(&a);
    rt_data_close(&b);

    /* --val and --limit: the same samples on each side of the split */
    assert_int_equal(rt_data_open(spec, 0.25f, 150, 5, &a), RT_OK);
    assert_int_equal(rt_data_open(sspec, 0.25f, 150, 5, &b), RT_OK);
    assert_int_equal(b.val->n, a.val->n);
    assert_int_equal(b.train->n, a.train->n);
    int32_t *y = malloc(150 * sizeof(int32_t));
    float *x = malloc(150 * 16 * sizeof(float));
    assert_int_equal(rt_dataset_rows(b.val, 0, b.val->n, x, y), RT_OK);
    assert_memory_equal(y, a.val->y, (size_t)a.val->n * sizeof(int32_t));
    assert_int_equal(rt_dataset_rows(b.train, 0, b.train->n, x, y), RT_OK);
    assert_memory_equal(y, a.train->y, (size_t)a.train->n * sizeof(int32_t));
    /* a slice reads its own records */
    rt_dataset part;
    rt_dataset_slice(b.train, 10, 20, &part);
    assert_int_equal(rt_dataset_rows(&part, 0, 10, x, y), RT_OK);
    assert_memory_equal(y, a.train->y + 10, 10 * sizeof(int32_t));
    free(x);
    free(y);
    rt_data_close(&a);
    rt_data_close(&b);
}

/* Rewrite line `line` (1-based) of dir's index with `text` (NULL: drop it). */
static void edit_index(const char *dir, int line, const char *text)
{
    char p[600], buf[8192] = "", l[512];
    path_in(p, sizeof p, dir, "index");
    FILE *f = fopen(p, "r");
    assert_non_null(f);
    for (int i = 1; fgets(l, sizeof l, f); i++) {
        if (i != line)
            strcat(buf, l);
        else if (text)
            strcat(strcat(buf, text), "\n");
    }
    fclose(f);
    write_text(p, buf);
}

static void test_shards_errors(void **state)
{
    const char *d = new_dir("shsrc2"), *sh = new_dir("sh2");
    write_idx_set(d, "train", 40, 4, 4, false, ident);
    char spec[600], sspec[600], idx[600], keep[8192];
    snprintf(spec, sizeof spec, "idx:%s", d);
    snprintf(sspec, sizeof sspec, "shards:%s", sh);
    pack_into(spec, sh, 2);
    path_in(idx, sizeof idx, sh, "index");
    FILE *f = fopen(idx, "r");
    size_t klen = fread(keep, 1, sizeof keep - 1, f);
    keep[klen] = '\0';
    fclose(f);
    static const struct {
        int line;
        const char *text, *says;
    } cases[] = {
        {1, "ragtag-shards 2", "index:1: index version not read"},
        {2, "shape 0 4 4", "index:2: expected 'shape C H W'"},
        {3, "label float32", "index:3: expected 'label int32'"},
        {6, "std 0", "index:6: not a finite number"},
        {8, "shard ../x.rts 20 0", "index:8: a shard name must be a plain file name"},
        {8, "shard train-00000.rts twenty 0", "index:8: expected 'shard NAME COUNT CRC32'"},
        {9, "shard train-00000.rts 20 0", "index:9: shard train-00000.rts is listed twice"},
        {9, NULL, "index:7: set train declares 40 records in 2 shards, but its shard lines add "
                  "up to 20 records in 1 shards"},
        {7, "set train 40 1", "index:9: more shards than its 'set' line declares"},
        {4, NULL, "expected 'classes K'"},
    };
    struct rt_data a;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_text(idx, keep);
        edit_index(sh, cases[i].line, cases[i].text);
        assert_int_equal(rt_data_open(sspec, 0.0f, 0, 5, &a), RT_ERR_FORMAT);
        assert_detail_has(cases[i].says);
        assert_detail_has(sh);
    }
    /* counts that add up but not to the shards' headers */
    write_text(idx, keep);
    char l8[128];
    f = fopen(idx, "r");
    for (int i = 0; i < 8; i++)
        assert_non_null(fgets(l8, sizeof l8, f));
    fclose(f);
    unsigned crc;
    assert_int_equal(sscanf(l8, "shard train-00000.rts 20 %x", &crc), 1);
    snprintf(l8, sizeof l8, "shard train-00000.rts 21 %08x", crc);
    edit_index(sh, 8, l8);
    f = fopen(idx, "r");
    char l9[128];
    for (int i = 0; i < 9; i++)
        assert_non_null(fgets(l9, sizeof l9, f));
    fclose(f);
    assert_int_equal(sscanf(l9, "shard train-00001.rts 20 %x", &crc), 1);
    snprintf(l9, sizeof l9, "shard train-00001.rts 19 %08x", crc);
    edit_index(sh, 9, l9);
    assert_int_equal(rt_data_open(sspec, 0.0f, 0, 5, &a), RT_ERR_FORMAT);
    assert_detail_has("train-00000.rts: offset 28: 20 records, the index says 21");
    write_text(idx, "");
    assert_int_equal(rt_data_open(sspec, 0.0f, 0, 5, &a), RT_ERR_FORMAT);
    assert_detail_has("truncated after line 0");
    unlink(idx);
    assert_int_equal(rt_data_open(sspec, 0.0f, 0, 5, &a), RT_ERR_NOTFOUND);
    assert_detail_has("index: No such file");
    write_text(idx, keep);

    /* a corrupt record: the loader's thread finds it, the caller hears it */
    char p[600];
    path_in(p, sizeof p, sh, "train-00001.rts");
    f = fopen(p, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, 32 + 7 * 24 + 9, SEEK_SET), 0);
    int c = fgetc(f);
    assert_int_equal(fseek(f, 32 + 7 * 24 + 9, SEEK_SET), 0);
    fputc(c ^ 0x10, f);
    fclose(f);
    assert_int_equal(rt_data_open(sspec, 0.0f, 0, 5, &a), RT_OK);
    rt_loader *l = rt_loader_new(a.train, 8, true, 3);
    assert_non_null(l);
    assert_int_equal(rt_loader_start(l, 0, 0), RT_OK);
    const float *x;
    const int32_t *y;
    int n, rc;
    rt_error_clear();
    while ((rc = rt_loader_next(l, &x, &y, &n)) > 0)
        ;
    assert_int_equal(rc, RT_ERR_FORMAT);
    assert_detail_has("train-00001.rts: record 7 at offset 200: checksum mismatch");
    rt_loader_destroy(&l);
    rt_data_close(&a);

    /* the files of a shard directory, for --serve-data: the index first */
    struct rt_data_files *files = malloc(sizeof *files);
    assert_int_equal(rt_data_files(sspec, files), RT_OK);
    assert_string_equal(files->kind, "shards");
    assert_int_equal(files->n, 3);
    assert_string_equal(files->name[0], "index");
    assert_string_equal(files->name[2], "train-00001.rts");
    const char *many = new_dir("sh3");
    pack_into(spec, many, 40); /* 40 shards fit; a test set would add more */
    snprintf(sspec, sizeof sspec, "shards:%s", many);
    assert_int_equal(rt_data_files(sspec, files), RT_OK);
    assert_int_equal(files->n, 41);
    write_idx_set(d, "train", 70, 4, 4, false, ident);
    pack_into(spec, many, 70);
    assert_int_equal(rt_data_files(sspec, files), RT_ERR_CONFIG);
    assert_detail_has("holds 70 shards, and a data manifest (coord --serve-data) lists at most 63");
    free(files);
}

int main(void)
{
    /* A deadlocked loader should fail the test, not hang `make check`. */
    alarm(300);
    snprintf(tmp, sizeof tmp, "%s", tu_tmpdir());
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_idx_roundtrip),
        cmocka_unit_test(test_idx_truncated),
        cmocka_unit_test(test_idx_gz_cut),
        cmocka_unit_test(test_idx_malformed),
        cmocka_unit_test(test_cifar),
        cmocka_unit_test(test_csv),
        cmocka_unit_test(test_permutation),
        cmocka_unit_test(test_stats_normalize),
        cmocka_unit_test(test_bytes_equal_floats),
        cmocka_unit_test(test_csv_storage),
        cmocka_unit_test(test_loader),
        cmocka_unit_test(test_open_split_limit),
        cmocka_unit_test(test_open_other_formats),
        cmocka_unit_test(test_fashion_finder),
        cmocka_unit_test(test_fashion_real),
        cmocka_unit_test(test_shards_as_memory),
        cmocka_unit_test(test_shards_errors),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmp);
    return failed;
}
