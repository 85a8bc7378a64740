/* status_http.h — the coordinator's status page over HTTP (libmicrohttpd):
 * `/` the page, `/page.js` its script, `/chart.js` Chart.js (when it was
 * embedded at build time), `/api/status` the snapshot as JSON, `/metrics`
 * the Prometheus text format. docs/status.md tells how to use it.
 *
 * The server runs on its own thread, reads only the snapshot (snapshot.h)
 * and bounds what a client can take: connections in all and per address,
 * the size of a request's headers, requests per second per connection,
 * idle time. With a token, the data (/api/status, /metrics) is given only
 * to a request that carries it (a bearer token, HTTP basic auth's password
 * or ?token=); the page and scripts hold no data and are open. */
#ifndef RT_STATUS_HTTP_H
#define RT_STATUS_HTTP_H

#include <stdbool.h>
#include <stddef.h>

#include "snapshot.h"

typedef struct rt_http rt_http;

/* Whether this ragtag was built with the status page (libmicrohttpd). */
bool rt_http_available(void);

/* Listen on addr ("PORT", ":PORT", "ADDRESS:PORT", "[V6]:PORT"; no
 * address: 127.0.0.1) and serve `snap`. token: NULL or "" serves the data
 * to anyone. The URL it serves (the port the OS chose when 0) in url.
 * NULL on error (the detail says why). */
rt_http *rt_http_start(const char *addr, rt_snap *snap, const char *token, char *url,
                       size_t url_cap);
/* Whether addr's host is a loopback address (the page stays on this machine). */
bool rt_http_is_loopback(const rt_http *h);
void rt_http_stop(rt_http **h);

#endif
