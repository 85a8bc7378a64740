/* shm.c — shared-memory links between ring neighbours on one host. */
#include "config.h"

#include "shm.h"

#include <ctype.h>
#include <math.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "hostreduce.h"
#include "status.h"

#define SHM_MAGIC 0x6d68737467617272ull /* "rragtshm" */
#define SHM_VERSION 1
#define SHM_TAG 0x53484d4cu
#define SHM_DEAD 0xdeadbeefu
#define SHM_MAX_SLOTS 1024

struct shm_hdr {
    uint64_t magic;
    uint32_t version;
    uint32_t nslots;
    uint64_t slot_bytes;
    uint64_t total_bytes;
    uint64_t payload_off;
    uint64_t gen;
    char run[40];
    alignas(64) _Atomic uint32_t attached;
    alignas(64) _Atomic uint32_t bell;
    _Atomic uint32_t waiting;
    alignas(64) _Atomic uint64_t head; /* slots published (producer) */
    alignas(64) _Atomic uint64_t tail; /* slots consumed (consumer) */
    alignas(64) struct rt_shm_desc desc[];
};

struct rt_shm {
    uint32_t tag;
    struct shm_hdr *h;
    size_t size;
    char name[128];
    bool owner;
    bool unlinked;
    uint32_t expect_attach;
    uint64_t head, tail; /* this side's shadows */
};

static size_t layout(uint32_t nslots, size_t slot_bytes, size_t *payload_off)
{
    size_t desc_end = sizeof(struct shm_hdr) + (size_t)nslots * sizeof(struct rt_shm_desc);
    *payload_off = (desc_end + 4095) & ~(size_t)4095;
    return *payload_off + (size_t)nslots * slot_bytes;
}

/* "ragtag-" 16 hex digits "-g" digits, and "-gossip" digits or nothing
 * (ring.c's and gossip_shm.c's names), or "-grads" or "-replica"
 * (hostreduce.c's). */
static const char *digits(const char *n)
{
    if (!isdigit((unsigned char)*n))
        return NULL;
    while (isdigit((unsigned char)*n))
        n++;
    return n;
}

static bool our_name(const char *n)
{
    if (strncmp(n, "ragtag-", 7) != 0)
        return false;
    n += 7;
    for (int i = 0; i < 16; i++, n++)
        if (!isxdigit((unsigned char)*n))
            return false;
    if (!strcmp(n, "-grads") || !strcmp(n, "-replica"))
        return true;
    if (strncmp(n, "-g", 2) != 0 || !(n = digits(n + 2)))
        return false;
    if (!*n)
        return true;
    return strncmp(n, "-gossip", 7) == 0 && (n = digits(n + 7)) && !*n;
}

/* hostreduce.c's: they live as long as their owner */
static bool is_grads(const char *name)
{
    size_t len = strlen(name);
    return (len >= 6 && !strcmp(name + len - 6, "-grads")) ||
           (len >= 8 && !strcmp(name + len - 8, "-replica"));
}

static bool owner_alive(int dir, const char *name)
{
    int fd = openat(dir, name, O_RDONLY | O_NOFOLLOW);
    if (fd < 0)
        return true;
    bool gone = rt_hostreduce_owner_gone(fd);
    close(fd);
    return !gone;
}

int rt_shm_sweep(const char *dir, double max_age_s, uint64_t *bytes)
{
    uint64_t b = 0;
    int removed = 0;
    DIR *d = opendir(dir);
    if (d) {
        time_t now = time(NULL);
        struct dirent *e;
        while ((e = readdir(d))) {
            struct stat st;
            if (!our_name(e->d_name) ||
                fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
                !S_ISREG(st.st_mode) || st.st_uid != geteuid())
                continue;
            /* (sizing and every write through a mapping move the mtime)
             * A worker's gradient lives as long as the worker: its name
             * goes once its owner has (after a moment: one being made has
             * no owner yet). */
            bool grads = is_grads(e->d_name);
            double age = grads ? fmin(max_age_s, RT_SHM_GRADS_STALE_AGE) : max_age_s;
            if (difftime(now, st.st_mtime) >= age && !(grads && owner_alive(dirfd(d), e->d_name)) &&
                unlinkat(dirfd(d), e->d_name, 0) == 0) {
                removed++;
                b += (uint64_t)st.st_size;
            }
        }
        closedir(d);
    }
    if (bytes)
        *bytes = b;
    return removed;
}

