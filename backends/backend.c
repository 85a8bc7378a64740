/* backend.c — the backend registry, the module loader and the checked
 * wrappers around the kernel table. Validation lives here, once, so each
 * backend stays small: every view is checked against its buffer's size and
 * device before the backend sees it.
 *
 * Backends: the built-in cpu backend first, then optional backends built as
 * loadable modules (ragtag-NAME.so, docs/backends.md) found on
 * RAGTAG_BACKEND_PATH, then next to a program run from the build tree, then
 * in the install directory. Modules are opened
 * only when something asks for a backend other than a built-in one, so a
 * cpu-only run never touches OpenCL or CUDA libraries. */
#include "config.h"

#include <dirent.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend-impl.h"
#include "status.h"

const char *const rt_op_names[RT_OPK_COUNT] = {
#define RT_OP(name, params) #name,
#include "ops.def"
#undef RT_OP
};

/* Offsets of the op slots, to check at registration that none is NULL. */
static const size_t op_slot_offsets[RT_OPK_COUNT] = {
#define RT_OP(name, params) offsetof(struct rt_backend_ops, name),
#include "ops.def"
#undef RT_OP
};

static const struct rt_backend_ops *const builtin_backends[] = {
    &rt_cpu_backend,
};
#define N_BUILTIN (sizeof builtin_backends / sizeof builtin_backends[0])

/* Optional backends ragtag knows by name. They are listed even when their
 * module is missing, so `ragtag devices` says why a backend is absent;
 * modules with other names found on the search path are listed after them. */
static const char *const known_modules[] = {"opencl", "cuda"};
#define N_KNOWN (sizeof known_modules / sizeof known_modules[0])

#ifndef RT_BACKEND_DIR
#define RT_BACKEND_DIR "/usr/local/lib/ragtag/backends"
#endif

/* A table is usable when its ABI matches and no slot is empty: a missing op
 * is refused here, never discovered mid-training. */
static int backend_check(const struct rt_backend_ops *ops)
{
    if (ops->abi_version != RT_BACKEND_ABI_VERSION || ops->size != sizeof *ops)
        return rt_error(RT_ERR_UNSUPPORTED,
                        "backend '%s' was built for kernel-table ABI %u (size %u), "
                        "this ragtag has ABI %u (size %zu)",
                        ops->name ? ops->name : "?", ops->abi_version, ops->size,
                        RT_BACKEND_ABI_VERSION, sizeof *ops);
    for (int i = 0; i < RT_OPK_COUNT; i++) {
        void *slot;
        memcpy(&slot, (const char *)ops + op_slot_offsets[i], sizeof slot);
        if (!slot)
            return rt_error(RT_ERR_UNSUPPORTED, "backend '%s' lacks op '%s'",
                            ops->name, rt_op_names[i]);
    }
    return RT_OK;
}

/* ---- the module loader ------------------------------------------------------ */

/* One optional backend: its table once a module loaded, else why not. */
struct module {
    char name[32];
    const struct rt_backend_ops *ops;
    char why[512];
    bool tried; /* a candidate file was found (why then says what failed) */
};

static struct {
    pthread_once_t once;
    struct module *mods;
    int n, cap;
    char path[2048]; /* the directories searched, ':'-separated, for messages */
} reg = {.once = PTHREAD_ONCE_INIT};

static bool loader_verbose(void)
{
    const char *v = getenv("RAGTAG_BACKEND_VERBOSE");
    return v && *v && strcmp(v, "0") != 0;
}

/* RAGTAG_BACKEND_VERBOSE=1: say what became of each candidate. */
static void loader_say(const char *what, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void loader_say(const char *what, const char *fmt, ...)
{
    if (!loader_verbose())
        return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "ragtag: backend module %s: ", what);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static struct module *module_entry(const char *name, bool add)
{
    for (int i = 0; i < reg.n; i++)
        if (strcmp(reg.mods[i].name, name) == 0)
            return &reg.mods[i];
    if (!add)
        return NULL;
    if (reg.n == reg.cap) {
        int cap = reg.cap ? 2 * reg.cap : 8;
        struct module *m = realloc(reg.mods, (size_t)cap * sizeof *m);
        if (!m)
            return NULL;
        reg.mods = m;
        reg.cap = cap;
    }
    struct module *m = &reg.mods[reg.n++];
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "%s", name);
    return m;
}

/* The NAME of a file called ragtag-NAME.so, or false. Names are short
 * lower-case words, so a stray file cannot smuggle in odd characters. */
