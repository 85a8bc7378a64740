/* convert.c — `ragtag export` (a model and its weights as ONNX) and
 * `ragtag import` (an ONNX or Caffe model as a ragtag model file and
 * weights), docs/onnx.md. The converters live in the core (src/onnx*.c);
 * this file reads the command line and picks one by the file's extension. */
#include "config.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "onnx.h"
#include "status.h"

static const char export_help[] =
    "usage: ragtag export MODEL.cfg --weights FILE.safetensors -o MODEL.onnx\n\n"
    "Writes the model and its weights (a checkpoint or --save file) as one ONNX\n"
    "graph (opset 13): input \"input\" [N, C, H, W]; outputs \"logits\" [N, classes]\n"
    "and \"probabilities\" (their softmax). Every ragtag layer is exported; batch\n"
    "norm uses its running statistics and dropout is the identity, as in\n"
    "`ragtag eval`. See docs/onnx.md.\n";

static const char import_help[] =
    "usage: ragtag import MODEL.onnx -o DIR\n"
    "       ragtag import NET.prototxt [--weights NET.caffemodel] -o DIR\n\n"
    "Writes DIR/model.cfg (a ragtag model file) and DIR/weights.safetensors (its\n"
    "weights, a checkpoint for `ragtag eval --weights` and `train --init`).\n"
    "ONNX operators: Conv, Gemm, MatMul (+ Add), Relu, LeakyRelu, Sigmoid, Tanh,\n"
    "MaxPool, AveragePool, GlobalAveragePool, BatchNormalization, Flatten,\n"
    "Reshape to 2-D, Dropout, Add (residual), Softmax (plus Identity and\n"
    "Constant). Another operator, or an attribute ragtag cannot express, is an\n"
    "error naming the node. See docs/onnx.md.\n";

static bool is_help(const char *a) { return !strcmp(a, "--help") || !strcmp(a, "-h"); }

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* FILE --weights W -o OUT, in any order; 2 (usage) on anything else. */
static int parse(const char *cmd, int argc, char **argv, const char **file,
                 const char **weights, const char **out)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool w = !strcmp(a, "--weights"), o = !strcmp(a, "-o") || !strcmp(a, "--output");
        if (w || o) {
            if (i + 1 >= argc) {
                fprintf(stderr, "ragtag %s: %s needs a value (see 'ragtag %s --help')\n", cmd,
                        a, cmd);
                return 2;
            }
            *(w ? weights : out) = argv[++i];
        } else if (a[0] == '-') {
            fprintf(stderr, "ragtag %s: unknown flag '%s' (see 'ragtag %s --help')\n", cmd, a,
                    cmd);
            return 2;
        } else if (*file) {
            fprintf(stderr, "ragtag %s: more than one input file ('%s', '%s')\n", cmd, *file, a);
            return 2;
        } else {
            *file = a;
        }
    }
    return 0;
}

static int done(const char *cmd, int rc)
{
    if (rc >= 0)
        return 0;
    const char *d = rt_error_detail();
    fprintf(stderr, "ragtag %s: %s\n", cmd, d[0] ? d : rt_strerror(rc));
    return 1;
}

int rt_cli_export(int argc, char **argv)
{
    if (argc >= 2 && is_help(argv[1])) {
        fputs(export_help, stdout);
        return 0;
    }
    const char *model = NULL, *weights = NULL, *out = NULL;
    if (parse("export", argc, argv, &model, &weights, &out))
        return 2;
    if (!model || !weights || !out) {
        fprintf(stderr, "ragtag export: needs %s (see 'ragtag export --help')\n",
                !model ? "a model file" : !weights ? "--weights FILE" : "-o FILE.onnx");
        return 2;
    }
    int rc = rt_onnx_export(model, weights, out);
    if (rc >= 0)
        printf("wrote %s\n", out);
    return done("export", rc);
}

int rt_cli_import(int argc, char **argv)
{
    if (argc >= 2 && is_help(argv[1])) {
        fputs(import_help, stdout);
        return 0;
    }
    const char *file = NULL, *weights = NULL, *dir = NULL;
    if (parse("import", argc, argv, &file, &weights, &dir))
        return 2;
    if (!file || !dir) {
        fprintf(stderr, "ragtag import: needs %s (see 'ragtag import --help')\n",
                !file ? "a model file (.onnx or .prototxt)" : "-o DIR");
        return 2;
    }
    int rc;
    if (ends_with(file, ".onnx")) {
        if (weights) {
            fprintf(stderr, "ragtag import: --weights is for Caffe models: an ONNX file holds "
                            "its weights\n");
            return 2;
        }
        rc = rt_onnx_import(file, dir);
    } else if (ends_with(file, ".prototxt")) {
        /* Caffe models: rt_caffe_import(), not part of this build yet */
        rc = rt_error(RT_ERR_UNSUPPORTED, "%s: Caffe import is not built into this ragtag",
                      file);
    } else {
        fprintf(stderr, "ragtag import: %s: unknown kind of model (accepted: .onnx, .prototxt)\n",
                file);
        return 2;
    }
    if (rc >= 0)
        printf("wrote %s/%s and %s/%s\n", dir, RT_ONNX_IMPORT_CFG, dir, RT_ONNX_IMPORT_WEIGHTS);
    return done("import", rc);
}