void rt_shm_sweep_once(void)
{
    static atomic_flag done = ATOMIC_FLAG_INIT;
    if (atomic_flag_test_and_set(&done))
        return;
    uint64_t bytes;
    int n = rt_shm_sweep("/dev/shm", RT_SHM_STALE_AGE, &bytes);
    if (n > 0)
        fprintf(stderr, "ragtag: removed %d shared memory segment%s that killed processes left "
                        "in /dev/shm (%.1f MB: links unused for %.0f minutes or more, "
                        "gradients of workers that are gone)\n",
                n, n == 1 ? "" : "s", (double)bytes / 1e6, RT_SHM_STALE_AGE / 60.0);
}

rt_shm *rt_shm_create(const char *name, const char *run, uint64_t gen, uint32_t nslots,
                      size_t slot_bytes, uint32_t expect_attach)
{
    rt_shm_sweep_once();
    RT_ASSERT(name && run && nslots <= SHM_MAX_SLOTS && (slot_bytes % 64) == 0);
    size_t payload_off, size = layout(nslots, slot_bytes, &payload_off);
    rt_shm *s = calloc(1, sizeof *s);
    if (!s) {
        rt_error(RT_ERR_NOMEM, "out of memory");
        return NULL;
    }
    snprintf(s->name, sizeof s->name, "%s", name);
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) {
        rt_error(RT_ERR_NET, "cannot create shared memory %s: %s (--no-shm avoids it)", name,
                 strerror(errno));
        free(s);
        return NULL;
    }
    /* Reserve the pages now: a full /dev/shm is an error here, not a
     * SIGBUS on first touch. */
    int fe = posix_fallocate(fd, 0, (off_t)size);
    if (fe != 0)
        errno = fe;
    if (fe != 0 || ftruncate(fd, (off_t)size) != 0) {
        rt_error(RT_ERR_NET, "cannot size shared memory %s to %zu bytes: %s (is /dev/shm "
                             "full? --no-shm avoids it)", name, size, strerror(errno));
        goto fail_fd;
    }
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (p == MAP_FAILED) {
        rt_error(RT_ERR_NET, "cannot map shared memory %s: %s", name, strerror(errno));
        goto fail_fd;
    }
    close(fd);
    memset(p, 0, size); /* touch every page now, never in a step */
    struct shm_hdr *h = p;
    h->version = SHM_VERSION;
    h->nslots = nslots;
    h->slot_bytes = slot_bytes;
    h->total_bytes = size;
    h->payload_off = payload_off;
    h->gen = gen;
    snprintf(h->run, sizeof h->run, "%s", run);
    atomic_store(&h->head, 0);
    atomic_store(&h->tail, 0);
    atomic_store_explicit((_Atomic uint64_t *)&h->magic, SHM_MAGIC, memory_order_release);
    s->tag = SHM_TAG;
    s->h = h;
    s->size = size;
    s->owner = true;
    s->expect_attach = expect_attach;
    return s;

fail_fd:
    close(fd);
    shm_unlink(name);
    free(s);
    return NULL;
}

/* One pause of a set-up wait: 1 when its time is up, < 0 when the idle
 * callback gives it up, 0 to go on. */
static int pause_setup(const struct rt_shm_wait *w, double t0, double *last_idle)
{
    if (rt_now() - t0 > w->timeout_s)
        return 1;
    if (w->idle && rt_now() - *last_idle > 0.02) {
        *last_idle = rt_now();
        if (w->idle(w->arg) < 0)
            return -1;
    }
    usleep(500);
    return 0;
}

