/* gemm.c — the cuda backend's GEMM: cuBLAS on the device's stream, for the
 * gemm op and for the convolutions' im2col path (conv.c). */
#include "config.h"

#include "cuda-impl.h"
#include "status.h"

/* Row-major C = alpha*op(A)*op(B) + beta*C is column-major
 * C^T = alpha*op(B)^T*op(A)^T + beta*C^T: the same memory, so cuBLAS gets
 * B first, A second, and the sizes n, m. Offsets are already in the
 * pointers. cuBLAS does not read C when beta == 0 (NaNs vanish), as the
 * contract asks; k == 0 or alpha == 0 only scales C, which cuBLAS would
 * not do with beta == 0 writing zeros everywhere, so a kernel does it. */
int cu_sgemm(rt_dev *d, bool ta, bool tb, int m, int n, int k, float alpha, const float *a,
             int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
    struct cu_dev *o = cu(d);
    if (m <= 0 || n <= 0)
        return RT_OK;
    if (k <= 0 || alpha == 0.0f) {
        if (beta == 1.0f)
            return RT_OK;
        return cu_status(rtcu_scale_block(o->stream, m, n, ldc, beta, c), "launching scale_block");
    }
    cublasStatus_t st = cublasSgemm(o->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                    ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b, ldb, a,
                                    lda, &beta, c, ldc);
    return cu_blas_status(st, "SGEMM");
}

int cu_gemm(rt_dev *d, int ta, int tb, int m, int n, int k, float alpha, rt_view a,
            int lda, rt_view b, int ldb, float beta, rt_view c, int ldc)
{
    RT_TRY(cu_enter(d));
    /* With k == 0 the wrapper has not checked a and b: do not touch them. */
    const float *ap = k > 0 ? cu_f(a) : NULL, *bp = k > 0 ? cu_f(b) : NULL;
    return cu_sgemm(d, ta != 0, tb != 0, m, n, k, alpha, ap, lda, bp, ldb, beta, cu_f(c), ldc);
}
