/* caffe_net.c — a Caffe net (prototxt) translated into a ragtag model file:
 * the walk over its layers in the TRAIN phase, the chain of blobs, the model
 * text and its notes. One layer's translation lives in caffe_layers.c. */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "caffe-impl.h"
#include "status.h"
#include "textproto.h"

int caffe_read_text(const char *path, char **out, size_t *out_len)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return rt_error(RT_ERR_IO, "%s: %s", path, strerror(errno));
    char *text = NULL;
    size_t len = 0, cap = 0;
    int rc = RT_OK;
    for (;;) {
        if (len + 65536 > cap) {
            char *grown = realloc(text, cap = 2 * cap + 65536);
            if (!grown) {
                rc = rt_error(RT_ERR_NOMEM, "%s: out of memory", path);
                break;
            }
            text = grown;
        }
        size_t got = fread(text + len, 1, cap - len - 1, f);
        len += got;
        if (got == 0) {
            if (ferror(f))
                rc = rt_error(RT_ERR_IO, "%s: %s", path, strerror(errno));
            break;
        }
    }
    fclose(f);
    if (rc < 0) {
        free(text);
        return rc;
    }
    text[len] = '\0';
    *out = text;
    *out_len = len;
    return RT_OK;
}

int caffe_prototxt_read(const char *path, Caffe__NetParameter **out)
{
    *out = NULL;
    char *text;
    size_t len;
    RT_TRY(caffe_read_text(path, &text, &len));
    ProtobufCMessage *m = NULL;
    int rc = rt_textproto_parse(text, len, path, &caffe__net_parameter__descriptor, &m);
    free(text);
    *out = (Caffe__NetParameter *)m;
    return rc;
}

/* A float as the shortest decimal that reads back as it (0.999f is
 * 0.999, not 0.99900001), so that the model file shows what the prototxt
 * said and 1 - 0.999 prints as 0.001. */
double caffe_decimal(float f)
{
    char buf[32];
    for (int p = 1; p < 9; p++) {
        snprintf(buf, sizeof buf, "%.*g", p, f);
        if (strtof(buf, NULL) == f)
            return strtod(buf, NULL);
    }
    return f;
}

static void vappend(char **buf, size_t *len, size_t *cap, bool *nomem, const char *fmt,
                    va_list ap)
{
    va_list aq;
    va_copy(aq, ap);
    int need = vsnprintf(NULL, 0, fmt, aq);
    va_end(aq);
    if (need < 0 || *nomem)
        return;
    if (*len + (size_t)need + 1 > *cap) {
        size_t cap2 = 2 * *cap + (size_t)need + 256;
        char *grown = realloc(*buf, cap2);
        if (!grown) {
            *nomem = true;
            return;
        }
        *buf = grown;
        *cap = cap2;
    }
    vsnprintf(*buf + *len, *cap - *len, fmt, ap);
    *len += (size_t)need;
}

void caffe_cfg_printf(struct caffe_net *n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vappend(&n->cfg, &n->len, &n->cap, &n->nomem, fmt, ap);
    va_end(ap);
}

/* A note goes into the model file's header and to the user's terminal. */
void caffe_note(struct caffe_net *n, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "ragtag import: note: %s\n", line);
    size_t room = sizeof n->notes - n->notes_len;
    int w = snprintf(n->notes + n->notes_len, room, "# note: %s\n", line);
    if (w > 0 && (size_t)w < room)
        n->notes_len += (size_t)w;
}

int caffe_layer_error(const struct caffe_net *n, const Caffe__LayerParameter *l, const char *fmt,
                      ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return rt_error(RT_ERR_CONFIG, "%s: layer '%s' (%s): %s", n->file,
                    l->name ? l->name : "(no name)", l->type ? l->type : "no type", msg);
}

int caffe_blob_set(struct caffe_net *n, const char *blob, int layer)
{
    if (n->nblobs == n->capblobs) {
        int cap = 2 * n->capblobs + 16;
        void *grown = realloc(n->blobs, (size_t)cap * sizeof *n->blobs);
        if (!grown)
            return rt_error(RT_ERR_NOMEM, "%s: out of memory", n->file);
        n->blobs = grown;
        n->capblobs = cap;
    }
    n->blobs[n->nblobs].blob = blob;
    n->blobs[n->nblobs++].layer = layer;
    return RT_OK;
}

int caffe_blob_layer(const struct caffe_net *n, const char *blob)
{
    for (int i = n->nblobs - 1; i >= 0; i--)
        if (!strcmp(n->blobs[i].blob, blob))
            return n->blobs[i].layer;
    return -3;
}

struct caffe_map *caffe_map_add(struct caffe_net *n, enum caffe_kind kind, const char *layer)
{
    if (n->nmaps == n->capmaps) {
        int cap = 2 * n->capmaps + 8;
        void *grown = realloc(n->maps, (size_t)cap * sizeof *n->maps);
        if (!grown) {
            rt_error(RT_ERR_NOMEM, "%s: out of memory", n->file);
            return NULL;
        }
        n->maps = grown;
        n->capmaps = cap;
    }
    struct caffe_map *m = &n->maps[n->nmaps++];
    memset(m, 0, sizeof *m);
    m->kind = kind;
    snprintf(m->layer, sizeof m->layer, "%s", layer ? layer : "");
    return m;
}

