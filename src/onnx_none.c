/* onnx_none.c — rt_onnx_export / rt_onnx_import in a build without
 * protobuf-c: they say so, and how to get them (docs/onnx.md). */
#include "config.h"

#include "onnx.h"
#include "status.h"

#define NOT_BUILT "ragtag was built without protobuf-c, so it cannot %s ONNX models; " \
                  "install the Debian packages libprotobuf-c-dev protobuf-c-compiler, then " \
                  "run ./configure and make again (%s)"

int rt_onnx_export(const char *model_path, const char *weights_path, const char *onnx_path)
{
    (void)weights_path;
    (void)onnx_path;
    return rt_error(RT_ERR_UNSUPPORTED, NOT_BUILT, "export", model_path);
}

int rt_onnx_import(const char *onnx_path, const char *out_dir)
{
    (void)out_dir;
    return rt_error(RT_ERR_UNSUPPORTED, NOT_BUILT, "import", onnx_path);
}
