/* convert.c — `ragtag import` and `ragtag export`: models in other
 * frameworks' formats, chosen by the file's extension (docs/onnx.md,
 * docs/caffe.md): ONNX (.onnx in and out) and Caffe (.prototxt in,
 * .caffemodel out). The converters live in the core (src/onnx*.c,
 * src/caffe*.c); this file reads the command line and picks one. */
#include "config.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "caffe_import.h"
#include "cli.h"
#include "onnx.h"
#include "status.h"

static const char import_help[] =
    "usage: ragtag import MODEL.onnx -o DIR\n"
    "       ragtag import NET.prototxt [--weights NET.caffemodel] [--input WxHxC] -o DIR\n\n"
    "ONNX: writes DIR/model.cfg (a ragtag model file) and DIR/weights.safetensors\n"
    "(its weights, a checkpoint for `ragtag eval --weights` and `train --init`).\n"
    "Operators: Conv, Gemm, MatMul (+ Add), Relu, LeakyRelu, Sigmoid, Tanh,\n"
    "MaxPool, AveragePool, GlobalAveragePool, BatchNormalization, Flatten,\n"
    "Reshape to 2-D, Dropout, Add (residual), Softmax (and Identity, Constant,\n"
    "a zero Pad). Another operator, or an attribute ragtag cannot express, is an\n"
    "error naming the node. See docs/onnx.md.\n"
    "Caffe: writes DIR/NET.cfg, a ragtag model file made from the net's TRAIN\n"
    "phase, and with --weights DIR/NET.safetensors, the Caffe weights under\n"
    "ragtag's tensor names. --input gives the image shape of a Data layer (it\n"
    "lives in the LMDB). See docs/caffe.md.\n";

static const char export_help[] =
    "usage: ragtag export MODEL.cfg --weights FILE.safetensors -o MODEL.onnx\n"
    "       ragtag export MODEL.cfg --weights FILE.safetensors -o NET.caffemodel\n"
    "                    [--prototxt NET.prototxt]\n\n"
    "ONNX: the model and its weights (a checkpoint or --save file) as one graph\n"
    "(opset 13): input \"input\" [N, C, H, W]; outputs \"logits\" [N, classes] and\n"
    "\"probabilities\" (their softmax). Every ragtag layer is exported; batch norm\n"
    "uses its running statistics and dropout is the identity, as in `ragtag eval`.\n"
    "See docs/onnx.md.\n"
    "Caffe: the weights in Caffe's binary .caffemodel layout. With --prototxt (a\n"
    "Caffe net that imports as MODEL.cfg) the layers take its names; without,\n"
    "ragtag's (conv1, dense5, bn3 + bn3_scale), and NET.prototxt, a Caffe deploy\n"
    "net for them, is written too. See docs/caffe.md.\n";

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

struct convert_args {
    const char *file, *weights, *out, *input, *prototxt;
};

/* FILE --weights W -o OUT [--input S] [--prototxt P]; --flag=value too. */
static int parse(const char *cmd, int argc, char **argv, struct convert_args *a)
{
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *eq = strchr(arg, '=');
        size_t klen = eq && !strncmp(arg, "--", 2) ? (size_t)(eq - arg) : strlen(arg);
        const char **dst = !strncmp(arg, "-o", klen) && klen == 2      ? &a->out
                           : !strncmp(arg, "--output", klen) && klen == 8   ? &a->out
                           : !strncmp(arg, "--weights", klen) && klen == 9  ? &a->weights
                           : !strncmp(arg, "--input", klen) && klen == 7    ? &a->input
                           : !strncmp(arg, "--prototxt", klen) && klen == 10 ? &a->prototxt
                                                                           : NULL;
        if (!dst && arg[0] == '-') {
            fprintf(stderr, "ragtag %s: unknown flag '%s' (see 'ragtag %s --help')\n", cmd, arg,
                    cmd);
            return -1;
        }
        if (!dst) {
            if (a->file) {
                fprintf(stderr, "ragtag %s: more than one model file ('%s')\n", cmd, arg);
                return -1;
            }
            a->file = arg;
        } else if (eq && klen < strlen(arg)) {
            *dst = eq + 1;
        } else if (i + 1 < argc) {
            *dst = argv[++i];
        } else {
            fprintf(stderr, "ragtag %s: flag '%s' needs a value\n", cmd, arg);
            return -1;
        }
    }
    return 0;
}

