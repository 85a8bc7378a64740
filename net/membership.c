/* membership.c — the member list and its wire form. */
#include "config.h"

#include "membership.h"

#include <stdio.h>
#include <string.h>

#include "status.h"

void rt_member_put(rt_wire_writer *w, const struct rt_member *m)
{
    rt_wire_raw_map(w, 16);
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
    rt_wire_raw_str(w, "quota");
    rt_wire_raw_f64(w, m->cpu_quota);
    rt_wire_raw_str(w, "ips");
    rt_wire_raw_f64(w, m->images_per_s);
    rt_wire_raw_str(w, "key");
    rt_wire_raw_str(w, m->key);
    rt_wire_raw_str(w, "shm");
    rt_wire_raw_str(w, m->shm);
    rt_wire_raw_str(w, "link");
    rt_wire_raw_str(w, m->link);
    rt_wire_raw_str(w, "mem_limit");
    rt_wire_raw_uint(w, m->mem_limit);
    rt_wire_raw_str(w, "mem_rss");
    rt_wire_raw_uint(w, m->mem_rss);
    rt_wire_raw_str(w, "mem_need");
    rt_wire_raw_uint(w, m->mem_need);
}

static bool hex_digits(const char *s, int n)
{
    for (int i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return s[n] == '\0';
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
    RT_TRY(rt_wire_get_f64(map, "quota", 0.0, 1e6, &m->cpu_quota));
    RT_TRY(rt_wire_get_f64(map, "ips", 0.0, 1e12, &m->images_per_s));
    RT_TRY(rt_wire_get_str(map, "key", 0, m->key, sizeof m->key));
    if (m->key[0] && !rt_key_valid(m->key))
        return rt_error(RT_ERR_FORMAT, "field 'key' is not a CurveZMQ public key");
    RT_TRY(rt_wire_get_str(map, "shm", 16, m->shm, sizeof m->shm));
    if (!hex_digits(m->shm, 16))
        return rt_error(RT_ERR_FORMAT, "field 'shm' is not 16 hex digits");
    RT_TRY(rt_wire_get_str(map, "link", RT_LINK_SECRET_LEN, m->link, sizeof m->link));
    if (!hex_digits(m->link, RT_LINK_SECRET_LEN))
        return rt_error(RT_ERR_FORMAT, "field 'link' is not %d hex digits", RT_LINK_SECRET_LEN);
    m->threads = (int)threads;
    /* memory (issue 18): optional, 0 = not known */
    static const uint64_t TB = (uint64_t)1 << 50;
    if (rt_wire_has(map, "mem_limit"))
        RT_TRY(rt_wire_get_uint(map, "mem_limit", 0, TB, &m->mem_limit));
    if (rt_wire_has(map, "mem_rss"))
        RT_TRY(rt_wire_get_uint(map, "mem_rss", 0, TB, &m->mem_rss));
    if (rt_wire_has(map, "mem_need"))
        RT_TRY(rt_wire_get_uint(map, "mem_need", 0, TB, &m->mem_need));
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

bool rt_membership_same_machine(const struct rt_membership *ms, int a, int b)
{
    const char *x = ms->m[a].host_id, *y = ms->m[b].host_id;
    const char *cut = strchr(x, '/');
    if (!cut || cut == x || strncmp(x, "noboot/", 7) == 0)
        return a == b; /* no boot id: only itself is known to be on its machine */
    const size_t len = (size_t)(cut - x) + 1; /* the boot id and its '/' */
    return strncmp(x, y, len) == 0;
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
    static _Thread_local char links[RT_MAX_WORKERS][RT_LINK_SECRET_LEN + 1];
    for (int r = 0; r < ms->n; r++) {
        memcpy(keys[r], ms->m[r].key, RT_KEY_LEN + 1);
        memcpy(links[r], ms->m[r].link, RT_LINK_SECRET_LEN + 1);
    }
    rt_curve_allow(c, (const char(*)[RT_KEY_LEN + 1])keys,
                   (const char(*)[RT_LINK_SECRET_LEN + 1])links, ms->n);
}
