/* opencl.c — the opencl backend: devices, contexts and the kernel program,
 * memory, errors, kernel launches, GEMM (CLBlast), elementwise ops,
 * reductions and optimiser steps. Convolutions live in conv.c, the other
 * layer ops in nn.c; the kernels in kernels/NAME.cl.
 *
 * Devices are every device of every OpenCL platform, numbered in platform
 * order: `--device N` picks among all of them. Nothing here aborts on a
 * device error: every OpenCL or CLBlast status becomes an rt_status with
 * the error's name (and the build log when the kernels fail to build). */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <clblast_c.h>

#include "module-util.h"
#include "ocl-impl.h"
#include "status.h"

/* ---- errors ------------------------------------------------------------------ */

#define OCL_ERRORS(X)                                                                        \
    X(CL_DEVICE_NOT_FOUND) X(CL_DEVICE_NOT_AVAILABLE) X(CL_COMPILER_NOT_AVAILABLE)           \
    X(CL_MEM_OBJECT_ALLOCATION_FAILURE) X(CL_OUT_OF_RESOURCES) X(CL_OUT_OF_HOST_MEMORY)      \
    X(CL_PROFILING_INFO_NOT_AVAILABLE) X(CL_MEM_COPY_OVERLAP) X(CL_IMAGE_FORMAT_MISMATCH)    \
    X(CL_IMAGE_FORMAT_NOT_SUPPORTED) X(CL_BUILD_PROGRAM_FAILURE) X(CL_MAP_FAILURE)           \
    X(CL_MISALIGNED_SUB_BUFFER_OFFSET) X(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST)       \
    X(CL_COMPILE_PROGRAM_FAILURE) X(CL_LINKER_NOT_AVAILABLE) X(CL_LINK_PROGRAM_FAILURE)      \
    X(CL_DEVICE_PARTITION_FAILED) X(CL_KERNEL_ARG_INFO_NOT_AVAILABLE) X(CL_INVALID_VALUE)    \
    X(CL_INVALID_DEVICE_TYPE) X(CL_INVALID_PLATFORM) X(CL_INVALID_DEVICE)                    \
    X(CL_INVALID_CONTEXT) X(CL_INVALID_QUEUE_PROPERTIES) X(CL_INVALID_COMMAND_QUEUE)         \
    X(CL_INVALID_HOST_PTR) X(CL_INVALID_MEM_OBJECT) X(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR)    \
    X(CL_INVALID_IMAGE_SIZE) X(CL_INVALID_SAMPLER) X(CL_INVALID_BINARY)                      \
    X(CL_INVALID_BUILD_OPTIONS) X(CL_INVALID_PROGRAM) X(CL_INVALID_PROGRAM_EXECUTABLE)       \
    X(CL_INVALID_KERNEL_NAME) X(CL_INVALID_KERNEL_DEFINITION) X(CL_INVALID_KERNEL)           \
    X(CL_INVALID_ARG_INDEX) X(CL_INVALID_ARG_VALUE) X(CL_INVALID_ARG_SIZE)                   \
    X(CL_INVALID_KERNEL_ARGS) X(CL_INVALID_WORK_DIMENSION) X(CL_INVALID_WORK_GROUP_SIZE)     \
    X(CL_INVALID_WORK_ITEM_SIZE) X(CL_INVALID_GLOBAL_OFFSET) X(CL_INVALID_EVENT_WAIT_LIST)   \
    X(CL_INVALID_EVENT) X(CL_INVALID_OPERATION) X(CL_INVALID_GL_OBJECT)                      \
    X(CL_INVALID_BUFFER_SIZE) X(CL_INVALID_MIP_LEVEL) X(CL_INVALID_GLOBAL_WORK_SIZE)         \
    X(CL_INVALID_PROPERTY) X(CL_INVALID_IMAGE_DESCRIPTOR) X(CL_INVALID_COMPILER_OPTIONS)     \
    X(CL_INVALID_LINKER_OPTIONS) X(CL_INVALID_DEVICE_PARTITION_COUNT)

/* CLBlast's own codes (its others are the OpenCL ones). */
#define OCL_BLAST_ERRORS(X)                                                                  \
    X(CLBlastNotImplemented) X(CLBlastInvalidMatrixA) X(CLBlastInvalidMatrixB)               \
    X(CLBlastInvalidMatrixC) X(CLBlastInvalidDimension) X(CLBlastInvalidLeadDimA)            \
    X(CLBlastInvalidLeadDimB) X(CLBlastInvalidLeadDimC) X(CLBlastInsufficientMemoryA)        \
    X(CLBlastInsufficientMemoryB) X(CLBlastInsufficientMemoryC)                              \
    X(CLBlastInsufficientMemoryTemp) X(CLBlastInvalidLocalMemUsage) X(CLBlastDatabaseError)  \
    X(CLBlastUnknownError) X(CLBlastUnexpectedError)

static const char *ocl_err_name(cl_int err)
{
    switch (err) {
#define X(e)                                                                                 \
    case e:                                                                                  \
        return #e;
        OCL_ERRORS(X)
        OCL_BLAST_ERRORS(X)
#undef X
    case -1001: return "CL_PLATFORM_NOT_FOUND_KHR";
    default: return "unknown OpenCL error";
    }
}

static bool ocl_err_is_nomem(cl_int err)
{
    return err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_HOST_MEMORY ||
           err == CL_INVALID_BUFFER_SIZE || err == CLBlastTempBufferAllocFailure;
}

int ocl_status(cl_int err, const char *what)
{
    if (err == CL_SUCCESS)
        return RT_OK;
    return rt_error(ocl_err_is_nomem(err) ? RT_ERR_NOMEM : RT_ERR_DEVICE, "opencl: %s: %s (%d)",
                    what, ocl_err_name(err), (int)err);
}

/* ---- devices ------------------------------------------------------------------ */

/* Every device of every platform, found once per process. */
static struct mod_devices ocl_list = MOD_DEVICES_INIT;
static struct ocl_shared *ocl_dev_list; /* ocl_list.n of them */

static int mkdir_p(char *path)
{
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        int rc = mkdir(path, 0755);
        *p = '/';
        if (rc < 0 && errno != EEXIST)
            return -1;
    }
    return mkdir(path, 0755) < 0 && errno != EEXIST ? -1 : 0;
}

/* PoCL compiles kernels with LLVM on first use (seconds, for CLBlast's
 * GEMM) and keeps the binaries in POCL_CACHE_DIR. Give it a per-user
 * directory of ours unless the user chose one, so a second start is fast.
 * This must happen before the first OpenCL call: PoCL reads it at start. */
