/* caffe_blobs.c — a binary .caffemodel (a NetParameter whose layers carry
 * their blobs), unpacked by protoc-c's generated code, and its blobs
 * checked against the shapes a ragtag model expects. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "caffe-impl.h"
#include "status.h"

static int read_all(const char *path, uint8_t **out, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return rt_error(RT_ERR_IO, "%s: %s", path, strerror(errno));
    struct stat st;
    int rc = RT_OK;
    uint8_t *buf = NULL;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode))
        rc = rt_error(RT_ERR_IO, "%s: not a regular file", path);
    else if (!(buf = malloc((size_t)st.st_size + 1)))
        rc = rt_error(RT_ERR_NOMEM, "%s: out of memory for %lld bytes", path,
                      (long long)st.st_size);
    else if (fread(buf, 1, (size_t)st.st_size, f) != (size_t)st.st_size)
        rc = rt_error(RT_ERR_IO, "%s: read failed: %s", path,
                      ferror(f) ? strerror(errno) : "the file got shorter");
    fclose(f);
    if (rc < 0) {
        free(buf);
        return rc;
    }
    *out = buf;
    *len = (size_t)st.st_size;
    return RT_OK;
}

int caffe_weights_read(const char *path, Caffe__NetParameter **out)
{
    *out = NULL;
    uint8_t *buf = NULL;
    size_t len = 0;
    RT_TRY(read_all(path, &buf, &len));
    Caffe__NetParameter *w = caffe__net_parameter__unpack(NULL, len, buf);
    free(buf);
    if (!w)
        return rt_error(RT_ERR_FORMAT, "%s: not a Caffe model (the %zu bytes are not a valid "
                                       "binary NetParameter: truncated or corrupt)", path, len);
    if (w->n_layer == 0 && w->n_layers == 0) {
        caffe__net_parameter__free_unpacked(w, NULL);
        return rt_error(RT_ERR_FORMAT, "%s: a NetParameter without layers (is it a prototxt, or "
                                       "a solver state?)", path);
    }
    *out = w;
    return RT_OK;
}

Caffe__BlobProto **caffe_weights_blobs(const Caffe__NetParameter *w, const char *layer,
                                       size_t *n)
{
    for (size_t i = 0; i < w->n_layer; i++)
        if (w->layer[i]->name && !strcmp(w->layer[i]->name, layer)) {
            *n = w->layer[i]->n_blobs;
            return w->layer[i]->blobs;
        }
    for (size_t i = 0; i < w->n_layers; i++) /* V1 models */
        if (w->layers[i]->name && !strcmp(w->layers[i]->name, layer)) {
            *n = w->layers[i]->n_blobs;
            return w->layers[i]->blobs;
        }
    *n = CAFFE_NO_LAYER;
    return NULL;
}

static void dims_str(char *buf, size_t size, int nd, const int64_t *d)
{
    size_t len = (size_t)snprintf(buf, size, "(");
    for (int i = 0; i < nd && len < size; i++)
        len += (size_t)snprintf(buf + len, size - len, "%s%" PRId64, i ? ", " : "", d[i]);
    if (len < size)
        snprintf(buf + len, size - len, ")");
}

/* The blob's dims: `shape`, else the legacy num / channels / height / width. */
static int blob_dims(const Caffe__BlobProto *b, int64_t d[8])
{
    if (b->shape) {
        int nd = b->shape->n_dim > 8 ? 8 : (int)b->shape->n_dim;
        memcpy(d, b->shape->dim, (size_t)nd * sizeof *d);
        return b->shape->n_dim > 8 ? -1 : nd;
    }
    d[0] = b->num, d[1] = b->channels, d[2] = b->height, d[3] = b->width;
    return 4;
}

int caffe_blob_copy(const char *path, const char *layer, size_t bi, const Caffe__BlobProto *b,
                    int ndim, const int *dims, float *dst)
{
    int64_t d[8];
    int nd = blob_dims(b, d), skip = 0;
    while (nd - skip > ndim && d[skip] == 1)
        skip++;
    bool same = nd - skip == ndim;
    size_t count = 1;
    for (int i = 0; same && i < ndim; i++) {
        same = d[skip + i] == dims[i];
        count *= (size_t)dims[i];
    }
    if (!same) {
        int64_t want[4];
        for (int i = 0; i < ndim; i++)
            want[i] = dims[i];
        char got[96], exp[96];
        dims_str(got, sizeof got, nd < 0 ? 0 : nd, d);
        dims_str(exp, sizeof exp, ndim, want);
        return rt_error(RT_ERR_SHAPE, "%s: layer '%s' blob %zu has shape %s%s but the prototxt "
                        "makes it %s", path, layer, bi, nd < 0 ? "of more than 8 dims " : "", got,
                        exp);
    }
    if (b->n_data == count) {
        memcpy(dst, b->data, count * sizeof *dst);
    } else if (b->n_data == 0 && b->n_double_data == count) {
        for (size_t i = 0; i < count; i++)
            dst[i] = (float)b->double_data[i];
    } else {
        return rt_error(RT_ERR_FORMAT, "%s: layer '%s' blob %zu holds %zu values but its shape "
                        "has %zu (truncated or corrupt)", path, layer, bi,
                        b->n_data ? b->n_data : b->n_double_data, count);
    }
    return RT_OK;
}