static bool module_file_name(const char *file, char *name, size_t size)
{
    size_t len = strlen(file);
    if (len <= 10 || strncmp(file, "ragtag-", 7) != 0 || strcmp(file + len - 3, ".so") != 0)
        return false;
    size_t n = len - 10;
    if (n >= size)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = file[7 + i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'))
            return false;
    }
    memcpy(name, file + 7, n);
    name[n] = '\0';
    return true;
}

/* dlopen one candidate and take its table if it is sound; on failure the
 * reason goes to `why` (kept only for the first candidate of a name: that is
 * the one the user most likely meant). */
static void module_try(struct module *m, const char *path)
{
    char why[512];
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(why, sizeof why, "%s", e ? e : "dlopen failed");
        goto fail;
    }
    const struct rt_backend_ops *(*get)(void);
    void *sym = dlsym(h, RT_BACKEND_MODULE_SYMBOL);
    if (!sym) {
        snprintf(why, sizeof why, "%.300s: no symbol %s (not a ragtag backend module)", path,
                 RT_BACKEND_MODULE_SYMBOL);
        goto fail_close;
    }
    memcpy(&get, &sym, sizeof get); /* object to function pointer, as POSIX allows */
    const struct rt_backend_ops *ops = get();
    if (!ops) {
        snprintf(why, sizeof why, "%.300s: the module returned no kernel table", path);
        goto fail_close;
    }
    if (backend_check(ops) < 0) {
        snprintf(why, sizeof why, "%.300s: %.200s", path, rt_error_detail());
        rt_error_clear();
        goto fail_close;
    }
    if (!ops->name || strcmp(ops->name, m->name) != 0) {
        snprintf(why, sizeof why, "%.300s: the module calls itself '%.32s', not '%s'", path,
                 ops->name ? ops->name : "(null)", m->name);
        goto fail_close;
    }
    /* Never dlclose'd: the table and its code live as long as the process. */
    m->ops = ops;
    loader_say(path, "loaded");
    return;

fail_close:
    dlclose(h);
fail:
    loader_say(path, "skipped: %s", why);
    if (!m->tried)
        snprintf(m->why, sizeof m->why, "%s", why);
    m->tried = true;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Every ragtag-*.so of one directory, in name order so the listing is stable. */
static void loader_scan_dir(const char *dir)
{
    DIR *dp = opendir(dir);
    if (!dp) {
        loader_say(dir, "skipped: not a readable directory");
        return;
    }
    char **files = NULL;
    size_t nf = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(dp))) {
        char name[32];
        if (!module_file_name(e->d_name, name, sizeof name))
            continue;
        if (nf == cap) {
            size_t c = cap ? 2 * cap : 8;
            char **f = realloc(files, c * sizeof *f);
            if (!f)
                break;
            files = f;
            cap = c;
        }
        if (!(files[nf] = strdup(e->d_name)))
            break;
        nf++;
    }
    closedir(dp);
    if (nf > 1)
        qsort(files, nf, sizeof *files, cmp_str);
    for (size_t i = 0; i < nf; i++) {
        char name[32], path[4096];
        module_file_name(files[i], name, sizeof name);
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        free(files[i]);
        bool builtin = false;
        for (size_t b = 0; b < N_BUILTIN; b++)
            builtin |= strcmp(builtin_backends[b]->name, name) == 0;
        struct module *m = builtin ? NULL : module_entry(name, true);
        if (builtin)
            loader_say(path, "skipped: '%s' is a built-in backend", name);
        else if (m && m->ops)
            loader_say(path, "skipped: backend '%s' already loaded from an earlier directory",
                       name);
        else if (m)
            module_try(m, path);
    }
    free(files);
}

/* A program run from the build tree (src/ragtag, the tests) finds the
 * modules built next to it, without `make install` or RAGTAG_BACKEND_PATH;
 * an installed one only the install directory. "" when not in the tree. */
static void build_tree_dirs(char *out, size_t cap)
{
    out[0] = '\0';
#ifdef RT_BUILD_DIR
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    size_t len = strlen(RT_BUILD_DIR);
    if (n <= 0 || (size_t)n <= len)
        return;
    exe[n] = '\0';
    if (strncmp(exe, RT_BUILD_DIR, len) != 0 || exe[len] != '/')
        return;
    int k = 0;
    for (size_t i = 0; i < N_KNOWN && k >= 0 && (size_t)k < cap; i++)
        k += snprintf(out + k, cap - (size_t)k, "%s" RT_BUILD_DIR "/backends/%s/.libs",
                      i ? ":" : "", known_modules[i]);
#endif
}