static void ocl_pocl_cache(void)
{
    if (getenv("POCL_CACHE_DIR"))
        return;
    char dir[1024];
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (xdg && *xdg == '/')
        snprintf(dir, sizeof dir, "%s/ragtag/pocl", xdg);
    else if (home && *home == '/')
        snprintf(dir, sizeof dir, "%s/.cache/ragtag/pocl", home);
    else
        return;
    if (mkdir_p(dir) == 0)
        setenv("POCL_CACHE_DIR", dir, 0);
}

static void ocl_info_str(cl_device_id dev, cl_device_info what, char *out, size_t size)
{
    if (clGetDeviceInfo(dev, what, size, out, NULL) != CL_SUCCESS)
        snprintf(out, size, "?");
    out[size - 1] = '\0';
}

static void ocl_describe(struct ocl_shared *sh)
{
    cl_ulong mem = 0, alloc = 0;
    cl_uint cu = 0, vf = 0;
    cl_device_type type = 0;
    cl_device_fp_config fp = 0;
    char ext[4096] = "", pname[128] = "?", pver[256] = "";
    ocl_info_str(sh->device, CL_DEVICE_NAME, sh->name, sizeof sh->name);
    clGetPlatformInfo(sh->platform, CL_PLATFORM_NAME, sizeof pname, pname, NULL);
    clGetPlatformInfo(sh->platform, CL_PLATFORM_VERSION, sizeof pver, pver, NULL);
    pname[sizeof pname - 1] = pver[sizeof pver - 1] = '\0';
    snprintf(sh->platform_name, sizeof sh->platform_name, "%.60s (%.60s)", pname, pver);
    clGetDeviceInfo(sh->device, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof mem, &mem, NULL);
    clGetDeviceInfo(sh->device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof alloc, &alloc, NULL);
    clGetDeviceInfo(sh->device, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cu, &cu, NULL);
    clGetDeviceInfo(sh->device, CL_DEVICE_TYPE, sizeof type, &type, NULL);
    clGetDeviceInfo(sh->device, CL_DEVICE_SINGLE_FP_CONFIG, sizeof fp, &fp, NULL);
    clGetDeviceInfo(sh->device, CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT, sizeof vf, &vf, NULL);
    /* The extension list can be longer than any fixed buffer: a failed
     * query just means no double precision. */
    if (clGetDeviceInfo(sh->device, CL_DEVICE_EXTENSIONS, sizeof ext, ext, NULL) != CL_SUCCESS)
        ext[0] = '\0';
    ext[sizeof ext - 1] = '\0';
    sh->mem_bytes = (size_t)mem;
    sh->max_alloc = (size_t)alloc;
    sh->compute_units = (int)cu;
    sh->is_cpu = (type & CL_DEVICE_TYPE_CPU) != 0;
    sh->is_pocl = strstr(pname, "Portable Computing Language") != NULL;
    sh->fp64 = strstr(ext, "cl_khr_fp64") != NULL;
    sh->crdiv = (fp & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT) != 0;
    sh->fma = (fp & CL_FP_FMA) != 0;
    sh->vec_float = (int)vf;
}

static void ocl_enumerate(void)
{
    cl_uint np = 0;
    cl_platform_id *plats = NULL;
    ocl_pocl_cache();
    cl_int err = clGetPlatformIDs(0, NULL, &np);
    if (err == -1001 /* CL_PLATFORM_NOT_FOUND_KHR */ || (err == CL_SUCCESS && np == 0)) {
        mod_devices_fail(&ocl_list, RT_ERR_NOTFOUND,
                         "no OpenCL platform: no ICD is installed (e.g. pocl-opencl-icd for "
                         "CPUs, or a GPU vendor's driver)");
        return;
    }
    if (err != CL_SUCCESS)
        goto cl_fail;
    plats = calloc(np, sizeof *plats);
    if (!plats)
        goto nomem;
    if ((err = clGetPlatformIDs(np, plats, NULL)) != CL_SUCCESS)
        goto cl_fail;
    for (int pass = 0; pass < 2; pass++) { /* count, then fill */
        int n = 0;
        for (cl_uint p = 0; p < np; p++) {
            cl_uint nd = 0;
            if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, 0, NULL, &nd) != CL_SUCCESS)
                continue; /* a platform without devices says CL_DEVICE_NOT_FOUND */
            if (pass == 1) {
                cl_device_id *ids = calloc(nd, sizeof *ids);
                if (!ids)
                    goto nomem;
                if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, nd, ids, NULL) == CL_SUCCESS)
                    for (cl_uint i = 0; i < nd && n + (int)i < ocl_list.n; i++) {
                        struct ocl_shared *sh = &ocl_dev_list[n + i];
                        sh->platform = plats[p];
                        sh->device = ids[i];
                        pthread_mutex_init(&sh->lock, NULL);
                        ocl_describe(sh);
                    }
                free(ids);
            }
            n += (int)nd;
        }
        if (pass == 0) {
            if (n == 0) {
                mod_devices_fail(&ocl_list, RT_ERR_NOTFOUND,
                                 "%u OpenCL platform(s) but no device", np);
                goto out;
            }
            ocl_list.n = n;
            if (!(ocl_dev_list = calloc((size_t)n, sizeof *ocl_dev_list)))
                goto nomem;
        }
    }
    ocl_list.status = RT_OK;
    goto out;

cl_fail:
    mod_devices_fail(&ocl_list, RT_ERR_DEVICE, "listing OpenCL platforms failed: %s (%d)",
                     ocl_err_name(err), (int)err);
    goto out;
nomem:
    mod_devices_fail(&ocl_list, RT_ERR_NOMEM, "out of memory listing OpenCL devices");
out:
    free(plats);
}

static int ocl_init(void) { return mod_devices_init(&ocl_list, ocl_enumerate); }

static int ocl_device_count(void) { return mod_devices_count(&ocl_list, ocl_enumerate); }

static int ocl_device_info(int device, struct rt_device_info *out)
{
    RT_TRY(mod_devices_check(&ocl_list, ocl_enumerate, "opencl", device));
    const struct ocl_shared *sh = &ocl_dev_list[device];
    snprintf(out->name, sizeof out->name, "%s", sh->name);
    snprintf(out->platform, sizeof out->platform, "%s", sh->platform_name);
    out->mem_bytes = sh->mem_bytes;
    out->compute_units = sh->compute_units;
    return RT_OK;
}

/* ---- context and program, once per device --------------------------------------- */

