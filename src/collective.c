/* collective.c — the one rule of which slice a rank owns. */
#include "collective.h"

#include "status.h"

void rt_slice(size_t n, int world, int rank, size_t *lo, size_t *hi)
{
    RT_ASSERT(world >= 1 && rank >= 0 && rank < world);
    *lo = (size_t)((unsigned __int128)n * (unsigned)rank / (unsigned)world);
    *hi = (size_t)((unsigned __int128)n * (unsigned)(rank + 1) / (unsigned)world);
}
