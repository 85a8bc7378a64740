/* caffe_model.c — a ragtag model on the cpu with host copies of its two
 * buffers, looked up by tensor name: what import fills from Caffe's blobs
 * and export reads into them. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "caffe-impl.h"
#include "status.h"

int caffe_model_open(const char *cfg_path, struct caffe_model *hm)
{
    memset(hm, 0, sizeof *hm);
    hm->dev = rt_dev_open("cpu", 0, 1);
    if (!hm->dev)
        return RT_ERR_DEVICE;
    hm->m = rt_model_load(cfg_path, hm->dev, 1);
    if (!hm->m) {
        caffe_model_close(hm);
        return RT_ERR_CONFIG;
    }
    size_t pc = rt_model_param_count(hm->m), sc = rt_model_state_count(hm->m);
    hm->nt = rt_model_tensor_count(hm->m);
    hm->params = calloc(pc + 1, sizeof(float));
    hm->state = calloc(sc + 1, sizeof(float));
    hm->infos = calloc((size_t)hm->nt + 1, sizeof *hm->infos);
    if (!hm->params || !hm->state || !hm->infos) {
        caffe_model_close(hm);
        return rt_error(RT_ERR_NOMEM, "%s: out of memory", cfg_path);
    }
    for (int i = 0; i < hm->nt; i++) {
        int rc = rt_model_tensor_info(hm->m, i, &hm->infos[i]);
        if (rc < 0) {
            caffe_model_close(hm);
            return rc;
        }
    }
    return RT_OK;
}

float *caffe_model_tensor(struct caffe_model *hm, const char *prefix, const char *suffix,
                          const struct rt_tensor_info **info)
{
    char name[96];
    snprintf(name, sizeof name, "%s%s", prefix, suffix);
    for (int i = 0; i < hm->nt; i++)
        if (!strcmp(hm->infos[i].name, name)) {
            *info = &hm->infos[i];
            return (hm->infos[i].state ? hm->state : hm->params) + hm->infos[i].offset;
        }
    *info = NULL;
    return NULL;
}

int caffe_model_upload(struct caffe_model *hm)
{
    size_t pc = rt_model_param_count(hm->m), sc = rt_model_state_count(hm->m);
    RT_TRY(rt_upload(hm->dev, rt_model_params(hm->m), hm->params, pc * sizeof(float)));
    if (sc > 0)
        RT_TRY(rt_upload(hm->dev, rt_model_state(hm->m), hm->state, sc * sizeof(float)));
    return RT_OK;
}

int caffe_model_download(struct caffe_model *hm)
{
    size_t pc = rt_model_param_count(hm->m), sc = rt_model_state_count(hm->m);
    RT_TRY(rt_download(hm->dev, hm->params, rt_model_params(hm->m), pc * sizeof(float)));
    if (sc > 0)
        RT_TRY(rt_download(hm->dev, hm->state, rt_model_state(hm->m), sc * sizeof(float)));
    return RT_OK;
}

void caffe_model_close(struct caffe_model *hm)
{
    rt_model_destroy(&hm->m);
    rt_dev_close(&hm->dev);
    free(hm->params);
    free(hm->state);
    free(hm->infos);
    memset(hm, 0, sizeof *hm);
}
