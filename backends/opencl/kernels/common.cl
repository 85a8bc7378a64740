/* common.cl — what every ragtag OpenCL kernel file shares. The .cl files are
 * built as one program, in the order of OPENCL_KERNELS in Makefile.am, with
 *   -DRT_FP64=1|0   the device has cl_khr_fp64: reductions accumulate in
 *                   double, like the cpu backend, else in float.
 *   -DRT_FMA=1|0    the device has fused multiply-add in hardware.
 *
 * Conventions: a view is a global pointer plus an element offset (ulong),
 * added on entry. Three kinds of kernel (OCL_KERNELS in ocl-impl.h): one
 * work-item per element, one per row of an output, and reductions with one
 * work-group per channel or partial sum. */

/* No a*b+c contraction into fma: the cpu backend (ISO C, -ffp-contract=off)
 * rounds each operation, and elementwise results then agree bit for bit. */
#pragma OPENCL FP_CONTRACT OFF

#if RT_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
typedef double acc_t;
#else
typedef float acc_t;
#endif

/* a*b + c for the sums of products of the convolutions (whose bounds allow
 * either rounding): one fused instruction where the device has it in
 * hardware (-DRT_FMA=1, from CL_FP_FMA), else a multiply and an add — never
 * a slow software fma. */
#if RT_FMA
#define RT_MAD(a, b, c) fma(a, b, c)
#else
#define RT_MAD(a, b, c) ((a) * (b) + (c))
#endif

/* Largest work-group of the reduction kernels (OCL_RED on the host). */
#define RT_RED 256

/* One work-item per element (or per row, for the "row" kernels): the host
 * rounds the launch up to whole work-groups. A CPU device (PoCL) runs the
 * work-items of a group as a loop it vectorises, so a kernel body must not
 * loop over a stride of the grid, and divisions stay out of inner loops. */
#define RT_ELEM(i, n)                                                                        \
    const ulong i = get_global_id(0);                                                        \
    if (i >= (ulong)(n))                                                                     \
        return

/* Sum of one value per work-item of the group, returned to every work-item.
 * The group size is a power of two <= RT_RED; `scratch` holds RT_RED values.
 * The trailing barrier lets the caller reuse scratch at once. */
acc_t rt_group_sum(local acc_t *scratch, acc_t v)
{
    const uint t = get_local_id(0);
    scratch[t] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint s = get_local_size(0) / 2; s > 0; s >>= 1) {
        if (t < s)
            scratch[t] += scratch[t + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    acc_t r = scratch[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}