/* ---- one function per format and direction --------------------------------- */

static int import_onnx(const struct convert_args *a)
{
    if (a->weights || a->input || a->prototxt) {
        fprintf(stderr, "ragtag import: %s: an ONNX file holds its weights and input shape "
                        "(--weights, --input and --prototxt are for Caffe nets)\n", a->file);
        return 2;
    }
    int rc = rt_onnx_import(a->file, a->out);
    if (rc < 0)
        return rc;
    printf("wrote %s/%s and %s/%s\n", a->out, RT_ONNX_IMPORT_CFG, a->out,
           RT_ONNX_IMPORT_WEIGHTS);
    return 0;
}

static int import_caffe(const struct convert_args *a)
{
    struct rt_caffe_import_result r;
    int rc = rt_caffe_import_shape(a->file, a->weights, a->out, a->input, &r);
    if (rc < 0)
        return rc;
    printf("wrote %s (%d layers)\n", r.cfg, r.layers);
    if (r.weights[0])
        printf("wrote %s\n", r.weights);
    return 0;
}

static int export_onnx(const struct convert_args *a)
{
    if (a->input || a->prototxt) {
        fprintf(stderr, "ragtag export: --input and --prototxt are for Caffe (.caffemodel)\n");
        return 2;
    }
    int rc = rt_onnx_export(a->file, a->weights, a->out);
    if (rc < 0)
        return rc;
    printf("wrote %s\n", a->out);
    return 0;
}

static int export_caffe(const struct convert_args *a)
{
    if (a->input) {
        fprintf(stderr, "ragtag export: --input is for import\n");
        return 2;
    }
    char deploy[4200];
    int rc = rt_caffe_export_weights(a->file, a->weights, a->prototxt, a->out, deploy,
                                     sizeof deploy);
    if (rc < 0)
        return rc;
    printf("wrote %s\n", a->out);
    if (deploy[0])
        printf("wrote %s (the Caffe net for it)\n", deploy);
    return 0;
}

struct format {
    const char *ext;
    int (*convert)(const struct convert_args *a);
};

/* The format of `path` in `table` (by extension) and run it: 0, 1 (failed,
 * said) or 2 (usage, said). */
static int dispatch(const char *cmd, const struct format *table, size_t n, const char *path,
                    const struct convert_args *a)
{
    for (size_t i = 0; i < n; i++) {
        if (!ends_with(path, table[i].ext))
            continue;
        int rc = table[i].convert(a);
        if (rc >= 0)
            return rc;
        const char *d = rt_error_detail();
        fprintf(stderr, "ragtag %s: %s\n", cmd, d[0] ? d : rt_strerror(rc));
        return 1;
    }
    fprintf(stderr, "ragtag %s: '%s': unknown kind of model (accepted:", cmd, path);
    for (size_t i = 0; i < n; i++)
        fprintf(stderr, " %s", table[i].ext);
    fprintf(stderr, ")\n");
    return 2;
}

int rt_cli_import(int argc, char **argv)
{
    static const struct format formats[] = {{".onnx", import_onnx},
                                            {".prototxt", import_caffe}};
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        fputs(import_help, stdout);
        return 0;
    }
    struct convert_args a = {0};
    if (parse("import", argc, argv, &a) < 0)
        return 2;
    if (!a.file || !a.out) {
        fprintf(stderr, "ragtag import: needs a model file and -o DIR (see 'ragtag import "
                        "--help')\n");
        return 2;
    }
    return dispatch("import", formats, sizeof formats / sizeof formats[0], a.file, &a);
}

int rt_cli_export(int argc, char **argv)
{
    static const struct format formats[] = {{".onnx", export_onnx},
                                            {".caffemodel", export_caffe}};
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        fputs(export_help, stdout);
        return 0;
    }
    struct convert_args a = {0};
    if (parse("export", argc, argv, &a) < 0)
        return 2;
    if (!a.file || !a.out || !a.weights) {
        fprintf(stderr, "ragtag export: needs MODEL.cfg, --weights FILE and -o OUT (see "
                        "'ragtag export --help')\n");
        return 2;
    }
    return dispatch("export", formats, sizeof formats / sizeof formats[0], a.out, &a);
}
