/* onnx_emit.c — the importer's output: DIR/model.cfg from the layers it
 * built, loaded back by ragtag (so the model file is checked by the same
 * reader as any other, and the tensors get ragtag's names), the weights put
 * into that model's buffers, and DIR/weights.safetensors saved as a
 * checkpoint of it (onnx_import.h). */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint.h"
#include "layer.h"
#include "onnx.h"
#include "onnx_import.h"
#include "onnx_read.h"
#include "status.h"

static bool has_activation_key(const char *type)
{
    return !strcmp(type, "conv") || !strcmp(type, "dense") || !strcmp(type, "shortcut");
}

/* The model file's text, malloc'ed. */
static char *cfg_text(const struct importer *im, int classes)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return NULL;
    const Onnx__ModelProto *m = im->model;
    bool version = m->producer_version && m->producer_version[0];
    fprintf(f, "# imported by ragtag from %s (producer: %s%s%s)\n\n", im->path,
            m->producer_name && m->producer_name[0] ? m->producer_name : "unknown",
            version ? " " : "", version ? m->producer_version : "");
    fprintf(f, "[net]\ninput = %dx%dx%d\nclasses = %d\n", im->input.w, im->input.h,
            im->input.c, classes);
    for (int i = 0; i < im->nlayers; i++) {
        const struct imp_layer *l = &im->layers[i];
        fprintf(f, "\n[%s]  # layer %d, from node %s (%s)\n%s", l->type, i + 1,
                rt_onnx_node_label(l->node), l->node->op_type, l->keys);
        if (has_activation_key(l->type) && l->act != RT_ACT_IDENTITY)
            fprintf(f, "activation = %s\n", rt_act_name(l->act));
    }
    fprintf(f, "\n[softmax]\n");
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    return text;
}

static int write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return rt_error(RT_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    bool ok = fputs(text, f) >= 0;
    if (fclose(f) != 0 || !ok)
        return rt_error(RT_ERR_IO, "writing %s failed: %s", path, strerror(errno));
    return RT_OK;
}

static int tensor_index(const rt_model *m, const char *name, struct rt_tensor_info *ti)
{
    for (int t = 0; t < rt_model_tensor_count(m); t++) {
        rt_model_tensor_info(m, t, ti);
        if (!strcmp(ti->name, name))
            return t;
    }
    return -1;
}

/* Layer i's tensors into the model's buffers, by name, shapes checked. */
static int put_weights(const struct importer *im, rt_model *m, rt_dev *dev, int i)
{
    const struct imp_layer *l = &im->layers[i];
    struct rt_layer_info info;
    RT_TRY(rt_model_layer_info(m, i, &info));
    for (int k = 0; k < l->nt; k++) {
        const struct imp_tensor *t = &l->t[k];
        char name[96];
        struct rt_tensor_info ti;
        snprintf(name, sizeof name, "%s.%s", info.name, t->suffix);
        size_t count = 1;
        for (int d = 0; d < t->ndim; d++)
            count *= (size_t)t->dims[d];
        RT_ASSERT(tensor_index(m, name, &ti) >= 0 && ti.count == count);
        rt_view base = ti.state ? rt_model_state(m) : rt_model_params(m);
        RT_TRY(rt_upload(dev, rt_view_at(base, ti.offset), t->data, count * sizeof(float)));
    }
    return RT_OK;
}

static char *join(const char *dir, const char *file)
{
    char *p = malloc(strlen(dir) + strlen(file) + 2);
    if (p)
        sprintf(p, "%s/%s", dir, file);
    return p;
}

int imp_emit(struct importer *im, const char *out_dir, int classes)
{
    char *text = cfg_text(im, classes);
    char *cfg_path = join(out_dir, RT_ONNX_IMPORT_CFG);
    char *w_path = join(out_dir, RT_ONNX_IMPORT_WEIGHTS);
    rt_dev *dev = NULL;
    rt_model *m = NULL;
    int rc = RT_OK;
    if (!text || !cfg_path || !w_path)
        rc = rt_error(RT_ERR_NOMEM, "out of memory writing the imported model");
    if (rc == RT_OK && mkdir(out_dir, 0777) != 0 && errno != EEXIST)
        rc = rt_error(RT_ERR_IO, "cannot make directory %s: %s", out_dir, strerror(errno));
    if (rc == RT_OK)
        rc = write_text(cfg_path, text);
    if (rc == RT_OK && !(dev = rt_dev_open("cpu", 0, 1)))
        rc = RT_ERR_DEVICE;
    if (rc == RT_OK && (rc = rt_model_open_string(text, cfg_path, dev, 1, &m)) < 0)
        rc = rt_error_wrap(rc, "%s: the model file made from it is refused", im->path);
    for (int i = 0; rc == RT_OK && i < im->nlayers; i++)
        rc = put_weights(im, m, dev, i);
    if (rc == RT_OK)
        rc = rt_checkpoint_save(w_path, m, NULL, NULL);
    rt_model_destroy(&m);
    rt_dev_close(&dev);
    free(text);
    free(cfg_path);
    free(w_path);
    return rc;
}
