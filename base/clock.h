/* clock.h — the clocks every layer times itself with. */
#ifndef RT_CLOCK_H
#define RT_CLOCK_H

double rt_now(void);     /* monotonic seconds */
double rt_cpu_now(void); /* CPU seconds used by this process, all threads */

#endif
