/* cli.h — the `ragtag` command line. */
#ifndef RT_CLI_H
#define RT_CLI_H

/* Exit status: 0 done, 1 failed, 2 bad usage, 130 interrupted. */
int rt_cli_main(int argc, char **argv);
/* `ragtag keygen DIR` (keygen.c). */
int rt_cli_keygen(int argc, char **argv);
/* `ragtag export` and `ragtag import` (convert.c, docs/onnx.md, docs/caffe.md). */
int rt_cli_export(int argc, char **argv);
int rt_cli_import(int argc, char **argv);
/* `ragtag pack` (pack.c). */
int rt_cli_pack(int argc, char **argv);

#endif
