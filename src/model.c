/* model.c — a network from a model file: the layer registry, shape
 * inference, the model's buffers, forward, loss and backward, summary.
 *
 * Memory, all allocated at load for max_batch so a step never allocates:
 *  params / grads  ONE buffer each, layers hold offsets (views) into them;
 *  state           batch-norm running statistics (not trained);
 *  acts / deltas   every layer's output and the gradient w.r.t. it, one
 *                  region per layer in one buffer each;
 *  scratch[2]      where a layer writes the gradient of an input that
 *                  already received one this pass; it is then added in;
 *  tmp[2]          free space for a layer within one forward/backward call;
 *  ws              the conv workspace, shared by every conv layer. */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "layer.h"
#include "status.h"

/* ---- the registry: section name -> layer ---------------------------------- */

static const struct rt_layer_ops *const registry[] = {
    &rt_layer_conv,    &rt_layer_dense,   &rt_layer_maxpool, &rt_layer_avgpool,
    &rt_layer_globalavgpool, &rt_layer_flatten, &rt_layer_relu, &rt_layer_leaky,
    &rt_layer_sigmoid, &rt_layer_tanh,    &rt_layer_dropout, &rt_layer_batchnorm,
    &rt_layer_shortcut, &rt_layer_softmax,
};
#define N_REGISTRY (sizeof registry / sizeof registry[0])

static const struct rt_layer_ops *registry_find(const char *type)
{
    for (size_t i = 0; i < N_REGISTRY; i++)
        if (strcmp(registry[i]->type, type) == 0)
            return registry[i];
    return NULL;
}

/* Largest values a model file may ask for, so sizes never overflow. */
#define MAX_SAMPLE_VALUES ((size_t)1 << 30)
#define MAX_BATCH (1 << 20)

struct tensor {
    struct rt_tensor_info info;
    struct rt_init_spec init;
    int layer;
};

struct rt_model {
    rt_dev *dev;
    int max_batch;
    struct rt_cfg *cfg; /* kept: the [train] options point into it */
    struct rt_cfg_section *train;
    struct rt_shape input;
    int classes;

    struct rt_layer *layers;
    int nlayers; /* the last is [softmax] */
    struct tensor *tensors;
    int ntensors, tensors_cap;
    size_t nparams, nstate;

    rt_buf *params, *grads, *state;
    rt_buf *acts, *deltas;
    size_t *act_off; /* per layer, into acts and deltas */
    size_t max_values; /* largest per-sample activation */
    rt_buf *scratch[2], *tmp[2], *ws;
    rt_buf *probs;      /* n rows of probabilities, then n losses: one download */
    float *probs_host;
    int32_t *labels_host;
    bool *got_grad; /* per layer: its delta was written this backward */
    rt_backward_hook hook; /* told of each layer's final gradients (NULL: nobody) */
    bool defer_weights;    /* large layers' weight gradients last (rt_model_defer_weight_grads) */
    void *hook_arg;

    int fwd_n; /* samples of the last forward, -1 before any */
    rt_view fwd_x; /* its input: the logits when [softmax] is the only layer */
    bool fwd_train, have_loss;
    /* a loss started (rt_model_loss_start) and not yet tallied: its n and
     * labels' host copy (the caller's or labels_host) */
    int tally_n;
    const int32_t *tally_labels;
    bool reading; /* that download may still be on its way into probs_host */
};

/* ---- helpers for layers (layer.h) ------------------------------------------ */

int rt_layer_error(const struct rt_layer_setup *su, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return rt_error(RT_ERR_CONFIG, "%s:%d: [%s] %s", su->cfg->file, su->sec->line,
                    su->sec->name, msg);
}

static size_t add_tensor(struct rt_layer_setup *su, struct rt_layer *l, const char *suffix,
                         int ndim, const int *dims, struct rt_init_spec init, bool state)
{
    rt_model *m = su->model;
    RT_ASSERT(ndim >= 1 && ndim <= 4);
    if (m->ntensors == m->tensors_cap) {
        int cap = m->tensors_cap ? 2 * m->tensors_cap : 32;
        void *p = realloc(m->tensors, (size_t)cap * sizeof *m->tensors);
        if (!p) {
            rt_error(RT_ERR_NOMEM, "out of memory building the model");
            return RT_LAYER_BAD_OFFSET;
        }
        m->tensors = p;
        m->tensors_cap = cap;
    }
    struct tensor *t = &m->tensors[m->ntensors++];
    memset(t, 0, sizeof *t);
    int len = snprintf(t->info.name, sizeof t->info.name, "%s.%s", l->name, suffix);
    RT_ASSERT(len > 0 && (size_t)len < sizeof t->info.name);
    t->info.ndim = ndim;
    t->info.count = 1;
    for (int i = 0; i < ndim; i++) {
        RT_ASSERT(dims[i] > 0);
        t->info.dims[i] = dims[i];
        t->info.count *= (size_t)dims[i];
    }
    t->info.state = state;
    t->init = init;
    t->layer = l->index;
    size_t *total = state ? &m->nstate : &m->nparams;
    t->info.offset = *total;
    if (!state && l->params == 0)
        l->param_off = *total;
    *total += t->info.count;
    if (state)
        l->state += t->info.count;
    else
        l->params += t->info.count;
    return t->info.offset;
}