/* The build failed: the status names the device, the log says why. */
static int ocl_build_error(struct ocl_shared *sh, cl_program prog, cl_int err)
{
    char log[768] = "";
    size_t len = 0;
    /* The log can be long (one line per warning): fetch it whole, keep its
     * start, which names the first error. */
    if (clGetProgramBuildInfo(prog, sh->device, CL_PROGRAM_BUILD_LOG, 0, NULL, &len) ==
            CL_SUCCESS &&
        len > 0) {
        char *all = malloc(len + 1);
        if (all && clGetProgramBuildInfo(prog, sh->device, CL_PROGRAM_BUILD_LOG, len, all,
                                         NULL) == CL_SUCCESS) {
            all[len] = '\0';
            snprintf(log, sizeof log, "%s", all);
        }
        free(all);
    }
    log[sizeof log - 1] = '\0';
    return rt_error(RT_ERR_DEVICE, "opencl: building ragtag's kernels for %s failed: %s (%d)%s%s",
                    sh->name, ocl_err_name(err), (int)err, log[0] ? "; build log:\n" : "", log);
}

/* ---- CLBlast tuning ------------------------------------------------------------------ */

/* CLBlast's tuning database knows GPUs and a few vendor CPU runtimes, not
 * PoCL, where it falls back to GPU-shaped defaults (large tiles, padded
 * operands): the skinny GEMMs of a convolution then run several times
 * slower than they could. These parameters were measured with LeNet's
 * shapes and square sizes on PoCL 3.1 (LLVM 15, AVX-512 Xeon, 2 cores):
 * a LeNet training step goes from 34 to 19 ms, seedcnn's from 320 to 165.
 * RAGTAG_CLBLAST_TUNING
 * replaces them (docs/backends.md). Note that CLBlast compares m*n*k with
 * the CUBE of XGEMM_MIN_INDIRECT_SIZE. */
static const char ocl_pocl_tuning[] =
    /* direct GEMM below 256^3 multiply-adds: small 16x16 tiles waste little
     * on a convolution's 6- or 16-row matrices */
    "GemmRoutine:XGEMM_MIN_INDIRECT_SIZE=256;"
    "XgemmDirect:WGD=16,MDIMCD=8,NDIMCD=8,MDIMAD=8,NDIMBD=8,VWMD=2,VWND=2,KWID=2,PADA=1,PADB=1;"
    /* above: 64x64 tiles, 8x8 work-items of 8x8 results, staged in local
     * memory (55-64 GFLOP/s from 512^3 to 1024^3 against 16-37 untuned) */
    "Xgemm:GEMMK=0,MWG=64,NWG=64,KWG=32,MDIMC=8,NDIMC=8,MDIMA=8,NDIMB=8,KWI=2,VWM=4,VWN=4,"
    "STRM=0,STRN=0,SA=1,SB=1,KREG=1";

/* Apply "Kernel:NAME=V,NAME=V;Kernel:..." through CLBlastOverrideParameters. */
static int ocl_apply_tuning(struct ocl_shared *sh, const char *spec, const char *from)
{
    char buf[1024];
    if (strlen(spec) >= sizeof buf)
        return rt_error(RT_ERR_CONFIG, "%s: tuning string longer than %zu characters", from,
                        sizeof buf - 1);
    memcpy(buf, spec, strlen(spec) + 1);
    for (char *save = NULL, *item = strtok_r(buf, ";", &save); item;
         item = strtok_r(NULL, ";", &save)) {
        char *colon = strchr(item, ':');
        if (!colon)
            return rt_error(RT_ERR_CONFIG, "%s: '%s' is not KERNEL:NAME=VALUE,...", from, item);
        *colon = '\0';
        const char *names[32];
        size_t values[32], n = 0;
        for (char *s2 = NULL, *kv = strtok_r(colon + 1, ",", &s2); kv;
             kv = strtok_r(NULL, ",", &s2)) {
            char *eq = strchr(kv, '='), *end;
            if (!eq || n == 32)
                return rt_error(RT_ERR_CONFIG, "%s: bad parameter '%s' for %s", from, kv, item);
            *eq = '\0';
            unsigned long long v = strtoull(eq + 1, &end, 10);
            if (*end || end == eq + 1)
                return rt_error(RT_ERR_CONFIG, "%s: %s=%s is not a number", from, kv, eq + 1);
            names[n] = kv;
            values[n++] = (size_t)v;
        }
        CLBlastStatusCode st = CLBlastOverrideParameters(sh->device, item, CLBlastPrecisionSingle,
                                                         n, names, values);
        if (st != CLBlastSuccess) {
            char what[160];
            snprintf(what, sizeof what, "%s: CLBlast refused the parameters for %.64s", from, item);
            return ocl_status((cl_int)st, what);
        }
    }
    return RT_OK;
}

static int ocl_tune(struct ocl_shared *sh)
{
    const char *env = getenv("RAGTAG_CLBLAST_TUNING");
    if (env)
        return ocl_apply_tuning(sh, env, "RAGTAG_CLBLAST_TUNING");
    if (sh->is_pocl && sh->is_cpu)
        return ocl_apply_tuning(sh, ocl_pocl_tuning, "ragtag's PoCL tuning");
    return RT_OK;
}

static int ocl_shared_build(struct ocl_shared *sh)
{
    cl_int err;
    cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)sh->platform, 0};
    cl_context ctx = clCreateContext(props, 1, &sh->device, NULL, NULL, &err);
    if (!ctx)
        return ocl_status(err, "creating a context");
    cl_program prog = clCreateProgramWithSource(ctx, (cl_uint)ocl_kernel_nlines,
                                                (const char **)ocl_kernel_lines, NULL, &err);
    if (!prog) {
        clReleaseContext(ctx);
        return ocl_status(err, "creating the kernel program");
    }
    char opts[160];
    snprintf(opts, sizeof opts, "-cl-std=CL1.2 -DRT_FP64=%d -DRT_FMA=%d%s", sh->fp64 ? 1 : 0,
             sh->fma ? 1 : 0, sh->crdiv ? " -cl-fp32-correctly-rounded-divide-sqrt" : "");
    err = clBuildProgram(prog, 1, &sh->device, opts, NULL, NULL);
    if (err != CL_SUCCESS) {
        int rc = ocl_build_error(sh, prog, err);
        clReleaseProgram(prog);
        clReleaseContext(ctx);
        return rc;
    }
    int rc = ocl_tune(sh);
    if (rc < 0) {
        clReleaseProgram(prog);
        clReleaseContext(ctx);
        return rc;
    }
    sh->context = ctx;
    sh->program = prog;
    return RT_OK;
}

static int ocl_shared_ready(struct ocl_shared *sh)
{
    pthread_mutex_lock(&sh->lock);
    int rc = sh->program ? RT_OK : ocl_shared_build(sh);
    pthread_mutex_unlock(&sh->lock);
    return rc;
}

/* ---- profiling (RAGTAG_OPENCL_PROFILE=1) -------------------------------------------- */

