/* caffe-impl.h — private to the Caffe import/export (src/caffe_*.c).
 *
 * A Caffe net (the prototxt, parsed by textproto.c into protoc-c's structs)
 * is translated into a ragtag model file, one Caffe layer at a time
 * (caffe_layers.c), and into a list of maps: which ragtag layer's tensors
 * come from which Caffe layer's blobs. Import fills the tensors from a
 * .caffemodel through the maps; export writes them back through the same
 * maps (or maps made from the model's own tensor names). */
#ifndef RT_CAFFE_IMPL_H
#define RT_CAFFE_IMPL_H

#include <stdbool.h>
#include <stddef.h>

#include "caffe.pb-c.h"
#include "model.h"

static inline size_t caffe_shape_count(struct rt_shape s)
{
    return (size_t)s.c * (size_t)s.h * (size_t)s.w;
}

/* What a ragtag layer with tensors is, in Caffe's terms. */
enum caffe_kind {
    CAFFE_CONV,  /* Convolution: blobs weight (out, in, kh, kw), bias (out) */
    CAFFE_DENSE, /* InnerProduct: weight (out, in), or (in, out) with transpose; bias */
    CAFFE_BN     /* BatchNorm: mean, var, scale factor (1); Scale: gamma, beta */
};

struct caffe_map {
    enum caffe_kind kind;
    char tensor[40];     /* ragtag tensor name prefix: "conv1.", "bn3.", "conv2.bn." */
    char layer[128];     /* the Caffe layer holding the blobs */
    char scale[128];     /* CAFFE_BN: its Scale layer ("" when none: gamma 1, beta 0) */
    bool bias;           /* CONV/DENSE: a bias blob; BN: the Scale layer has beta */
    bool transpose;      /* DENSE: InnerProduct's transpose: true */
};

/* A net being translated. */
struct caffe_net {
    const char *file;            /* the prototxt, for messages */
    Caffe__NetParameter *net;
    char *cfg;                   /* the layers' sections written so far */
    size_t len, cap;
    bool nomem;
    struct caffe_map *maps;
    int nmaps, capmaps;
    /* Caffe blob name -> ragtag layer (0: the input, -1: labels, -2: a
     * value that ragtag does not keep); the last entry of a name wins */
    struct {
        const char *blob;
        int layer;
    } *blobs;
    int nblobs, capblobs;
    struct rt_shape in;          /* the net's input */
    int index;                   /* ragtag layers written so far */
    struct rt_shape shape;       /* the last layer's output */
    const char *top;             /* the Caffe blob holding it */
    bool foldable;               /* the last section takes an `activation` key */
    int bn_map;                  /* map of a BatchNorm just written (a Scale may follow), or -1 */
    bool ended;                  /* the softmax is written */
    int classes;
    unsigned noted;              /* notes given once: bits of caffe_layers.c */
    char notes[2048];            /* what was skipped or ignored, one "# " line each */
    size_t notes_len;
};

/* caffe_net.c */
/* A float as the shortest decimal that reads back as it (0.999f: 0.999). */
double caffe_decimal(float f);
/* A whole text file, NUL-terminated; the caller frees *out. */
int caffe_read_text(const char *path, char **out, size_t *len);
/* Read and parse a prototxt; RT_ERR_IO / RT_ERR_FORMAT naming FILE:LINE. */
int caffe_prototxt_read(const char *path, Caffe__NetParameter **out);
/* Translate n->net (the TRAIN phase) into n->cfg and n->maps. `input`
 * ("WxHxC" or NULL) gives the shape of a Data layer's images. */
int caffe_net_translate(struct caffe_net *n, const char *input);
/* The whole model file: header, [net], the layers. Caller frees. */
char *caffe_net_model_text(const struct caffe_net *n, const char *source);
void caffe_net_free(struct caffe_net *n);
/* Append to the model text / the notes; failures show as n->nomem. */
void caffe_cfg_printf(struct caffe_net *n, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void caffe_note(struct caffe_net *n, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int caffe_blob_set(struct caffe_net *n, const char *blob, int layer);
int caffe_blob_layer(const struct caffe_net *n, const char *blob); /* -3 when unknown */
struct caffe_map *caffe_map_add(struct caffe_net *n, enum caffe_kind kind, const char *layer);
/* "FILE: layer 'NAME' (TYPE): " + message, RT_ERR_CONFIG. */
int caffe_layer_error(const struct caffe_net *n, const Caffe__LayerParameter *l, const char *fmt,
                      ...) __attribute__((format(printf, 3, 4)));

/* caffe_input.c: the input shape from Input / MemoryData / DummyData /
 * Data-like layers or the net's legacy input fields. Returns the number of
 * leading layers that were input layers. */
int caffe_input_shape(struct caffe_net *n, const Caffe__LayerParameter *const *layers, int count,
                      const char *input);
bool caffe_is_data_layer(const char *type);

/* caffe_layers.c: one Caffe layer into the model text. */
int caffe_layer_translate(struct caffe_net *n, const Caffe__LayerParameter *l);

/* caffe_blobs.c: the binary .caffemodel */
int caffe_weights_read(const char *path, Caffe__NetParameter **out);
/* The blobs of the layer named `layer` (new or V1 layers); *n is
 * CAFFE_NO_LAYER when there is no such layer. */
#define CAFFE_NO_LAYER ((size_t)-1)
Caffe__BlobProto **caffe_weights_blobs(const Caffe__NetParameter *w, const char *layer,
                                       size_t *n);
/* Copy blob `bi` of `layer` into dst after checking it has `ndim` dims
 * equal to dims (leading 1s of a legacy 4-D shape ignored). */
int caffe_blob_copy(const char *path, const char *layer, size_t bi, const Caffe__BlobProto *b,
                    int ndim, const int *dims, float *dst);

/* caffe_deploy.c: a deploy prototxt for the model file `cfg_path`
 * (loaded as `m`), its layers named as ragtag names them. */
int caffe_deploy_write(const char *cfg_path, const rt_model *m, const char *net_name,
                       const char *path);

/* caffe_model.c: a ragtag model built on the cpu with its tensors on the
 * host, for import (fill, then save) and export (load, then read). */
struct caffe_model {
    rt_dev *dev;
    rt_model *m;
    float *params, *state;
    struct rt_tensor_info *infos;
    int nt;
};
int caffe_model_open(const char *cfg_path, struct caffe_model *hm);
/* The tensor `prefix``suffix` ("conv1." "weight") on the host, or NULL. */
float *caffe_model_tensor(struct caffe_model *hm, const char *prefix, const char *suffix,
                          const struct rt_tensor_info **info);
int caffe_model_upload(struct caffe_model *hm);
int caffe_model_download(struct caffe_model *hm);
void caffe_model_close(struct caffe_model *hm);

#endif
