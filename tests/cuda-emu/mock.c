/* mock.c — the CUDA runtime, cuBLAS and cuDNN as far as the cuda backend
 * calls them, on the host, for tests/test_cuda_emu.sh: device memory is
 * malloc'ed (and filled with 0xff, so a kernel reading what it never wrote
 * shows), copies are memcpy, streams are immediate. cuBLAS's SGEMM is a
 * plain column-major loop, an independent check of the backend's row-major
 * mapping. cuDNN's handles and descriptors work and its heuristics offer
 * one algorithm, but every compute call is refused with
 * CUDNN_STATUS_NOT_SUPPORTED: with cuDNN on, the emulation exercises the
 * backend's fallbacks to its own kernels and to im2col + cuBLAS. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>
#include <cublas_v2.h>
#include <cudnn.h>

cudaError_t cudaGetDeviceCount(int *n) { *n = 1; return cudaSuccess; }
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
const char *cudaGetErrorString(cudaError_t e) { return e ? "mock error" : "no error"; }
const char *cudaGetErrorName(cudaError_t e) { return e ? "cudaErrorMock" : "cudaSuccess"; }
cudaError_t cudaDriverGetVersion(int *v) { *v = 13000; return cudaSuccess; }
cudaError_t cudaRuntimeGetVersion(int *v) { *v = 13000; return cudaSuccess; }
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int d) {
    memset(p, 0, sizeof *p); snprintf(p->name, sizeof p->name, "CPU emulation");
    p->totalGlobalMem = (size_t)1 << 30; p->multiProcessorCount = 1; p->major = 9; return cudaSuccess; }
cudaError_t cudaSetDevice(int d) { return cudaSuccess; }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned f) { *s = (cudaStream_t)0x1; return cudaSuccess; }
cudaError_t cudaStreamDestroy(cudaStream_t s) { return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t s) { return cudaSuccess; }
cudaError_t cudaMalloc(void **p, size_t n) { *p = malloc(n); if (*p) memset(*p, 0xff, n); return *p ? cudaSuccess : cudaErrorMemoryAllocation; }
cudaError_t cudaFree(void *p) { free(p); return cudaSuccess; }
cudaError_t cudaMallocHost(void **p, size_t n) { return cudaMalloc(p, n); }
cudaError_t cudaFreeHost(void *p) { free(p); return cudaSuccess; }
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, enum cudaMemcpyKind k, cudaStream_t st) { memcpy(d, s, n); return cudaSuccess; }
cudaError_t cudaMemsetAsync(void *d, int v, size_t n, cudaStream_t st) { memset(d, v, n); return cudaSuccess; }
cudaError_t cudaMemGetInfo(size_t *f, size_t *t) { *f = *t = (size_t)1 << 30; return cudaSuccess; }
cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *a, const void *f) { return cudaSuccess; }

cublasStatus_t cublasCreate_v2(cublasHandle_t *h) { *h = (cublasHandle_t)0x1; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasDestroy_v2(cublasHandle_t h) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasGetProperty(libraryPropertyType t, int *v) { *v = 13; return CUBLAS_STATUS_SUCCESS; }
const char *cublasGetStatusName(cublasStatus_t s) { return "CUBLAS_STATUS_MOCK"; }
const char *cublasGetStatusString(cublasStatus_t s) { return "mock"; }
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t h, void *w, size_t n) { return CUBLAS_STATUS_SUCCESS; }
/* column-major, as cuBLAS: C = alpha op(A) op(B) + beta C; beta == 0 does not read C */
cublasStatus_t cublasSgemm_v2(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                              const float *alpha, const float *A, int lda, const float *B, int ldb,
                              const float *beta, float *C, int ldc) {
    if ((ta == CUBLAS_OP_N ? lda < m : lda < k) || (tb == CUBLAS_OP_N ? ldb < k : ldb < n) || ldc < m)
        return CUBLAS_STATUS_INVALID_VALUE;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double acc = 0;
            for (int p = 0; p < k; p++) {
                float a = ta == CUBLAS_OP_N ? A[i + (size_t)p * lda] : A[p + (size_t)i * lda];
                float b = tb == CUBLAS_OP_N ? B[p + (size_t)j * ldb] : B[j + (size_t)p * ldb];
                acc += (double)a * b;
            }
            float *c = &C[i + (size_t)j * ldc];
            *c = *alpha * (float)acc + (*beta == 0.0f ? 0.0f : *beta * *c);
        }
    return CUBLAS_STATUS_SUCCESS;
}