size_t rt_layer_param(struct rt_layer_setup *su, struct rt_layer *l, const char *suffix,
                      int ndim, const int *dims, struct rt_init_spec init)
{
    return add_tensor(su, l, suffix, ndim, dims, init, false);
}

size_t rt_layer_state(struct rt_layer_setup *su, struct rt_layer *l, const char *suffix,
                      int ndim, const int *dims, float value)
{
    struct rt_init_spec init = {.kind = RT_INIT_CONST, .value = value};
    return add_tensor(su, l, suffix, ndim, dims, init, true);
}

const struct rt_init_spec *rt_model_tensor_init(const rt_model *m, int i)
{
    RT_ASSERT(m && i >= 0 && i < m->ntensors);
    return &m->tensors[i].init;
}

/* ---- building -------------------------------------------------------------- */

/* "WxHxC", three positive whole numbers. */
static bool parse_wxhxc(const char *s, int v[3])
{
    for (int i = 0; i < 3; i++) {
        char *end;
        if (*s < '0' || *s > '9')
            return false;
        errno = 0;
        long x = strtol(s, &end, 10);
        if (errno || x < 1 || x > 65536)
            return false;
        v[i] = (int)x;
        if (i < 2 && *end != 'x' && *end != 'X')
            return false;
        if (i == 2 && *end != '\0')
            return false;
        s = end + 1;
    }
    return true;
}

static int parse_net(rt_model *m, struct rt_cfg_section *s)
{
    const struct rt_cfg *c = m->cfg;
    RT_TRY(rt_cfg_check_keys(c, s, "input, width, height, channels, classes"));
    struct rt_cfg_entry *in = rt_cfg_find(s, "input");
    bool separate = rt_cfg_find(s, "width") || rt_cfg_find(s, "height") ||
                    rt_cfg_find(s, "channels");
    if (in && separate)
        return rt_error(RT_ERR_CONFIG,
                        "%s:%d: [net] gives both input and width/height/channels "
                        "(use one or the other)", c->file, in->line);
    if (in) {
        int v[3];
        if (!parse_wxhxc(in->value, v))
            return rt_error(RT_ERR_CONFIG,
                            "%s:%d: [net] input = %s: not a shape (accepted: WxHxC, e.g. "
                            "28x28x1, each from 1 to 65536)", c->file, in->line, in->value);
        m->input = (struct rt_shape){v[2], v[1], v[0]};
    } else {
        if (!separate)
            return rt_error(RT_ERR_CONFIG,
                            "%s:%d: [net] needs input = WxHxC (or width, height, channels)",
                            c->file, s->line);
        RT_TRY(rt_cfg_int(c, s, "width", true, 0, 1, 65536, &m->input.w));
        RT_TRY(rt_cfg_int(c, s, "height", true, 0, 1, 65536, &m->input.h));
        RT_TRY(rt_cfg_int(c, s, "channels", false, 1, 1, 65536, &m->input.c));
    }
    if (rt_shape_count(m->input) > MAX_SAMPLE_VALUES)
        return rt_error(RT_ERR_CONFIG, "%s:%d: [net] input of %zu values is too large",
                        c->file, s->line, rt_shape_count(m->input));
    return rt_cfg_int(c, s, "classes", true, 0, 1, 1 << 20, &m->classes);
}

static void known_sections(char *buf, size_t n)
{
    snprintf(buf, n, "net, train");
    for (size_t i = 0; i < N_REGISTRY; i++) {
        strncat(buf, ", ", n - strlen(buf) - 1);
        strncat(buf, registry[i]->type, n - strlen(buf) - 1);
    }
}

/* Weight layers whose own activation is linear take the nonlinearity that
 * follows them (past batch norm and dropout) for He vs Glorot. */
static void resolve_init(rt_model *m)
{
    for (int t = 0; t < m->ntensors; t++) {
        struct rt_init_spec *in = &m->tensors[t].init;
        if (in->kind != RT_INIT_AUTO)
            continue;
        int i = m->tensors[t].layer;
        enum rt_act act = m->layers[i].act;
        float alpha = m->layers[i].alpha;
        if (act == RT_ACT_IDENTITY) {
            int j = i + 1;
            while (j < m->nlayers && m->layers[j].passthrough)
                j++;
            if (j < m->nlayers && m->layers[j].params == 0) {
                act = m->layers[j].act;
                alpha = m->layers[j].alpha;
            }
        }
        in->kind = act == RT_ACT_RELU || act == RT_ACT_LEAKY ? RT_INIT_HE : RT_INIT_GLOROT;
        in->alpha = act == RT_ACT_LEAKY ? alpha : 0.0f;
    }
}

