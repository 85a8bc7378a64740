/* data.h — data sets in memory, readers for IDX / CIFAR-10 / CSV, and a
 * batch loader with a prefetch thread. */
#ifndef RT_DATA_H
#define RT_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct rt_shards;

/* A labelled image set in host memory, NCHW, kept as the file stores it:
 * pixels that are bytes (IDX, CIFAR-10, CSV of integers 0..255) stay one
 * byte each, and `lut` says what each byte value becomes in a batch, so
 * the full Fashion-MNIST takes 55 MB instead of 220. Values that are not
 * bytes (a CSV with fractions) are kept as floats. Exactly one of u8 and
 * f32 is set. Either way the loader hands the model the very floats a
 * float copy scaled to [0,1] and normalised in place would hold:
 * lut[v] is computed with the same float expressions.
 * A set packed in shards (shards:DIR, shards.h) keeps neither: its
 * records stay on disk and are read as batches need them (u8, f32 and y
 * NULL, `shards` set); sample i is record map[i] of the shards, or record
 * base + i without a map. */
typedef struct rt_dataset {
    int n, c, h, w;
    int classes;     /* number of label values (max label + 1, at least) */
    uint8_t *u8;     /* n * c * h * w bytes, or NULL */
    float *f32;      /* n * c * h * w floats (already scaled), or NULL */
    float lut[256];  /* byte v in a batch: v / 255, then (. - mean) / std */
    /* lut[v] is ((float)v / 255 - lut_sub) / lut_div, checked bit for bit
     * for all 256 values: batches compute it 8 bytes an instruction */
    bool lut_affine;
    float lut_sub, lut_div;
    int32_t *y;      /* n, or NULL for shards */
    struct rt_shards *shards; /* owned, unless the set is a slice */
    uint32_t *map;   /* n record numbers, or NULL */
    long base;
    char name[256];
} rt_dataset;

/* The sets a run uses; val and test may be NULL. */
struct rt_data {
    rt_dataset *train, *val, *test;
    float mean, std; /* the train set's statistics every set was normalised with */
};

/* Readers. A truncated or malformed file is RT_ERR_FORMAT naming the file and
 * the byte offset; a missing one RT_ERR_NOTFOUND/RT_ERR_IO naming the path. */
int rt_dataset_read_idx(const char *images_path, const char *labels_path, rt_dataset **out);
/* The sizes an IDX image file's header gives (images, rows, columns),
 * without reading its pixels. */
int rt_idx_image_dims(const char *path, uint32_t dims[3]);
int rt_dataset_read_cifar10(const char *const *paths, int npaths, rt_dataset **out);
/* CSV: label in the first column, then c*h*w pixel values 0..255; a header
 * line is skipped when its first field is not a number. */
int rt_dataset_read_csv(const char *path, int c, int h, int w, rt_dataset **out);

/* Open a data spec:
 *   fashion-mnist          Debian's dataset-fashion-mnist files (searched in
 *                          $RAGTAG_DATA_DIR, /usr/share/datasets/fashion-mnist, ...)
 *   mnist:DIR | idx:DIR    train-/t10k- images/labels idx(.gz) files in DIR
 *   cifar10:DIR            data_batch_1..5.bin and test_batch.bin
 *   csv:TRAIN[,TEST]       CSV files (28x28x1 unless `shape` says otherwise)
 *   shards:DIR             a set packed by `ragtag pack` (shards.h), read
 *                          from disk a batch at a time
 * The train set is then split: the last-shuffled `val_frac` of it (seeded)
 * becomes `val`. `limit` > 0 keeps only the first `limit` training images
 * (before the split), for quick runs and tests. Normalises every set with
 * the train set's mean and standard deviation. */
int rt_data_open(const char *spec, float val_frac, long limit, uint64_t seed, struct rt_data *out);
/* The same keeping only the images whose labels `classes` lists ("0-4",
 * "5,7,9"; NULL or "": all), in the train and test sets, before `limit`
 * and the split; labels are renumbered 0, 1, ... in the list's order, so
 * the model's [net] classes is the list's length. */
int rt_data_open_classes(const char *spec, const char *classes, float val_frac, long limit,
                         uint64_t seed, struct rt_data *out);
/* --classes: map[label] = its new number or -1, for labels 0..classes-1;
 * *kept: how many are kept. RT_ERR_CONFIG naming the item. */
int rt_data_classes_parse(const char *spec, int classes, int *map, int *kept);
/* Keep the samples whose map[label] >= 0, in order, relabelled (in place). */
void rt_dataset_keep_classes(rt_dataset *ds, const int *map, int kept);
void rt_data_close(struct rt_data *d);

/* The files a data spec reads, so that a coordinator can ship a data set to
 * workers (--serve-data): `kind` is the spec's prefix, name[i] the file
 * name the reader finds in a directory (train-images-idx3-ubyte.gz,
 * data_batch_1.bin, ...; "train.csv" / "test.csv" for csv), path[i] where
 * it is here, and `suffix` what the spec says after the files
 * (":shape=HxWxC"). rt_data_files_spec rebuilds a spec for the same files
 * gathered under their names in `dir`. */
