/* optim.c — optimisers: SGD (momentum, Nesterov, weight decay), Adam, AdamW
 * and Nadam over one flat parameter buffer.
 *
 * The maths lives in the kernel table (sgd_step / adam_step, specified in
 * backend.h) so that every backend updates bit-compatibly; this file only
 * owns the state buffers, the step counter, the schedule, clipping and
 * Adam's per-step scalars (computed once here for every backend). State
 * stays on the parameters' device: the update never copies to the host. */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "optim.h"
#include "status.h"

#define OPTIM_TAG 0x4f505449u  /* "OPTI" */
#define OPTIM_DEAD 0xdeadbeefu /* poisoned on destroy: use-after-free asserts */

struct rt_optim {
    uint32_t tag;
    rt_dev *dev;
    struct rt_optim_config cfg;
    size_t n;            /* trainable floats: the spans' total */
    struct rt_span *spans; /* where they lie in the parameter buffer */
    int nspans;
    int nstate;
    rt_buf *state[2];
    const char *state_names[2];
    long steps;
    float last_lr;
    double last_norm;
};

static const char *const optim_names[] = {
    [RT_OPT_SGD] = "sgd",
    [RT_OPT_ADAM] = "adam",
    [RT_OPT_ADAMW] = "adamw",
    [RT_OPT_NADAM] = "nadam",
};
#define N_OPTIM ((int)(sizeof optim_names / sizeof optim_names[0]))

void rt_optim_config_defaults(struct rt_optim_config *c)
{
    memset(c, 0, sizeof *c);
    c->kind = RT_OPT_SGD;
    c->lr = 0.01f;
    c->momentum = 0.9f;
    c->nesterov = false;
    c->weight_decay = 0.0f;
    c->beta1 = 0.9f;
    c->beta2 = 0.999f;
    c->eps = 1e-8f;
    c->clip_norm = 0.0f;
    c->schedule = RT_SCHED_CONSTANT;
    c->step_size = 0;
    c->gamma = 0.1f;
    c->total_steps = 0;
    c->min_lr = 0.0f;
    c->warmup_steps = 0;
}

int rt_optim_kind_parse(const char *s, enum rt_optim_kind *out)
{
    for (int i = 0; i < N_OPTIM; i++) {
        if (s && strcmp(s, optim_names[i]) == 0) {
            *out = (enum rt_optim_kind)i;
            return RT_OK;
        }
    }
    return rt_error(RT_ERR_CONFIG, "unknown optimizer '%s' (accepted: sgd, adam, adamw, nadam)",
                    s ? s : "(null)");
}

const char *rt_optim_kind_name(enum rt_optim_kind k)
{
    return (int)k >= 0 && (int)k < N_OPTIM ? optim_names[k] : "?";
}

/* Hyper-parameters come from flags and model files, so a bad value is a
 * configuration error with the accepted range, found before the first step
 * rather than as NaN weights an hour later. */
