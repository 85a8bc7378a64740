/* coord_report.c — what the coordinator shows and writes: rank 0's
 * progress, epoch lines and metrics (the workers' text never reaches the
 * terminal unchecked), the cluster table, each worker's result and the
 * verdict at the end (interrupted, failed, or identical replicas). */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "checkpoint.h"
#include "coord-impl.h"
#include "partition.h"
#include "status.h"

/* Text from a worker goes to a terminal: no control characters. */
void coord_sanitize(char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            *s = '?';
}

static bool printable_text(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return false;
    return true;
}

/* The newest "step" of the metrics file's lines (-1: none). Lines are
 * written in the order of steps. */
static long metrics_last_step(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[4096];
    long last = -1, step;
    while (fgets(line, sizeof line, f)) {
        const char *p = strstr(line, "\"step\": ");
        if (p && !strstr(line, "\"event\"") && sscanf(p + 8, "%ld", &step) == 1 && step > last)
            last = step;
    }
    fclose(f);
    return last;
}

int coord_report_open(struct coord *k)
{
    const struct rt_train_config *c = k->c;
    k->metrics_step = -1;
    if (c->resume && c->metrics_path[0])
        k->metrics_step = metrics_last_step(c->metrics_path);
    /* at the start, not after the training (after coord_ckpt_open: it may
     * go into the checkpoint directory just made) */
    if (c->save_path[0])
        RT_TRY(rt_safetensors_can_write(c->save_path));
    if (c->metrics_path[0] && !(k->mf = rt_metrics_open(c->metrics_path)))
        return RT_ERR_IO;
    return RT_OK;
}

/* A re-adopted run's rank 0 sends again what the coordinator it replaces
 * may have read after the checkpoint file: a metrics line of a step the
 * file already has is written once. */
static bool metrics_seen(const struct coord *k, rt_wire_map f)
{
    if (!k->adopted || k->metrics_step < 0)
        return false;
    for (uint32_t i = 0; i < f->via.map.size; i++) {
        const msgpack_object *kk = &f->via.map.ptr[i].key, *v = &f->via.map.ptr[i].val;
        if (kk->via.str.size == 4 && !memcmp(kk->via.str.ptr, "step", 4) &&
            v->type == MSGPACK_OBJECT_POSITIVE_INTEGER && (long)v->via.u64 <= k->metrics_step) {
            coord_note("the metrics of step %llu are in %s already: not written again",
                       (unsigned long long)v->via.u64, k->c->metrics_path);
            return true;
        }
    }
    return false;
}

void coord_report_close(struct coord *k) { rt_metrics_close(&k->mf); }

int coord_report_progress(struct coord *k, struct coord_worker *w)
{
    uint64_t epoch, epochs, done, total;
    double loss, acc, ips, eta;
    rt_wire_map m = rt_wire_root(&k->msg);
    if (w->rank != 0 || rt_wire_get_uint(m, "epochs", 1, 1000000, &epochs) < 0 ||
        rt_wire_get_uint(m, "epoch", 1, epochs, &epoch) < 0 ||
        rt_wire_get_uint(m, "total", 1, UINT32_MAX, &total) < 0 ||
        rt_wire_get_uint(m, "done", 0, total, &done) < 0 ||
        rt_wire_get_f64_or_nan(m, "loss", 0, 1e30, &loss) < 0 ||
        rt_wire_get_f64_or_nan(m, "acc", 0, 1, &acc) < 0 ||
        rt_wire_get_f64(m, "ips", 0, 1e12, &ips) < 0 ||
        rt_wire_get_f64(m, "eta", 0, 1e12, &eta) < 0) {
        rt_wire_drop(&k->drops, w->m.name, "a bad 'progress'");
        return RT_OK;
    }
    rt_progress_step(&k->prog, (int)epoch, (int)epochs, (long)done, (long)total, loss, acc, ips,
                     eta);
    coord_status_progress(k, (int)epoch, (int)epochs, (long)done, (long)total, loss, acc, ips,
                          eta);
    return RT_OK;
}

int coord_report_line(struct coord *k, struct coord_worker *w)
{
    char text[1024];
    if (w->rank != 0 || rt_wire_get_str(rt_wire_root(&k->msg), "text", 1, text, sizeof text) < 0 ||
        !printable_text(text)) {
        rt_wire_drop(&k->drops, w->m.name, "a bad 'line'");
        return RT_OK;
    }
    /* The plan's lines (shares, standby) are log lines, shown even with
     * --progress off; epoch lines follow the progress mode. */
    coord_plan_line(k, text);
    if (k->prog.quiet && !strncmp(text, "ragtag: [plan]", 14))
        fprintf(stderr, "%s\n", text);
    else
        rt_progress_epoch(&k->prog, text);
    return RT_OK;
}

