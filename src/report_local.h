/* report_local.h — the reporter of a run in one process: the progress bar
 * (or plain lines) on stderr and the --metrics file (not installed). */
#ifndef RT_REPORT_LOCAL_H
#define RT_REPORT_LOCAL_H

#include "progress.h"
#include "reporter.h"

typedef struct rt_local_report rt_local_report;

/* metrics_path "" or NULL: no metrics file. NULL when it cannot be opened. */
rt_local_report *rt_local_report_new(enum rt_progress_mode mode, const char *metrics_path);
void rt_local_report_destroy(rt_local_report **r);
/* Its reporter table (ready, checkpoint and restore are not offered). */
rt_reporter rt_local_report_reporter(rt_local_report *r);

#endif