#define OCL_PROF_MAX 96
#define OCL_PROF_EVENTS 512

/* Kernels are timed by their events' device clocks (the queue profiles):
 * a finish around every kernel would add its sleep and wake-up, tens of
 * microseconds on PoCL, to every small one. The [spans] of whole ops are
 * host time with a finish at each end. */
struct ocl_prof {
    int n;
    struct {
        char name[48];
        double t;
        long calls;
    } e[OCL_PROF_MAX];
    int pending;
    cl_ulong last_end;          /* the previous kernel's end (device clock, ns) */
    double gaps;                /* seconds from a kernel's end to the next one's start */
    long kernels;
    cl_event ev[OCL_PROF_EVENTS];
    const char *ev_name[OCL_PROF_EVENTS];
};

static double ocl_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double ocl_prof_begin(rt_dev *d)
{
    struct ocl_dev *o = ocl(d);
    if (!o->prof)
        return 0.0;
    clFinish(o->queue);
    return ocl_now();
}

static void ocl_prof_add(struct ocl_prof *p, const char *name, double t)
{
    int i = 0;
    while (i < p->n && strcmp(p->e[i].name, name) != 0)
        i++;
    if (i == p->n) {
        if (p->n == OCL_PROF_MAX)
            return;
        snprintf(p->e[p->n++].name, sizeof p->e[0].name, "%s", name);
    }
    p->e[i].t += t;
    p->e[i].calls++;
}

void ocl_prof_end(rt_dev *d, double t0, const char *name)
{
    struct ocl_dev *o = ocl(d);
    if (!o->prof || t0 == 0.0)
        return;
    clFinish(o->queue);
    ocl_prof_add(o->prof, name, ocl_now() - t0);
}

/* The device time of every kernel queued since the last call. */
static void ocl_prof_collect(struct ocl_prof *p)
{
    for (int i = 0; i < p->pending; i++) {
        cl_ulong a = 0, b = 0;
        if (clWaitForEvents(1, &p->ev[i]) == CL_SUCCESS &&
            clGetEventProfilingInfo(p->ev[i], CL_PROFILING_COMMAND_START, sizeof a, &a, NULL) ==
                CL_SUCCESS &&
            clGetEventProfilingInfo(p->ev[i], CL_PROFILING_COMMAND_END, sizeof b, &b, NULL) ==
                CL_SUCCESS)
        {
            ocl_prof_add(p, p->ev_name[i], 1e-9 * (double)(b - a));
            /* (long waits for the host, as between steps, count too) */
            if (p->last_end && a > p->last_end)
                p->gaps += 1e-9 * (double)(a - p->last_end);
            p->last_end = b;
            p->kernels++;
        }
        clReleaseEvent(p->ev[i]);
    }
    p->pending = 0;
}

static cl_event *ocl_prof_event(struct ocl_prof *p, const char *name)
{
    if (!p)
        return NULL;
    if (p->pending == OCL_PROF_EVENTS)
        ocl_prof_collect(p);
    p->ev_name[p->pending] = name;
    return &p->ev[p->pending];
}

static void ocl_prof_print(struct ocl_prof *p)
{
    double total = 0;
    for (int i = 0; i < p->n; i++)
        if (p->e[i].name[0] != '[')
            total += p->e[i].t;
    fprintf(stderr, "opencl profile (ms total, calls, us/call); [spans] include their kernels\n");
    fprintf(stderr, "  %ld kernels: %.1f ms running, %.1f ms from one's end to the next one's "
                    "start (%.1f us each)\n",
            p->kernels, total * 1e3, p->gaps * 1e3,
            p->kernels > 1 ? p->gaps * 1e6 / (double)(p->kernels - 1) : 0.0);
    for (int i = 0; i < p->n; i++) {
        int best = i;
        for (int j = i + 1; j < p->n; j++)
            if (p->e[j].t > p->e[best].t)
                best = j;
        if (best != i) {
            char tmp[sizeof p->e[0]];
            memcpy(tmp, &p->e[i], sizeof tmp);
            memcpy(&p->e[i], &p->e[best], sizeof tmp);
            memcpy(&p->e[best], tmp, sizeof tmp);
        }
        fprintf(stderr, "  %-40s %10.1f %8ld %9.1f %5.1f%%\n", p->e[i].name, p->e[i].t * 1e3,
                p->e[i].calls, p->e[i].t * 1e6 / (double)p->e[i].calls,
                total > 0 ? 100.0 * p->e[i].t / total : 0.0);
    }
}

/* ---- opening a device ------------------------------------------------------------- */

static const char *const ocl_kernel_names[OCL_K_COUNT] = {
#define X(name, kind) "rt_" #name,
    OCL_KERNELS(X)
#undef X
};

static const char ocl_kernel_kinds[OCL_K_COUNT] = {
#define X(name, kind) #kind[0],
    OCL_KERNELS(X)
#undef X
};

/* Work-group sizes, by kind of kernel. Reductions: a power of two that
 * fits their local arrays (OCL_RED). Element kernels: large groups on a
 * CPU device, which runs a group as one vectorised loop and pays for every
 * group it schedules; 256 on a GPU. Row kernels do a row's worth of work
 * each: 64, so that a few hundred rows still spread over every core. */
static size_t ocl_pick_wg(struct ocl_dev *o, enum ocl_kernel k)
{
    size_t kmax = 0, want;
    if (clGetKernelWorkGroupInfo(o->k[k], o->sh->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof kmax,
                                 &kmax, NULL) != CL_SUCCESS ||
        kmax == 0)
        kmax = 1;
    switch (ocl_kernel_kinds[k]) {
    case 'E': want = o->sh->is_cpu ? 1024 : 256; break;
    case 'R': want = 64; break;
    case 'T': want = o->sh->is_cpu ? 8 : 64; break;
    case 'S': want = o->sh->is_cpu ? 4 : 64; break;
    default: want = OCL_RED; break;
    }
    size_t wg = 1;
    while (wg * 2 <= want && wg * 2 <= kmax)
        wg *= 2;
    return wg;
}

static void ocl_dev_free(struct ocl_dev *o)
{
    ocl_event_done(&o->late_ev);
    ocl_event_done(&o->read_ev);
    for (int i = 0; i < OCL_K_COUNT; i++)
        if (o->k[i])
            clReleaseKernel(o->k[i]);
    if (o->partial)
        clReleaseMemObject(o->partial);
    if (o->flag)
        clReleaseMemObject(o->flag);
    if (o->dummy)
        clReleaseMemObject(o->dummy);
    if (o->queue)
        clReleaseCommandQueue(o->queue);
    if (o->prof) {
        ocl_prof_collect(o->prof);
        ocl_prof_print(o->prof);
    }
    free(o->prof);
    free(o->stage);
    free(o);
}