rt_shm *rt_shm_open(const char *name, const char *run, uint64_t gen, const struct rt_shm_wait *w)
{
    double t0 = rt_now(), last_idle = t0, timeout_s = w->timeout_s;
    int rc = 0;
    int fd = -1;
    for (;;) {
        fd = shm_open(name, O_RDWR, 0);
        if (fd >= 0) {
            struct stat st;
            if (fstat(fd, &st) == 0 && (size_t)st.st_size >= sizeof(struct shm_hdr))
                break; /* created and sized */
            close(fd);
            fd = -1;
        } else if (errno != ENOENT) {
            rt_error(RT_ERR_NET, "cannot open shared memory %s: %s", name, strerror(errno));
            return NULL;
        }
        if ((rc = pause_setup(w, t0, &last_idle)) != 0) {
            if (rc > 0)
                rt_error(RT_ERR_TIMEOUT, "shared memory %s of a neighbour did not appear "
                                         "within %.0f s", name, timeout_s);
            return NULL;
        }
    }
    struct stat st;
    fstat(fd, &st);
    /* Only a neighbour of this user made it, for this user alone: anything
     * else was planted (another user's segment under the expected name). */
    if (st.st_uid != geteuid() || (st.st_mode & 077)) {
        close(fd);
        rt_error(RT_ERR_NET, "shared memory %s belongs to another user or is open to others "
                             "(mode %04o): not a neighbour's", name,
                 (unsigned)(st.st_mode & 07777));
        return NULL;
    }
    size_t size = (size_t)st.st_size;
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        rt_error(RT_ERR_NET, "cannot map shared memory %s: %s", name, strerror(errno));
        return NULL;
    }
    struct shm_hdr *h = p;
    /* The owner writes the magic last: wait for it. */
    while (atomic_load_explicit((_Atomic uint64_t *)&h->magic, memory_order_acquire) !=
           SHM_MAGIC) {
        if ((rc = pause_setup(w, t0, &last_idle)) != 0) {
            munmap(p, size);
            if (rc > 0)
                rt_error(RT_ERR_TIMEOUT, "shared memory %s was never initialised", name);
            return NULL;
        }
    }
    size_t payload_off;
    if (h->version != SHM_VERSION || h->nslots > SHM_MAX_SLOTS || h->slot_bytes % 64 ||
        h->slot_bytes > ((size_t)1 << 30) || h->total_bytes != size ||
        layout(h->nslots, h->slot_bytes, &payload_off) != size || h->payload_off != payload_off ||
        h->gen != gen || strncmp(h->run, run, sizeof h->run) != 0) {
        munmap(p, size);
        rt_error(RT_ERR_NET, "shared memory %s belongs to another run or version", name);
        return NULL;
    }
    rt_shm *s = calloc(1, sizeof *s);
    if (!s) {
        munmap(p, size);
        rt_error(RT_ERR_NOMEM, "out of memory");
        return NULL;
    }
    s->tag = SHM_TAG;
    s->h = h;
    s->size = size;
    snprintf(s->name, sizeof s->name, "%s", name);
    s->head = atomic_load(&h->head);
    s->tail = atomic_load(&h->tail);
    atomic_fetch_add(&h->attached, 1);
    return s;
}

void rt_shm_close(rt_shm **sp)
{
    if (!sp || !*sp)
        return;
    rt_shm *s = *sp;
    RT_ASSERT(s->tag == SHM_TAG);
    if (s->owner && !s->unlinked)
        shm_unlink(s->name);
    munmap(s->h, s->size);
    s->tag = SHM_DEAD;
    free(s);
    *sp = NULL;
}

