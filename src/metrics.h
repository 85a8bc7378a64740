/* metrics.h — one JSON object per line (JSON Lines), flushed per line so a
 * crashed run keeps every line it wrote. */
#ifndef RT_METRICS_H
#define RT_METRICS_H

#include <stdio.h>

typedef struct rt_metrics rt_metrics;

/* Open for appending (a resumed run continues the file). NULL on error. */
rt_metrics *rt_metrics_open(const char *path);
void rt_metrics_close(rt_metrics **m);

/* Build one line: begin, fields, end. Non-finite numbers become null. */
void rt_metrics_begin(rt_metrics *m);
void rt_metrics_str(rt_metrics *m, const char *key, const char *value);
void rt_metrics_num(rt_metrics *m, const char *key, double value);
void rt_metrics_int(rt_metrics *m, const char *key, long value);
int rt_metrics_end(rt_metrics *m);
/* A nested object under key: its fields follow, then map_end (one level). */
void rt_metrics_map_begin(rt_metrics *m, const char *key);
void rt_metrics_map_end(rt_metrics *m);

#endif
