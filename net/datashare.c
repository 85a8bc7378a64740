/* datashare.c — data manifests and the worker's content-addressed cache. */
#include "config.h"

#include "datashare.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sha256.h"
#include "status.h"

int rt_manifest_build(const char *spec, struct rt_data_manifest *m)
{
    memset(m, 0, sizeof *m);
    RT_TRY(rt_data_files(spec, &m->files));
    for (int i = 0; i < m->files.n; i++)
        RT_TRY(rt_sha256_file(m->files.path[i], m->sha[i], &m->size[i]));
    return RT_OK;
}

void rt_manifest_put(rt_wire_writer *w, const struct rt_data_manifest *m)
{
    rt_wire_put_map(w, "data", 3);
    rt_wire_raw_str(w, "kind");
    rt_wire_raw_str(w, m->files.kind);
    rt_wire_raw_str(w, "suffix");
    rt_wire_raw_str(w, m->files.suffix);
    rt_wire_raw_str(w, "files");
    rt_wire_raw_array(w, m->files.n);
    for (int i = 0; i < m->files.n; i++) {
        rt_wire_raw_map(w, 3);
        rt_wire_raw_str(w, "name");
        rt_wire_raw_str(w, m->files.name[i]);
        rt_wire_raw_str(w, "size");
        rt_wire_raw_uint(w, m->size[i]);
        rt_wire_raw_str(w, "sha256");
        rt_wire_raw_str(w, m->sha[i]);
    }
}

static bool safe_name(const char *s)
{
    if (!*s || *s == '.')
        return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '.' || *s == '-' || *s == '_'))
            return false;
    return true;
}

static bool is_hex(const char *s, size_t n)
{
    if (strlen(s) != n)
        return false;
    for (; *s; s++)
        if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f')))
            return false;
    return true;
}

int rt_manifest_get(rt_wire_map root, struct rt_data_manifest *m)
{
    memset(m, 0, sizeof *m);
    rt_wire_map d;
    RT_TRY(rt_wire_get_map(root, "data", &d));
    RT_TRY(rt_wire_get_str(d, "kind", 1, m->files.kind, sizeof m->files.kind));
    static const char *const kinds[] = {"fashion-mnist", "mnist", "idx", "cifar10", "csv",
                                        "shards"};
    bool known = false;
    for (int i = 0; i < 6; i++)
        known |= !strcmp(m->files.kind, kinds[i]);
    if (!known)
        return rt_error(RT_ERR_FORMAT, "data kind '%s' is not one ragtag reads", m->files.kind);
    RT_TRY(rt_wire_get_str(d, "suffix", 0, m->files.suffix, sizeof m->files.suffix));
    if (m->files.suffix[0]) {
        int h, w, c, used = 0;
        if (sscanf(m->files.suffix, ":shape=%dx%dx%d%n", &h, &w, &c, &used) != 3 ||
            m->files.suffix[used] != '\0')
            return rt_error(RT_ERR_FORMAT, "data suffix '%s' is not :shape=HxWxC",
                            m->files.suffix);
    }
    const msgpack_object *items;
    size_t n;
    RT_TRY(rt_wire_get_array(d, "files", RT_DATA_MAX_FILES, &items, &n));
    if (n == 0)
        return rt_error(RT_ERR_FORMAT, "a data set of no files");
    for (size_t i = 0; i < n; i++) {
        rt_wire_map f;
        RT_TRY(rt_wire_item_map(items, i, "files", &f));
        RT_TRY(rt_wire_get_str(f, "name", 1, m->files.name[i], sizeof m->files.name[0]));
        RT_TRY(rt_wire_get_uint(f, "size", 0, RT_DATA_MAX_FILE_BYTES, &m->size[i]));
        RT_TRY(rt_wire_get_str(f, "sha256", 64, m->sha[i], sizeof m->sha[0]));
        if (!safe_name(m->files.name[i]))
            return rt_error(RT_ERR_FORMAT, "data file name '%s' is not a plain file name",
                            m->files.name[i]);
        if (!is_hex(m->sha[i], 64))
            return rt_error(RT_ERR_FORMAT, "'%s' is not a SHA-256", m->sha[i]);
        for (size_t j = 0; j < i; j++)
            if (!strcmp(m->files.name[j], m->files.name[i]))
                return rt_error(RT_ERR_FORMAT, "data file '%s' listed twice", m->files.name[i]);
    }
    m->files.n = (int)n;
    return RT_OK;
}

static int mkdirs(const char *path)
{
    char p[4096];
    snprintf(p, sizeof p, "%s", path);
    for (char *s = p + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = '\0';
        if (mkdir(p, 0700) != 0 && errno != EEXIST)
            return rt_error(RT_ERR_IO, "cannot create %s: %s", p, strerror(errno));
        *s = '/';
    }
    if (mkdir(p, 0700) != 0 && errno != EEXIST)
        return rt_error(RT_ERR_IO, "cannot create %s: %s", p, strerror(errno));
    return RT_OK;
}

