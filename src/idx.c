/* idx.c — IDX image and label files (LeCun's MNIST layout, also used by
 * Fashion-MNIST), raw or gzip'ed.
 *
 * Both kinds are read through zlib's gz* functions, which read a plain file
 * transparently, so there is one code path. Byte offsets in messages count
 * the uncompressed data, the only offsets that mean anything in an IDX file.
 *
 * Layout (big-endian): magic 00 00 08 NDIM, NDIM uint32 sizes, then the
 * unsigned bytes. Images: 0x00000803, n rows cols. Labels: 0x00000801, n. */
#include "data.h"
#include "status.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define IDX_UBYTE 0x08
#define STAGE_BYTES (1u << 20)
#define MAX_SIDE 65535u

/* An open IDX file and how far into its (uncompressed) data we are. */
struct idx_file {
    gzFile f;
    const char *path;
    unsigned long long off;
};

static int idx_open(struct idx_file *s, const char *path)
{
    s->path = path;
    s->off = 0;
    errno = 0;
    s->f = gzopen(path, "rb");
    if (!s->f) {
        if (errno == ENOENT)
            return rt_error(RT_ERR_NOTFOUND, "%s: no such file", path);
        if (errno)
            return rt_error(RT_ERR_IO, "%s: %s", path, strerror(errno));
        return rt_error(RT_ERR_NOMEM, "%s: out of memory opening it", path);
    }
    /* Big reads: zlib's default 8 KiB buffer costs ~10% on 47 MB. */
    gzbuffer(s->f, 256 * 1024);
    return RT_OK;
}

static void idx_close(struct idx_file *s)
{
    if (s->f)
        gzclose_r(s->f);
    s->f = NULL;
}

/* What a read is for, to say where a file went wrong: "the header", or
 * item k (from the offset) of `count` items of `size` bytes from `start`. */
struct idx_part {
    const char *name;
    unsigned long long start;
    size_t size;
    uint32_t count;
};

static const struct idx_part header_part = {"the header", 0, 0, 0};

static void describe(const struct idx_file *s, const struct idx_part *p, char *buf, size_t bufsz)
{
    if (p->size == 0)
        snprintf(buf, bufsz, "%s", p->name);
    else
        snprintf(buf, bufsz, "%s %llu of %u", p->name, (s->off - p->start) / p->size + 1,
                 p->count);
}

/* An error after a short or failed gzread: the reason is in gzerror. */
static int idx_read_error(struct idx_file *s, const struct idx_part *part)
{
    char what[96];
    describe(s, part, what, sizeof what);
    int zerr = Z_OK;
    const char *msg = gzerror(s->f, &zerr);
    if (zerr == Z_ERRNO)
        return rt_error(RT_ERR_IO, "%s: read error at offset %llu: %s", s->path, s->off,
                        strerror(errno));
    if (zerr == Z_OK || zerr == Z_BUF_ERROR) /* plain end of file, or of gzip input */
        return rt_error(RT_ERR_FORMAT, "%s: truncated at offset %llu, in %s", s->path, s->off,
                        what);
    if (zerr == Z_MEM_ERROR)
        return rt_error(RT_ERR_NOMEM, "%s: out of memory decompressing", s->path);
    return rt_error(RT_ERR_FORMAT, "%s: corrupt gzip data near offset %llu, in %s: %s", s->path,
                    s->off, what, msg ? msg : "?");
}

/* Read exactly n bytes, or fail naming the offset where the data ran out. */
static int idx_read(struct idx_file *s, void *buf, size_t n, const struct idx_part *part)
{
    unsigned char *p = buf;
    while (n > 0) {
        unsigned chunk = n > (1u << 30) ? (1u << 30) : (unsigned)n;
        int got = gzread(s->f, p, chunk);
        if (got > 0) {
            s->off += (unsigned)got;
            p += got;
            n -= (size_t)got;
        }
        if (got < (int)chunk)
            return idx_read_error(s, part);
    }
    return RT_OK;
}

/* The file must end where its header says: trailing bytes mean the header
 * and the data disagree. Reading on also makes zlib check the gzip trailer
 * (CRC and length), which catches a stream cut inside the trailer. */
static int idx_expect_end(struct idx_file *s)
{
    unsigned char extra;
    int got = gzread(s->f, &extra, 1);
    if (got > 0)
        return rt_error(RT_ERR_FORMAT, "%s: unexpected data after offset %llu, where the header "
                        "says the file ends", s->path, s->off);
    int zerr = Z_OK;
    gzerror(s->f, &zerr);
    static const struct idx_part trailer = {"the gzip trailer", 0, 0, 0};
    if (got < 0 || zerr != Z_OK)
        return idx_read_error(s, &trailer);
    return RT_OK;
}

