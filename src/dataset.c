/* dataset.c — the seeded permutation, and rt_data_open: spec parsing, the
 * Fashion-MNIST finder, the --limit subset, the seeded validation split and
 * normalisation. How a set holds its pixels is samples.c; the file readers
 * live in idx.c, cifar.c and csv.c; the batch loader in loader.c. */
#include "data.h"
#include "rng.h"
#include "shards.h"
#include "status.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The rng stream of the validation split. Epoch permutations use streams
 * 0, 1, 2, ...; this one is far from them, so the split never correlates
 * with any epoch's order. */
#define SPLIT_STREAM 0x73706c6974ull /* "split" */

/* ---- permutations ------------------------------------------------------------ */

/* Fisher-Yates from the top down; rt_rng_below is unbiased and the same on
 * every machine, so the order is too. */
static void shuffle(uint32_t *perm, long n, rt_rng *r)
{
    for (long i = 0; i < n; i++)
        perm[i] = (uint32_t)i;
    for (long i = n - 1; i > 0; i--) {
        long j = (long)rt_rng_below(r, (uint64_t)i + 1);
        uint32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

void rt_permutation(uint32_t *perm, long n, uint64_t seed, long epoch)
{
    RT_ASSERT(n >= 0 && (uint64_t)n <= UINT32_MAX && (perm || n == 0) && epoch >= 0);
    rt_rng r;
    rt_rng_seed(&r, seed, (uint64_t)epoch);
    shuffle(perm, n, &r);
}

/* ---- limit, split ------------------------------------------------------------- */

/* A new set holding src's samples idx[0..n-1], in that order, stored as
 * src is. */
static rt_dataset *gather(const rt_dataset *src, const uint32_t *idx, long n)
{
    rt_dataset *ds = src->u8 ? rt_dataset_new_u8((int)n, src->c, src->h, src->w)
                             : rt_dataset_new((int)n, src->c, src->h, src->w);
    if (!ds)
        return NULL;
    size_t bytes = rt_dataset_sample_values(src) * rt_dataset_value_size(src);
    char *dst = ds->u8 ? (char *)ds->u8 : (char *)ds->f32;
    const char *from = src->u8 ? (const char *)src->u8 : (const char *)src->f32;
    for (long i = 0; i < n; i++) {
        memcpy(dst + (size_t)i * bytes, from + (size_t)idx[i] * bytes, bytes);
        ds->y[i] = src->y[idx[i]];
    }
    rt_dataset_copy_lut(ds, src);
    ds->classes = src->classes;
    return ds;
}

/* Keep the first `limit` samples. Shrinking in place needs no second copy
 * of the set; a failed realloc merely keeps the bigger block. */
static void keep_first(rt_dataset *ds, long limit)
{
    if (limit <= 0 || limit >= ds->n)
        return;
    ds->n = (int)limit;
    if (ds->shards)
        return; /* records past n are never read; a map keeps its first n */
    size_t bytes = (size_t)limit * rt_dataset_sample_values(ds) * rt_dataset_value_size(ds);
    if (ds->u8) {
        uint8_t *x = realloc(ds->u8, bytes);
        if (x)
            ds->u8 = x;
    } else {
        float *x = realloc(ds->f32, bytes);
        if (x)
            ds->f32 = x;
    }
    int32_t *y = realloc(ds->y, (size_t)limit * sizeof(int32_t));
    if (y)
        ds->y = y;
}

/* Move the samples not marked in is_val to the front, in file order, and
 * keep only them: the training part stays where it was read, so a split
 * costs the validation part's memory only, never a second copy of the
 * set (that copy was most of a worker's peak). */
static void keep_unmarked(rt_dataset *ds, const unsigned char *is_val)
{
    size_t bytes = rt_dataset_sample_values(ds) * rt_dataset_value_size(ds);
    char *x = ds->u8 ? (char *)ds->u8 : (char *)ds->f32;
    long a = 0;
    for (long i = 0; i < ds->n; i++) {
        if (is_val[i])
            continue;
        if (a != i) {
            memmove(x + (size_t)a * bytes, x + (size_t)i * bytes, bytes);
            ds->y[a] = ds->y[i];
        }
        a++;
    }
    keep_first(ds, a);
}

/* Records of a set of shards marked (or not) in is_val, in file order:
 * the same samples, in the same order, as the split of bytes in memory. */
static uint32_t *marked_records(const rt_dataset *ds, const unsigned char *is_val, bool want,
                                long count)
{
    uint32_t *map = malloc((size_t)(count ? count : 1) * sizeof *map);
    if (!map)
        return NULL;
    long k = 0;
    for (long i = 0; i < ds->n; i++)
        if ((is_val[i] != 0) == want)
            map[k++] = ds->map ? ds->map[i] : (uint32_t)(ds->base + i);
    RT_ASSERT(k == count);
    return map;
}

/* The split of a set kept in shards: two maps of record numbers instead
 * of copies of bytes; both sets read the one set of files. */
static int split_shards(rt_dataset *all, const unsigned char *is_val, long nval, rt_dataset **val)
{
    long ntrain = all->n - nval;
    uint32_t *vmap = marked_records(all, is_val, true, nval);
    uint32_t *tmap = marked_records(all, is_val, false, ntrain);
    if (!vmap || !tmap) {
        free(vmap);
        free(tmap);
        return rt_error(RT_ERR_NOMEM, "out of memory splitting %d records", all->n);
    }
    struct rt_shards *sh = rt_shards_ref(all->shards);
    rt_dataset *va = rt_dataset_new_shards(&sh, &vmap, nval);
    if (!va) {
        rt_shards_close(&sh);
        free(vmap);
        free(tmap);
        return RT_ERR_NOMEM;
    }
    rt_dataset_copy_lut(va, all);
    va->classes = all->classes;
    free(all->map);
    all->map = tmap;
    all->base = 0;
    all->n = (int)ntrain;
    *val = va;
    return RT_OK;
}

/* Split *train into train and val: the last nval samples of a seeded shuffle
 * go to val. Both keep file order, which keeps the copies sequential and the
 * result independent of how the shuffle happens to order them. */
static int split(rt_dataset **train, float val_frac, uint64_t seed, rt_dataset **val)
{
    rt_dataset *all = *train;
    long n = all->n;
    long nval = lround((double)val_frac * (double)n);
    if (nval < 1)
        nval = 1; /* a fraction was asked for: never an empty validation set */
    if (nval >= n)
        return rt_error(RT_ERR_ARG,
                        "a validation fraction of %g of %ld training images leaves none to train on",
                        (double)val_frac, n);

    int rc = RT_ERR_NOMEM;
    uint32_t *perm = malloc((size_t)n * sizeof *perm);
    uint32_t *iva = NULL;
    unsigned char *is_val = calloc((size_t)n, 1);
    if (!perm || !is_val) {
        rc = rt_error(RT_ERR_NOMEM, "out of memory splitting %ld images", n);
        goto out;
    }
    rt_rng r;
    rt_rng_seed(&r, seed, SPLIT_STREAM);
    shuffle(perm, n, &r);
    for (long i = n - nval; i < n; i++)
        is_val[perm[i]] = 1;
    if (all->shards) {
        rc = split_shards(all, is_val, nval, val);
        goto out;
    }
    if (!(iva = malloc((size_t)nval * sizeof *iva))) {
        rc = rt_error(RT_ERR_NOMEM, "out of memory splitting %ld images", n);
        goto out;
    }
    long b = 0;
    for (long i = 0; i < n; i++)
        if (is_val[i])
            iva[b++] = (uint32_t)i;
    RT_ASSERT(b == nval);
    rt_dataset *va = gather(all, iva, b);
    if (!va)
        goto out;
    keep_unmarked(all, is_val);
    *val = va;
    rc = RT_OK;
out:
    free(is_val);
    free(iva);
    free(perm);
    return rc;
}

/* ---- finding files ---------------------------------------------------------------- */

static bool is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static bool is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The IDX file of `set` ("train" / "t10k") and `what` ("images-idx3" /
 * "labels-idx1") in dir, under the names it is published with: LeCun's and
 * Zalando's (train-images-idx3-ubyte[.gz]) and Kaggle's
 * (train-images.idx3-ubyte). */
static bool find_idx_file(const char *dir, const char *set, const char *what, char *out,
                          size_t outsz)
{
    static const char *const forms[] = {"%s/%s-%s-ubyte.gz", "%s/%s-%s-ubyte"};
    for (size_t i = 0; i < sizeof forms / sizeof *forms; i++) {
        snprintf(out, outsz, forms[i], dir, set, what);
        if (is_file(out))
            return true;
    }
    /* Kaggle's spelling: a dot before idx3 / idx1. */
    char dotted[32];
    snprintf(dotted, sizeof dotted, "%s", what);
    char *dash = strchr(dotted, '-');
    if (dash)
        *dash = '.';
    static const char *const kforms[] = {"%s/%s-%s-ubyte", "%s/%s-%s-ubyte.gz"};
    for (size_t i = 0; i < sizeof kforms / sizeof *kforms; i++) {
        snprintf(out, outsz, kforms[i], dir, set, dotted);
        if (is_file(out))
            return true;
    }
    snprintf(out, outsz, "%s/%s-%s-ubyte[.gz]", dir, set, what);
    return false;
}

static int open_idx_dir(const char *dir, rt_dataset **train, rt_dataset **test)
{
    char ti[4096], tl[4096], ei[4096], el[4096];
    if (!is_dir(dir))
        return rt_error(RT_ERR_NOTFOUND, "%s: no such directory", dir);
    if (!find_idx_file(dir, "train", "images-idx3", ti, sizeof ti))
        return rt_error(RT_ERR_NOTFOUND, "%s: not found", ti);
    if (!find_idx_file(dir, "train", "labels-idx1", tl, sizeof tl))
        return rt_error(RT_ERR_NOTFOUND, "%s: not found", tl);
    bool has_ei = find_idx_file(dir, "t10k", "images-idx3", ei, sizeof ei);
    bool has_el = find_idx_file(dir, "t10k", "labels-idx1", el, sizeof el);
    if (has_ei != has_el)
        return rt_error(RT_ERR_NOTFOUND, "%s: not found (the test set needs both files)",
                        has_ei ? el : ei);
    RT_TRY(rt_dataset_read_idx(ti, tl, train));
    if (has_ei) {
        int rc = rt_dataset_read_idx(ei, el, test);
        if (rc < 0) {
            rt_dataset_destroy(train);
            return rc;
        }
    }
    return RT_OK;
}

/* $RAGTAG_DATA_DIR first, so a user can point at their own copy; then
 * Debian's dataset-fashion-mnist; then places a user may have unpacked it. */
static int find_fashion_mnist(char *dir, size_t dirsz)
{
    char cand[6][2048];
    int nc = 0;
    const char *env = getenv("RAGTAG_DATA_DIR");
    if (env && *env) {
        snprintf(cand[nc++], sizeof cand[0], "%s/fashion-mnist", env);
        snprintf(cand[nc++], sizeof cand[0], "%s", env);
    }
    snprintf(cand[nc++], sizeof cand[0], "/usr/share/datasets/fashion-mnist");
    snprintf(cand[nc++], sizeof cand[0], "/usr/local/share/datasets/fashion-mnist");
    const char *home = getenv("HOME");
    if (home && *home)
        snprintf(cand[nc++], sizeof cand[0], "%s/.local/share/datasets/fashion-mnist", home);
    snprintf(cand[nc++], sizeof cand[0], "data/fashion-mnist");

    char looked[4096] = "";
    size_t used = 0;
    for (int i = 0; i < nc; i++) {
        char probe[4096];
        if (find_idx_file(cand[i], "train", "images-idx3", probe, sizeof probe) &&
            find_idx_file(cand[i], "train", "labels-idx1", probe, sizeof probe)) {
            size_t k = strnlen(cand[i], dirsz - 1);
            memcpy(dir, cand[i], k);
            dir[k] = '\0';
            return RT_OK;
        }
        int k = snprintf(looked + used, sizeof looked - used, "%s%s", i ? ", " : "", cand[i]);
        if (k > 0 && (size_t)k < sizeof looked - used)
            used += (size_t)k;
    }
    return rt_error(RT_ERR_NOTFOUND,
                    "fashion-mnist not found (looked in %s); install the Debian package "
                    "dataset-fashion-mnist, or set RAGTAG_DATA_DIR to a directory holding "
                    "train-images-idx3-ubyte.gz and its siblings",
                    looked);
}

/* CIFAR-10's binary version unpacks to cifar-10-batches-bin/; accept both
 * that folder and its parent. */
static int open_cifar_dir(const char *dir, rt_dataset **train, rt_dataset **test)
{
    char base[2048];
    snprintf(base, sizeof base, "%s/cifar-10-batches-bin", dir);
    if (!is_dir(base))
        snprintf(base, sizeof base, "%s", dir);
    if (!is_dir(base))
        return rt_error(RT_ERR_NOTFOUND, "%s: no such directory", dir);
    char names[5][2100], tname[2100];
    const char *paths[5];
    for (int i = 0; i < 5; i++) {
        snprintf(names[i], sizeof names[i], "%s/data_batch_%d.bin", base, i + 1);
        if (!is_file(names[i]))
            return rt_error(RT_ERR_NOTFOUND, "%s: not found (CIFAR-10 needs data_batch_1..5.bin)",
                            names[i]);
        paths[i] = names[i];
    }
    RT_TRY(rt_dataset_read_cifar10(paths, 5, train));
    snprintf(tname, sizeof tname, "%s/test_batch.bin", base);
    if (is_file(tname)) {
        const char *tp = tname;
        int rc = rt_dataset_read_cifar10(&tp, 1, test);
        if (rc < 0) {
            rt_dataset_destroy(train);
            return rc;
        }
    }
    return RT_OK;
}

/* csv:TRAIN[,TEST][:shape=HxWxC] */
static int open_csv(const char *arg, rt_dataset **train, rt_dataset **test)
{
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", arg) >= (int)sizeof buf)
        return rt_error(RT_ERR_CONFIG, "data spec too long");
    int h = 28, w = 28, c = 1;
    char *opt = strstr(buf, ":shape=");
    if (opt) {
        int used = 0;
        const char *s = opt + strlen(":shape=");
        if (sscanf(s, "%dx%dx%d%n", &h, &w, &c, &used) != 3 || s[used] != '\0' || h <= 0 ||
            w <= 0 || c <= 0 || h > 65536 || w > 65536 || c > 65536)
            return rt_error(RT_ERR_CONFIG, "csv data spec: bad shape '%s' (expected HxWxC, e.g. 28x28x1)",
                            s);
        *opt = '\0';
    }
    char *comma = strchr(buf, ',');
    if (comma)
        *comma = '\0';
    if (!buf[0] || (comma && !comma[1]))
        return rt_error(RT_ERR_CONFIG, "csv data spec '%s': expected csv:TRAIN[,TEST][:shape=HxWxC]",
                        arg);
    RT_TRY(rt_dataset_read_csv(buf, c, h, w, train));
    if (comma) {
        int rc = rt_dataset_read_csv(comma + 1, c, h, w, test);
        if (rc < 0) {
            rt_dataset_destroy(train);
            return rc;
        }
    }
    return RT_OK;
}

static const char *after_prefix(const char *spec, const char *prefix)
{
    size_t n = strlen(prefix);
    return strncmp(spec, prefix, n) == 0 ? spec + n : NULL;
}

/* shards:DIR (shards.h): the train set, and the test set when packed. */
static int open_shards_dir(const char *dir, rt_dataset **train, rt_dataset **test)
{
    rt_shards *sh = NULL, *th = NULL;
    uint32_t *none = NULL;
    RT_TRY(rt_shards_open(dir, "train", &sh));
    if (!sh)
        return rt_error(RT_ERR_FORMAT, "%s/index: no 'set train' line: nothing to train on", dir);
    int rc = rt_shards_open(dir, "test", &th);
    long n = rt_shards_info(sh)->n, nt = th ? rt_shards_info(th)->n : 0;
    if (rc == RT_OK && n > INT32_MAX)
        rc = rt_error(RT_ERR_FORMAT, "%s: %ld training records (ragtag counts up to 2^31-1)",
                      dir, n);
    if (rc == RT_OK && !(*train = rt_dataset_new_shards(&sh, &none, n)))
        rc = RT_ERR_NOMEM;
    if (rc == RT_OK && th && !(*test = rt_dataset_new_shards(&th, &none, nt))) {
        rt_dataset_destroy(train);
        rc = RT_ERR_NOMEM;
    }
    rt_shards_close(&sh);
    rt_shards_close(&th);
    return rc;
}

/* Read the sets a spec names; `kind` gets the name used for the sets. */
static int open_sets(const char *spec, rt_dataset **train, rt_dataset **test, const char **kind)
{
    const char *arg;
    if (strcmp(spec, "fashion-mnist") == 0) {
        char dir[2048];
        *kind = "fashion-mnist";
        RT_TRY(find_fashion_mnist(dir, sizeof dir));
        return open_idx_dir(dir, train, test);
    }
    if ((arg = after_prefix(spec, "fashion-mnist:"))) {
        *kind = "fashion-mnist";
        return open_idx_dir(arg, train, test);
    }
    if ((arg = after_prefix(spec, "mnist:"))) {
        *kind = "mnist";
        return open_idx_dir(arg, train, test);
    }
    if ((arg = after_prefix(spec, "idx:"))) {
        *kind = "idx";
        return open_idx_dir(arg, train, test);
    }
    if ((arg = after_prefix(spec, "cifar10:"))) {
        *kind = "cifar10";
        return open_cifar_dir(arg, train, test);
    }
    if ((arg = after_prefix(spec, "csv:"))) {
        *kind = "csv";
        return open_csv(arg, train, test);
    }
    if ((arg = after_prefix(spec, "shards:"))) {
        *kind = "shards";
        return open_shards_dir(arg, train, test);
    }
    return rt_error(RT_ERR_CONFIG,
                    "unknown data spec '%s': expected fashion-mnist, mnist:DIR, idx:DIR, "
                    "cifar10:DIR, csv:TRAIN[,TEST][:shape=HxWxC] or shards:DIR",
                    spec);
}

/* ---- the files behind a spec (for shipping a data set) ------------------------ */

static int add_file(struct rt_data_files *f, const char *path, const char *name)
{
    if (f->n >= RT_DATA_MAX_FILES)
        return rt_error(RT_ERR_CONFIG, "too many data files");
    snprintf(f->path[f->n], sizeof f->path[0], "%s", path);
    if (!name) {
        const char *slash = strrchr(path, '/');
        name = slash ? slash + 1 : path;
    }
    snprintf(f->name[f->n], sizeof f->name[0], "%s", name);
    f->n++;
    return RT_OK;
}

static int idx_files(const char *dir, struct rt_data_files *f)
{
    static const char *const sets[4][2] = {{"train", "images-idx3"}, {"train", "labels-idx1"},
                                           {"t10k", "images-idx3"}, {"t10k", "labels-idx1"}};
    char p[4096];
    if (!is_dir(dir))
        return rt_error(RT_ERR_NOTFOUND, "%s: no such directory", dir);
    for (int i = 0; i < 4; i++) {
        if (find_idx_file(dir, sets[i][0], sets[i][1], p, sizeof p))
            RT_TRY(add_file(f, p, NULL));
        else if (i < 2)
            return rt_error(RT_ERR_NOTFOUND, "%s: not found", p);
    }
    return RT_OK;
}

int rt_data_files(const char *spec, struct rt_data_files *f)
{
    memset(f, 0, sizeof *f);
    const char *arg;
    char dir[2048];
    if (strcmp(spec, "fashion-mnist") == 0) {
        snprintf(f->kind, sizeof f->kind, "fashion-mnist");
        RT_TRY(find_fashion_mnist(dir, sizeof dir));
        return idx_files(dir, f);
    }
    static const char *const idx_kinds[] = {"fashion-mnist", "mnist", "idx"};
    for (int k = 0; k < 3; k++) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "%s:", idx_kinds[k]);
        if ((arg = after_prefix(spec, prefix))) {
            snprintf(f->kind, sizeof f->kind, "%s", idx_kinds[k]);
            return idx_files(arg, f);
        }
    }
    if ((arg = after_prefix(spec, "cifar10:"))) {
        snprintf(f->kind, sizeof f->kind, "cifar10");
        snprintf(dir, sizeof dir, "%s/cifar-10-batches-bin", arg);
        if (!is_dir(dir))
            snprintf(dir, sizeof dir, "%s", arg);
        char p[2100];
        for (int i = 1; i <= 5; i++) {
            snprintf(p, sizeof p, "%s/data_batch_%d.bin", dir, i);
            if (!is_file(p))
                return rt_error(RT_ERR_NOTFOUND, "%s: not found", p);
            RT_TRY(add_file(f, p, NULL));
        }
        snprintf(p, sizeof p, "%s/test_batch.bin", dir);
        if (is_file(p))
            RT_TRY(add_file(f, p, NULL));
        return RT_OK;
    }
    if ((arg = after_prefix(spec, "shards:"))) {
        char names[RT_DATA_MAX_FILES][64], p[4200];
        int n = 0;
        snprintf(f->kind, sizeof f->kind, "shards");
        RT_TRY(rt_shards_files(arg, names, RT_DATA_MAX_FILES, &n));
        for (int i = 0; i < n; i++) {
            snprintf(p, sizeof p, "%s/%s", arg, names[i]);
            RT_TRY(add_file(f, p, names[i]));
        }
        return RT_OK;
    }
    if ((arg = after_prefix(spec, "csv:"))) {
        char buf[4096];
        snprintf(f->kind, sizeof f->kind, "csv");
        if (snprintf(buf, sizeof buf, "%s", arg) >= (int)sizeof buf)
            return rt_error(RT_ERR_CONFIG, "data spec too long");
        char *opt = strstr(buf, ":shape=");
        if (opt) {
            snprintf(f->suffix, sizeof f->suffix, "%s", opt);
            *opt = '\0';
        }
        char *comma = strchr(buf, ',');
        if (comma)
            *comma = '\0';
        if (!is_file(buf))
            return rt_error(RT_ERR_NOTFOUND, "%s: not found", buf);
        RT_TRY(add_file(f, buf, "train.csv"));
        if (comma) {
            if (!is_file(comma + 1))
                return rt_error(RT_ERR_NOTFOUND, "%s: not found", comma + 1);
            RT_TRY(add_file(f, comma + 1, "test.csv"));
        }
        return RT_OK;
    }
    return rt_error(RT_ERR_CONFIG, "unknown data spec '%s'", spec);
}

