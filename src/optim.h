/* optim.h — optimisers (fused steps from the kernel table), learning-rate
 * schedules and gradient clipping. */
#ifndef RT_OPTIM_H
#define RT_OPTIM_H

#include <stdbool.h>
#include <stddef.h>

#include "backend.h"

enum rt_optim_kind { RT_OPT_SGD, RT_OPT_ADAM, RT_OPT_ADAMW, RT_OPT_NADAM };
enum rt_sched_kind { RT_SCHED_CONSTANT, RT_SCHED_STEP, RT_SCHED_COSINE };

struct rt_optim_config {
    enum rt_optim_kind kind;
    float lr;
    float momentum;     /* SGD */
    bool nesterov;      /* SGD */
    float weight_decay; /* L2 for SGD/Adam/Nadam, decoupled for AdamW */
    float beta1, beta2, eps;
    float clip_norm;    /* 0: no clipping; else clip the global L2 norm */
    enum rt_sched_kind schedule;
    long step_size;     /* step schedule: multiply by gamma every step_size steps */
    float gamma;
    long total_steps;   /* cosine: decay from lr (end of warm-up) to min_lr
                         * (step total_steps and after); total_steps counts
                         * the whole run, warm-up included */
    float min_lr;
    long warmup_steps;  /* linear warm-up from lr/warmup_steps to lr, then the
                         * schedule, counting its steps from the end of warm-up */
};

/* Defaults: SGD lr 0.01 momentum 0.9, betas 0.9/0.999, eps 1e-8, constant. */
void rt_optim_config_defaults(struct rt_optim_config *c);
int rt_optim_kind_parse(const char *s, enum rt_optim_kind *out);
int rt_sched_kind_parse(const char *s, enum rt_sched_kind *out);
const char *rt_optim_kind_name(enum rt_optim_kind k);
const char *rt_sched_kind_name(enum rt_sched_kind k);

/* How the learning rate follows the global batch (--lr-scale): none,
 * linear (lr x batch / base, Goyal et al. 2017) or sqrt (lr x
 * sqrt(batch / base), Krizhevsky 2014; Hoffer et al. 2017). */
enum rt_lr_scale { RT_LR_SCALE_NONE, RT_LR_SCALE_LINEAR, RT_LR_SCALE_SQRT };
/* The factor the rule gives batch over base (1 for none). */
double rt_lr_scale_factor(enum rt_lr_scale rule, int batch, int base);

/* The learning rate of step `step` (0-based). Pure function. */
float rt_schedule_lr(const struct rt_optim_config *c, long step);

/* The scalars of Adam/AdamW/Nadam step `step` (1-based) at learning rate
 * lr, for the kernel table's adam_step: computed here, once, in double
 * where it matters, so every backend applies the same bits. */
void rt_optim_adam_scalars(const struct rt_optim_config *c, float lr, long step,
                           struct rt_adam_scalars *out);

typedef struct rt_optim rt_optim;

/* Part of a flat parameter buffer: floats [off, off + len). */
struct rt_span {
    size_t off, len;
};

/* State for n parameters on device d (momentum, or Adam's m and v), zeroed. */
rt_optim *rt_optim_new(rt_dev *d, const struct rt_optim_config *c, size_t n);
/* The same for the parameters in spans[0..nspans-1] of a larger buffer
 * (ascending, not overlapping): the others (frozen layers) are never
 * touched and have no state. The state holds the spans back to back, so
 * rt_optim_size is the sum of their lengths; rt_optim_step / update still
 * take views of the whole buffer. */
rt_optim *rt_optim_new_spans(rt_dev *d, const struct rt_optim_config *c,
                             const struct rt_span *spans, int nspans);
void rt_optim_destroy(rt_optim **o);

/* One update of w (n floats) from g: measure g's L2 norm (when clipping, or
 * when want_norm: a step that logs it; otherwise the norm is NaN), clip
 * (when asked and the norm is finite; g is scaled in place), schedule,
 * fused step. Counts steps. */
int rt_optim_step(rt_optim *o, rt_view w, rt_view g, bool want_norm);
/* The same with the gradient's norm measured by the caller (a data-parallel
 * step knows the norm of the whole gradient, not only of the slice w and g
 * cover); NaN: not measured, no clipping. */
int rt_optim_update(rt_optim *o, rt_view w, rt_view g, double norm);
/* The same update, applied to the parameters in [lo, hi) of w's buffer
 * only (their state and gradient alike); counts one step. The ranges of
 * the ranks of one host, each updating its own, give together the bits of
 * one rt_optim_update (the maths is elementwise), so the workers of a host
 * can share one copy of the weights and split its update. */
int rt_optim_update_range(rt_optim *o, rt_view w, rt_view g, double norm, size_t lo, size_t hi);
/* A step's update in pieces: rt_optim_update_part on any number of
 * disjoint ranges (each at most once a step; none counts a step, all use
 * the step's learning rate), then rt_optim_update_done once, with the norm
 * the step logs (NaN: not measured). No clipping: that needs the whole
 * gradient's norm before the first piece (rt_optim_clips says whether). */
int rt_optim_update_part(rt_optim *o, rt_view w, rt_view g, size_t lo, size_t hi);
void rt_optim_update_done(rt_optim *o, double norm);
bool rt_optim_clips(const rt_optim *o);

long rt_optim_steps(const rt_optim *o);          /* updates done so far */
size_t rt_optim_size(const rt_optim *o);         /* n, as given to rt_optim_new */
void rt_optim_set_steps(rt_optim *o, long steps); /* on resume */
float rt_optim_last_lr(const rt_optim *o);
double rt_optim_last_grad_norm(const rt_optim *o); /* before clipping; NaN before the first step */

/* Optimiser state buffers, for checkpoints: 0 (plain SGD), 1 or 2 views of
 * n floats each, named by rt_optim_state_name ("momentum", "adam_m", ...). */
int rt_optim_state_count(const rt_optim *o);
rt_view rt_optim_state(const rt_optim *o, int i);
const char *rt_optim_state_name(const rt_optim *o, int i);
/* Exchange state buffer i with *b (rt_optim_size floats on the optimiser's
 * device; the contents stay where they are): see rt_model_swap_params. */
void rt_optim_swap_state(rt_optim *o, int i, rt_buf **b);
const struct rt_optim_config *rt_optim_config(const rt_optim *o);

#endif