static int build(rt_model *m)
{
    struct rt_cfg *c = m->cfg;
    if (c->count == 0)
        return rt_error(RT_ERR_CONFIG,
                        "%s:%d: no sections (a model file has [net], layers, [softmax])",
                        c->file, c->last_line > 0 ? c->last_line : 1);
    struct rt_cfg_section *net = &c->sections[0];
    if (strcmp(net->name, "net") != 0)
        return rt_error(RT_ERR_CONFIG,
                        "%s:%d: [%s] before [net] (a model file starts with [net])", c->file,
                        net->line, net->name);
    RT_TRY(parse_net(m, net));

    m->layers = calloc((size_t)c->count, sizeof *m->layers);
    if (!m->layers)
        return rt_error(RT_ERR_NOMEM, "out of memory building the model");
    bool have_softmax = false;
    for (int si = 1; si < c->count; si++) {
        struct rt_cfg_section *s = &c->sections[si];
        if (strcmp(s->name, "net") == 0)
            return rt_error(RT_ERR_CONFIG,
                            "%s:%d: second [net] section (first at line %d; one is allowed)",
                            c->file, s->line, net->line);
        if (strcmp(s->name, "train") == 0) {
            if (m->train)
                return rt_error(RT_ERR_CONFIG,
                                "%s:%d: second [train] section (first at line %d; one is "
                                "allowed)", c->file, s->line, m->train->line);
            m->train = s;
            for (int k = 0; k < s->count; k++)
                s->entries[k].used = true;
            continue;
        }
        const struct rt_layer_ops *ops = registry_find(s->name);
        if (!ops) {
            char known[512];
            known_sections(known, sizeof known);
            return rt_error(RT_ERR_CONFIG, "%s:%d: unknown section [%s] (known: %s)",
                            c->file, s->line, s->name, known);
        }
        if (have_softmax)
            return rt_error(RT_ERR_CONFIG,
                            "%s:%d: [%s] after [softmax] (softmax must be the last layer)",
                            c->file, s->line, s->name);
        char keys[512];
        snprintf(keys, sizeof keys, "%s%sfreeze", ops->keys, *ops->keys ? ", " : "");
        RT_TRY(rt_cfg_check_keys(c, s, keys));

        struct rt_layer *l = &m->layers[m->nlayers];
        l->ops = ops;
        l->index = m->nlayers;
        snprintf(l->name, sizeof l->name, "%s%d", ops->prefix, l->index + 1);
        l->line = s->line;
        l->in = l->index ? m->layers[l->index - 1].out : m->input;
        l->ninputs = 1;
        l->inputs[0] = l->index - 1;
        l->inputs[1] = -1;
        l->act = RT_ACT_IDENTITY;
        if (ops->priv_size && !(l->priv = calloc(1, ops->priv_size)))
            return rt_error(RT_ERR_NOMEM, "out of memory building the model");
        m->nlayers++; /* counted now so destroy releases it on failure */
        struct rt_layer_setup su = {
            .cfg = c, .sec = s, .layers = m->layers, .model = m, .classes = m->classes};
        int rc = ops->setup(l, &su);
        if (rc < 0)
            return rc;
        int frozen = 0;
        RT_TRY(rt_cfg_int(c, s, "freeze", false, 0, 0, 1, &frozen));
        l->frozen = frozen == 1;
        if (l->out.c < 1 || l->out.h < 1 || l->out.w < 1 ||
            rt_shape_count(l->out) > MAX_SAMPLE_VALUES)
            return rt_layer_error(&su, "impossible output shape %dx%dx%d", l->out.w,
                                  l->out.h, l->out.c);
        if (ops == &rt_layer_softmax)
            have_softmax = true;
    }
    if (!have_softmax)
        return rt_error(RT_ERR_CONFIG,
                        "%s:%d: no [softmax] layer at the end (the last layer must be "
                        "[softmax]: softmax + cross-entropy over [net] classes)",
                        c->file, c->last_line);
    resolve_init(m);
    return RT_OK;
}

static rt_buf *buf_floats(rt_dev *dev, size_t n)
{
    /* never zero bytes: some backends refuse empty allocations */
    return rt_buf_new(dev, (n ? n : 1) * sizeof(float));
}

/* Whether layer i's output may be its input's memory (output_is_input):
 * its one input is a layer's output that no other layer reads, so the
 * gradient w.r.t. it has one writer too. */
static bool shares_input_memory(const rt_model *m, int i)
{
    const struct rt_layer *l = &m->layers[i];
    if (!l->ops->output_is_input || l->ninputs != 1 || l->inputs[0] < 0 ||
        rt_shape_count(l->out) != rt_shape_count(m->layers[l->inputs[0]].out))
        return false;
    int readers = 0;
    for (int j = 0; j < m->nlayers; j++)
        for (int k = 0; k < m->layers[j].ninputs; k++)
            readers += m->layers[j].inputs[k] == l->inputs[0];
    return readers == 1;
}