int rt_data_files_spec(const struct rt_data_files *f, const char *dir, char *spec, size_t cap)
{
    int k;
    if (strcmp(f->kind, "csv") == 0)
        k = f->n > 1 ? snprintf(spec, cap, "csv:%s/train.csv,%s/test.csv%s", dir, dir, f->suffix)
                     : snprintf(spec, cap, "csv:%s/train.csv%s", dir, f->suffix);
    else
        k = snprintf(spec, cap, "%s:%s", f->kind, dir);
    if (k < 0 || (size_t)k >= cap)
        return rt_error(RT_ERR_CONFIG, "data directory %s is too long", dir);
    return RT_OK;
}

/* RAGTAG_DATA_FLOAT=1, a testing aid: keep the sets as floats scaled and
 * normalised in place, as ragtag did before sets were kept as bytes, so
 * that tests can check that both give the model the same bits (and a
 * benchmark can show what the bytes save). */
static int float_storage_if_asked(rt_dataset *train, rt_dataset *test)
{
    const char *e = getenv("RAGTAG_DATA_FLOAT");
    if (!e || strcmp(e, "1") != 0)
        return RT_OK;
    RT_TRY(rt_dataset_widen(train, train->n));
    return test ? rt_dataset_widen(test, test->n) : RT_OK;
}