/* The direct convolutions' vector: 16 floats where the device prefers them
 * (PoCL on AVX-512, whose 32 registers hold the tile), else 8;
 * RAGTAG_OPENCL_VECTOR=8|16 forces one (the tests check both). */
static int ocl_pick_conv_vector(struct ocl_dev *o)
{
    const char *env = getenv("RAGTAG_OPENCL_VECTOR");
    o->conv_v = o->sh->vec_float >= 16 ? 16 : 8;
    if (!env || !*env)
        return RT_OK;
    if (strcmp(env, "8") != 0 && strcmp(env, "16") != 0)
        return rt_error(RT_ERR_CONFIG, "RAGTAG_OPENCL_VECTOR=%s: give 8 or 16 (floats per "
                        "vector of the direct convolutions)", env);
    o->conv_v = atoi(env);
    return RT_OK;
}

static int ocl_dev_open(rt_dev *d)
{
    RT_TRY(ocl_init());
    struct ocl_shared *sh = &ocl_dev_list[d->device];
    RT_TRY(ocl_shared_ready(sh));
    struct ocl_dev *o = calloc(1, sizeof *o);
    if (!o)
        return rt_error(RT_ERR_NOMEM, "out of memory opening an OpenCL device");
    o->sh = sh;
    cl_int err;
    int rc;
    const char *prof = getenv("RAGTAG_OPENCL_PROFILE");
    if (prof && *prof && strcmp(prof, "0") != 0)
        o->prof = calloc(1, sizeof *o->prof); /* NULL: no profile, nothing else lost */
    if ((rc = ocl_pick_conv_vector(o)) < 0)
        goto fail;
    o->stage = malloc(OCL_STAGE_BYTES); /* NULL: every upload blocks, nothing else lost */
    o->queue = clCreateCommandQueue(sh->context, sh->device,
                                    o->prof ? CL_QUEUE_PROFILING_ENABLE : 0, &err);
    if (!o->queue) {
        rc = ocl_status(err, "creating a command queue");
        goto fail;
    }
    for (int i = 0; i < OCL_K_COUNT; i++) {
        o->k[i] = clCreateKernel(sh->program, ocl_kernel_names[i], &err);
        if (!o->k[i]) {
            rc = ocl_status(err, ocl_kernel_names[i]);
            goto fail;
        }
        o->wg[i] = ocl_pick_wg(o, (enum ocl_kernel)i);
    }
    size_t part = OCL_SUMSQ_GROUPS * (sh->fp64 ? sizeof(double) : sizeof(float));
    o->partial = clCreateBuffer(sh->context, CL_MEM_READ_WRITE, part, NULL, &err);
    if (o->partial)
        o->flag = clCreateBuffer(sh->context, CL_MEM_READ_WRITE, sizeof(cl_int), NULL, &err);
    if (o->flag)
        o->dummy = clCreateBuffer(sh->context, CL_MEM_READ_WRITE, sizeof(cl_float), NULL, &err);
    if (!o->dummy) {
        rc = ocl_status(err, "allocating scratch buffers");
        goto fail;
    }
    d->impl = o;
    return RT_OK;

fail:
    ocl_dev_free(o);
    return rc;
}

static void ocl_dev_close(rt_dev *d)
{
    struct ocl_dev *o = ocl(d);
    if (!o)
        return;
    clFinish(o->queue);
    ocl_dev_free(o);
    d->impl = NULL;
}

/* ---- kernel launches -------------------------------------------------------------- */

static int ocl_set_args(rt_dev *d, cl_kernel k, const char *fmt, va_list ap)
{
    struct ocl_dev *o = ocl(d);
    cl_uint idx = 0;
    cl_int err = CL_SUCCESS;
    for (const char *f = fmt; *f && err == CL_SUCCESS; f++) {
        switch (*f) {
        case 'v': {
            rt_view v = va_arg(ap, rt_view);
            cl_mem m = v.buf ? ocl_mem(v) : o->dummy;
            cl_ulong off = v.buf ? (cl_ulong)v.off : 0;
            err = clSetKernelArg(k, idx++, sizeof m, &m);
            if (err == CL_SUCCESS)
                err = clSetKernelArg(k, idx++, sizeof off, &off);
            break;
        }
        case 'm': {
            cl_mem m = va_arg(ap, cl_mem);
            err = clSetKernelArg(k, idx++, sizeof m, &m);
            break;
        }
        case 'i': {
            cl_int v = va_arg(ap, int);
            err = clSetKernelArg(k, idx++, sizeof v, &v);
            break;
        }
        case 'l': {
            cl_ulong v = va_arg(ap, size_t);
            err = clSetKernelArg(k, idx++, sizeof v, &v);
            break;
        }
        case 'u': {
            cl_ulong v = va_arg(ap, uint64_t);
            err = clSetKernelArg(k, idx++, sizeof v, &v);
            break;
        }
        case 'f': {
            cl_float v = (cl_float)va_arg(ap, double);
            err = clSetKernelArg(k, idx++, sizeof v, &v);
            break;
        }
        default:
            RT_ASSERT(!"bad kernel argument format");
        }
    }
    return ocl_status(err, "setting kernel arguments");
}

static int ocl_enqueue(rt_dev *d, enum ocl_kernel k, size_t groups)
{
    struct ocl_dev *o = ocl(d);
    size_t local = o->wg[k], global = groups * local;
    cl_event *ev = ocl_prof_event(o->prof, ocl_kernel_names[k]);
    cl_int err = clEnqueueNDRangeKernel(o->queue, o->k[k], 1, NULL, &global, &local, 0, NULL, ev);
    if (ev && err == CL_SUCCESS)
        o->prof->pending++;
    if (err != CL_SUCCESS) {
        char what[64];
        snprintf(what, sizeof what, "running kernel %s", ocl_kernel_names[k]);
        return ocl_status(err, what);
    }
    return RT_OK;
}

int ocl_run_n(rt_dev *d, enum ocl_kernel k, size_t n, const char *fmt, ...)
{
    struct ocl_dev *o = ocl(d);
    va_list ap;
    va_start(ap, fmt);
    int rc = ocl_set_args(d, o->k[k], fmt, ap);
    va_end(ap);
    if (rc < 0 || n == 0)
        return rc;
    return ocl_enqueue(d, k, (n + o->wg[k] - 1) / o->wg[k]);
}