static cudnnStatus_t refuse(void) { return CUDNN_STATUS_NOT_SUPPORTED; }
#define OK return CUDNN_STATUS_SUCCESS
static int dummy;
cudnnStatus_t cudnnCreate(cudnnHandle_t *h) { *h = (cudnnHandle_t)&dummy; OK; }
cudnnStatus_t cudnnDestroy(cudnnHandle_t h) { OK; }
cudnnStatus_t cudnnSetStream(cudnnHandle_t h, cudaStream_t s) { OK; }
const char *cudnnGetErrorString(cudnnStatus_t s) { return "CUDNN_STATUS_MOCK"; }
void cudnnGetLastErrorString(char *m, size_t n) { snprintf(m, n, "mock refusal"); }
size_t cudnnGetVersion(void) { return 91900; }
struct desc { int a, b, c, d; };
static void *mk(void) { return calloc(1, sizeof(struct desc)); }
cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t *d) { *d = mk(); OK; }
cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t *d) { *d = mk(); OK; }
cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t *d) { *d = mk(); OK; }
cudnnStatus_t cudnnCreatePoolingDescriptor(cudnnPoolingDescriptor_t *d) { *d = mk(); OK; }
cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t d) { free(d); OK; }
cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t d) { free(d); OK; }
cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t d) { free(d); OK; }
cudnnStatus_t cudnnDestroyPoolingDescriptor(cudnnPoolingDescriptor_t d) { free(d); OK; }
cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d, cudnnTensorFormat_t f, cudnnDataType_t t, int n, int c, int h, int w) { *(struct desc *)d = (struct desc){n, c, h, w}; OK; }
cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t t, cudnnTensorFormat_t f, int k, int c, int h, int w) { *(struct desc *)d = (struct desc){k, c, h, w}; OK; }
cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t d, int ph, int pw, int u, int v, int dh, int dw, cudnnConvolutionMode_t m, cudnnDataType_t t) { *(struct desc *)d = (struct desc){ph, pw, u, v}; OK; }
cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t d, cudnnMathType_t m) { OK; }
cudnnStatus_t cudnnGetConvolution2dForwardOutputDim(cudnnConvolutionDescriptor_t cd, cudnnTensorDescriptor_t xd, cudnnFilterDescriptor_t wd, int *n, int *c, int *h, int *w) {
    struct desc *v = (void *)cd, *x = (void *)xd, *f = (void *)wd;
    *n = x->a; *c = f->a; *h = (x->c + 2 * v->a - f->c) / v->c + 1; *w = (x->d + 2 * v->b - f->d) / v->d + 1; OK; }
cudnnStatus_t cudnnSetPooling2dDescriptor(cudnnPoolingDescriptor_t d, cudnnPoolingMode_t m, cudnnNanPropagation_t p, int a, int b, int c, int e, int f, int g) { OK; }
#define PERF(T, name, ...) cudnnStatus_t name(__VA_ARGS__, const int req, int *got, T *perf) { \
    memset(perf, 0, sizeof *perf); perf->algo = 1; perf->status = CUDNN_STATUS_SUCCESS; \
    perf->determinism = CUDNN_DETERMINISTIC; perf->mathType = CUDNN_FMA_MATH; *got = 1; OK; }
