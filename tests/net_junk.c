/* net_junk.c — send bad traffic to ragtag sockets (see junk.h), for
 * tests/test_cluster.sh:
 *     net_junk router|pull ENDPOINT [ROUNDS]
 * router: the coordinator's socket (sent from a DEALER); pull: a worker's
 * ring inbox (sent from a PUSH). With $RAGTAG_JOIN (a join string), it
 * sends to the router as an invited worker would connect: the garbage
 * then reaches the decoders through CurveZMQ; without, it is a stranger. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "creds.h"
#include "junk.h"

int main(int argc, char **argv)
{
    if (argc < 3 || (strcmp(argv[1], "router") && strcmp(argv[1], "pull"))) {
        fprintf(stderr, "usage: net_junk router|pull ENDPOINT [ROUNDS]\n");
        return 2;
    }
    int rounds = argc > 3 ? atoi(argv[3]) : 2;
    static struct rt_creds c;
    const char *join = getenv("RAGTAG_JOIN");
    if (join && join[0] && !strcmp(argv[1], "router")) {
        if (rt_creds_from_join(join, &c) < 0) {
            fprintf(stderr, "net_junk: $RAGTAG_JOIN: not a join string\n");
            return 2;
        }
        junk_curve[0] = c.coord.pub;
        junk_curve[1] = c.invite.pub;
        junk_curve[2] = c.invite.sec;
    }
    junk_blast(argv[2], !strcmp(argv[1], "router") ? ZMQ_DEALER : ZMQ_PUSH, NULL, rounds);
    return 0;
}