static const char *const metric_keys[] = {
    "epoch", "step", "train_loss", "train_acc", "val_loss", "val_acc", "test_loss", "test_acc",
    "lr", "images_per_s", "seconds", "loss", "acc", "grad_norm", "samples", "steps_redone",
    "consensus_distance", "consensus_relative", "max_rss_mb", NULL,
};

static bool metric_ok(const msgpack_object *key, const msgpack_object *v)
{
    bool known = false;
    for (int j = 0; metric_keys[j]; j++)
        known |= key->via.str.size == strlen(metric_keys[j]) &&
                 !memcmp(key->via.str.ptr, metric_keys[j], key->via.str.size);
    return known && (v->type == MSGPACK_OBJECT_POSITIVE_INTEGER ||
                     v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER ||
                     v->type == MSGPACK_OBJECT_FLOAT64 || v->type == MSGPACK_OBJECT_FLOAT32);
}

/* "metrics": one line of the metrics file, every field checked before
 * any is written. */
int coord_report_metrics(struct coord *k, struct coord_worker *w)
{
    rt_wire_map f;
    if (w->rank != 0 || rt_wire_get_map(rt_wire_root(&k->msg), "fields", &f) < 0 ||
        f->via.map.size > 18) {
        rt_wire_drop(&k->drops, w->m.name, "a bad 'metrics'");
        return RT_OK;
    }
    for (uint32_t i = 0; i < f->via.map.size; i++)
        if (!metric_ok(&f->via.map.ptr[i].key, &f->via.map.ptr[i].val)) {
            rt_wire_drop(&k->drops, w->m.name, "a 'metrics' field that is not a known number");
            return RT_OK;
        }
    coord_status_metrics(k, f);
    if (!k->mf || metrics_seen(k, f))
        return RT_OK;
    rt_metrics_begin(k->mf);
    for (uint32_t i = 0; i < f->via.map.size; i++) {
        const msgpack_object *kk = &f->via.map.ptr[i].key, *v = &f->via.map.ptr[i].val;
        char key[32];
        snprintf(key, sizeof key, "%.*s", (int)kk->via.str.size, kk->via.str.ptr);
        if (v->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
            rt_metrics_int(k->mf, key, (long)v->via.u64);
        else if (v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
            rt_metrics_int(k->mf, key, (long)v->via.i64);
        else
            rt_metrics_num(k->mf, key, v->via.f64);
    }
    return rt_metrics_end(k->mf);
}

/* Each rank's share of the batch. Balanced sync/average: what the
 * workers' first plan will say, from the speeds they reported at join,
 * computed the same way (partition.h). */
static void first_shares(struct coord *k, long *share)
{
    double speed[RT_MAX_WORKERS];
    long sh[RT_MAX_WORKERS];
    bool act[RT_MAX_WORKERS];
    bool plan = k->c->partition == RT_PARTITION_BALANCED && k->c->mode != RT_MODE_GOSSIP;
    int n = k->ms.n;
    for (int r = 0; plan && r < n; r++) {
        speed[r] = coord_rank(k, r)->ips;
        act[r] = true;
    }
    long cap[RT_MAX_WORKERS];
    for (int r = 0; r < n; r++) {
        long c = coord_rank(k, r)->mem_rows;
        cap[r] = c > 0 ? c : k->c->batch;
    }
    if (plan) {
        rt_plan_standby(n, speed, k->c->min_share, act);
        (void)rt_plan_shares_capped(k->c->batch, n, speed, act,
                                    k->c->mode == RT_MODE_SYNC ? cap : NULL, sh);
    }
    for (int r = 0; r < n; r++) {
        size_t lo, hi;
        rt_slice((size_t)k->c->batch, n, r, &lo, &hi);
        share[r] = plan ? sh[r] : (long)(hi - lo);
    }
}

void coord_report_table(struct coord *k)
{
    long share[RT_MAX_WORKERS];
    first_shares(k, share);
    coord_plan_first(k, share);
    int n = k->ms.n;
    coord_note("cluster of %d worker%s, run %.8s, links %s, generation %llu:", n,
               n == 1 ? "" : "s", k->run, coord_security_mode(k), (unsigned long long)k->ms.gen);
    fprintf(stderr, "  %4s  %-14s %-14s %-8s %-30s %7s %5s %10s %9s %6s  %s\n", "rank", "name",
            "host", "backend", "device", "threads", "cpus", "MB need/lim", "img/s", "share",
            "ring");
    for (int r = 0; r < n; r++) {
        struct coord_worker *w = coord_rank(k, r);
        char ring[64], cpus[16];
        if (w->m.cpu_quota > 0.0)
            snprintf(cpus, sizeof cpus, "%.2f", w->m.cpu_quota);
        else
            snprintf(cpus, sizeof cpus, "-");
        if (n == 1)
            snprintf(ring, sizeof ring, "-");
        else
            snprintf(ring, sizeof ring, "%s -> %d",
                     rt_membership_link_kind(&k->ms, r, k->o->allow_shm), (r + 1) % n);
        char mem[48];
        coord_memory_cell(w, mem, sizeof mem);
        fprintf(stderr, "  %4d  %-14.14s %-14.14s %-8s %-30.30s %7d %5s %11s %9.0f %6ld  %s\n", r,
                w->m.name, w->m.host, w->m.backend, w->m.device, w->m.threads, cpus, mem, w->ips,
                share[r], ring);
    }
}

/* The fields of a "done" into w's result; false when one is bad. */
static bool read_done(struct coord *k, struct coord_worker *w, int64_t *status, uint64_t *u)
{
    rt_wire_map m = rt_wire_root(&k->msg);
    struct rt_train_result *r = &w->res;
    return rt_wire_get_int(m, "status", -100, 0, status) == 0 &&
           rt_wire_get_str(m, "message", 0, w->message, sizeof w->message) == 0 &&
           rt_wire_get_uint(m, "hash", 0, UINT64_MAX, &u[0]) == 0 &&
           rt_wire_get_uint(m, "epochs_run", 0, 1000000, &u[1]) == 0 &&
           rt_wire_get_uint(m, "steps", 0, (uint64_t)1 << 50, &u[2]) == 0 &&
           rt_wire_get_f64_or_nan(m, "train_loss", 0, 1e30, &r->train_loss) == 0 &&
           rt_wire_get_f64_or_nan(m, "train_acc", 0, 1, &r->train_acc) == 0 &&
           rt_wire_get_f64_or_nan(m, "val_loss", 0, 1e30, &r->val_loss) == 0 &&
           rt_wire_get_f64_or_nan(m, "val_acc", 0, 1, &r->val_acc) == 0 &&
           rt_wire_get_f64_or_nan(m, "test_loss", -1, 1e30, &r->test_loss) == 0 &&
           rt_wire_get_f64_or_nan(m, "test_acc", -1, 1, &r->test_acc) == 0 &&
           rt_wire_get_f64(m, "images_per_s", 0, 1e12, &r->images_per_s) == 0 &&
           rt_wire_get_bool(m, "stopped_early", &r->stopped_early) == 0 &&
           rt_wire_get_uint(m, "best_epoch", 0, 1000000, &u[3]) == 0 &&
           (!rt_wire_has(m, "local_steps") ||
            (rt_wire_get_uint(m, "local_steps", 0, (uint64_t)1 << 50, &u[4]) == 0 &&
             rt_wire_get_f64(m, "train_s", 0, 1e12, &r->train_seconds) == 0 &&
             rt_wire_get_uint(m, "averagings", 0, (uint64_t)1 << 50, &u[5]) == 0 &&
             rt_wire_get_uint(m, "plans", 0, (uint64_t)1 << 50, &u[6]) == 0)) &&
           (!rt_wire_has(m, "max_rss") ||
            rt_wire_get_uint(m, "max_rss", 0, (uint64_t)1 << 50, &w->max_rss) == 0);
}

void coord_report_done(struct coord *k, struct coord_worker *w)
{
    int64_t status;
    uint64_t u[7] = {0}; /* hash, epochs, steps, best epoch, local steps, averagings, plans */
    struct rt_train_result *r = &w->res;
    if (!read_done(k, w, &status, u)) {
        rt_wire_drop(&k->drops, w->m.name, rt_error_detail());
        return;
    }
    coord_sanitize(w->message);
    w->done = true;
    w->status = (int)status;
    w->hash = r->params_hash = u[0];
    r->epochs_run = (int)u[1];
    r->steps = (long)u[2];
    r->best_epoch = (int)u[3];
    r->local_steps = (long)u[4];
    r->gossip_averagings = (long)u[5];
    r->plans = (long)u[6];
    /* local modes: how each worker fared at its own pace */
    if (w->status == 0 && k->c->mode != RT_MODE_SYNC) {
        char avg[64] = "";
        if (k->c->mode == RT_MODE_GOSSIP)
            snprintf(avg, sizeof avg, ", %ld pairwise averagings", r->gossip_averagings);
        coord_note("worker %s (rank %d): %ld local steps in %.1f s of training (%.0f steps/s)%s",
                   w->m.name, w->rank, r->local_steps, r->train_seconds,
                   r->train_seconds > 0 ? r->local_steps / r->train_seconds : 0.0, avg);
    }
}

int coord_report_failed(struct coord *k, struct coord_worker *w)
{
    char msg[600] = "";
    rt_wire_get_str(rt_wire_root(&k->msg), "message", 0, msg, sizeof msg);
    coord_sanitize(msg);
    return rt_error(RT_ERR_NET, "worker %s (rank %d, %s) failed: %s", w->m.name, w->rank,
                    w->m.host, msg[0] ? msg : "(no message)");
}

static int check_replicas(struct coord *k)
{
    struct coord_worker *w0 = coord_rank(k, 0);
    int n = k->ms.n;
    for (int r = 1; r < n; r++) {
        struct coord_worker *w = coord_rank(k, r);
        if (w->hash != w0->hash)
            return rt_error(RT_ERR_NET, "replicas diverged: rank %d (%s) ends with parameter "
                                        "hash %016llx, rank 0 with %016llx",
                            r, w->m.name, (unsigned long long)w->hash,
                            (unsigned long long)w0->hash);
    }
    coord_note("replicas identical: parameter hash %016llx on all %d worker%s",
               (unsigned long long)w0->hash, n, n == 1 ? "" : "s");
    return RT_OK;
}

void coord_report_event(struct coord *k, const char *event, const struct coord_worker *w,
                        const char *why)
{
    coord_status_event(k, !strcmp(event, "joined") ? "join" : event,
                       "generation %llu: %s %s (%s, rank %d): %s", (unsigned long long)k->ms.gen +
                       (!strcmp(event, "joined") ? 0 : 1), w->m.name, event, w->m.host, w->rank, why);
    if (!k->mf)
        return;
    rt_metrics_begin(k->mf);
    rt_metrics_str(k->mf, "event", event);
    rt_metrics_int(k->mf, "generation", (long)k->ms.gen + (!strcmp(event, "lost") ? 1 : 0));
    rt_metrics_str(k->mf, "name", w->m.name);
    rt_metrics_str(k->mf, "host", w->m.host);
    rt_metrics_int(k->mf, "rank", w->rank);
    rt_metrics_str(k->mf, "reason", why);
    rt_metrics_int(k->mf, "workers", coord_alive(k));
    if (rt_metrics_end(k->mf) < 0)
        coord_note("cannot write the metrics file: %s", rt_error_detail());
}

void coord_report_restart(struct coord *k, int workers)
{
    bool ck = coord_ckpt_written(k);
    char why[1024]; /* the reason the run lost its state; later calls may set their own */
    snprintf(why, sizeof why, "%s", rt_error_detail());
    coord_status_event(k, "restart", "the run goes on from %s: %s",
                       ck ? k->ck.last_path : "its beginning", why);
    if (!k->mf)
        return;
    rt_metrics_begin(k->mf);
    rt_metrics_str(k->mf, "event", "restart");
    rt_metrics_str(k->mf, "from", ck ? "checkpoint" : "beginning");
    if (ck)
        rt_metrics_str(k->mf, "checkpoint", k->ck.last_path);
    rt_metrics_str(k->mf, "reason", why);
    rt_metrics_int(k->mf, "workers", workers);
    if (k->o->spawn_local)
        rt_metrics_int(k->mf, "restarts", *k->local.restarts);
    if (rt_metrics_end(k->mf) < 0)
        coord_note("cannot write the metrics file: %s", rt_error_detail());
}

int coord_report_end(struct coord *k, double t_start, struct rt_train_result *res)
{
    if (k->lost || k->joined || k->standby)
        fprintf(stderr, "ragtag: [members] %ld lost, %ld joined, %ld left on standby; the run "
                        "ended in generation %llu with %d worker%s\n", k->lost, k->joined,
                k->standby, (unsigned long long)k->ms.gen, k->ms.n, k->ms.n == 1 ? "" : "s");
    struct coord_worker *w0 = coord_rank(k, 0);
    *res = w0->res;
    res->seconds = rt_now() - t_start;
    coord_memory_report(k, res);
    if (k->interrupted_step <= 0 && w0->status != RT_ERR_INTERRUPTED)
        return check_replicas(k);
    if (k->ck.last_path[0])
        fprintf(stderr, "\nragtag: interrupted at step %ld; saved %s (continue with "
                        "--resume)\n", w0->res.steps, k->ck.last_path);
    else
        fprintf(stderr, "\nragtag: interrupted at step %ld (no --checkpoint: nothing "
                        "saved)\n", w0->res.steps);
    return rt_error(RT_ERR_INTERRUPTED, "training interrupted at step %ld", w0->res.steps);
}
