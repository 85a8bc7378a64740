/* coord_ckpt.c — checkpoints of a run, written by the coordinator: rank 0
 * sends the weights, the state and (for "last") the whole optimiser state,
 * which every worker holds; the coordinator writes them as they come.
 * --resume reads them back and hands every worker all of it with "start". */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "coord-impl.h"
#include "status.h"
#include "transfer.h"

/* A "ckpt" message: its fields, and its frames once checked. */
struct part {
    char which[8];
    uint64_t epoch, step, best_epoch, bad, lo, hi, np, ns;
    double best;
    const msgpack_object *names;
    size_t nopt;
    const float *params, *state;
};

static int coord_note_line(void *arg, const char *line)
{
    (void)arg;
    coord_note("%s", line);
    return RT_OK;
}

int coord_ckpt_open(struct coord *k)
{
    struct coord_ckpt *ck = &k->ck;
    const struct rt_train_config *c = k->c;
    if (!(ck->cpu = rt_dev_open("cpu", 0, 1)))
        return RT_ERR_DEVICE;
    if (!(ck->cm = rt_model_load_string(k->model_text, c->model_path, ck->cpu, 1)))
        return RT_ERR_CONFIG;
    ck->np = rt_model_param_count(ck->cm);
    ck->ns = rt_model_state_count(ck->cm);
    /* the workers' starting point, for --init: the same seed gives the
     * same bits; --freeze shapes the optimiser state */
    RT_TRY(rt_model_init(ck->cm, c->seed));
    RT_TRY(rt_transfer_prepare(ck->cm, c, coord_note_line, NULL));
    struct rt_optim_config oc = c->optim;
    oc.schedule = RT_SCHED_CONSTANT; /* only the state's shape matters here */
    oc.total_steps = oc.warmup_steps = 0;
    if (!(ck->copt = rt_optim_new_trainable(ck->cpu, &oc, ck->cm)))
        return RT_ERR_CONFIG;
    if (!c->checkpoint_dir[0])
        return RT_OK;
    int stale = 0;
    RT_TRY(rt_checkpoint_dir_open(c->checkpoint_dir, &stale));
    if (stale)
        coord_note("removed %d temporary file%s that interrupted checkpoint writes left in %s",
                   stale, stale == 1 ? "" : "s", c->checkpoint_dir);
    snprintf(ck->last_path, sizeof ck->last_path, "%s/last.safetensors", c->checkpoint_dir);
    snprintf(ck->best_path, sizeof ck->best_path, "%s/best.safetensors", c->checkpoint_dir);
    return RT_OK;
}

void coord_ckpt_close(struct coord_ckpt *ck)
{
    rt_optim_destroy(&ck->copt);
    rt_model_destroy(&ck->cm);
    rt_dev_close(&ck->cpu);
    free(ck->best_params);
    free(ck->best_state);
    memset(ck, 0, sizeof *ck);
}

static int keep_best(struct coord_ckpt *ck)
{
    RT_TRY(rt_checkpoint_load(ck->best_path, ck->cm, NULL, NULL));
    ck->best_params = malloc(ck->np * sizeof(float));
    ck->best_state = malloc((ck->ns ? ck->ns : 1) * sizeof(float));
    if (!ck->best_params || !ck->best_state)
        return rt_error(RT_ERR_NOMEM, "no memory for the best weights");
    memcpy(ck->best_params, rt_view_host(rt_model_params(ck->cm)), ck->np * sizeof(float));
    if (ck->ns)
        memcpy(ck->best_state, rt_view_host(rt_model_state(ck->cm)), ck->ns * sizeof(float));
    ck->have_best = true;
    return RT_OK;
}

/* --init without a checkpoint to resume from: the workers start from the
 * weights loaded in coord_ckpt_open, sent with "start" like a resumed
 * run's at step 0 (optimiser state zero), so that no worker needs the file. */
void coord_ckpt_start_from_init(struct coord *k)
{
    struct coord_ckpt *ck = &k->ck;
    if (!k->c->init_path[0] || ck->resuming)
        return;
    ck->rpos = (struct rt_train_pos){.seed = k->c->seed, .best_metric = NAN};
    ck->resuming = true;
    coord_note("every worker starts from the weights of --init %s", k->c->init_path);
}

/* --resume: read DIR/best (for early stopping) and DIR/last, like one
 * process would; the workers get them with "start". */