#define RT_DATA_MAX_FILES 64 /* shards: the index and 63 shards */
struct rt_data_files {
    char kind[32];
    int n;
    char name[RT_DATA_MAX_FILES][64];
    char path[RT_DATA_MAX_FILES][4096];
    char suffix[64];
};
int rt_data_files(const char *spec, struct rt_data_files *out);
int rt_data_files_spec(const struct rt_data_files *f, const char *dir, char *spec, size_t cap);

/* A set of n images of c x h x w: rt_dataset_new holds floats,
 * rt_dataset_new_u8 bytes (with lut[v] = v / 255). */
/* What rt_data_open(spec, val_frac, limit) will hold, without reading the
 * pixels (IDX headers, CIFAR-10 file sizes; for CSV, a bound from the file
 * sizes): *peak while the files are read and split, *kept once open. */
int rt_data_need(const char *spec, float val_frac, long limit, uint64_t *peak, uint64_t *kept);

rt_dataset *rt_dataset_new(int n, int c, int h, int w);
rt_dataset *rt_dataset_new_u8(int n, int c, int h, int w);
void rt_dataset_destroy(rt_dataset **ds);
/* x = (x - mean) / std, one mean/std over all pixels (for bytes: over the
 * 256 entries of lut). */
void rt_dataset_normalize(rt_dataset *ds, float mean, float std);
/* dst's pixels become floats as src's do (the table, and its form). */
void rt_dataset_copy_lut(rt_dataset *dst, const rt_dataset *src);
void rt_dataset_stats(const rt_dataset *ds, float *mean, float *std);
/* Values per sample (c*h*w), bytes per stored value (1 or 4), and the
 * bytes the pixels and labels take in memory. */
size_t rt_dataset_sample_values(const rt_dataset *ds);
size_t rt_dataset_value_size(const rt_dataset *ds);
size_t rt_dataset_bytes(const rt_dataset *ds);
/* The floats the model sees: value i of the set (i < n*c*h*w; not for
 * shards), samples first..first+n-1 into dst, and samples idx[0..n-1]
 * into dst (batch order), with their labels into y when y is not NULL.
 * Reading shards can fail (a corrupt record: its shard and offset). */
float rt_dataset_value(const rt_dataset *ds, size_t i);
int rt_dataset_rows(const rt_dataset *ds, long first, long n, float *dst, int32_t *y);
int rt_dataset_gather(const rt_dataset *ds, const uint32_t *idx, long n, float *dst, int32_t *y);
/* A set of the records of shards `sh` (taking it over): sample i is record
 * map[i] (map taken over too, n entries), or record i without a map. */
rt_dataset *rt_dataset_new_shards(struct rt_shards **sh, uint32_t **map, long n);
/* A view of samples lo..hi-1 of ds: it shares ds's arrays (and shards)
 * and is never destroyed. */
void rt_dataset_slice(const rt_dataset *ds, long lo, long hi, rt_dataset *part);
/* Bytes to floats (lut[v]), when a reader meets a value that is not a
 * byte; room (>= n) samples are allocated. */
int rt_dataset_widen(rt_dataset *ds, long room);

/* The seeded permutation of epoch `epoch`: the same on every machine. */
void rt_permutation(uint32_t *perm, long n, uint64_t seed, long epoch);

/* Batches of a data set, gathered by a prefetch thread into pinned staging
 * buffers so the training step never waits for the copy. */
typedef struct rt_loader rt_loader;
rt_loader *rt_loader_new(const rt_dataset *ds, int batch, bool shuffle, uint64_t seed);
void rt_loader_destroy(rt_loader **l);
/* Start epoch `epoch` (0-based) at batch `first_batch` (for resume). */
int rt_loader_start(rt_loader *l, long epoch, long first_batch);
/* Next batch: 1 and fills x (n*c*h*w floats), y, n; 0 at the end of the
 * epoch (the last batch may be short); negative when the batch could not
 * be read (shards: the shard and offset of a bad record). Pointers stay
 * valid until the next call. */
int rt_loader_next(rt_loader *l, const float **x, const int32_t **y, int *n);
long rt_loader_batches(const rt_loader *l); /* batches per epoch */
/* A worker that trains on part of each batch reads only that part, from
 * shards the records its share needs: after rt_loader_set_partial, the
 * thread gathers the rows the last step used, and rt_loader_rows(a, b)
 * says which rows of the batch rt_loader_next gave last the step uses (it
 * reads them now if the part moved: a new plan). */
void rt_loader_set_partial(rt_loader *l);
int rt_loader_rows(rt_loader *l, long a, long b);
/* The data-set indices of the samples of the batch rt_loader_next gave
 * last, in batch order (distributed runs count them: every sample once). */
const uint32_t *rt_loader_indices(const rt_loader *l);

#endif
