/* membership.c — the member list and its wire form. */
#include "config.h"

#include "membership.h"

#include <stdio.h>
#include <string.h>

#include "status.h"

void rt_member_put(rt_wire_writer *w, const struct rt_member *m)
{
    rt_wire_raw_map(w, 12);
    rt_wire_raw_str(w, "id");
    rt_wire_raw_str(w, m->id);
    rt_wire_raw_str(w, "name");
    rt_wire_raw_str(w, m->name);
    rt_wire_raw_str(w, "host");
    rt_wire_raw_str(w, m->host);
    rt_wire_raw_str(w, "host_id");
    rt_wire_raw_str(w, m->host_id);
    rt_wire_raw_str(w, "endpoint");
    rt_wire_raw_str(w, m->endpoint);
    rt_wire_raw_str(w, "backend");
    rt_wire_raw_str(w, m->backend);
    rt_wire_raw_str(w, "device");
    rt_wire_raw_str(w, m->device);
    rt_wire_raw_str(w, "threads");
    rt_wire_raw_uint(w, (uint64_t)m->threads);
    rt_wire_raw_str(w, "cpus");
    rt_wire_raw_f64(w, m->cpus);
    rt_wire_raw_str(w, "ips");
    rt_wire_raw_f64(w, m->images_per_s);
    rt_wire_raw_str(w, "key");
    rt_wire_raw_str(w, m->key);
    rt_wire_raw_str(w, "shm");
    rt_wire_raw_str(w, m->shm);
}

static bool hex16(const char *s)
{
    for (int i = 0; i < 16; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return s[16] == '\0';
}

static bool printable(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return false;
    return true;
}

int rt_member_get(rt_wire_map map, struct rt_member *m)
{
    uint64_t threads;
    memset(m, 0, sizeof *m);
    RT_TRY(rt_wire_get_str(map, "id", 16, m->id, 17));
    for (const char *p = m->id; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return rt_error(RT_ERR_FORMAT, "field 'id' is not 16 hex digits");
    RT_TRY(rt_wire_get_str(map, "name", 1, m->name, sizeof m->name));
    RT_TRY(rt_wire_get_str(map, "host", 1, m->host, sizeof m->host));
    RT_TRY(rt_wire_get_str(map, "host_id", 1, m->host_id, sizeof m->host_id));
    RT_TRY(rt_wire_get_str(map, "endpoint", 7, m->endpoint, sizeof m->endpoint));
    RT_TRY(rt_wire_get_str(map, "backend", 1, m->backend, sizeof m->backend));
    RT_TRY(rt_wire_get_str(map, "device", 0, m->device, sizeof m->device));
    RT_TRY(rt_wire_get_uint(map, "threads", 0, 4096, &threads));
    if (rt_wire_has(map, "cpus"))
        RT_TRY(rt_wire_get_f64(map, "cpus", 0.0, 65536.0, &m->cpus));
    RT_TRY(rt_wire_get_f64(map, "ips", 0.0, 1e12, &m->images_per_s));
    RT_TRY(rt_wire_get_str(map, "key", 0, m->key, sizeof m->key));
    if (m->key[0] && !rt_key_valid(m->key))
        return rt_error(RT_ERR_FORMAT, "field 'key' is not a CurveZMQ public key");
    RT_TRY(rt_wire_get_str(map, "shm", 16, m->shm, sizeof m->shm));
    if (!hex16(m->shm))
        return rt_error(RT_ERR_FORMAT, "field 'shm' is not 16 hex digits");
    m->threads = (int)threads;
    if (strncmp(m->endpoint, "tcp://", 6) != 0)
        return rt_error(RT_ERR_FORMAT, "ring endpoint '%s' is not tcp://", m->endpoint);
    if (!printable(m->name) || !printable(m->host) || !printable(m->host_id) ||
        !printable(m->endpoint) || !printable(m->backend) || !printable(m->device))
        return rt_error(RT_ERR_FORMAT, "a member field holds control characters");
    return RT_OK;
}

void rt_membership_put(rt_wire_writer *w, const struct rt_membership *ms)
{
    rt_wire_put_uint(w, "gen", ms->gen);
    rt_wire_put_array(w, "members", ms->n);
    for (int i = 0; i < ms->n; i++)
        rt_member_put(w, &ms->m[i]);
}

int rt_membership_get(rt_wire_map map, struct rt_membership *ms)
{
    const msgpack_object *items;
    size_t n;
    RT_TRY(rt_wire_get_uint(map, "gen", 1, UINT32_MAX, &ms->gen));
    RT_TRY(rt_wire_get_array(map, "members", RT_MAX_WORKERS, &items, &n));
    if (n == 0)
        return rt_error(RT_ERR_FORMAT, "an empty member list");
    for (size_t i = 0; i < n; i++) {
        rt_wire_map e;
        RT_TRY(rt_wire_item_map(items, i, "members", &e));
        int rc = rt_member_get(e, &ms->m[i]);
        if (rc < 0)
            return rt_error_wrap(rc, "member %zu", i);
        for (size_t j = 0; j < i; j++)
            if (!strcmp(ms->m[j].id, ms->m[i].id))
                return rt_error(RT_ERR_FORMAT, "member id %s appears twice", ms->m[i].id);
    }
    ms->n = (int)n;
    return RT_OK;
}

bool rt_membership_same_host(const struct rt_membership *ms, int a, int b)
{
    return strcmp(ms->m[a].host_id, ms->m[b].host_id) == 0;
}

const char *rt_membership_link_kind(const struct rt_membership *ms, int r, bool allow_shm)
{
    if (ms->n == 1)
        return "-";
    int right = (r + 1) % ms->n;
    return allow_shm && rt_membership_same_host(ms, r, right) ? "shm" : "tcp";
}

void rt_membership_admit(const struct rt_membership *ms, rt_curve *c)
{
    if (!c)
        return;
    static _Thread_local char keys[RT_MAX_WORKERS][RT_KEY_LEN + 1];
    for (int r = 0; r < ms->n; r++)
        memcpy(keys[r], ms->m[r].key, RT_KEY_LEN + 1);
    rt_curve_allow(c, (const char(*)[RT_KEY_LEN + 1])keys, ms->n);
}
