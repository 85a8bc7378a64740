/* caffe_none.c — the Caffe import/export of a ragtag built without
 * protobuf-c: each entry point says so. */
#include "config.h"

#include "caffe_import.h"
#include "status.h"

static int missing(void)
{
    return rt_error(RT_ERR_UNSUPPORTED, "ragtag was built without protobuf-c, which Caffe "
                    "import/export needs: install libprotobuf-c-dev and protobuf-c-compiler, "
                    "then configure and build again");
}

int rt_caffe_import_shape(const char *prototxt, const char *weights, const char *outdir,
                          const char *input, struct rt_caffe_import_result *res)
{
    return missing();
}

int rt_caffe_import(const char *prototxt, const char *weights, const char *outdir)
{
    return missing();
}

int rt_caffe_export_weights(const char *model_cfg, const char *weights, const char *prototxt,
                            const char *out, char *deploy, size_t deploy_size)
{
    return missing();
}