int rt_cache_dir(const char *dir, char *out, size_t cap)
{
    const char *env;
    if (dir && *dir)
        snprintf(out, cap, "%s", dir);
    else if ((env = getenv("RAGTAG_CACHE_DIR")) && *env)
        snprintf(out, cap, "%s", env);
    else if ((env = getenv("XDG_CACHE_HOME")) && *env)
        snprintf(out, cap, "%s/ragtag", env);
    else if ((env = getenv("HOME")) && *env)
        snprintf(out, cap, "%s/.cache/ragtag", env);
    else
        snprintf(out, cap, "/tmp/ragtag-cache-%u", (unsigned)getuid());
    char data[4200];
    snprintf(data, sizeof data, "%s/data", out);
    return mkdirs(data);
}

bool rt_cache_has(const char *cache, const char *sha, uint64_t size)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/data/%s", cache, sha);
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size == size;
}

struct rt_cache_file {
    FILE *f;
    char tmp[4200], final[4200];
    char sha[65];
    uint64_t size, written;
    rt_sha256 h;
};

rt_cache_file *rt_cache_file_begin(const char *cache, const char *sha, uint64_t size)
{
    rt_cache_file *f = calloc(1, sizeof *f);
    if (!f) {
        rt_error(RT_ERR_NOMEM, "out of memory");
        return NULL;
    }
    snprintf(f->final, sizeof f->final, "%s/data/%s", cache, sha);
    snprintf(f->tmp, sizeof f->tmp, "%s/data/.%s.%d.part", cache, sha, (int)getpid());
    snprintf(f->sha, sizeof f->sha, "%s", sha);
    f->size = size;
    rt_sha256_init(&f->h);
    if (!(f->f = fopen(f->tmp, "wb"))) {
        rt_error(RT_ERR_IO, "cannot write %s: %s", f->tmp, strerror(errno));
        free(f);
        return NULL;
    }
    return f;
}

int rt_cache_file_write(rt_cache_file *f, uint64_t off, const void *p, size_t n)
{
    if (off != f->written || n > f->size - f->written)
        return rt_error(RT_ERR_FORMAT, "data chunk at %llu+%zu does not follow %llu of %llu bytes",
                        (unsigned long long)off, n, (unsigned long long)f->written,
                        (unsigned long long)f->size);
    if (fwrite(p, 1, n, f->f) != n)
        return rt_error(RT_ERR_IO, "cannot write %s: %s", f->tmp, strerror(errno));
    rt_sha256_update(&f->h, p, n);
    f->written += n;
    return RT_OK;
}

bool rt_cache_file_complete(const rt_cache_file *f) { return f->written == f->size; }

int rt_cache_file_finish(rt_cache_file **fp)
{
    rt_cache_file *f = *fp;
    int rc = RT_OK;
    char got[65];
    rt_sha256_hex(&f->h, got);
    if (fflush(f->f) != 0 || fsync(fileno(f->f)) != 0)
        rc = rt_error(RT_ERR_IO, "cannot write %s: %s", f->tmp, strerror(errno));
    fclose(f->f);
    f->f = NULL;
    if (rc == RT_OK && f->written != f->size)
        rc = rt_error(RT_ERR_FORMAT, "data file %.12s… arrived with %llu of %llu bytes", f->sha,
                      (unsigned long long)f->written, (unsigned long long)f->size);
    if (rc == RT_OK && strcmp(got, f->sha) != 0)
        rc = rt_error(RT_ERR_FORMAT, "data file %.12s… arrived with SHA-256 %.12s…: corrupt",
                      f->sha, got);
    if (rc == RT_OK && rename(f->tmp, f->final) != 0)
        rc = rt_error(RT_ERR_IO, "cannot rename %s: %s", f->tmp, strerror(errno));
    if (rc < 0)
        unlink(f->tmp);
    free(f);
    *fp = NULL;
    return rc;
}

void rt_cache_file_abort(rt_cache_file **fp)
{
    if (!fp || !*fp)
        return;
    if ((*fp)->f)
        fclose((*fp)->f);
    unlink((*fp)->tmp);
    free(*fp);
    *fp = NULL;
}

int rt_cache_spec(const char *cache, const struct rt_data_manifest *m, char *spec, size_t cap)
{
    rt_sha256 h;
    rt_sha256_init(&h);
    for (int i = 0; i < m->files.n; i++) {
        rt_sha256_update(&h, m->files.name[i], strlen(m->files.name[i]) + 1);
        rt_sha256_update(&h, m->sha[i], 64);
    }
    char id[65], dir[4200];
    rt_sha256_hex(&h, id);
    snprintf(dir, sizeof dir, "%s/sets/%.24s", cache, id);
    RT_TRY(mkdirs(dir));
    for (int i = 0; i < m->files.n; i++) {
        char link[4400], target[200], tmp[4500];
        snprintf(link, sizeof link, "%s/%s", dir, m->files.name[i]);
        snprintf(target, sizeof target, "../../data/%s", m->sha[i]);
        char have[200];
        ssize_t k = readlink(link, have, sizeof have - 1);
        if (k > 0 && (size_t)k == strlen(target) && !memcmp(have, target, (size_t)k))
            continue;
        snprintf(tmp, sizeof tmp, "%s.%d.tmp", link, (int)getpid());
        unlink(tmp);
        if (symlink(target, tmp) != 0 || rename(tmp, link) != 0)
            return rt_error(RT_ERR_IO, "cannot link %s: %s", link, strerror(errno));
    }
    return rt_data_files_spec(&m->files, dir, spec, cap);
}