/* Runs once per process, the first time a non-built-in backend is wanted. */
static void loader_init(void)
{
    for (size_t i = 0; i < N_KNOWN; i++)
        module_entry(known_modules[i], true);

    char dirs[sizeof reg.path], tree[1024];
    const char *env = getenv("RAGTAG_BACKEND_PATH");
    build_tree_dirs(tree, sizeof tree);
    snprintf(dirs, sizeof dirs, "%s%s%s%s%s", env ? env : "", env && *env ? ":" : "", tree,
             tree[0] ? ":" : "", RT_BACKEND_DIR);
    reg.path[0] = '\0';
    for (char *save = NULL, *dir = strtok_r(dirs, ":", &save); dir;
         dir = strtok_r(NULL, ":", &save)) {
        size_t len = strlen(reg.path);
        snprintf(reg.path + len, sizeof reg.path - len, "%s%s", len ? ":" : "", dir);
        loader_scan_dir(dir);
    }
    for (int i = 0; i < reg.n; i++) {
        struct module *m = &reg.mods[i];
        if (!m->ops && !m->tried) {
            snprintf(m->why, sizeof m->why,
                     "no module ragtag-%s.so in %s (not built or not installed; "
                     "RAGTAG_BACKEND_PATH adds directories)",
                     m->name, reg.path);
            loader_say(m->name, "%s", m->why);
        }
    }
}

static void loader_run(void) { pthread_once(&reg.once, loader_init); }

/* ---- the registry ------------------------------------------------------------ */

/* The table of a usable backend, or NULL with the reason set as the error
 * ("backend 'x' is unavailable: why", or just "why" when `brief`). */
static const struct rt_backend_ops *backend_find(const char *name, bool brief)
{
    for (size_t i = 0; i < N_BUILTIN; i++)
        if (strcmp(builtin_backends[i]->name, name) == 0)
            return builtin_backends[i];
    loader_run();
    struct module *m = module_entry(name, false);
    if (m && m->ops)
        return m->ops;
    if (m) {
        if (brief)
            rt_error(RT_ERR_NOTFOUND, "%s", m->why);
        else
            rt_error(RT_ERR_NOTFOUND, "backend '%s' is unavailable: %s", name, m->why);
        return NULL;
    }
    char known[256] = "";
    for (int i = 0; i < rt_backend_count(); i++) {
        strncat(known, i ? ", " : "", sizeof known - strlen(known) - 1);
        strncat(known, rt_backend_name(i), sizeof known - strlen(known) - 1);
    }
    rt_error(RT_ERR_NOTFOUND, "no backend named '%s' (known: %s)", name, known);
    return NULL;
}

int rt_backend_count(void)
{
    loader_run();
    return (int)N_BUILTIN + reg.n;
}

const char *rt_backend_name(int i)
{
    loader_run();
    if (i < 0)
        return NULL;
    if ((size_t)i < N_BUILTIN)
        return builtin_backends[i]->name;
    i -= (int)N_BUILTIN;
    return i < reg.n ? reg.mods[i].name : NULL;
}

/* A backend that could not be loaded has no devices: the count is an error
 * whose detail says why, which `ragtag devices` prints. */
int rt_backend_device_count(const char *backend)
{
    const struct rt_backend_ops *ops = backend_find(backend, true);
    if (!ops)
        return RT_ERR_NOTFOUND;
    return ops->device_count();
}

int rt_backend_device_info(const char *backend, int device, struct rt_device_info *out)
{
    memset(out, 0, sizeof *out);
    const struct rt_backend_ops *ops = backend_find(backend, true);
    if (!ops)
        return RT_ERR_NOTFOUND;
    return ops->device_info(device, out);
}

rt_dev *rt_dev_open(const char *backend, int device, int threads)
{
    const struct rt_backend_ops *ops = backend_find(backend, false);
    if (!ops)
        return NULL;
    if (backend_check(ops) < 0)
        return NULL;
    int n = ops->device_count();
    if (n < 0)
        return NULL; /* the backend said why */
    if (device < 0 || device >= n) {
        rt_error(RT_ERR_NOTFOUND, "backend '%s' has %d device(s); device %d does not exist",
                 backend, n, device);
        return NULL;
    }
    rt_dev *d = calloc(1, sizeof *d);
    if (!d) {
        rt_error(RT_ERR_NOMEM, "out of memory opening backend '%s'", backend);
        return NULL;
    }
    d->ops = ops;
    d->device = device;
    d->threads = threads;
    if (ops->dev_open(d) < 0) {
        free(d);
        return NULL;
    }
    return d;
}

