/* coord_job.c — what every worker gets: the job (its rank, the member
 * list, the model text, the options, the data or a manifest of files to
 * fetch) and, on request, the data files piece by piece. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord-impl.h"
#include "status.h"

#define MAX_MODEL_TEXT (512u << 10)

int coord_job_read_model(struct coord *k)
{
    const char *path = k->c->model_path;
    FILE *f = fopen(path, "rb");
    if (!f)
        return rt_error(RT_ERR_IO, "cannot read %s: %s", path, strerror(errno));
    k->model_text = malloc(MAX_MODEL_TEXT + 1);
    if (!k->model_text) {
        fclose(f);
        return rt_error(RT_ERR_NOMEM, "out of memory");
    }
    k->model_len = fread(k->model_text, 1, MAX_MODEL_TEXT + 1, f);
    int err = ferror(f) ? errno : 0;
    fclose(f);
    if (err)
        return rt_error(RT_ERR_IO, "cannot read %s: %s", path, strerror(err));
    if (k->model_len > MAX_MODEL_TEXT)
        return rt_error(RT_ERR_CONFIG, "%s is larger than %u KiB", path, MAX_MODEL_TEXT >> 10);
    k->model_text[k->model_len] = '\0';
    return RT_OK;
}

static int option_add(void *arg, const char *key, const char *value)
{
    struct coord *k = arg;
    struct coord_option_list *l = &k->opts;
    if (k->o->serve_data && !strcmp(key, "data"))
        return RT_OK; /* the workers get the files instead */
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 64;
        char **nk = realloc(l->key, (size_t)cap * sizeof *nk);
        if (nk)
            l->key = nk;
        char **nv = realloc(l->value, (size_t)cap * sizeof *nv);
        if (nv)
            l->value = nv;
        if (!nk || !nv)
            return rt_error(RT_ERR_NOMEM, "no memory for the options sent to workers");
        l->cap = cap;
    }
    l->key[l->n] = strdup(key);
    l->value[l->n] = strdup(value);
    if (!l->key[l->n] || !l->value[l->n]) {
        free(l->key[l->n]);
        free(l->value[l->n]);
        return rt_error(RT_ERR_NOMEM, "no memory for the options sent to workers");
    }
    l->n++;
    return RT_OK;
}

static void put_job(struct coord *k, int r, const struct rt_membership *ms, double setup_after)
{
    const struct rt_coord_options *o = k->o;
    const struct rt_train_config *c = k->c;
    rt_wire_begin(&k->wr, k->run, "job", 14 + (o->serve_data ? 1 : 0));
    rt_wire_put_uint(&k->wr, "rank", (uint64_t)r);
    rt_membership_put(&k->wr, ms);
    rt_wire_put_str(&k->wr, "model_name", c->model_path);
    rt_wire_put_bin(&k->wr, "model", k->model_text, k->model_len);
    rt_wire_put_bool(&k->wr, "checkpoints", c->checkpoint_dir[0] != '\0');
    rt_wire_put_bool(&k->wr, "final", c->save_path[0] != '\0');
    rt_wire_put_bool(&k->wr, "shm", o->allow_shm);
    rt_wire_put_uint(&k->wr, "chunk", o->chunk_bytes);
    rt_wire_put_f64(&k->wr, "hb", 1.0);
    rt_wire_put_f64(&k->wr, "timeout", o->worker_timeout);
    rt_wire_put_bool(&k->wr, "token_links", o->token_links && k->curve);
    rt_wire_put_f64(&k->wr, "setup_after", setup_after);
    rt_wire_put_array(&k->wr, "options", k->opts.n);
    for (int i = 0; i < k->opts.n; i++) {
        rt_wire_raw_array(&k->wr, 2);
        rt_wire_raw_str(&k->wr, k->opts.key[i]);
        rt_wire_raw_str(&k->wr, k->opts.value[i]);
    }
    if (o->serve_data)
        rt_manifest_put(&k->wr, &k->man);
}

/* The options of every job, built once: for the set-up phase's jobs, or
 * for the first joiner of a re-adopted run, which has no set-up phase
 * (its joiners got no options at all, trained with the defaults, and the
 * ring's collective check caught them as a diverged member). */
