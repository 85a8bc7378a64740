/* errors.c — the cuda backend's vendor statuses as ragtag ones, and
 * entering a device. Nothing in the module aborts on a device error: every
 * CUDA, cuBLAS and cuDNN status becomes an rt_status carrying the vendor's
 * name and message. */
#include "config.h"

#include <stdbool.h>

#include "cuda-impl.h"
#include "status.h"

int cu_status(cudaError_t err, const char *what)
{
    if (err == cudaSuccess)
        return RT_OK;
    cudaGetLastError(); /* reported now: a later launch check must not see it again */
    return rt_error(err == cudaErrorMemoryAllocation ? RT_ERR_NOMEM : RT_ERR_DEVICE,
                    "cuda: %s: %s (%s)", what, cudaGetErrorString(err), cudaGetErrorName(err));
}

int cu_blas_status(cublasStatus_t st, const char *what)
{
    if (st == CUBLAS_STATUS_SUCCESS)
        return RT_OK;
    return rt_error(st == CUBLAS_STATUS_ALLOC_FAILED ? RT_ERR_NOMEM : RT_ERR_DEVICE,
                    "cuBLAS: %s: %s (%s)", what, cublasGetStatusString(st),
                    cublasGetStatusName(st));
}

int cu_dnn_status(cudnnStatus_t st, const char *what)
{
    if (st == CUDNN_STATUS_SUCCESS)
        return RT_OK;
    /* cuDNN 9 keeps a message of its own for the last failure: say it too. */
    char last[384] = "";
    cudnnGetLastErrorString(last, sizeof last);
    last[sizeof last - 1] = '\0';
    const bool nomem = st == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED ||
                       st == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED;
    return rt_error(nomem ? RT_ERR_NOMEM : RT_ERR_DEVICE, "cuDNN: %s: %s (%d)%s%s", what,
                    cudnnGetErrorString(st), (int)st, last[0] ? ": " : "", last);
}

int cu_enter(rt_dev *d)
{
    return cu_status(cudaSetDevice(cu(d)->ordinal), "making the device current");
}