/* --classes on the train and test sets; *classes becomes the list's length. */
static int keep_classes(const char *list, rt_dataset *train, rt_dataset *test, int *classes)
{
    if (train->shards)
        return rt_error(RT_ERR_CONFIG, "--classes %s: not available with shards:DIR data (its "
                                       "labels stay on disk; pack the classes wanted instead: "
                                       "ragtag pack --data SPEC --classes ...)", list);
    int *map = malloc((size_t)*classes * sizeof *map), kept = 0;
    if (!map)
        return rt_error(RT_ERR_NOMEM, "out of memory for --classes");
    int rc = rt_data_classes_parse(list, *classes, map, &kept);
    if (rc == RT_OK) {
        rt_dataset_keep_classes(train, map, kept);
        if (test)
            rt_dataset_keep_classes(test, map, kept);
        *classes = kept;
        if (train->n == 0)
            rc = rt_error(RT_ERR_CONFIG, "--classes %s: no training image has one of these "
                                         "labels", list);
    }
    free(map);
    return rc;
}

int rt_data_open(const char *spec, float val_frac, long limit, uint64_t seed, struct rt_data *out)
{
    return rt_data_open_classes(spec, NULL, val_frac, limit, seed, out);
}

int rt_data_open_classes(const char *spec, const char *list, float val_frac, long limit,
                         uint64_t seed, struct rt_data *out)
{
    RT_ASSERT(spec && out);
    memset(out, 0, sizeof *out);
    if (!(val_frac >= 0.0f && val_frac < 1.0f))
        return rt_error(RT_ERR_ARG, "validation fraction %g is not in [0, 1)", (double)val_frac);
    if (limit < 0)
        return rt_error(RT_ERR_ARG, "limit %ld is negative", limit);

    rt_dataset *train = NULL, *val = NULL, *test = NULL;
    const char *kind = "data";
    int rc = open_sets(spec, &train, &test, &kind);
    if (rc < 0)
        return rc;
    if (train->n == 0) {
        rc = rt_error(RT_ERR_FORMAT, "%s: the training set is empty", train->name);
        goto fail;
    }
    if ((rc = float_storage_if_asked(train, test)) < 0)
        goto fail;
    if (test && (test->c != train->c || test->h != train->h || test->w != train->w)) {
        rc = rt_error(RT_ERR_FORMAT, "%s: test images are %dx%dx%d but training images %dx%dx%d",
                      spec, test->h, test->w, test->c, train->h, train->w, train->c);
        goto fail;
    }
    /* One class count for all sets, from the full sets, so that --limit or
     * a split that misses the top label never shrinks the output layer. */
    int classes = train->classes;
    if (test && test->classes > classes)
        classes = test->classes;
    if (strcmp(kind, "fashion-mnist") == 0 && classes < 10)
        classes = 10;
    if (list && *list && (rc = keep_classes(list, train, test, &classes)) < 0)
        goto fail;

    keep_first(train, limit);
    if (val_frac > 0.0f && (rc = split(&train, val_frac, seed, &val)) < 0)
        goto fail;

    /* Statistics of the data the model trains on: neither validation nor
     * test images may leak into the normalisation. Shards carry those of
     * the whole packed training set, computed by pack with this same code
     * (reading a set larger than memory twice to compute them again would
     * cost an epoch of I/O): the same numbers as in memory without --val
     * and --limit. */
    float mean, std;
    if (train->shards) {
        mean = rt_shards_info(train->shards)->mean;
        std = rt_shards_info(train->shards)->std;
    } else {
        rt_dataset_stats(train, &mean, &std);
    }
    if (!(std > 1e-12f))
        std = 1.0f; /* constant images: subtract the mean, never divide by 0 */
    rt_dataset *sets[3] = {train, val, test};
    static const char *const role[3] = {"train", "val", "test"};
    for (int i = 0; i < 3; i++) {
        if (!sets[i])
            continue;
        rt_dataset_normalize(sets[i], mean, std);
        sets[i]->classes = classes;
        snprintf(sets[i]->name, sizeof sets[i]->name, "%s/%s", kind, role[i]);
    }
    out->train = train;
    out->val = val;
    out->test = test;
    out->mean = mean;
    out->std = std;
    return RT_OK;

fail:
    rt_dataset_destroy(&test);
    rt_dataset_destroy(&val);
    rt_dataset_destroy(&train);
    return rc;
}

void rt_data_close(struct rt_data *d)
{
    if (!d)
        return;
    rt_dataset_destroy(&d->train);
    rt_dataset_destroy(&d->val);
    rt_dataset_destroy(&d->test);
}