static int optim_config_check(const struct rt_optim_config *c)
{
    if ((int)c->kind < 0 || (int)c->kind >= N_OPTIM)
        return rt_error(RT_ERR_CONFIG, "unknown optimizer kind %d", (int)c->kind);
    if (!(isfinite(c->lr) && c->lr > 0.0f))
        return rt_error(RT_ERR_CONFIG, "learning rate %g must be a positive number", c->lr);
    if (!(isfinite(c->weight_decay) && c->weight_decay >= 0.0f))
        return rt_error(RT_ERR_CONFIG, "weight decay %g must be >= 0", c->weight_decay);
    if (!(isfinite(c->clip_norm) && c->clip_norm >= 0.0f))
        return rt_error(RT_ERR_CONFIG, "clip norm %g must be >= 0 (0: no clipping)",
                        c->clip_norm);
    if (c->kind == RT_OPT_SGD) {
        if (!(c->momentum >= 0.0f && c->momentum < 1.0f))
            return rt_error(RT_ERR_CONFIG, "momentum %g must be in [0, 1)", c->momentum);
        if (c->nesterov && c->momentum == 0.0f)
            return rt_error(RT_ERR_CONFIG, "Nesterov SGD needs a momentum > 0");
    } else {
        if (!(c->beta1 >= 0.0f && c->beta1 < 1.0f))
            return rt_error(RT_ERR_CONFIG, "beta1 %g must be in [0, 1)", c->beta1);
        if (!(c->beta2 >= 0.0f && c->beta2 < 1.0f))
            return rt_error(RT_ERR_CONFIG, "beta2 %g must be in [0, 1)", c->beta2);
        if (!(isfinite(c->eps) && c->eps > 0.0f))
            return rt_error(RT_ERR_CONFIG, "eps %g must be a positive number", c->eps);
    }
    if (c->warmup_steps < 0)
        return rt_error(RT_ERR_CONFIG, "warm-up steps %ld must be >= 0", c->warmup_steps);
    switch (c->schedule) {
    case RT_SCHED_CONSTANT:
        break;
    case RT_SCHED_STEP:
        if (c->step_size <= 0)
            return rt_error(RT_ERR_CONFIG, "step schedule needs a step size > 0 (got %ld)",
                            c->step_size);
        if (!(isfinite(c->gamma) && c->gamma > 0.0f))
            return rt_error(RT_ERR_CONFIG, "step schedule gamma %g must be > 0", c->gamma);
        break;
    case RT_SCHED_COSINE:
        if (c->total_steps <= c->warmup_steps)
            return rt_error(RT_ERR_CONFIG,
                            "cosine schedule needs total steps (%ld) > warm-up steps (%ld): "
                            "train longer (--epochs, --limit), warm up less (--warmup E), or "
                            "use --schedule constant", c->total_steps, c->warmup_steps);
        if (!(c->min_lr >= 0.0f && c->min_lr <= c->lr))
            return rt_error(RT_ERR_CONFIG, "cosine min_lr %g must be in [0, lr = %g]",
                            c->min_lr, c->lr);
        break;
    default:
        return rt_error(RT_ERR_CONFIG, "unknown schedule kind %d", (int)c->schedule);
    }
    return RT_OK;
}

rt_optim *rt_optim_new(rt_dev *d, const struct rt_optim_config *c, size_t n)
{
    struct rt_span all = {0, n};
    return rt_optim_new_spans(d, c, &all, 1);
}

rt_optim *rt_optim_new_spans(rt_dev *d, const struct rt_optim_config *c,
                             const struct rt_span *spans, int nspans)
{
    RT_ASSERT(d && c && nspans >= 0 && (spans || nspans == 0));
    if (optim_config_check(c) < 0)
        return NULL;
    rt_optim *o = calloc(1, sizeof *o);
    if (!o || !(o->spans = malloc(((size_t)nspans + 1) * sizeof *o->spans))) {
        free(o);
        rt_error(RT_ERR_NOMEM, "out of memory for the optimizer");
        return NULL;
    }
    o->tag = OPTIM_TAG;
    o->dev = d;
    o->cfg = *c;
    size_t n = 0;
    for (int i = 0; i < nspans; i++) {
        RT_ASSERT(i == 0 || spans[i].off >= spans[i - 1].off + spans[i - 1].len);
        o->spans[i] = spans[i];
        n += spans[i].len;
    }
    o->nspans = nspans;
    o->n = n;
    o->last_norm = NAN;
    if (c->kind == RT_OPT_SGD) {
        if (c->momentum != 0.0f) {
            o->nstate = 1;
            o->state_names[0] = "momentum";
        }
    } else {
        o->nstate = 2;
        o->state_names[0] = "adam_m";
        o->state_names[1] = "adam_v";
    }
    for (int i = 0; i < o->nstate; i++) {
        /* A zero-length buffer is legal for a slice of nothing, but not every
         * backend allocates 0 bytes: keep one float. */
        o->state[i] = rt_buf_new(d, (n ? n : 1) * sizeof(float));
        if (!o->state[i]) {
            rt_error_wrap(RT_ERR_NOMEM, "allocating optimizer state '%s' (%zu floats)",
                          o->state_names[i], n);
            goto destroy_optim;
        }
        if (rt_op_fill(d, n, 0.0f, rt_buf_view(o->state[i])) < 0)
            goto destroy_optim;
    }
    return o;

destroy_optim:
    rt_optim_destroy(&o);
    return NULL;
}

