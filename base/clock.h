/* clock.h — the clocks every layer times itself with. */
#ifndef RT_CLOCK_H
#define RT_CLOCK_H

double rt_now(void);     /* monotonic seconds */
double rt_cpu_now(void); /* CPU seconds used by this process, all threads */

/* One turn of a spin-wait: tells the core (and its SMT sibling) that this
 * thread only waits. */
static inline void rt_spin_pause(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__) || defined(__arm__)
    __asm__ __volatile__("yield");
#else
    __asm__ __volatile__("" ::: "memory");
#endif
}

#endif