static int allocate(rt_model *m)
{
    rt_dev *dev = m->dev;
    size_t B = (size_t)m->max_batch;
    m->act_off = calloc((size_t)m->nlayers, sizeof *m->act_off);
    m->got_grad = calloc((size_t)m->nlayers, sizeof *m->got_grad);
    m->probs_host = malloc(B * ((size_t)m->classes + 1) * sizeof(float));
    m->labels_host = malloc(B * sizeof(int32_t));
    if (!m->act_off || !m->got_grad || !m->probs_host || !m->labels_host)
        return rt_error(RT_ERR_NOMEM, "out of host memory for the model");

    size_t total = 0, ws = 0;
    m->max_values = rt_shape_count(m->input);
    for (int i = 0; i < m->nlayers - 1; i++) { /* softmax's output stays with the loss */
        struct rt_layer *l = &m->layers[i];
        size_t v = rt_shape_count(l->out);
        if (shares_input_memory(m, i)) {
            m->act_off[i] = m->act_off[l->inputs[0]];
        } else {
            m->act_off[i] = total;
            total += B * v;
        }
        if (v > m->max_values)
            m->max_values = v;
        if (l->ops->workspace) {
            size_t w = l->ops->workspace(l, dev, m->max_batch);
            if (w > ws)
                ws = w;
        }
    }
    size_t big = B * m->max_values;
    /* scratch only ever holds the gradient of an activation with several
     * consumers, which only a shortcut creates */
    size_t branch = 0;
    for (int i = 0; i < m->nlayers; i++)
        if (m->layers[i].ninputs > 1)
            branch = big;
    if (!(m->params = buf_floats(dev, m->nparams)) ||
        !(m->grads = buf_floats(dev, m->nparams + RT_MODEL_GRAD_SPARE)) ||
        !(m->state = buf_floats(dev, m->nstate)) || !(m->acts = buf_floats(dev, total)) ||
        !(m->deltas = buf_floats(dev, total)) || !(m->scratch[0] = buf_floats(dev, branch)) ||
        !(m->scratch[1] = buf_floats(dev, branch)) || !(m->tmp[0] = buf_floats(dev, big)) ||
        !(m->tmp[1] = buf_floats(dev, big)) || !(m->ws = buf_floats(dev, ws)) ||
        !(m->probs = buf_floats(dev, B * ((size_t)m->classes + 1))))
        return rt_error_wrap(RT_ERR_NOMEM, "allocating the model's buffers for batch %d",
                             m->max_batch);
    for (int i = 0; i < m->nlayers; i++) {
        struct rt_layer *l = &m->layers[i];
        if (l->ops->alloc && l->ops->alloc(l, dev, m->max_batch) < 0)
            return rt_error_wrap(RT_ERR_NOMEM, "allocating %s", l->name);
    }
    /* defined contents before any init: zero weights, unit running variance */
    RT_TRY(rt_op_fill(dev, m->nparams, 0.0f, rt_buf_view(m->params)));
    RT_TRY(rt_op_fill(dev, m->nparams + RT_MODEL_GRAD_SPARE, 0.0f, rt_buf_view(m->grads)));
    for (int t = 0; t < m->ntensors; t++)
        if (m->tensors[t].info.state)
            RT_TRY(rt_op_fill(dev, m->tensors[t].info.count, m->tensors[t].init.value,
                              rt_view_at(rt_buf_view(m->state), m->tensors[t].info.offset)));
    return RT_OK;
}

int rt_model_open_string(const char *text, const char *name, rt_dev *dev, int max_batch,
                         rt_model **out)
{
    *out = NULL;
    if (!text || !name || !dev)
        return rt_error(RT_ERR_ARG, "rt_model_load: NULL text, name or device");
    if (max_batch < 1 || max_batch > MAX_BATCH)
        return rt_error(RT_ERR_ARG, "%s: max batch %d out of range (1 to %d)", name,
                        max_batch, MAX_BATCH);
    rt_model *m = calloc(1, sizeof *m);
    if (!m)
        return rt_error(RT_ERR_NOMEM, "out of memory loading %s", name);
    m->dev = dev;
    m->max_batch = max_batch;
    m->fwd_n = -1;
    m->defer_weights = true;
    int rc;
    if ((rc = rt_cfg_parse(text, name, &m->cfg)) < 0 || (rc = build(m)) < 0 ||
        (rc = allocate(m)) < 0)
        goto fail;
    *out = m;
    return RT_OK;
fail:
    rt_model_destroy(&m);
    return rc;
}

rt_model *rt_model_load_string(const char *text, const char *name, rt_dev *dev,
                               int max_batch)
{
    rt_model *m;
    rt_model_open_string(text, name, dev, max_batch, &m);
    return m;
}

rt_model *rt_model_load(const char *path, rt_dev *dev, int max_batch)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        rt_error(errno == ENOENT ? RT_ERR_NOTFOUND : RT_ERR_IO, "cannot open model file %s: %s",
                 path, strerror(errno));
        return NULL;
    }
    char *text = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (cap - len < 4096) {
            cap = cap ? 2 * cap : 16384;
            char *p = realloc(text, cap + 1);
            if (!p) {
                rt_error(RT_ERR_NOMEM, "out of memory reading %s", path);
                goto fail;
            }
            text = p;
        }
        size_t got = fread(text + len, 1, cap - len, f);
        len += got;
        if (got == 0)
            break;
    }
    if (ferror(f)) {
        rt_error(RT_ERR_IO, "reading model file %s: %s", path, strerror(errno));
        goto fail;
    }
    text[len] = '\0';
    if (strlen(text) != len) {
        rt_error(RT_ERR_CONFIG, "%s: contains a NUL byte (a model file is text)", path);
        goto fail;
    }
    fclose(f);
    rt_model *m = rt_model_load_string(text, path, dev, max_batch);
    free(text);
    return m;