/* Caffe's NetStateRule against the TRAIN state (level 0, no stages). */
static bool rule_meets_train(const Caffe__NetStateRule *r)
{
    if (r->has_phase && r->phase != CAFFE__PHASE__TRAIN)
        return false;
    if ((r->has_min_level && r->min_level > 0) || (r->has_max_level && r->max_level < 0))
        return false;
    return r->n_stage == 0; /* a required stage is never set; not_stage always holds */
}

static bool in_train_phase(const Caffe__LayerParameter *l)
{
    if (l->has_phase)
        return l->phase == CAFFE__PHASE__TRAIN;
    if (l->n_include > 0) {
        for (size_t i = 0; i < l->n_include; i++)
            if (rule_meets_train(l->include[i]))
                return true;
        return false;
    }
    for (size_t i = 0; i < l->n_exclude; i++)
        if (rule_meets_train(l->exclude[i]))
            return false;
    return true;
}

/* The layers Caffe builds for training, in order; the others get a note. */
static int train_layers(struct caffe_net *n, const Caffe__LayerParameter ***out, int *count)
{
    const Caffe__NetParameter *net = n->net;
    if (net->n_layers > 0)
        return rt_error(RT_ERR_CONFIG, "%s: uses Caffe's old V1 'layers' format: upgrade it "
                                       "with Caffe's upgrade_net_proto_text first", n->file);
    const Caffe__LayerParameter **v = calloc(net->n_layer + 1, sizeof *v);
    if (!v)
        return rt_error(RT_ERR_NOMEM, "%s: out of memory", n->file);
    int k = 0;
    for (size_t i = 0; i < net->n_layer; i++) {
        const Caffe__LayerParameter *l = net->layer[i];
        if (!l->type || !l->type[0]) {
            free(v);
            return caffe_layer_error(n, l, "has no type");
        }
        if (in_train_phase(l))
            v[k++] = l;
        else if (!caffe_is_data_layer(l->type) && strcmp(l->type, "Accuracy"))
            caffe_note(n, "skipped layer '%s' (%s): not in the TRAIN phase", l->name, l->type);
    }
    *out = v;
    *count = k;
    return RT_OK;
}

int caffe_net_translate(struct caffe_net *n, const char *input)
{
    n->bn_map = -1;
    const Caffe__LayerParameter **layers = NULL;
    int count = 0;
    RT_TRY(train_layers(n, &layers, &count));
    int first = caffe_input_shape(n, layers, count, input);
    int rc = first < 0 ? first : RT_OK;
    for (int i = first; rc == RT_OK && i < count; i++)
        rc = caffe_layer_translate(n, layers[i]);
    free(layers);
    if (rc < 0)
        return rc;
    if (n->nomem)
        return rt_error(RT_ERR_NOMEM, "%s: out of memory", n->file);
    if (n->index == 0)
        return rt_error(RT_ERR_CONFIG, "%s: the net has no layers that ragtag can train", n->file);
    if (!n->ended) {
        /* a deploy net that stops at its logits */
        caffe_note(n, "the net ends without a Softmax: ragtag's [softmax] (softmax + "
                      "cross-entropy) is added after its last layer");
        n->classes = (int)caffe_shape_count(n->shape);
        caffe_cfg_printf(n, "\n[softmax]\n");
    }
    return n->nomem ? rt_error(RT_ERR_NOMEM, "%s: out of memory", n->file) : RT_OK;
}

char *caffe_net_model_text(const struct caffe_net *n, const char *source)
{
    const char *name = n->net->name ? n->net->name : "(unnamed)";
    const char *fmt = "# Imported by `ragtag import` from %s (Caffe net \"%s\"); each section\n"
                      "# names the Caffe layers it comes from (docs/caffe.md).\n%s\n"
                      "[net]\ninput = %dx%dx%d\nclasses = %d\n%s";
    int need = snprintf(NULL, 0, fmt, source, name, n->notes, n->in.w, n->in.h, n->in.c,
                        n->classes, n->cfg ? n->cfg : "");
    char *text = need < 0 ? NULL : malloc((size_t)need + 1);
    if (!text) {
        rt_error(RT_ERR_NOMEM, "out of memory");
        return NULL;
    }
    snprintf(text, (size_t)need + 1, fmt, source, name, n->notes, n->in.w, n->in.h, n->in.c,
             n->classes, n->cfg ? n->cfg : "");
    return text;
}

void caffe_net_free(struct caffe_net *n)
{
    if (n->net)
        caffe__net_parameter__free_unpacked(n->net, NULL);
    free(n->cfg);
    free(n->maps);
    free(n->blobs);
    memset(n, 0, sizeof *n);
}