int ocl_run_groups(rt_dev *d, enum ocl_kernel k, size_t groups, const char *fmt, ...)
{
    struct ocl_dev *o = ocl(d);
    va_list ap;
    va_start(ap, fmt);
    int rc = ocl_set_args(d, o->k[k], fmt, ap);
    va_end(ap);
    if (rc < 0 || groups == 0)
        return rc;
    return ocl_enqueue(d, k, groups);
}

/* ---- memory ------------------------------------------------------------------------ */

/* Bytes of b's memory object: its size and OCL_BUF_SPARE more where the
 * device allows that much in one allocation. */
size_t ocl_buf_readable(rt_dev *d, const rt_buf *b)
{
    const size_t bytes = mod_buf_bytes(b);
    const size_t max = ocl(d)->sh->max_alloc;
    return max >= OCL_BUF_SPARE && bytes <= max - OCL_BUF_SPARE ? bytes + OCL_BUF_SPARE : bytes;
}

static int ocl_buf_alloc(rt_dev *d, rt_buf *b)
{
    struct ocl_dev *o = ocl(d);
    if (b->bytes > o->sh->max_alloc)
        return rt_error(RT_ERR_NOMEM,
                        "opencl: a buffer of %zu bytes is larger than %s allows in one "
                        "allocation (%zu bytes)",
                        b->bytes, o->sh->name, o->sh->max_alloc);
    cl_int err;
    cl_mem m = clCreateBuffer(o->sh->context, CL_MEM_READ_WRITE, ocl_buf_readable(d, b), NULL,
                              &err);
    if (!m) {
        char what[96];
        return ocl_status(err, mod_buf_what(b, what, sizeof what));
    }
    b->handle = m;
    return RT_OK;
}

static void ocl_buf_free(rt_dev *d, rt_buf *b)
{
    if (b->handle)
        clReleaseMemObject((cl_mem)b->handle);
    b->handle = NULL;
}

/* The caller may reuse `src` as soon as this returns. A blocking write
 * waits for every kernel queued before it (the previous step's optimiser,
 * on PoCL a sleep and a wake-up each way), so a small one is copied to the
 * stage and queued: the device goes on, and the host queues the forward
 * meanwhile. The stage is free again after any wait for the whole queue. */
static int ocl_upload(rt_dev *d, rt_view dst, const void *src, size_t bytes)
{
    struct ocl_dev *o = ocl(d);
    const size_t need = (bytes + 63) & ~(size_t)63;
    if (bytes > OCL_STAGE_BYTES / 4 || !o->stage) {
        cl_int err = clEnqueueWriteBuffer(o->queue, ocl_mem(dst), CL_TRUE, dst.off * 4, bytes,
                                          src, 0, NULL, NULL);
        return ocl_status(err, "uploading");
    }
    if (o->staged + need > OCL_STAGE_BYTES) {
        RT_TRY(ocl_status(clFinish(o->queue), "uploading (waiting for earlier uploads)"));
        o->staged = 0;
    }
    unsigned char *at = o->stage + o->staged;
    memcpy(at, src, bytes);
    cl_int err = clEnqueueWriteBuffer(o->queue, ocl_mem(dst), CL_FALSE, dst.off * 4, bytes, at, 0,
                                      NULL, NULL);
    o->staged += need;
    return ocl_status(err, "uploading");
}

static int ocl_download(rt_dev *d, void *dst, rt_view src, size_t bytes)
{
    struct ocl_dev *o = ocl(d);
    cl_int err = clEnqueueReadBuffer(o->queue, ocl_mem(src), CL_TRUE, src.off * 4, bytes, dst, 0,
                                     NULL, NULL);
    if (err == CL_SUCCESS) {
        o->staged = 0; /* an in-order queue: every earlier write is done */
        ocl_event_done(&o->read_ev); /* (and a started download) */
    }
    /* (a softmax's label check queued before this read is back too) */
    const int late = ocl_late_check(d);
    RT_TRY(ocl_status(err, "downloading"));
    return late;
}

static int ocl_download_wait(rt_dev *d)
{
    struct ocl_dev *o = ocl(d);
    if (!o->read_ev)
        return RT_OK;
    cl_int err = ocl_event_done(&o->read_ev);
    /* an in-order queue: the uploads staged before the read are done too
     * (with none since, the whole stage is free again) */
    if (err == CL_SUCCESS && o->staged == o->staged_at_read)
        o->staged = 0;
    return ocl_status(err, "downloading (a started download)");
}

/* A read the host does not wait for: the queue goes on with what the host
 * queues after it (backend.h, rt_download_start). */
static int ocl_download_start(rt_dev *d, void *dst, rt_view src, size_t bytes)
{
    struct ocl_dev *o = ocl(d);
    RT_TRY(ocl_download_wait(d));
    cl_int err = clEnqueueReadBuffer(o->queue, ocl_mem(src), CL_FALSE, src.off * 4, bytes, dst,
                                     0, NULL, &o->read_ev);
    if (err != CL_SUCCESS)
        o->read_ev = NULL;
    o->staged_at_read = o->staged;
    return ocl_status(err, "starting a download");
}

/* memmove semantics. OpenCL refuses overlapping copies within one buffer,
 * so those (rare: no layer makes them) go through a temporary buffer. */
static int ocl_copy(rt_dev *d, rt_view dst, rt_view src, size_t n)
{
    struct ocl_dev *o = ocl(d);
    cl_mem s = ocl_mem(src), t = ocl_mem(dst);
    const enum mod_copy kind = mod_copy_kind(dst, src, n);
    if (kind == MOD_COPY_SAME)
        return RT_OK;
    cl_int err;
    if (kind == MOD_COPY_OVERLAP) {
        cl_mem tmp = clCreateBuffer(o->sh->context, CL_MEM_READ_WRITE, n * 4, NULL, &err);
        if (!tmp)
            return ocl_status(err, "allocating a copy's bounce buffer");
        err = clEnqueueCopyBuffer(o->queue, s, tmp, src.off * 4, 0, n * 4, 0, NULL, NULL);
        if (err == CL_SUCCESS)
            err = clEnqueueCopyBuffer(o->queue, tmp, t, 0, dst.off * 4, n * 4, 0, NULL, NULL);
        clReleaseMemObject(tmp); /* released once the copies are done */
        return ocl_status(err, "copying");
    }
    err = clEnqueueCopyBuffer(o->queue, s, t, src.off * 4, dst.off * 4, n * 4, 0, NULL, NULL);
    return ocl_status(err, "copying");
}

/* Errors of enqueued work (a lost device, an allocation that failed when
 * first touched, a bad label a softmax op found) surface here. */
static int ocl_sync(rt_dev *d)
{
    cl_int err = clFinish(ocl(d)->queue);
    if (err == CL_SUCCESS) {
        ocl(d)->staged = 0;
        ocl_event_done(&ocl(d)->read_ev);
    }
    const int late = ocl_late_check(d);
    RT_TRY(ocl_status(err, "finishing queued work"));
    return late;
}