fail:
    free(text);
    fclose(f);
    return NULL;
}

void rt_model_destroy(rt_model **mp)
{
    if (!mp || !*mp)
        return;
    rt_model *m = *mp;
    if (m->reading) /* a loss never collected: its bytes must not land in freed memory */
        rt_download_wait(m->dev);
    for (int i = 0; i < m->nlayers; i++) {
        struct rt_layer *l = &m->layers[i];
        if (l->ops->release && l->priv)
            l->ops->release(l);
        free(l->priv);
    }
    free(m->layers);
    free(m->tensors);
    rt_buf *bufs[] = {m->params, m->grads, m->state, m->acts, m->deltas, m->scratch[0],
                      m->scratch[1], m->tmp[0], m->tmp[1], m->ws, m->probs};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        rt_buf_destroy(&bufs[i]);
    free(m->act_off);
    free(m->got_grad);
    free(m->probs_host);
    free(m->labels_host);
    rt_cfg_destroy(&m->cfg);
    free(m);
    *mp = NULL;
}

/* ---- accessors ----------------------------------------------------------- */

struct rt_shape rt_model_input_shape(const rt_model *m) { return m->input; }
int rt_model_classes(const rt_model *m) { return m->classes; }
int rt_model_max_batch(const rt_model *m) { return m->max_batch; }
rt_dev *rt_model_dev(const rt_model *m) { return m->dev; }
size_t rt_model_param_count(const rt_model *m) { return m->nparams; }
rt_view rt_model_params(const rt_model *m) { return rt_buf_view(m->params); }
rt_view rt_model_grads(const rt_model *m) { return rt_buf_view(m->grads); }

int rt_model_use_grad_memory(rt_model *m, float *mem, size_t floats)
{
    size_t need = m->nparams + RT_MODEL_GRAD_SPARE;
    float *old = rt_view_host(rt_buf_view(m->grads));
    if (!old || floats < need)
        return rt_error(RT_ERR_CONFIG, "the gradient cannot move to %zu floats of host memory "
                        "(%zu needed, on %s)", floats, need, rt_dev_backend(m->dev));
    rt_buf *b = rt_buf_wrap_host(m->dev, mem, need * sizeof(float));
    if (!b)
        return RT_ERR_NOMEM;
    memcpy(mem, old, need * sizeof(float));
    rt_buf_destroy(&m->grads);
    m->grads = b;
    return RT_OK;
}
void rt_model_swap_params(rt_model *m, rt_buf **b)
{
    RT_ASSERT(m && b && *b && (*b)->bytes >= m->nparams * sizeof(float) && (*b)->dev == m->dev);
    rt_buf *t = m->params;
    m->params = *b;
    *b = t;
}

size_t rt_model_state_count(const rt_model *m) { return m->nstate; }
rt_view rt_model_state(const rt_model *m) { return rt_buf_view(m->state); }
int rt_model_tensor_count(const rt_model *m) { return m->ntensors; }

struct rt_layer *rt_model_layer(rt_model *m, int i)
{
    RT_ASSERT(m && i >= 0 && i < m->nlayers);
    return &m->layers[i];
}

const struct rt_layer *rt_model_layer_const(const rt_model *m, int i)
{
    RT_ASSERT(m && i >= 0 && i < m->nlayers);
    return &m->layers[i];
}

int rt_model_tensor_info(const rt_model *m, int i, struct rt_tensor_info *out)
{
    if (i < 0 || i >= m->ntensors)
        return rt_error(RT_ERR_ARG, "tensor %d does not exist (the model has %d)", i,
                        m->ntensors);
    *out = m->tensors[i].info;
    return RT_OK;
}

int rt_model_layer_count(const rt_model *m) { return m->nlayers; }

int rt_model_layer_info(const rt_model *m, int i, struct rt_layer_info *out)
{
    if (i < 0 || i >= m->nlayers)
        return rt_error(RT_ERR_ARG, "layer %d does not exist (the model has %d)", i,
                        m->nlayers);
    const struct rt_layer *l = &m->layers[i];
    memset(out, 0, sizeof *out);
    out->type = l->ops->type;
    snprintf(out->name, sizeof out->name, "%s", l->name);
    out->line = l->line;
    out->in = l->in;
    out->out = l->out;
    out->ninputs = l->ninputs;
    out->inputs[0] = l->inputs[0];
    out->inputs[1] = l->inputs[1];
    out->act = l->act;
    out->alpha = l->alpha;
    if (l->ops->describe)
        l->ops->describe(l, out);
    return RT_OK;
}

int rt_model_train_option_count(const rt_model *m) { return m->train ? m->train->count : 0; }

struct rt_train_option rt_model_train_option(const rt_model *m, int i)
{
    RT_ASSERT(m->train && i >= 0 && i < m->train->count);
    const struct rt_cfg_entry *e = &m->train->entries[i];
    return (struct rt_train_option){e->key, e->value, m->cfg->file, e->line};
}

/* ---- forward, loss, backward ------------------------------------------------- */

/* Output of layer j, or the network input x for j = -1. */
static rt_view act_view(const rt_model *m, int j, rt_view x)
{
    return j < 0 ? x : rt_view_at(rt_buf_view(m->acts), m->act_off[j]);
}