void rt_dev_close(rt_dev **dp)
{
    if (!dp || !*dp)
        return;
    rt_dev *d = *dp;
    d->ops->dev_close(d);
    free(d);
    *dp = NULL;
}

const char *rt_dev_backend(const rt_dev *d) { return d->ops->name; }
int rt_dev_threads(const rt_dev *d) { return d->threads; }
size_t rt_dev_live_bytes(const rt_dev *d) { return d->live_bytes; }

rt_buf *rt_buf_new(rt_dev *d, size_t bytes)
{
    RT_ASSERT(d);
    rt_buf *b = calloc(1, sizeof *b);
    if (!b) {
        rt_error(RT_ERR_NOMEM, "out of host memory for a buffer descriptor");
        return NULL;
    }
    b->dev = d;
    b->bytes = bytes;
    if (d->ops->buf_alloc(d, b) < 0) {
        free(b);
        return NULL;
    }
    d->live_bytes += bytes;
    return b;
}

rt_buf *rt_buf_wrap_host(rt_dev *d, void *host, size_t bytes)
{
    RT_ASSERT(d && host && d->ops->host_memory && ((uintptr_t)host & 63) == 0);
    rt_buf *b = calloc(1, sizeof *b);
    if (!b) {
        rt_error(RT_ERR_NOMEM, "out of host memory for a buffer descriptor");
        return NULL;
    }
    *b = (rt_buf){.dev = d, .bytes = bytes, .handle = host, .borrowed = true};
    return b;
}

void rt_buf_destroy(rt_buf **bp)
{
    if (!bp || !*bp)
        return;
    rt_buf *b = *bp;
    if (b->borrowed) {
        free(b);
        *bp = NULL;
        return;
    }
    b->dev->live_bytes -= b->bytes;
    b->dev->ops->buf_free(b->dev, b);
    free(b);
    *bp = NULL;
}

void *rt_view_host(rt_view v)
{
    if (!v.buf || !v.buf->dev->ops->host_memory)
        return NULL;
    return (float *)v.buf->handle + v.off;
}

/* ---- checks --------------------------------------------------------------- */

/* A view must lie on `d` and hold `n` elements from its offset. Breaking this
 * is a bug in the caller (a layer), so it is an assertion, not a status. */
static void check_view(rt_dev *d, rt_view v, size_t n, const char *op, const char *arg)
{
    if (n == 0)
        return;
    if (!v.buf || v.buf->dev != d || v.off > v.buf->bytes / 4 || n > v.buf->bytes / 4 - v.off) {
        fprintf(stderr,
                "ragtag: internal error: op %s: view '%s' (offset %zu, %zu elements) "
                "outside its buffer (%zu elements) or on another device\n",
                op, arg, v.off, n, v.buf ? v.buf->bytes / 4 : 0);
        abort();
    }
}
#define CHECK(v, n) check_view(d, (v), (size_t)(n), __func__ + 6, #v)

int rt_upload(rt_dev *d, rt_view dst, const void *src, size_t bytes)
{
    RT_ASSERT(bytes % 4 == 0);
    check_view(d, dst, bytes / 4, "upload", "dst");
    return bytes ? d->ops->upload(d, dst, src, bytes) : RT_OK;
}

int rt_download(rt_dev *d, void *dst, rt_view src, size_t bytes)
{
    RT_ASSERT(bytes % 4 == 0);
    check_view(d, src, bytes / 4, "download", "src");
    return bytes ? d->ops->download(d, dst, src, bytes) : RT_OK;
}

int rt_download_start(rt_dev *d, void *dst, rt_view src, size_t bytes)
{
    RT_ASSERT(bytes % 4 == 0);
    check_view(d, src, bytes / 4, "download", "src");
    if (!bytes)
        return RT_OK;
    return d->ops->download_start ? d->ops->download_start(d, dst, src, bytes)
                                  : d->ops->download(d, dst, src, bytes);
}

int rt_download_wait(rt_dev *d)
{
    return d->ops->download_wait ? d->ops->download_wait(d) : RT_OK;
}

int rt_copy(rt_dev *d, rt_view dst, rt_view src, size_t n)
{
    check_view(d, dst, n, "copy", "dst");
    check_view(d, src, n, "copy", "src");
    return n ? d->ops->copy(d, dst, src, n) : RT_OK;
}