int coord_ckpt_load_resume(struct coord *k)
{
    struct coord_ckpt *ck = &k->ck;
    const struct rt_train_config *c = k->c;
    struct stat st;
    if (stat(ck->last_path, &st) != 0) {
        coord_note("no checkpoint at %s yet: starting from scratch", ck->last_path);
        return RT_OK;
    }
    if (c->patience > 0 && stat(ck->best_path, &st) == 0)
        RT_TRY(keep_best(ck));
    RT_TRY(rt_checkpoint_load(ck->last_path, ck->cm, ck->copt, &ck->rpos));
    if (ck->rpos.seed != c->seed)
        return rt_error(RT_ERR_CONFIG, "%s was trained with --seed %llu, not %llu: resume with "
                                       "the same seed (the data order and split depend on it)",
                        ck->last_path, (unsigned long long)ck->rpos.seed,
                        (unsigned long long)c->seed);
    ck->resuming = true;
    coord_note("resuming from %s at epoch %ld, step %ld", ck->last_path, ck->rpos.epoch,
               ck->rpos.step);
    return RT_OK;
}

static void put_resume(struct coord *k, size_t lo, size_t hi, int nopt)
{
    const struct coord_ckpt *ck = &k->ck;
    const struct rt_train_pos *p = &ck->rpos;
    rt_wire_begin(&k->wr, k->run, "start", 12);
    rt_wire_put_bool(&k->wr, "resume", true);
    rt_wire_put_uint(&k->wr, "epoch", (uint64_t)p->epoch);
    rt_wire_put_uint(&k->wr, "step", (uint64_t)p->step);
    rt_wire_put_f64(&k->wr, "best_metric", p->best_metric);
    rt_wire_put_uint(&k->wr, "best_epoch", (uint64_t)p->best_epoch);
    rt_wire_put_uint(&k->wr, "bad_epochs", (uint64_t)p->bad_epochs);
    rt_wire_put_uint(&k->wr, "np", ck->np);
    rt_wire_put_uint(&k->wr, "ns", ck->ns);
    rt_wire_put_uint(&k->wr, "lo", (uint64_t)lo);
    rt_wire_put_uint(&k->wr, "hi", (uint64_t)hi);
    rt_wire_put_uint(&k->wr, "nopt", (uint64_t)nopt);
    rt_wire_put_bool(&k->wr, "best", ck->have_best);
}

/* "start" of a resumed run: position, weights, the optimiser state, and
 * the best weights when early stopping needs them. */
int coord_ckpt_send_resume(struct coord *k, struct coord_worker *w)
{
    const struct coord_ckpt *ck = &k->ck;
    size_t lo = 0, hi = rt_optim_size(ck->copt); /* the trainable parameters' state */
    int nopt = rt_optim_state_count(ck->copt);
    put_resume(k, lo, hi, nopt);
    RT_TRY(rt_wire_end(&k->wr));
    const void *fr[7];
    size_t sz[7];
    int n = 0;
    fr[n] = rt_view_host(rt_model_params(ck->cm));
    sz[n++] = ck->np * sizeof(float);
    if (ck->ns) {
        fr[n] = rt_view_host(rt_model_state(ck->cm));
        sz[n++] = ck->ns * sizeof(float);
    }
    for (int i = 0; i < nopt; i++) {
        fr[n] = (const float *)rt_view_host(rt_optim_state(ck->copt, i)) + lo;
        sz[n++] = (size_t)(hi - lo) * sizeof(float);
    }
    if (ck->have_best) {
        fr[n] = ck->best_params;
        sz[n++] = ck->np * sizeof(float);
        if (ck->ns) {
            fr[n] = ck->best_state;
            sz[n++] = ck->ns * sizeof(float);
        }
    }
    return coord_send(k, w, fr, sz, n);
}

static int read_part(struct coord *k, struct part *p)
{
    rt_wire_map m = rt_wire_root(&k->msg);
    size_t np = k->ck.np, ns = k->ck.ns;
    if (rt_wire_get_str(m, "which", 1, p->which, sizeof p->which) < 0 ||
        rt_wire_get_uint(m, "epoch", 0, 1000000, &p->epoch) < 0 ||
        rt_wire_get_uint(m, "step", 0, (uint64_t)1 << 50, &p->step) < 0 ||
        rt_wire_get_f64_or_nan(m, "best_metric", -1e30, 1e30, &p->best) < 0 ||
        rt_wire_get_uint(m, "best_epoch", 0, 1000000, &p->best_epoch) < 0 ||
        rt_wire_get_uint(m, "bad_epochs", 0, 1000000, &p->bad) < 0 ||
        rt_wire_get_uint(m, "lo", 0, np, &p->lo) < 0 ||
        rt_wire_get_uint(m, "hi", p->lo, np, &p->hi) < 0 ||
        rt_wire_get_uint(m, "np", 0, np, &p->np) < 0 ||
        rt_wire_get_uint(m, "ns", 0, ns, &p->ns) < 0 ||
        rt_wire_get_array(m, "opt", 2, &p->names, &p->nopt) < 0)
        return RT_ERR_FORMAT;
    return RT_OK;
}