PERF(cudnnConvolutionFwdAlgoPerf_t, cudnnGetConvolutionForwardAlgorithm_v7, cudnnHandle_t h, const cudnnTensorDescriptor_t x, const cudnnFilterDescriptor_t w, const cudnnConvolutionDescriptor_t c, const cudnnTensorDescriptor_t y)
PERF(cudnnConvolutionBwdDataAlgoPerf_t, cudnnGetConvolutionBackwardDataAlgorithm_v7, cudnnHandle_t h, const cudnnFilterDescriptor_t w, const cudnnTensorDescriptor_t dy, const cudnnConvolutionDescriptor_t c, const cudnnTensorDescriptor_t dx)
PERF(cudnnConvolutionBwdFilterAlgoPerf_t, cudnnGetConvolutionBackwardFilterAlgorithm_v7, cudnnHandle_t h, const cudnnTensorDescriptor_t x, const cudnnTensorDescriptor_t dy, const cudnnConvolutionDescriptor_t c, const cudnnFilterDescriptor_t dw)
cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t h, const cudnnTensorDescriptor_t x, const cudnnFilterDescriptor_t w, const cudnnConvolutionDescriptor_t c, const cudnnTensorDescriptor_t y, cudnnConvolutionFwdAlgo_t a, size_t *n) { *n = 0; OK; }
cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(cudnnHandle_t h, const cudnnFilterDescriptor_t w, const cudnnTensorDescriptor_t dy, const cudnnConvolutionDescriptor_t c, const cudnnTensorDescriptor_t dx, cudnnConvolutionBwdDataAlgo_t a, size_t *n) { *n = 0; OK; }
cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(cudnnHandle_t h, const cudnnTensorDescriptor_t x, const cudnnTensorDescriptor_t dy, const cudnnConvolutionDescriptor_t c, const cudnnFilterDescriptor_t dw, cudnnConvolutionBwdFilterAlgo_t a, size_t *n) { *n = 0; OK; }
#define REFUSED(name, ...) cudnnStatus_t name(__VA_ARGS__) { return refuse(); }
REFUSED(cudnnConvolutionForward, cudnnHandle_t h, const void *a, const cudnnTensorDescriptor_t xd, const void *x, const cudnnFilterDescriptor_t wd, const void *w, const cudnnConvolutionDescriptor_t cd, cudnnConvolutionFwdAlgo_t al, void *ws, size_t wn, const void *b, const cudnnTensorDescriptor_t yd, void *y)
REFUSED(cudnnConvolutionBackwardData, cudnnHandle_t h, const void *a, const cudnnFilterDescriptor_t wd, const void *w, const cudnnTensorDescriptor_t dyd, const void *dy, const cudnnConvolutionDescriptor_t cd, cudnnConvolutionBwdDataAlgo_t al, void *ws, size_t wn, const void *b, const cudnnTensorDescriptor_t dxd, void *dx)
REFUSED(cudnnConvolutionBackwardFilter, cudnnHandle_t h, const void *a, const cudnnTensorDescriptor_t xd, const void *x, const cudnnTensorDescriptor_t dyd, const void *dy, const cudnnConvolutionDescriptor_t cd, cudnnConvolutionBwdFilterAlgo_t al, void *ws, size_t wn, const void *b, const cudnnFilterDescriptor_t dwd, void *dw)
REFUSED(cudnnFindConvolutionForwardAlgorithmEx, cudnnHandle_t h, const cudnnTensorDescriptor_t xd, const void *x, const cudnnFilterDescriptor_t wd, const void *w, const cudnnConvolutionDescriptor_t cd, const cudnnTensorDescriptor_t yd, void *y, const int r, int *g, cudnnConvolutionFwdAlgoPerf_t *p, void *ws, size_t wn)
REFUSED(cudnnFindConvolutionBackwardDataAlgorithmEx, cudnnHandle_t h, const cudnnFilterDescriptor_t wd, const void *w, const cudnnTensorDescriptor_t dyd, const void *dy, const cudnnConvolutionDescriptor_t cd, const cudnnTensorDescriptor_t dxd, void *dx, const int r, int *g, cudnnConvolutionBwdDataAlgoPerf_t *p, void *ws, size_t wn)
REFUSED(cudnnFindConvolutionBackwardFilterAlgorithmEx, cudnnHandle_t h, const cudnnTensorDescriptor_t xd, const void *x, const cudnnTensorDescriptor_t dyd, const void *dy, const cudnnConvolutionDescriptor_t cd, const cudnnFilterDescriptor_t dwd, void *dw, const int r, int *g, cudnnConvolutionBwdFilterAlgoPerf_t *p, void *ws, size_t wn)
REFUSED(cudnnPoolingForward, cudnnHandle_t h, const cudnnPoolingDescriptor_t p, const void *a, const cudnnTensorDescriptor_t x, const void *xx, const void *b, const cudnnTensorDescriptor_t y, void *yy)
REFUSED(cudnnPoolingBackward, cudnnHandle_t h, const cudnnPoolingDescriptor_t p, const void *a, const cudnnTensorDescriptor_t y, const void *yy, const cudnnTensorDescriptor_t dy, const void *dyy, const cudnnTensorDescriptor_t x, const void *xx, const void *b, const cudnnTensorDescriptor_t dx, void *dxx)
REFUSED(cudnnBatchNormalizationForwardTraining, cudnnHandle_t h, cudnnBatchNormMode_t m, const void *a, const void *b, const cudnnTensorDescriptor_t xd, const void *x, const cudnnTensorDescriptor_t yd, void *y, const cudnnTensorDescriptor_t bd, const void *g, const void *be, double f, void *rm, void *rv, double e, void *sm, void *si)
REFUSED(cudnnBatchNormalizationForwardInference, cudnnHandle_t h, cudnnBatchNormMode_t m, const void *a, const void *b, const cudnnTensorDescriptor_t xd, const void *x, const cudnnTensorDescriptor_t yd, void *y, const cudnnTensorDescriptor_t bd, const void *g, const void *be, const void *rm, const void *rv, double e)
REFUSED(cudnnBatchNormalizationBackward, cudnnHandle_t h, cudnnBatchNormMode_t m, const void *a, const void *b, const void *c, const void *d, const cudnnTensorDescriptor_t xd, const void *x, const cudnnTensorDescriptor_t dyd, const void *dy, const cudnnTensorDescriptor_t dxd, void *dx, const cudnnTensorDescriptor_t bd, const void *g, void *dg, void *db, double e, const void *sm, const void *si)