bool rt_shm_unlink_if_attached(rt_shm *s)
{
    RT_ASSERT(s && s->tag == SHM_TAG && s->owner);
    if (!s->unlinked && atomic_load(&s->h->attached) >= s->expect_attach) {
        shm_unlink(s->name);
        s->unlinked = true;
    }
    return s->unlinked;
}

int rt_shm_unlink_when_attached(rt_shm *s, const struct rt_shm_wait *w)
{
    RT_ASSERT(s && s->tag == SHM_TAG && s->owner);
    double t0 = rt_now(), last_idle = t0;
    while (!rt_shm_unlink_if_attached(s)) {
        int rc = pause_setup(w, t0, &last_idle);
        if (rc > 0)
            return rt_error(RT_ERR_TIMEOUT, "a neighbour did not map shared memory %s within "
                                            "%.0f s", s->name, w->timeout_s);
        if (rc < 0)
            return RT_ERR_NET; /* the idle callback set the reason */
    }
    return RT_OK;
}

uint32_t rt_shm_slots(const rt_shm *s) { return s->h->nslots; }
size_t rt_shm_slot_bytes(const rt_shm *s) { return s->h->slot_bytes; }

bool rt_shm_can_put(rt_shm *s)
{
    uint64_t tail = atomic_load_explicit(&s->h->tail, memory_order_acquire);
    return s->head - tail < s->h->nslots;
}

void *rt_shm_slot_to_fill(rt_shm *s)
{
    return (char *)s->h + s->h->payload_off + (s->head % s->h->nslots) * s->h->slot_bytes;
}

void rt_shm_publish(rt_shm *s, const struct rt_shm_desc *d)
{
    RT_ASSERT(d->bytes <= s->h->slot_bytes);
    s->h->desc[s->head % s->h->nslots] = *d;
    s->head++;
    atomic_store_explicit(&s->h->head, s->head, memory_order_release);
    rt_shm_ring(s);
}

int rt_shm_peek(rt_shm *s, struct rt_shm_desc *d, const void **payload)
{
    uint64_t head = atomic_load_explicit(&s->h->head, memory_order_acquire);
    if (head == s->tail)
        return 0;
    if (head - s->tail > s->h->nslots)
        return rt_error(RT_ERR_NET, "shared memory link %s is corrupt (head %llu, tail %llu)",
                        s->name, (unsigned long long)head, (unsigned long long)s->tail);
    uint64_t slot = s->tail % s->h->nslots;
    *d = s->h->desc[slot];
    if (d->bytes > s->h->slot_bytes)
        return rt_error(RT_ERR_NET, "shared memory link %s: slot of %llu bytes (at most %llu)",
                        s->name, (unsigned long long)d->bytes,
                        (unsigned long long)s->h->slot_bytes);
    *payload = (const char *)s->h + s->h->payload_off + slot * s->h->slot_bytes;
    return 1;
}

void rt_shm_consume(rt_shm *s, rt_shm *producer_bell)
{
    s->tail++;
    atomic_store_explicit(&s->h->tail, s->tail, memory_order_release);
    if (producer_bell)
        rt_shm_ring(producer_bell);
}

uint32_t rt_shm_bell(rt_shm *s) { return atomic_load(&s->h->bell); }

void rt_shm_ring(rt_shm *s)
{
    atomic_fetch_add(&s->h->bell, 1);
    if (atomic_load(&s->h->waiting))
        syscall(SYS_futex, &s->h->bell, FUTEX_WAKE, 1, NULL, NULL, 0);
}

void rt_shm_wait(rt_shm *s, uint32_t seen, double timeout_s)
{
    atomic_store(&s->h->waiting, 1);
    if (atomic_load(&s->h->bell) == seen) {
        struct timespec ts;
        ts.tv_sec = (time_t)timeout_s;
        ts.tv_nsec = (long)((timeout_s - (double)ts.tv_sec) * 1e9);
        syscall(SYS_futex, &s->h->bell, FUTEX_WAIT, seen, &ts, NULL, 0);
    }
    atomic_store(&s->h->waiting, 0);
}
