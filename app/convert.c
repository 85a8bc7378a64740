/* convert.c — `ragtag import` and `ragtag export`: models in other
 * frameworks' formats, chosen by the file's extension (docs/caffe.md).
 * Here: Caffe (.prototxt in, .caffemodel out). */
#include "config.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "caffe_import.h"
#include "cli.h"
#include "status.h"

static const char import_help[] =
    "usage: ragtag import NET.prototxt [--weights NET.caffemodel] [--input WxHxC] -o DIR\n\n"
    "Writes DIR/NET.cfg, a ragtag model file made from a Caffe net (its TRAIN\n"
    "phase), and with --weights DIR/NET.safetensors, the Caffe weights under\n"
    "ragtag's tensor names (use it with --weights of eval, or --resume).\n"
    "--input gives the image shape of a Data layer (it lives in the LMDB).\n"
    "See docs/caffe.md.\n";

static const char export_help[] =
    "usage: ragtag export MODEL.cfg --weights FILE.safetensors -o NET.caffemodel\n"
    "                    [--prototxt NET.prototxt]\n\n"
    "Writes the weights of a ragtag model in Caffe's binary .caffemodel layout.\n"
    "With --prototxt (a Caffe net that imports as MODEL.cfg) the layers take its\n"
    "names; without, ragtag's (conv1, dense5, bn3 + bn3_scale), and NET.prototxt,\n"
    "a Caffe deploy net for them, is written too. See docs/caffe.md.\n";

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

int rt_cli_import(int argc, char **argv)
{
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
    if (!ends_with(a.file, ".prototxt")) {
        fprintf(stderr, "ragtag import: '%s': ragtag imports Caffe nets (.prototxt)\n", a.file);
        return 2;
    }
    struct rt_caffe_import_result r;
    int rc = rt_caffe_import_shape(a.file, a.weights, a.out, a.input, &r);
    if (rc < 0) {
        fprintf(stderr, "ragtag import: %s\n", rt_error_detail());
        return 1;
    }
    printf("wrote %s (%d layers)\n", r.cfg, r.layers);
    if (r.weights[0])
        printf("wrote %s\n", r.weights);
    return 0;
}

int rt_cli_export(int argc, char **argv)
{
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        fputs(export_help, stdout);
        return 0;
    }
    struct convert_args a = {0};
    if (parse("export", argc, argv, &a) < 0)
        return 2;
    if (!a.file || !a.out || !a.weights || a.input) {
        fprintf(stderr, "ragtag export: needs MODEL.cfg, --weights FILE and -o OUT (see "
                        "'ragtag export --help')\n");
        return 2;
    }
    if (!ends_with(a.out, ".caffemodel")) {
        fprintf(stderr, "ragtag export: '%s': ragtag exports Caffe weights (.caffemodel)\n",
                a.out);
        return 2;
    }
    char deploy[4200];
    int rc = rt_caffe_export_weights(a.file, a.weights, a.prototxt, a.out, deploy, sizeof deploy);
    if (rc < 0) {
        fprintf(stderr, "ragtag export: %s\n", rt_error_detail());
        return 1;
    }
    printf("wrote %s\n", a.out);
    if (deploy[0])
        printf("wrote %s (the Caffe net for it)\n", deploy);
    return 0;
}