/* ---- GEMM --------------------------------------------------------------------------- */

static int ocl_blast_status(CLBlastStatusCode st, const char *what)
{
    return ocl_status((cl_int)st, what);
}

/* RT_GM in elementwise.cl */
#define OCL_GEMM_ROWS 6

/* ragtag's own GEMM kernels (kernels/elementwise.cl) instead of CLBlast:
 * on CPU devices, where CLBlast's GPU-shaped kernels are slow at every
 * shape a layer makes, for every transpose but A^T B^T, while indices fit
 * in an int. RAGTAG_OPENCL_GEMM=own|clblast forces a choice (tests). */
static bool ocl_own_gemm(rt_dev *d, bool ta, bool tb, int m, int n, int k, int lda, int ldb,
                         int ldc)
{
    if (ta && tb)
        return false;
    const double lim = 2147483647.0 - 64.0;
    if ((double)(ta ? k : m) * lda > lim || (double)(tb ? n : k) * ldb > lim ||
        (double)m * ldc > lim)
        return false;
    const char *env = getenv("RAGTAG_OPENCL_GEMM");
    if (env && strcmp(env, "own") == 0)
        return true;
    if (env && strcmp(env, "clblast") == 0)
        return false;
    return ocl(d)->sh->is_cpu;
}

/* The own GEMM's work-items, and which block runs fastest: neighbouring
 * work-items share rows of A (column block fastest), so B streams once
 * per row block, or share B (row block fastest), so A streams once per
 * column block: the smaller traffic wins. */
static size_t own_tiles(rt_dev *d, bool tb, int m, int n, int k, int *rowfast)
{
    const bool v16 = ocl(d)->conv_v == 16;
    const int tr = tb ? 3 : OCL_GEMM_ROWS, tc = tb ? 3 : v16 ? 32 : 16; /* the kernels' tiles */
    const double nrb = (double)((m + tr - 1) / tr), ncb = (double)((n + tc - 1) / tc);
    *rowfast = (double)m * k * ncb < (double)k * n * nrb;
    return (size_t)nrb * (size_t)ncb;
}

/* The own GEMM, C = alpha op(A) op(B) + beta C, then (kind >= 0, only
 * with B transposed) act(C + bias[j]) as rt_bias_act_lin. */
static int own_gemm(rt_dev *d, bool ta, bool tb, int m, int n, int k, float alpha, rt_view a,
                    int lda, rt_view b, int ldb, float beta, rt_view c, int ldc, rt_view bias,
                    int kind, float act_alpha)
{
    const bool v16 = ocl(d)->conv_v == 16;
    double t0 = ocl_prof_begin(d);
    int rc, rowfast;
    const size_t items = own_tiles(d, tb, m, n, k, &rowfast);
    if (!tb) /* op(A)[i][kk] = A[i*sai + kk*sak] */
        rc = ocl_run_n(d, v16 ? OCL_K_gemm_rows_v16 : OCL_K_gemm_rows, items, "iiifiivvifvii", m,
                       n, k, (double)alpha, ta ? 1 : lda, ta ? lda : 1, a, b, ldb, (double)beta,
                       c, ldc, rowfast);
    else
        rc = ocl_run_n(d, v16 ? OCL_K_gemm_dots_v16 : OCL_K_gemm_dots, items, "iiifvivifviivif", m,
                       n, k, (double)alpha, a, lda, b, ldb, (double)beta, c, ldc, rowfast, bias,
                       kind, (double)act_alpha);
    if (t0 != 0.0) {
        char name[64];
        snprintf(name, sizeof name, "[own sgemm %c%c %dx%dx%d%s]", ta ? 'T' : 'N', tb ? 'T' : 'N',
                 m, n, k, kind >= 0 ? " bias act" : "");
        ocl_prof_end(d, t0, name);
    }
    return rc;
}

int ocl_sgemm(rt_dev *d, bool ta, bool tb, int m, int n, int k, float alpha, rt_view a, int lda,
              rt_view b, int ldb, float beta, rt_view c, int ldc)
{
    if (m <= 0 || n <= 0)
        return RT_OK;
    if (k <= 0 || alpha == 0.0f) {
        if (beta == 1.0f)
            return RT_OK;
        return ocl_run_n(d, OCL_K_scale_block, (size_t)m, "iiifv", m, n, ldc, (double)beta, c);
    }
    if (ocl_own_gemm(d, ta, tb, m, n, k, lda, ldb, ldc))
        return own_gemm(d, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc,
                        (rt_view){NULL, 0}, -1, 0.0f);
    struct ocl_dev *o = ocl(d);
    double t0 = ocl_prof_begin(d);
    /* CLBlast does not read C when beta == 0 (NaNs vanish), as the
     * contract asks; tests/test_backend_ops.c checks it. */
    CLBlastStatusCode st = CLBlastSgemm(
        CLBlastLayoutRowMajor, ta ? CLBlastTransposeYes : CLBlastTransposeNo,
        tb ? CLBlastTransposeYes : CLBlastTransposeNo, (size_t)m, (size_t)n, (size_t)k, alpha,
        ocl_mem(a), a.off, (size_t)lda, ocl_mem(b), b.off, (size_t)ldb, beta, ocl_mem(c), c.off,
        (size_t)ldc, &o->queue, NULL);
    if (t0 != 0.0) {
        char name[48];
        snprintf(name, sizeof name, "[sgemm %c%c %dx%dx%d]", ta ? 'T' : 'N', tb ? 'T' : 'N', m,
                 n, k);
        ocl_prof_end(d, t0, name);
    }
    return ocl_blast_status(st, "CLBlast SGEMM");
}

/* One launch where the own GEMM runs and the activation is piecewise
 * linear; otherwise the GEMM, then bias_act_fwd. */
int ocl_dense_fwd(rt_dev *d, int n, int in, int units, rt_view x, rt_view w, rt_view b,
                  enum rt_act kind, float alpha, rt_view y)
{
    if (kind < RT_ACT_IDENTITY || kind > RT_ACT_TANH)
        return rt_error(RT_ERR_UNSUPPORTED, "opencl: unknown activation %d", (int)kind);
    if (in > 0 && kind <= RT_ACT_LEAKY && ocl_own_gemm(d, false, true, n, units, in, in, in, units))
        return own_gemm(d, false, true, n, units, in, 1.0f, x, in, w, in, 0.0f, y, units, b,
                        (int)kind, alpha);
    RT_TRY(ocl_sgemm(d, false, true, n, units, in, 1.0f, x, in, w, in, 0.0f, y, units));
    return ocl_bias_act_fwd(d, kind, alpha, n, units, 1, b, y);
}

