/* none.c — the multi-machine entry points of a ragtag built without
 * ZeroMQ / msgpack-c: each says what to install. */
#include "config.h"

#include <string.h>

#include "net.h"
#include "status.h"

#define MISSING                                                                              \
    rt_error(RT_ERR_UNSUPPORTED, "this ragtag was built without multi-machine training: "   \
                                 "install libzmq3-dev and libmsgpack-dev, then run "         \
                                 "./configure and make again")

bool rt_net_available(void) { return false; }

void rt_coord_options_defaults(struct rt_coord_options *o)
{
    memset(o, 0, sizeof *o);
    o->workers = 1;
}

int rt_coord_run(const struct rt_coord_options *o, const struct rt_train_config *c,
                 struct rt_train_result *res)
{
    (void)o;
    (void)c;
    memset(res, 0, sizeof *res);
    return MISSING;
}

void rt_coord_request_stop(void) {}

void rt_worker_options_defaults(struct rt_worker_options *o) { memset(o, 0, sizeof *o); }

int rt_worker_run(const struct rt_worker_options *o)
{
    (void)o;
    return MISSING;
}

void rt_worker_request_stop(void) {}

int rt_net_keygen(const char *dir, char *public_key, size_t cap)
{
    (void)dir;
    if (cap)
        public_key[0] = '\0';
    return MISSING;
}