int rt_sync(rt_dev *d) { return d->ops->sync(d); }

size_t rt_conv2d_workspace(rt_dev *d, const struct rt_conv_shape *s)
{
    return d->ops->conv2d_workspace(d, s);
}

static size_t zu(int v)
{
    RT_ASSERT(v >= 0);
    return (size_t)v;
}

static void check_conv(const struct rt_conv_shape *s)
{
    RT_ASSERT(s->n >= 0 && s->c > 0 && s->k > 0 && s->r > 0 && s->s > 0);
    RT_ASSERT(s->stride_h > 0 && s->stride_w > 0 && s->pad_h >= 0 && s->pad_w >= 0);
    RT_ASSERT(s->oh == (s->h + 2 * s->pad_h - s->r) / s->stride_h + 1);
    RT_ASSERT(s->ow == (s->w + 2 * s->pad_w - s->s) / s->stride_w + 1);
    RT_ASSERT(s->oh > 0 && s->ow > 0);
}

static void check_pool(const struct rt_pool_shape *s)
{
    RT_ASSERT(s->n >= 0 && s->c > 0 && s->r > 0 && s->s > 0);
    RT_ASSERT(s->stride_h > 0 && s->stride_w > 0 && s->pad_h >= 0 && s->pad_w >= 0);
    RT_ASSERT(s->pad_h < s->r && s->pad_w < s->s);
    RT_ASSERT(s->oh == (s->h + 2 * s->pad_h - s->r) / s->stride_h + 1);
    RT_ASSERT(s->ow == (s->w + 2 * s->pad_w - s->s) / s->stride_w + 1);
    RT_ASSERT(s->oh > 0 && s->ow > 0);
}

/* ---- the checked op wrappers ----------------------------------------------- */

