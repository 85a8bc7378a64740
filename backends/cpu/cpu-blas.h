/* cpu-blas.h — the CBLAS the cpu backend was configured with (OpenBLAS,
 * BLIS or another), or nothing without one (RT_HAVE_CBLAS unset). */
#ifndef RT_CPU_BLAS_H
#define RT_CPU_BLAS_H

#ifdef RT_HAVE_CBLAS
#ifdef RT_BLAS_BLIS
/* blis.h defines many static inline helpers it does not use */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wtype-limits"
#include <blis.h>
#pragma GCC diagnostic pop
#else
#include <cblas.h>
#endif
#endif

#endif