void rt_optim_destroy(rt_optim **op)
{
    if (!op || !*op)
        return;
    rt_optim *o = *op;
    RT_ASSERT(o->tag == OPTIM_TAG);
    for (int i = 0; i < 2; i++)
        rt_buf_destroy(&o->state[i]);
    free(o->spans);
    o->tag = OPTIM_DEAD;
    free(o);
    *op = NULL;
}

/* Bias corrections bc1 = 1-b1^t, bc2 = 1-b2^t in double. Adam: L2 on the
 * gradient; AdamW: w -= lr*wd*w first. Adam/AdamW: m_hat = m/bc1; Nadam:
 * m_hat = b1*m/(1-b1^(t+1)) + (1-b1)*g'/bc1. */
void rt_optim_adam_scalars(const struct rt_optim_config *c, float lr, long step,
                           struct rt_adam_scalars *out)
{
    RT_ASSERT(step >= 1 && c->kind != RT_OPT_SGD);
    const bool decoupled = c->kind == RT_OPT_ADAMW;
    const double t = (double)step;
    const double bc1 = 1.0 - pow(c->beta1, t), bc2 = 1.0 - pow(c->beta2, t);
    *out = (struct rt_adam_scalars){
        .lr = lr,
        .beta1 = c->beta1,
        .beta2 = c->beta2,
        .eps = c->eps,
        .l2 = decoupled ? 0.0f : c->weight_decay,
        .decay = decoupled ? lr * c->weight_decay : 0.0f,
        .inv_bc2 = (float)(1.0 / bc2),
        .cm = (float)(1.0 / bc1),
        .cg = 0.0f,
    };
    if (c->kind == RT_OPT_NADAM) {
        out->cm = (float)(c->beta1 / (1.0 - pow(c->beta1, t + 1.0)));
        out->cg = (float)((1.0 - c->beta1) / bc1);
    }
}

/* The gradient norm (one reduction, one double to the host) is measured
 * only for clipping or a step that logs it: on a small model it was a
 * sixth of the per-step cost, and a blow-up shows in the loss, which the
 * trainer checks every step. Clipping only happens when the norm is
 * finite: scaling by clip/inf would silently zero the gradient instead of
 * exposing the blow-up. */
int rt_optim_step(rt_optim *o, rt_view w, rt_view g, bool want_norm)
{
    RT_ASSERT(o && o->tag == OPTIM_TAG);
    if (!want_norm && !(o->cfg.clip_norm > 0.0f))
        return rt_optim_update(o, w, g, NAN);
    double ss = 0.0;
    for (int i = 0; i < o->nspans; i++) {
        double part = 0.0;
        RT_TRY(rt_op_sumsq(o->dev, o->spans[i].len, rt_view_at(g, o->spans[i].off), &part));
        ss += part;
    }
    return rt_optim_update(o, w, g, sqrt(ss));
}

/* The fused step of one span; its state lies at `at` in the state buffers. */
static int span_step(rt_optim *o, const struct rt_span *sp, size_t at, float lr, rt_view w,
                     rt_view g)
{
    const struct rt_optim_config *c = &o->cfg;
    rt_view ws = rt_view_at(w, sp->off), gs = rt_view_at(g, sp->off);
    if (c->kind == RT_OPT_SGD) {
        struct rt_sgd_params p = {
            .lr = lr,
            .momentum = c->momentum,
            .weight_decay = c->weight_decay,
            .nesterov = c->nesterov,
        };
        rt_view v = {0};
        if (o->nstate)
            v = rt_view_at(rt_buf_view(o->state[0]), at);
        return rt_op_sgd_step(o->dev, sp->len, &p, ws, gs, v);
    }
    struct rt_adam_scalars p;
    rt_optim_adam_scalars(c, lr, o->steps + 1, &p);
    return rt_op_adam_step(o->dev, sp->len, &p, ws, gs, rt_view_at(rt_buf_view(o->state[0]), at),
                           rt_view_at(rt_buf_view(o->state[1]), at));
}

int rt_optim_update(rt_optim *o, rt_view w, rt_view g, double norm)
{
    return rt_optim_update_range(o, w, g, norm, 0, SIZE_MAX);
}

/* The spans' parts within [lo, hi), each scaled by `scale` first when it
 * is not 1 (clipping). */