int rt_op_gemm(rt_dev *d, int ta, int tb, int m, int n, int k, float alpha, rt_view a,
               int lda, rt_view b, int ldb, float beta, rt_view c, int ldc)
{
    RT_ASSERT(m >= 0 && n >= 0 && k >= 0);
    if (m == 0 || n == 0)
        return RT_OK;
    size_t arows = ta ? zu(k) : zu(m), acols = ta ? zu(m) : zu(k);
    size_t brows = tb ? zu(n) : zu(k), bcols = tb ? zu(k) : zu(n);
    RT_ASSERT((size_t)lda >= acols && (size_t)ldb >= bcols && (size_t)ldc >= zu(n));
    if (k > 0) {
        CHECK(a, (arows - 1) * lda + acols);
        CHECK(b, (brows - 1) * ldb + bcols);
    }
    CHECK(c, (zu(m) - 1) * ldc + zu(n));
    return d->ops->gemm(d, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

int rt_op_conv2d_fwd(rt_dev *d, const struct rt_conv_shape *s, rt_view x, rt_view w,
                     rt_view y, rt_view ws)
{
    check_conv(s);
    if (s->n == 0)
        return RT_OK;
    CHECK(x, zu(s->n) * s->c * s->h * s->w);
    CHECK(w, zu(s->k) * s->c * s->r * s->s);
    CHECK(y, zu(s->n) * s->k * s->oh * s->ow);
    CHECK(ws, rt_conv2d_workspace(d, s));
    return d->ops->conv2d_fwd(d, s, x, w, y, ws);
}

int rt_op_conv2d_bwd_data(rt_dev *d, const struct rt_conv_shape *s, rt_view dy, rt_view w,
                          rt_view dx, rt_view ws)
{
    check_conv(s);
    if (s->n == 0)
        return RT_OK;
    CHECK(dy, zu(s->n) * s->k * s->oh * s->ow);
    CHECK(w, zu(s->k) * s->c * s->r * s->s);
    CHECK(dx, zu(s->n) * s->c * s->h * s->w);
    CHECK(ws, rt_conv2d_workspace(d, s));
    return d->ops->conv2d_bwd_data(d, s, dy, w, dx, ws);
}

int rt_op_conv2d_bwd_filter(rt_dev *d, const struct rt_conv_shape *s, rt_view x,
                            rt_view dy, rt_view dw, rt_view ws)
{
    check_conv(s);
    CHECK(dw, zu(s->k) * s->c * s->r * s->s);
    if (s->n > 0) {
        CHECK(x, zu(s->n) * s->c * s->h * s->w);
        CHECK(dy, zu(s->n) * s->k * s->oh * s->ow);
        CHECK(ws, rt_conv2d_workspace(d, s));
    }
    return d->ops->conv2d_bwd_filter(d, s, x, dy, dw, ws);
}

int rt_op_dense_fwd(rt_dev *d, int n, int in, int units, rt_view x, rt_view w, rt_view b,
                    enum rt_act kind, float alpha, rt_view y)
{
    RT_ASSERT(n >= 0 && in >= 0 && units >= 0);
    if (n == 0 || units == 0)
        return RT_OK;
    if (in > 0) {
        CHECK(x, zu(n) * zu(in));
        CHECK(w, zu(units) * zu(in));
    }
    CHECK(b, zu(units));
    CHECK(y, zu(n) * zu(units));
    return d->ops->dense_fwd(d, n, in, units, x, w, b, kind, alpha, y);
}

int rt_op_dense_bwd(rt_dev *d, int n, int in, int units, rt_view g, rt_view x, rt_view w,
                    rt_view dw, rt_view dx)
{
    RT_ASSERT(n >= 0 && in >= 0 && units >= 0);
    if (in == 0 || (!dw.buf && !dx.buf))
        return RT_OK;
    if (dw.buf)
        CHECK(dw, zu(units) * zu(in));
    if (dx.buf)
        CHECK(dx, zu(n) * zu(in));
    if (n > 0 && units > 0) {
        CHECK(g, zu(n) * zu(units));
        if (dw.buf)
            CHECK(x, zu(n) * zu(in));
        if (dx.buf)
            CHECK(w, zu(units) * zu(in));
    }
    return d->ops->dense_bwd(d, n, in, units, g, x, w, dw, dx);
}

int rt_op_conv2d_fwd_bias_act(rt_dev *d, const struct rt_conv_shape *s, rt_view x, rt_view w,
                              rt_view b, enum rt_act kind, float alpha, rt_view y, rt_view ws)
{
    check_conv(s);
    if (s->n == 0)
        return RT_OK;
    CHECK(x, zu(s->n) * s->c * s->h * s->w);
    CHECK(w, zu(s->k) * s->c * s->r * s->s);
    CHECK(b, zu(s->k));
    CHECK(y, zu(s->n) * s->k * s->oh * s->ow);
    CHECK(ws, rt_conv2d_workspace(d, s));
    return d->ops->conv2d_fwd_bias_act(d, s, x, w, b, kind, alpha, y, ws);
}

int rt_op_conv2d_bwd_act(rt_dev *d, const struct rt_conv_shape *s, enum rt_act kind,
                         float alpha, rt_view x, rt_view y, rt_view dy, rt_view w, rt_view g,
                         rt_view dx, rt_view dw, rt_view db, rt_view ws)
{
    check_conv(s);
    CHECK(dw, zu(s->k) * s->c * s->r * s->s);
    if (db.buf)
        CHECK(db, zu(s->k));
    if (s->n > 0) {
        const size_t yn = zu(s->n) * s->k * s->oh * s->ow;
        CHECK(x, zu(s->n) * s->c * s->h * s->w);
        CHECK(dy, yn);
        if (kind != RT_ACT_IDENTITY || db.buf) {
            CHECK(y, yn);
            CHECK(g, yn);
        }
        CHECK(w, zu(s->k) * s->c * s->r * s->s);
        if (dx.buf)
            CHECK(dx, zu(s->n) * s->c * s->h * s->w);
        CHECK(ws, rt_conv2d_workspace(d, s));
    }
    return d->ops->conv2d_bwd_act(d, s, kind, alpha, x, y, dy, w, g, dx, dw, db, ws);
}

int rt_op_bias_act_fwd(rt_dev *d, enum rt_act kind, float alpha, int n, int c, int hw,
                       rt_view b, rt_view y)
{
    CHECK(b, zu(c));
    CHECK(y, zu(n) * zu(c) * zu(hw));
    if (n == 0 || c == 0 || hw == 0)
        return RT_OK;
    return d->ops->bias_act_fwd(d, kind, alpha, n, c, hw, b, y);
}

int rt_op_act_bias_bwd(rt_dev *d, enum rt_act kind, float alpha, int n, int c, int hw,
                       rt_view y, rt_view dy, rt_view dx, rt_view db)
{
    CHECK(db, zu(c));
    CHECK(y, zu(n) * zu(c) * zu(hw));
    CHECK(dy, zu(n) * zu(c) * zu(hw));
    CHECK(dx, zu(n) * zu(c) * zu(hw));
    if (c == 0)
        return RT_OK;
    return d->ops->act_bias_bwd(d, kind, alpha, n, c, hw, y, dy, dx, db);
}

int rt_op_bias_add(rt_dev *d, int n, int c, int hw, rt_view b, rt_view y)
{
    CHECK(b, zu(c));
    CHECK(y, zu(n) * zu(c) * zu(hw));
    if (n == 0 || c == 0 || hw == 0)
        return RT_OK;
    return d->ops->bias_add(d, n, c, hw, b, y);
}

int rt_op_bias_grad(rt_dev *d, int n, int c, int hw, rt_view dy, rt_view db)
{
    CHECK(db, zu(c));
    CHECK(dy, zu(n) * zu(c) * zu(hw));
    if (c == 0)
        return RT_OK;
    return d->ops->bias_grad(d, n, c, hw, dy, db);
}

int rt_op_pool_fwd(rt_dev *d, const struct rt_pool_shape *s, rt_view x, rt_view y)
{
    check_pool(s);
    if (s->n == 0)
        return RT_OK;
    CHECK(x, zu(s->n) * s->c * s->h * s->w);
    CHECK(y, zu(s->n) * s->c * s->oh * s->ow);
    return d->ops->pool_fwd(d, s, x, y);
}

int rt_op_pool_bwd(rt_dev *d, const struct rt_pool_shape *s, rt_view x, rt_view y,
                   rt_view dy, rt_view dx)
{
    check_pool(s);
    if (s->n == 0)
        return RT_OK;
    CHECK(x, zu(s->n) * s->c * s->h * s->w);
    CHECK(y, zu(s->n) * s->c * s->oh * s->ow);
    CHECK(dy, zu(s->n) * s->c * s->oh * s->ow);
    CHECK(dx, zu(s->n) * s->c * s->h * s->w);
    return d->ops->pool_bwd(d, s, x, y, dy, dx);
}

int rt_op_act_fwd(rt_dev *d, enum rt_act kind, float alpha, size_t n, rt_view x, rt_view y)
{
    CHECK(x, n);
    CHECK(y, n);
    return n ? d->ops->act_fwd(d, kind, alpha, n, x, y) : RT_OK;
}

int rt_op_add_act_fwd(rt_dev *d, enum rt_act kind, float alpha, size_t n, rt_view a, rt_view b,
                      rt_view y)
{
    CHECK(a, n);
    CHECK(b, n);
    CHECK(y, n);
    return n ? d->ops->add_act_fwd(d, kind, alpha, n, a, b, y) : RT_OK;
}

int rt_op_act_bwd(rt_dev *d, enum rt_act kind, float alpha, size_t n, rt_view x, rt_view y,
                  rt_view dy, rt_view dx)
{
    CHECK(x, n);
    CHECK(y, n);
    CHECK(dy, n);
    CHECK(dx, n);
    return n ? d->ops->act_bwd(d, kind, alpha, n, x, y, dy, dx) : RT_OK;
}

int rt_op_softmax_xent_fwd(rt_dev *d, int n, int c, rt_view logits, rt_view labels,
                           rt_view probs, rt_view losses)
{
    RT_ASSERT(c > 0);
    CHECK(logits, zu(n) * zu(c));
    CHECK(labels, zu(n));
    CHECK(probs, zu(n) * zu(c));
    CHECK(losses, zu(n));
    return n ? d->ops->softmax_xent_fwd(d, n, c, logits, labels, probs, losses) : RT_OK;
}

int rt_op_softmax_xent_bwd(rt_dev *d, int n, int c, rt_view probs, rt_view labels,
                           float scale, rt_view dlogits)
{
    RT_ASSERT(c > 0);
    CHECK(probs, zu(n) * zu(c));
    CHECK(labels, zu(n));
    CHECK(dlogits, zu(n) * zu(c));
    return n ? d->ops->softmax_xent_bwd(d, n, c, probs, labels, scale, dlogits) : RT_OK;
}

int rt_op_bn_fwd_train(rt_dev *d, const struct rt_bn_shape *s, rt_view x, rt_view gamma,
                       rt_view beta, rt_view y, rt_view save_mean, rt_view save_invstd,
                       rt_view run_mean, rt_view run_var)
{
    size_t total = zu(s->n) * zu(s->c) * zu(s->hw);
    RT_ASSERT(s->n > 0 && s->c > 0 && s->hw > 0);
    CHECK(x, total);
    CHECK(y, total);
    CHECK(gamma, zu(s->c));
    CHECK(beta, zu(s->c));
    CHECK(save_mean, zu(s->c));
    CHECK(save_invstd, zu(s->c));
    CHECK(run_mean, zu(s->c));
    CHECK(run_var, zu(s->c));
    return d->ops->bn_fwd_train(d, s, x, gamma, beta, y, save_mean, save_invstd, run_mean,
                                run_var);
}

int rt_op_bn_fwd_infer(rt_dev *d, const struct rt_bn_shape *s, rt_view x, rt_view gamma,
                       rt_view beta, rt_view run_mean, rt_view run_var, rt_view y)
{
    size_t total = zu(s->n) * zu(s->c) * zu(s->hw);
    CHECK(x, total);
    CHECK(y, total);
    CHECK(gamma, zu(s->c));
    CHECK(beta, zu(s->c));
    CHECK(run_mean, zu(s->c));
    CHECK(run_var, zu(s->c));
    return total ? d->ops->bn_fwd_infer(d, s, x, gamma, beta, run_mean, run_var, y) : RT_OK;
}

int rt_op_bn_bwd(rt_dev *d, const struct rt_bn_shape *s, rt_view x, rt_view y, rt_view dy,
                 rt_view gamma, rt_view save_mean, rt_view save_invstd, rt_view dx,
                 rt_view dgamma, rt_view dbeta)
{
    size_t total = zu(s->n) * zu(s->c) * zu(s->hw);
    RT_ASSERT(s->n > 0 && s->c > 0 && s->hw > 0);
    CHECK(x, total);
    if (s->act != RT_ACT_IDENTITY) /* the activation's gradient is taken from y */
        CHECK(y, total);
    CHECK(dy, total);
    CHECK(dx, total);
    CHECK(gamma, zu(s->c));
    CHECK(save_mean, zu(s->c));
    CHECK(save_invstd, zu(s->c));
    CHECK(dgamma, zu(s->c));
    CHECK(dbeta, zu(s->c));
    return d->ops->bn_bwd(d, s, x, y, dy, gamma, save_mean, save_invstd, dx, dgamma, dbeta);
}

int rt_op_dropout_fwd(rt_dev *d, size_t n, float rate, uint64_t seed, rt_view x, rt_view y,
                      rt_view mask)
{
    RT_ASSERT(rate >= 0.0f && rate < 1.0f);
    CHECK(x, n);
    CHECK(y, n);
    CHECK(mask, n);
    return n ? d->ops->dropout_fwd(d, n, rate, seed, x, y, mask) : RT_OK;
}

int rt_op_mul(rt_dev *d, size_t n, rt_view a, rt_view b, rt_view y)
{
    CHECK(a, n);
    CHECK(b, n);
    CHECK(y, n);
    return n ? d->ops->mul(d, n, a, b, y) : RT_OK;
}

int rt_op_axpy(rt_dev *d, size_t n, float alpha, rt_view x, rt_view y)
{
    CHECK(x, n);
    CHECK(y, n);
    return n ? d->ops->axpy(d, n, alpha, x, y) : RT_OK;
}

int rt_op_scale(rt_dev *d, size_t n, float alpha, rt_view x)
{
    CHECK(x, n);
    return n ? d->ops->scale(d, n, alpha, x) : RT_OK;
}

int rt_op_fill(rt_dev *d, size_t n, float value, rt_view x)
{
    CHECK(x, n);
    return n ? d->ops->fill(d, n, value, x) : RT_OK;
}

int rt_op_sumsq(rt_dev *d, size_t n, rt_view x, double *out)
{
    CHECK(x, n);
    *out = 0.0;
    return n ? d->ops->sumsq(d, n, x, out) : RT_OK;
}

int rt_op_sgd_step(rt_dev *d, size_t n, const struct rt_sgd_params *p, rt_view w, rt_view g,
                   rt_view v)
{
    CHECK(w, n);
    CHECK(g, n);
    if (p->momentum != 0.0f)
        CHECK(v, n);
    return n ? d->ops->sgd_step(d, n, p, w, g, v) : RT_OK;
}

int rt_op_adam_step(rt_dev *d, size_t n, const struct rt_adam_scalars *p, rt_view w, rt_view g,
                    rt_view m, rt_view v)
{
    RT_ASSERT(p);
    CHECK(w, n);
    CHECK(g, n);
    CHECK(m, n);
    CHECK(v, n);
    return n ? d->ops->adam_step(d, n, p, w, g, m, v) : RT_OK;
}
