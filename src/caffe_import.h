/* caffe_import.h — Caffe models in and out (docs/caffe.md).
 *
 * Import: a net.prototxt (protobuf text format) becomes a ragtag model file,
 * and with a .caffemodel (binary) its weights become a ragtag checkpoint
 * (safetensors) with ragtag's tensor names. Export: a ragtag model's weights
 * written in the .caffemodel layout, for Caffe (or CaffeOnSpark) to load.
 *
 * Built with protobuf-c (configure: HAVE_PROTOBUF_C); without it every
 * function fails with RT_ERR_UNSUPPORTED saying so. */
#ifndef RT_CAFFE_IMPORT_H
#define RT_CAFFE_IMPORT_H

#include <stddef.h>

struct rt_caffe_import_result {
    char cfg[4096];     /* the model file written: OUTDIR/model.cfg */
    char weights[4096]; /* the checkpoint written, OUTDIR/weights.safetensors ("" if none) */
    int layers;         /* ragtag layers in the model */
};

/* Write OUTDIR/model.cfg from `prototxt` and, when `weights` (a .caffemodel)
 * is not NULL, OUTDIR/weights.safetensors (the names of every `ragtag
 * import`). The net's TRAIN phase is imported;
 * a Data layer's image shape comes from `input` ("WxHxC"), which may be
 * NULL for nets that state their input shape. Notes about what was skipped
 * or ignored go to stderr and into the model file's header. `res` may be
 * NULL. RT_ERR_CONFIG naming the layer (and parameter) ragtag cannot
 * express, RT_ERR_FORMAT naming FILE:LINE of a malformed prototxt or a
 * broken .caffemodel, RT_ERR_SHAPE for blobs that do not fit. */
int rt_caffe_import_shape(const char *prototxt, const char *weights, const char *outdir,
                          const char *input, struct rt_caffe_import_result *res);
/* The same for nets that state their input shape. */
int rt_caffe_import(const char *prototxt, const char *weights, const char *outdir);

/* Write the weights of `model_cfg` loaded from `weights` (a ragtag
 * checkpoint or --save file) to `out` as a .caffemodel. With `prototxt`
 * (which must translate to the same model) the Caffe layers take its names
 * and blob layouts; without, they are named after ragtag's layers (conv1,
 * dense5, bn3 + bn3_scale; a conv's own batch norm as convN_bn +
 * convN_scale), and a deploy net for them is written next to `out`
 * (NET.prototxt for NET.caffemodel; its path in `deploy`, "" with
 * `prototxt`; `deploy` may be NULL). The .caffemodel is written to a
 * temporary file and renamed. */
int rt_caffe_export_weights(const char *model_cfg, const char *weights, const char *prototxt,
                            const char *out, char *deploy, size_t deploy_size);

#endif