static int update_spans(rt_optim *o, rt_view w, rt_view g, float scale, size_t lo, size_t hi)
{
    float lr = rt_schedule_lr(&o->cfg, o->steps);
    size_t at = 0;
    for (int i = 0; i < o->nspans; at += o->spans[i].len, i++) {
        /* the part of span i within [lo, hi); its state lies as far into
         * the span's state as the part into the span */
        size_t a = o->spans[i].off > lo ? o->spans[i].off : lo;
        size_t b = o->spans[i].off + o->spans[i].len;
        b = b < hi ? b : hi;
        if (a >= b)
            continue;
        struct rt_span part = {a, b - a};
        if (scale != 1.0f)
            RT_TRY(rt_op_scale(o->dev, part.len, scale, rt_view_at(g, part.off)));
        RT_TRY(span_step(o, &part, at + (a - o->spans[i].off), lr, w, g));
    }
    return RT_OK;
}

int rt_optim_update_range(rt_optim *o, rt_view w, rt_view g, double norm, size_t lo, size_t hi)
{
    RT_ASSERT(o && o->tag == OPTIM_TAG && lo <= hi);
    const struct rt_optim_config *c = &o->cfg;
    bool clip = c->clip_norm > 0.0f && isfinite(norm) && norm > (double)c->clip_norm;
    RT_TRY(update_spans(o, w, g, clip ? (float)((double)c->clip_norm / norm) : 1.0f, lo, hi));
    rt_optim_update_done(o, norm);
    return RT_OK;
}

int rt_optim_update_part(rt_optim *o, rt_view w, rt_view g, size_t lo, size_t hi)
{
    RT_ASSERT(o && o->tag == OPTIM_TAG && lo <= hi && !rt_optim_clips(o));
    return update_spans(o, w, g, 1.0f, lo, hi);
}

void rt_optim_update_done(rt_optim *o, double norm)
{
    RT_ASSERT(o && o->tag == OPTIM_TAG);
    o->last_norm = norm;
    o->last_lr = rt_schedule_lr(&o->cfg, o->steps);
    o->steps++;
}

bool rt_optim_clips(const rt_optim *o)
{
    RT_ASSERT(o && o->tag == OPTIM_TAG);
    return o->cfg.clip_norm > 0.0f;
}

long rt_optim_steps(const rt_optim *o)
{
    RT_ASSERT(o && o->tag == OPTIM_TAG);
    return o->steps;
}

void rt_optim_set_steps(rt_optim *o, long steps)
{
    RT_ASSERT(o && o->tag == OPTIM_TAG && steps >= 0);
    o->steps = steps;
}

float rt_optim_last_lr(const rt_optim *o)
{
    RT_ASSERT(o && o->tag == OPTIM_TAG);
    return o->last_lr;
}

double rt_optim_last_grad_norm(const rt_optim *o)
{
    RT_ASSERT(o && o->tag == OPTIM_TAG);
    return o->last_norm;
}

size_t rt_optim_size(const rt_optim *o)
{
    RT_ASSERT(o && o->tag == OPTIM_TAG);
    return o->n;
}

int rt_optim_state_count(const rt_optim *o)
{
    RT_ASSERT(o && o->tag == OPTIM_TAG);
    return o->nstate;
}

rt_view rt_optim_state(const rt_optim *o, int i)
{
    RT_ASSERT(o && o->tag == OPTIM_TAG && i >= 0 && i < o->nstate);
    return rt_buf_view(o->state[i]);
}

void rt_optim_swap_state(rt_optim *o, int i, rt_buf **b)
{
    RT_ASSERT(o && o->tag == OPTIM_TAG && i >= 0 && i < o->nstate && b && *b &&
              (*b)->bytes >= o->n * sizeof(float) && (*b)->dev == o->dev);
    rt_buf *t = o->state[i];
    o->state[i] = *b;
    *b = t;
}

const char *rt_optim_state_name(const rt_optim *o, int i)
{
    RT_ASSERT(o && o->tag == OPTIM_TAG && i >= 0 && i < o->nstate);
    return o->state_names[i];
}

const struct rt_optim_config *rt_optim_config(const rt_optim *o)
{
    RT_ASSERT(o && o->tag == OPTIM_TAG);
    return &o->cfg;
}