static uint32_t be32(const unsigned char *b)
{
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

/* Read the magic and the ndim sizes, checking that the file holds unsigned
 * bytes in `ndim` dimensions. */
static int idx_header(struct idx_file *s, int ndim, uint32_t *dims, const char *kind)
{
    unsigned char b[4 * 4];
    RT_TRY(idx_read(s, b, 4, &header_part));
    uint32_t magic = be32(b);
    uint32_t want = (uint32_t)IDX_UBYTE << 8 | (uint32_t)ndim;
    if (magic != want)
        return rt_error(RT_ERR_FORMAT,
                        "%s: bad magic number 0x%08x at offset 0 (an IDX %s file of unsigned "
                        "bytes starts with 0x%08x)",
                        s->path, magic, kind, want);
    RT_TRY(idx_read(s, b, 4 * (size_t)ndim, &header_part));
    for (int i = 0; i < ndim; i++)
        dims[i] = be32(b + 4 * i);
    return RT_OK;
}

int rt_idx_image_dims(const char *path, uint32_t dims[3])
{
    struct idx_file im = {0};
    int rc = idx_open(&im, path);
    if (rc == RT_OK)
        rc = idx_header(&im, 3, dims, "image");
    idx_close(&im);
    return rc;
}

int rt_dataset_read_idx(const char *images_path, const char *labels_path, rt_dataset **out)
{
    RT_ASSERT(images_path && labels_path && out);
    *out = NULL;
    struct idx_file im = {0}, lb = {0};
    rt_dataset *ds = NULL;
    unsigned char *stage = NULL;
    uint32_t idims[3], ldims[1];
    int rc;

    if ((rc = idx_open(&im, images_path)) < 0)
        goto out;
    if ((rc = idx_open(&lb, labels_path)) < 0)
        goto out;
    /* Both headers before any bulk read, so a mismatched pair fails fast. */
    if ((rc = idx_header(&im, 3, idims, "image")) < 0)
        goto out;
    if ((rc = idx_header(&lb, 1, ldims, "label")) < 0)
        goto out;
    uint32_t n = idims[0], rows = idims[1], cols = idims[2];
    if (n == 0 || n > INT_MAX || rows == 0 || cols == 0 || rows > MAX_SIDE || cols > MAX_SIDE) {
        rc = rt_error(RT_ERR_FORMAT, "%s: implausible sizes %u x %u x %u in the header (offset 4)",
                      images_path, n, rows, cols);
        goto out;
    }
    if (ldims[0] != n) {
        rc = rt_error(RT_ERR_FORMAT, "%s holds %u labels but %s holds %u images", labels_path,
                      ldims[0], images_path, n);
        goto out;
    }

    ds = rt_dataset_new_u8((int)n, 1, (int)rows, (int)cols);
    stage = malloc(STAGE_BYTES);
    if (!ds || !stage) {
        rc = ds ? rt_error(RT_ERR_NOMEM, "out of memory reading %s", images_path) : RT_ERR_NOMEM;
        goto out;
    }

    /* Pixels: kept as the bytes they are, read straight into the set. */
    size_t image_bytes = (size_t)rows * cols;
    size_t total = (size_t)n * image_bytes;
    const struct idx_part images = {"image", im.off, image_bytes, n};
    for (size_t done = 0; done < total;) {
        size_t chunk = total - done < STAGE_BYTES ? total - done : STAGE_BYTES;
        if ((rc = idx_read(&im, ds->u8 + done, chunk, &images)) < 0)
            goto out;
        done += chunk;
    }
    if ((rc = idx_expect_end(&im)) < 0)
        goto out;

    /* Labels: unsigned bytes, so always < 256; the class count is max + 1. */
    int maxlabel = 0;
    const struct idx_part labels = {"label", lb.off, 1, n};
    for (uint32_t done = 0; done < n;) {
        uint32_t chunk = n - done < STAGE_BYTES ? n - done : STAGE_BYTES;
        if ((rc = idx_read(&lb, stage, chunk, &labels)) < 0)
            goto out;
        for (uint32_t i = 0; i < chunk; i++) {
            ds->y[done + i] = stage[i];
            if (stage[i] > maxlabel)
                maxlabel = stage[i];
        }
        done += chunk;
    }
    if ((rc = idx_expect_end(&lb)) < 0)
        goto out;
    ds->classes = maxlabel + 1;
    snprintf(ds->name, sizeof ds->name, "%s", images_path);
    *out = ds;
    ds = NULL;
    rc = RT_OK;

out:
    free(stage);
    rt_dataset_destroy(&ds);
    idx_close(&lb);
    idx_close(&im);
    return rc;
}