int ocl_gemm(rt_dev *d, int ta, int tb, int m, int n, int k, float alpha, rt_view a,
             int lda, rt_view b, int ldb, float beta, rt_view c, int ldc)
{
    return ocl_sgemm(d, ta != 0, tb != 0, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/* Both gradients in one launch of the own rows kernel where it takes both
 * (rt_gemm_rows_pair: each tile the bits of its own launch): dw = g^T x
 * (units x in, inner n), dx = g w (n x in, inner units). On PoCL a launch
 * costs about 11 us of a training step (nine empty ones added to lenet's
 * step cost 4.2%), as much as the work of lenet's smaller GEMMs. Else the
 * two GEMMs in turn. */
int ocl_dense_bwd(rt_dev *d, int n, int in, int units, rt_view g, rt_view x, rt_view w,
                  rt_view dw, rt_view dx)
{
    if (!dw.buf || !dx.buf || n <= 0 || units <= 0 || in <= 0 ||
        !ocl_own_gemm(d, true, false, units, in, n, units, in, in) ||
        !ocl_own_gemm(d, false, false, n, in, units, units, in, in))
        return rt_dense_bwd_by_gemm(d, n, in, units, g, x, w, dw, dx);
    const bool v16 = ocl(d)->conv_v == 16;
    double t0 = ocl_prof_begin(d);
    int rw, rx;
    const size_t iw = own_tiles(d, false, units, in, n, &rw);
    const size_t ix = own_tiles(d, false, n, in, units, &rx);
    int rc = ocl_run_n(d, v16 ? OCL_K_gemm_rows_v16_pair : OCL_K_gemm_rows_pair, iw + ix,
                       "liiifiivvifviiiiifiivvifvii", iw,
                       units, in, n, 1.0, 1, units, g, x, in, 0.0, dw, in, rw, /* g^T x */
                       n, in, units, 1.0, units, 1, g, w, in, 0.0, dx, in, rx); /* g w */
    if (t0 != 0.0) {
        char name[96];
        snprintf(name, sizeof name, "[own sgemm pair TN %dx%dx%d, NN %dx%dx%d]", units, in, n, n,
                 in, units);
        ocl_prof_end(d, t0, name);
    }
    return rc;
}

/* ---- elementwise ----------------------------------------------------------------------- */

int ocl_mul(rt_dev *d, size_t n, rt_view a, rt_view b, rt_view y)
{
    return ocl_run_n(d, OCL_K_mul, n, "lvvv", n, a, b, y);
}

int ocl_axpy(rt_dev *d, size_t n, float alpha, rt_view x, rt_view y)
{
    return ocl_run_n(d, OCL_K_axpy, n, "lfvv", n, (double)alpha, x, y);
}

int ocl_scale(rt_dev *d, size_t n, float alpha, rt_view x)
{
    return ocl_run_n(d, OCL_K_scale, n, "lfv", n, (double)alpha, x);
}

int ocl_fill(rt_dev *d, size_t n, float value, rt_view x)
{
    return ocl_run_n(d, OCL_K_fill, n, "lfv", n, (double)value, x);
}

/* Two stages: OCL_SUMSQ_GROUPS work-groups each sum a grid-stride share
 * (double when the device has it), then the host adds the partials in
 * group order. The launch shape is fixed, so a run repeats exactly. */
int ocl_sumsq(rt_dev *d, size_t n, rt_view x, double *out)
{
    struct ocl_dev *o = ocl(d);
    size_t groups = (n + o->wg[OCL_K_sumsq_part] - 1) / o->wg[OCL_K_sumsq_part];
    if (groups > OCL_SUMSQ_GROUPS)
        groups = OCL_SUMSQ_GROUPS;
    RT_TRY(ocl_run_groups(d, OCL_K_sumsq_part, groups, "lvm", n, x, o->partial));
    union {
        double d[OCL_SUMSQ_GROUPS];
        float f[OCL_SUMSQ_GROUPS];
    } part;
    size_t each = o->sh->fp64 ? sizeof(double) : sizeof(float);
    cl_int err = clEnqueueReadBuffer(o->queue, o->partial, CL_TRUE, 0, groups * each, &part, 0,
                                     NULL, NULL);
    RT_TRY(ocl_status(err, "reading sumsq's partial sums"));
    double s = 0.0;
    for (size_t i = 0; i < groups; i++)
        s += o->sh->fp64 ? part.d[i] : (double)part.f[i];
    *out = s;
    return RT_OK;
}

/* ---- optimiser steps -------------------------------------------------------------------- */

int ocl_sgd_step(rt_dev *d, size_t n, const struct rt_sgd_params *p, rt_view w, rt_view g,
                 rt_view v)
{
    int mode = p->momentum == 0.0f ? 0 : p->nesterov ? 2 : 1;
    return ocl_run_n(d, OCL_K_sgd_step, n, "lfffivvv", n, (double)p->lr, (double)p->momentum,
                     (double)p->weight_decay, mode, w, g, v);
}

/* The step's scalars come from the core, as on every backend. */
int ocl_adam_step(rt_dev *d, size_t n, const struct rt_adam_scalars *p, rt_view w, rt_view g,
                  rt_view m, rt_view v)
{
    return ocl_run_n(d, OCL_K_adam_step, n, "lfffffffffvvvv", n, (double)p->lr,
                     (double)p->beta1, (double)p->beta2, (double)p->eps, (double)p->l2,
                     (double)p->decay, (double)p->inv_bc2, (double)p->cm, (double)p->cg, w, g,
                     m, v);
}

/* ---- the table -------------------------------------------------------------------------- */

static const struct rt_backend_ops ocl_backend = {
    .abi_version = RT_BACKEND_ABI_VERSION,
    .size = sizeof(struct rt_backend_ops),
    .name = "opencl",
    .device_count = ocl_device_count,
    .device_info = ocl_device_info,
    .dev_open = ocl_dev_open,
    .dev_close = ocl_dev_close,
    .buf_alloc = ocl_buf_alloc,
    .buf_free = ocl_buf_free,
    .upload = ocl_upload,
    .download = ocl_download,
    .download_start = ocl_download_start,
    .download_wait = ocl_download_wait,
    .copy = ocl_copy,
    .sync = ocl_sync,
    .conv2d_workspace = ocl_conv2d_workspace,
    .host_memory = false,
#define RT_OP(name, params) .name = ocl_##name,
#include "ops.def"
#undef RT_OP
};

/* The module's one exported symbol (see backend-impl.h). */
const struct rt_backend_ops *rt_backend_module_ops(void) { return &ocl_backend; }
