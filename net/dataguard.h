/* dataguard.h — a worker trusts its coordinator no further than it must.
 *
 * A job names its data as a spec (--data): a coordinator could name any
 * file of the worker's machine (csv:/etc/passwd) and learn from the error
 * what it holds, or whether it exists. So a worker opens
 *   - data the coordinator serves (--serve-data: its own cache), or
 *   - the default data set of its own installation ("fashion-mnist"), or
 *   - paths under a directory its own command line allows (--data-dir DIR,
 *     repeatable; symbolic links followed must stay inside),
 * and refuses anything else before touching it. Errors in reading data
 * that name the data's files go to the coordinator without their detail
 * (which may quote a file's bytes): the worker's own log keeps it. */
#ifndef RT_DATAGUARD_H
#define RT_DATAGUARD_H

#include <stdbool.h>

#include "net.h"

/* RT_OK when the worker may open `spec`, else RT_ERR_CONFIG saying why
 * (naming the spec, nothing of the file system). */
int rt_data_guard(const struct rt_worker_options *o, const char *spec);
/* Whether an error detail is about the files of `spec`. */
bool rt_data_guard_mentions(const char *spec, const char *detail);

#endif