static rt_view delta_view(const rt_model *m, int j)
{
    return rt_view_at(rt_buf_view(m->deltas), m->act_off[j]);
}

/* The logits: the output of the layer before [softmax]. */
static rt_view logits_view(const rt_model *m, rt_view x)
{
    return act_view(m, m->nlayers - 2, x);
}

int rt_model_logits(rt_model *m, float *host, int n)
{
    RT_ASSERT(m && host);
    if (n != m->fwd_n || n < 0)
        return rt_error(RT_ERR_ARG, "logits of %d samples after a forward of %d", n, m->fwd_n);
    if (n == 0)
        return RT_OK;
    return rt_download(m->dev, host, logits_view(m, m->fwd_x),
                       (size_t)n * (size_t)m->classes * sizeof(float));
}

/* Per-layer dropout seeds: splitmix64 of the step seed and layer index, so
 * two dropout layers never share a mask. */
static uint64_t layer_seed(uint64_t seed, int index)
{
    uint64_t z = seed + 0x9E3779B97F4A7C15ull * (uint64_t)(index + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Layer i's inputs and output in p (x: the network's input). */
static void io_views(const rt_model *m, int i, rt_view x, struct rt_pass *p)
{
    const struct rt_layer *l = &m->layers[i];
    for (int k = 0; k < l->ninputs; k++)
        p->x[k] = act_view(m, l->inputs[k], x);
    p->y = act_view(m, i, x);
}

static struct rt_pass base_pass(const rt_model *m, int n, bool train)
{
    struct rt_pass p = {
        .dev = m->dev,
        .n = n,
        .train = train,
        .params = rt_buf_view(m->params),
        .grads = rt_buf_view(m->grads),
        .state = rt_buf_view(m->state),
        .tmp = {rt_buf_view(m->tmp[0]), rt_buf_view(m->tmp[1])},
        .ws = rt_buf_view(m->ws),
    };
    return p;
}

static int check_batch(const rt_model *m, rt_view x, int n, const char *what)
{
    if (n < 0 || n > m->max_batch)
        return rt_error(RT_ERR_ARG, "%s: batch of %d samples (accepted: 0 to max batch %d)",
                        what, n, m->max_batch);
    size_t need = (size_t)n * rt_shape_count(m->input);
    if (need && (!x.buf || x.buf->dev != m->dev || x.off > x.buf->bytes / 4 ||
                 x.buf->bytes / 4 - x.off < need))
        return rt_error(RT_ERR_ARG,
                        "%s: the input view does not hold %d samples of %zu values on the "
                        "model's device", what, n, rt_shape_count(m->input));
    return RT_OK;
}

int rt_model_forward(rt_model *m, rt_view x, int n, bool train, uint64_t seed)
{
    RT_ASSERT(m);
    RT_TRY(check_batch(m, x, n, "forward"));
    m->fwd_n = n;
    m->fwd_train = train;
    m->fwd_x = x;
    m->have_loss = false;
    m->tally_n = 0; /* (a loss never collected is dropped) */
    if (n == 0)
        return RT_OK;
    struct rt_pass p = base_pass(m, n, train);
    for (int i = 0; i < m->nlayers - 1; i++) {
        struct rt_layer *l = &m->layers[i];
        p.seed = layer_seed(seed, i);
        io_views(m, i, x, &p);
        int rc = l->ops->forward(l, &p);
        if (rc < 0)
            return rt_error_wrap(rc, "forward of %s", l->name);
    }
    return RT_OK;
}

/* The summed loss and the right answers of the n rows softmax wrote, in
 * probs_host once the started download is in (one download brings the
 * probabilities and the losses after them). */
static void tally_loss(rt_model *m, const int32_t *labels, int n, double *loss_sum,
                       long *correct, float *probs_host)
{
    const size_t C = (size_t)m->classes;
    const float *losses = m->probs_host + (size_t)n * C;
    double sum = 0.0;
    long right = 0;
    for (int i = 0; i < n; i++) {
        sum += losses[i];
        const float *row = m->probs_host + (size_t)i * C;
        int best = 0;
        for (size_t k = 1; k < C; k++)
            if (row[k] > row[best])
                best = (int)k;
        right += best == labels[i];
    }
    if (loss_sum)
        *loss_sum += sum;
    if (correct)
        *correct += right;
    if (probs_host)
        memcpy(probs_host, m->probs_host, (size_t)n * C * sizeof(float));
}

int rt_model_loss_start(rt_model *m, rt_view labels, const int32_t *labels_host, int n)
{
    RT_ASSERT(m);
    if (n != m->fwd_n)
        return rt_error(RT_ERR_ARG, "loss of %d samples after a forward of %d", n, m->fwd_n);
    m->tally_n = 0;
    if (n == 0)
        return RT_OK;
    if (!labels.buf || labels.buf->dev != m->dev || labels.off > labels.buf->bytes / 4 ||
        labels.buf->bytes / 4 - labels.off < (size_t)n)
        return rt_error(RT_ERR_ARG, "loss: the label view does not hold %d labels", n);
    int C = m->classes;
    /* labels are checked on the host first: a bad one must not index past
     * a row inside a kernel */
    if (!labels_host) {
        RT_TRY(rt_download(m->dev, m->labels_host, labels, (size_t)n * sizeof(int32_t)));
        labels_host = m->labels_host;
    }
    for (int i = 0; i < n; i++)
        if (labels_host[i] < 0 || labels_host[i] >= C)
            return rt_error(RT_ERR_ARG, "label %d of sample %d is not a class (0 to %d)",
                            labels_host[i], i, C - 1);
    rt_view probs = rt_buf_view(m->probs);
    RT_TRY(rt_op_softmax_xent_fwd(m->dev, n, C, logits_view(m, m->fwd_x), labels, probs,
                                  rt_view_at(probs, (size_t)n * (size_t)C)));
    m->reading = true;
    RT_TRY(rt_download_start(m->dev, m->probs_host, probs, (size_t)n * (C + 1) * sizeof(float)));
    m->tally_n = n;
    m->tally_labels = labels_host;
    m->have_loss = true;
    return RT_OK;
}

int rt_model_loss_collect(rt_model *m, double *loss_sum, long *correct, float *probs_host)
{
    RT_ASSERT(m);
    if (m->tally_n == 0)
        return RT_OK;
    const int n = m->tally_n;
    m->tally_n = 0;
    RT_TRY(rt_download_wait(m->dev));
    m->reading = false;
    tally_loss(m, m->tally_labels, n, loss_sum, correct, probs_host);
    return RT_OK;
}

int rt_model_loss_host(rt_model *m, rt_view labels, const int32_t *labels_host, int n,
                       double *loss_sum, long *correct, float *probs_host)
{
    RT_TRY(rt_model_loss_start(m, labels, labels_host, n));
    return rt_model_loss_collect(m, loss_sum, correct, probs_host);
}

int rt_model_loss(rt_model *m, rt_view labels, int n, double *loss_sum, long *correct,
                  float *probs_host)
{
    return rt_model_loss_host(m, labels, NULL, n, loss_sum, correct, probs_host);
}

/* Whether this backward leaves layer l's weight gradient to its end (a
 * frozen layer's is zeroed right after its backward: nothing to defer). */
static bool deferred(const rt_model *m, const struct rt_layer *l)
{
    return m->defer_weights && rt_layer_defers(l) && !l->frozen;
}

/* Layer i's backward over the pass p (its views set here), its input
 * gradients added in where another layer wrote one first. */
static int backward_layer(rt_model *m, rt_view x, int i, int low, struct rt_pass *p)
{
    struct rt_layer *l = &m->layers[i];
    RT_ASSERT(m->got_grad[i]); /* every layer feeds the next one */
    bool direct[2] = {false, false};
    for (int k = 0; k < l->ninputs; k++) {
        int src = l->inputs[k];
        p->x[k] = act_view(m, src, x);
        p->need_dx[k] = src >= low;
        if (src < low)
            continue;
        if (!m->got_grad[src]) {
            p->dx[k] = delta_view(m, src);
            m->got_grad[src] = direct[k] = true;
        } else {
            p->dx[k] = rt_buf_view(m->scratch[k]);
        }
    }
    p->y = act_view(m, i, x);
    p->dy = delta_view(m, i);
    p->defer_weights = deferred(m, l);
    int rc = l->ops->backward(l, p);
    if (rc < 0)
        return rt_error_wrap(rc, "backward of %s", l->name);
    if (l->frozen && l->params) /* computed on the way down, never applied */
        RT_TRY(rt_op_fill(m->dev, l->params, 0.0f,
                          rt_view_at(rt_buf_view(m->grads), l->param_off)));
    for (int k = 0; k < l->ninputs; k++) {
        int src = l->inputs[k];
        if (src >= low && !direct[k])
            RT_TRY(rt_op_axpy(m->dev, (size_t)p->n * rt_shape_count(m->layers[src].out), 1.0f,
                              rt_buf_view(m->scratch[k]), delta_view(m, src)));
    }
    return RT_OK;
}

/* The weight gradients deferred in this backward, from layer `top` down,
 * then the hook of every layer from `top` down (held back: a range is final
 * only once the deferred gradients above it are). */
static int finish_deferred(rt_model *m, rt_view x, int n, int top, int low, size_t grads_hi)
{
    struct rt_pass p = base_pass(m, n, m->fwd_train);
    for (int i = top; i >= low; i--) {
        struct rt_layer *l = &m->layers[i];
        if (!deferred(m, l))
            continue;
        io_views(m, i, x, &p);
        int rc = l->ops->weight_grad(l, &p);
        if (rc < 0)
            return rt_error_wrap(rc, "weight gradient of %s", l->name);
    }
    for (int i = top; i >= low; i--) {
        const struct rt_layer *l = &m->layers[i];
        if (l->params && m->hook)
            RT_TRY(m->hook(m->hook_arg, grads_hi - l->params, grads_hi));
        grads_hi -= l->params;
    }
    RT_ASSERT(grads_hi == 0 || low > 0); /* frozen layers below low hold the rest */
    return RT_OK;
}

int rt_model_backward(rt_model *m, rt_view x, rt_view labels, int n, float grad_scale)
{
    RT_ASSERT(m);
    RT_TRY(check_batch(m, x, n, "backward"));
    if (n != m->fwd_n)
        return rt_error(RT_ERR_ARG, "backward of %d samples after a forward of %d", n,
                        m->fwd_n);
    if (n == 0) /* a worker with no share this step contributes zeros */
        return rt_op_fill(m->dev, m->nparams, 0.0f, rt_buf_view(m->grads));
    if (!m->fwd_train && m->nstate > 0)
        return rt_error(RT_ERR_ARG, "backward after an inference-mode forward: batch norm "
                        "differentiates batch statistics, so run forward with train = true");
    if (!m->have_loss)
        RT_TRY(rt_model_loss(m, labels, n, NULL, NULL, NULL));
    int L = m->nlayers;
    if (L < 2)
        return RT_OK; /* [softmax] alone: nothing to train */
    memset(m->got_grad, 0, (size_t)L * sizeof *m->got_grad);
    RT_TRY(rt_op_softmax_xent_bwd(m->dev, n, m->classes, rt_buf_view(m->probs), labels,
                                  grad_scale, delta_view(m, L - 2)));
    m->got_grad[L - 2] = true;

    /* Layers below the lowest trainable one need no gradient at all: the
     * pass stops there, and that layer computes no gradient of its input. */
    int low = rt_model_lowest_trainable(m);
    struct rt_pass p = base_pass(m, n, m->fwd_train);
    size_t grads_hi = m->nparams; /* layers declare their parameters in order */
    int held = -1; /* the first layer whose hook waits for a deferred gradient */
    for (int i = L - 2; i >= low; i--) {
        struct rt_layer *l = &m->layers[i];
        RT_TRY(backward_layer(m, x, i, low, &p));
        if (p.defer_weights && held < 0)
            held = i;
        if (held < 0 && l->params && m->hook)
            RT_TRY(m->hook(m->hook_arg, grads_hi - l->params, grads_hi));
        if (held < 0)
            grads_hi -= l->params;
    }
    if (held >= 0)
        return finish_deferred(m, x, n, held, low, grads_hi);
    RT_ASSERT(grads_hi == 0 || low > 0); /* frozen layers below low hold the rest */
    return RT_OK;
}

void rt_model_defer_weight_grads(rt_model *m, bool on)
{
    RT_ASSERT(m);
    m->defer_weights = on;
}

void rt_model_set_backward_hook(rt_model *m, rt_backward_hook fn, void *arg)
{
    RT_ASSERT(m);
    m->hook = fn;
    m->hook_arg = arg;
}

/* ---- summary ------------------------------------------------------------------ */

/* 1234567 -> "1,234,567" */
static const char *grouped(size_t v, char *buf, size_t n)
{
    char raw[32];
    int len = snprintf(raw, sizeof raw, "%zu", v), o = 0;
    for (int i = 0; i < len && (size_t)o + 2 < n; i++) {
        if (i && (len - i) % 3 == 0)
            buf[o++] = ',';
        buf[o++] = raw[i];
    }
    buf[o] = '\0';
    return buf;
}

static void shape_text(struct rt_shape s, char *buf, size_t n)
{
    if (s.h == 1 && s.w == 1)
        snprintf(buf, n, "(%d)", s.c);
    else
        snprintf(buf, n, "(%d, %d, %d)", s.c, s.h, s.w);
}

int rt_model_summary(const rt_model *m, FILE *out)
{
    char shape[64], num[32], kind[48], name[96];
    const char *rule =
        "======================================================================";
    fprintf(out, "Model: %s\n", m->cfg->file);
    fprintf(out, "%-30s %-24s %14s\n", "Layer (type)", "Output shape (C, H, W)", "Param #");
    fprintf(out, "%s\n", rule);
    shape_text(m->input, shape, sizeof shape);
    fprintf(out, "%-30s %-24s %14s\n", "input (net)", shape, "0");
    for (int i = 0; i < m->nlayers; i++) {
        const struct rt_layer *l = &m->layers[i];
        if (l->act != RT_ACT_IDENTITY && strcmp(l->ops->type, rt_act_name(l->act)) != 0)
            snprintf(kind, sizeof kind, "%s+%s", l->ops->type, rt_act_name(l->act));
        else
            snprintf(kind, sizeof kind, "%s", l->ops->type);
        snprintf(name, sizeof name, "%s (%s%s)", l->name, kind, l->frozen ? ", frozen" : "");
        shape_text(l->out, shape, sizeof shape);
        fprintf(out, "%-30s %-24s %14s\n", name, shape,
                grouped(l->params + l->state, num, sizeof num));
    }
    fprintf(out, "%s\n", rule);
    fprintf(out, "Total params: %s\n", grouped(m->nparams + m->nstate, num, sizeof num));
    size_t frozen = m->nparams - rt_model_trainable_count(m);
    fprintf(out, "Trainable params: %s\n", grouped(m->nparams - frozen, num, sizeof num));
    fprintf(out, "Non-trainable params: %s\n", grouped(m->nstate + frozen, num, sizeof num));
    return ferror(out) ? rt_error(RT_ERR_IO, "writing the model summary failed") : RT_OK;
}
