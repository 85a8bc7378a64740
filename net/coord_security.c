/* coord_security.c — who may connect to the coordinator: its credentials,
 * the ZAP handler that admits the join token's key (or --authorized-keys),
 * the line that tells how workers join, and the refusal to listen beyond
 * loopback without credentials (docs/cluster.md, "Security"). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord-impl.h"
#include "status.h"

/* Where the credentials come from: --keys DIR; made in memory for the
 * local workers of train --workers N (they get them in their environment,
 * never on a command line); this user's loopback file for a coordinator on
 * 127.x; none beyond loopback. */
static int get_creds(struct coord *k, const char *endpoint)
{
    const struct rt_coord_options *o = k->o;
    if (o->keys_dir[0]) {
        int rc = rt_creds_load_dir(o->keys_dir, &k->creds);
        return rc < 0 ? rt_error_wrap(rc, "--keys %s", o->keys_dir) : RT_OK;
    }
    if (o->spawn_local || !o->listen[0])
        return rt_creds_generate(&k->creds);
    if (rt_endpoint_is_loopback(endpoint))
        return rt_creds_local(endpoint, true, &k->creds);
    return rt_error(RT_ERR_CONFIG,
                    "refusing to listen on %s without credentials: anyone who can reach it "
                    "could join the run, read the model and the data and change the training. "
                    "Make credentials with `ragtag keygen DIR` and give --keys DIR (the "
                    "coordinator then prints the line workers join with), or give --insecure "
                    "on a network you trust", endpoint);
}

int coord_security_open(struct coord *k, const char *endpoint)
{
    const struct rt_coord_options *o = k->o;
    if (o->insecure) {
        coord_note("WARNING: --insecure: the links of this run are neither authenticated nor "
                   "encrypted; anyone who can reach %s can join it, read the model and the "
                   "data, and change the training", endpoint);
        return RT_OK;
    }
    if (o->authorized_keys[0] && !o->keys_dir[0])
        return rt_error(RT_ERR_CONFIG, "--authorized-keys needs --keys DIR (the coordinator's "
                                       "own key pair)");
    if (o->token_links)
        coord_note("--link-security token: the links between workers are authenticated but "
                   "not encrypted: whoever can read the network between them sees the "
                   "gradients, and could pose as a member of the current generation");
    RT_TRY(get_creds(k, endpoint));
    rt_creds_join_string(&k->creds, k->join, sizeof k->join);
    if (o->spawn_local && setenv("RAGTAG_JOIN", k->join, 1) != 0)
        return rt_error(RT_ERR_NOMEM, "cannot pass the join string to the local workers");
    struct rt_curve_config cc = {
        .zctx = k->zctx,
        .self = k->creds.coord,
        .who = "coord",
        .unknown = o->authorized_keys[0] ? "its key is not in --authorized-keys"
                                         : "not invited (a wrong join token, or an old one)",
        .quiet = o->spawn_local,
    };
    if (!(k->curve = rt_curve_new(&cc)))
        return RT_ERR_NET;
    if (!o->authorized_keys[0]) {
        rt_curve_allow_one(k->curve, k->creds.invite.pub);
        return RT_OK;
    }
    int n = 0;
    RT_TRY(rt_authorized_keys_load(o->authorized_keys, k->curve, &n));
    coord_note("admitting the %d worker key%s of %s", n, n == 1 ? "" : "s", o->authorized_keys);
    return RT_OK;
}

void coord_security_announce(struct coord *k)
{
    const struct rt_coord_options *o = k->o;
    if (!k->curve || o->spawn_local)
        return;
    /* a wildcard address (0.0.0.0, the star, [::]): name this host instead */
    char ep[RT_ENDPOINT_MAX + 80], host[RT_NAME_MAX];
    const char *port = strrchr(k->endpoint, ':');
    snprintf(ep, sizeof ep, "%s", k->endpoint);
    if (port && (strstr(k->endpoint, "//0.0.0.0:") || strstr(k->endpoint, "//*:") ||
                 strstr(k->endpoint, "//[::]:"))) {
        rt_net_host_name(host, sizeof host);
        snprintf(ep, sizeof ep, "tcp://%s%s", host, port);
    }
    if (!o->keys_dir[0] && rt_endpoint_is_loopback(k->endpoint)) {
        coord_note("links: CurveZMQ with this user's loopback credentials; workers of this user "
                   "on this machine join with: ragtag worker --join %s", ep);
        return;
    }
    coord_note("workers join with (one line; keep it secret, it admits whoever holds it):");
    fprintf(stderr, "    RAGTAG_JOIN=%s ragtag worker --join %s\n", k->join, ep);
    if (o->keys_dir[0])
        coord_note("or copy %s/join to the worker (mode 600) and give --join-file FILE",
                   o->keys_dir);
}

void coord_security_close(struct coord *k)
{
    rt_curve_destroy(&k->curve);
    memset(&k->creds, 0, sizeof k->creds);
}

const char *coord_security_mode(const struct coord *k)
{
    if (!k->curve)
        return "INSECURE (--insecure: neither authenticated nor encrypted)";
    if (k->o->token_links)
        return k->o->authorized_keys[0]
                   ? "CurveZMQ control, token links between workers, admitted by --authorized-keys"
                   : "CurveZMQ control, token links between workers, admitted by the join token";
    return k->o->authorized_keys[0] ? "CurveZMQ, workers admitted by --authorized-keys"
                                    : "CurveZMQ, workers admitted by the join token";
}