static int job_options(struct coord *k)
{
    if (k->opts.built)
        return RT_OK;
    RT_TRY(rt_train_config_each(k->c, option_add, k));
    if (k->c->mode == RT_MODE_GOSSIP && k->c->local_batch == 0) {
        /* a run constant: a worker that joins later walks the same batches;
         * a re-adopted run's first start had its --workers (the same
         * command line) */
        int n = k->adopted ? k->o->workers : k->nw;
        char v[24];
        snprintf(v, sizeof v, "%d", (k->c->batch + n - 1) / n);
        RT_TRY(option_add(k, "local_batch", v));
    }
    k->opts.built = true;
    return RT_OK;
}

/* Rank by rank, once the ranks are known. */
int coord_job_send(struct coord *k)
{
    RT_TRY(job_options(k));
    for (int r = 0; r < k->nw; r++) {
        put_job(k, r, &k->ms, 0.0);
        RT_TRY(rt_wire_end(&k->wr));
        /* one that left between its hello and its job is lost in set-up,
         * not the run's end */
        if (coord_send(k, coord_rank(k, r), NULL, NULL, 0) < 0) {
            char how[700];
            snprintf(how, sizeof how, "its job could not reach it (%s)", rt_error_detail());
            RT_TRY(coord_setup_lose(k, coord_rank(k, r), how));
        }
    }
    return RT_OK;
}

int coord_job_send_late(struct coord *k, struct coord_worker *w, double setup_after)
{
    if (k->ms.n >= RT_MAX_WORKERS)
        return rt_error(RT_ERR_ARG, "a run holds at most %d workers", RT_MAX_WORKERS);
    RT_TRY(job_options(k));
    struct rt_membership *ms = malloc(sizeof *ms);
    if (!ms)
        return rt_error(RT_ERR_NOMEM, "no memory for a member list");
    *ms = k->ms;
    ms->m[ms->n++] = w->m; /* a place for now: the generation that admits it gives its own */
    put_job(k, ms->n - 1, ms, setup_after);
    free(ms);
    RT_TRY(rt_wire_end(&k->wr));
    return coord_send(k, w, NULL, NULL, 0);
}

static int stream_file(struct coord *k, struct coord_worker *w, uint64_t i, FILE *f)
{
    const char *path = k->man.files.path[i];
    uint64_t off = 0;
    while (off < k->man.size[i]) {
        size_t n = fread(k->chunk, 1, RT_DATA_CHUNK, f);
        if (n == 0 && ferror(f))
            return rt_error(RT_ERR_IO, "cannot read %s: %s", path, strerror(errno));
        if (n == 0)
            return rt_error(RT_ERR_IO, "%s changed while being served", path);
        rt_wire_begin(&k->wr, k->run, "file", 2);
        rt_wire_put_uint(&k->wr, "file", i);
        rt_wire_put_uint(&k->wr, "off", off);
        RT_TRY(rt_wire_end(&k->wr));
        const void *fr[1] = {k->chunk};
        size_t sz[1] = {n};
        RT_TRY(coord_send(k, w, fr, sz, 1));
        off += n;
    }
    return RT_OK;
}

/* "fetch": stream file i to the worker in RT_DATA_CHUNK pieces; libzmq
 * queues them. */
int coord_job_serve_file(struct coord *k, struct coord_worker *w)
{
    uint64_t i;
    if (!k->o->serve_data ||
        rt_wire_get_uint(rt_wire_root(&k->msg), "file", 0, (uint64_t)k->man.files.n - 1, &i) < 0) {
        rt_wire_drop(&k->drops, w->m.name, "a request for a data file that is not served");
        return RT_OK;
    }
    if (!k->chunk && !(k->chunk = malloc(RT_DATA_CHUNK)))
        return rt_error(RT_ERR_NOMEM, "no memory to serve data files");
    FILE *f = fopen(k->man.files.path[i], "rb");
    if (!f)
        return rt_error(RT_ERR_IO, "cannot read %s: %s", k->man.files.path[i], strerror(errno));
    int rc = stream_file(k, w, i, f);
    fclose(f);
    if (rc == RT_OK)
        coord_note("sent %s (%.1f MB) to %s", k->man.files.name[i],
                   (double)k->man.size[i] / 1e6, w->m.name);
    return rc;
}

void coord_job_free(struct coord *k)
{
    for (int i = 0; i < k->opts.n; i++) {
        free(k->opts.key[i]);
        free(k->opts.value[i]);
    }
    free(k->opts.key);
    free(k->opts.value);
    k->opts = (struct coord_option_list){0};
    free(k->model_text);
    k->model_text = NULL;
    free(k->chunk);
    k->chunk = NULL;
}