/* Why a part does not fit this run's checkpoints, or NULL. */
static const char *misfit(struct coord *k, const struct part *p)
{
    const struct coord_ckpt *ck = &k->ck;
    bool last = !strcmp(p->which, "last");
    int expect_opt = last ? rt_optim_state_count(ck->copt) : 0;
    if (!last && strcmp(p->which, "best") && strcmp(p->which, "final"))
        return "an unknown checkpoint kind";
    if (p->lo != 0 || p->hi != (last ? rt_optim_size(ck->copt) : p->hi))
        return "optimiser state that is not the whole model's";
    if (p->np != ck->np || p->ns != ck->ns)
        return "weights of the wrong size";
    if ((int)p->nopt != expect_opt)
        return "the wrong number of optimiser buffers";
    if (k->fr.n != 2 + (int)p->nopt + (p->np ? 1 : 0) + (p->ns ? 1 : 0))
        return "the wrong number of frames";
    for (size_t i = 0; i < p->nopt; i++) {
        char nm[32];
        if (rt_wire_item_str(p->names, i, "opt", nm, sizeof nm) < 0 ||
            strcmp(nm, rt_optim_state_name(ck->copt, (int)i)) != 0 ||
            rt_zframe_size(&k->fr, 2 + (int)i) != (p->hi - p->lo) * sizeof(float))
            return "optimiser state of another kind or size";
    }
    int f = 2 + (int)p->nopt;
    if (p->np && rt_zframe_size(&k->fr, f) != p->np * sizeof(float))
        return "a parameter frame of the wrong size";
    if (p->ns && rt_zframe_size(&k->fr, f + (p->np ? 1 : 0)) != p->ns * sizeof(float))
        return "a state frame of the wrong size";
    return NULL;
}

static int upload_model(struct coord_ckpt *ck, const float *params, const float *state)
{
    RT_TRY(rt_upload(ck->cpu, rt_model_params(ck->cm), params, ck->np * sizeof(float)));
    if (ck->ns)
        RT_TRY(rt_upload(ck->cpu, rt_model_state(ck->cm), state, ck->ns * sizeof(float)));
    return RT_OK;
}

/* "last": the weights, the state and the optimiser state of one step. */
static int last_save(struct coord *k, const struct part *p, const struct rt_train_pos *pos)
{
    struct coord_ckpt *ck = &k->ck;
    for (size_t i = 0; i < p->nopt; i++)
        memcpy(rt_view_host(rt_optim_state(ck->copt, (int)i)), rt_zframe_data(&k->fr, 2 + (int)i),
               rt_optim_size(ck->copt) * sizeof(float));
    RT_TRY(upload_model(ck, p->params, p->state));
    rt_optim_set_steps(ck->copt, (long)p->step);
    return rt_checkpoint_save(ck->last_path, ck->cm, ck->copt, pos);
}

/* "ckpt": one part of a checkpoint from w. */
int coord_ckpt_part(struct coord *k, struct coord_worker *w)
{
    struct coord_ckpt *ck = &k->ck;
    struct part p;
    if (read_part(k, &p) < 0) {
        rt_wire_drop(&k->drops, w->m.name, rt_error_detail());
        return RT_OK;
    }
    const char *bad = misfit(k, &p);
    if (bad) {
        rt_wire_drop(&k->drops, w->m.name, bad);
        return RT_OK;
    }
    int f = 2 + (int)p.nopt;
    p.params = p.np ? rt_zframe_data(&k->fr, f) : NULL;
    p.state = p.ns ? rt_zframe_data(&k->fr, f + 1) : NULL;
    struct rt_train_pos pos = {.epoch = (long)p.epoch, .step = (long)p.step, .seed = k->c->seed,
                               .best_metric = p.best, .best_epoch = (long)p.best_epoch,
                               .bad_epochs = (long)p.bad};
    if (strcmp(p.which, "last") != 0) {
        const char *path = !strcmp(p.which, "best") ? ck->best_path : k->c->save_path;
        if (!path[0])
            return RT_OK;
        RT_TRY(upload_model(ck, p.params, p.state));
        RT_TRY(rt_checkpoint_save(path, ck->cm, NULL, &pos));
        coord_status_event(k, "checkpoint", "wrote %s (%s, step %llu)", path, p.which,
                           (unsigned long long)p.step);
        return RT_OK;
    }
    if (!ck->last_path[0])
        return RT_OK;
    RT_TRY(last_save(k, &p, &pos));
    coord_status_event(k, "checkpoint", "wrote %s (step %llu)", ck->last_path,
                       (unsigned long long)p.step);
    return RT_OK;
}

bool coord_ckpt_written(const struct coord *k)
{
    struct stat st;
    return k->ck.last_path[0] && stat(k->ck.last_path, &st) == 0;
}
