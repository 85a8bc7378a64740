/* net_junk.c — send bad traffic to ragtag sockets (see junk.h), for
 * tests/test_cluster.sh:
 *     net_junk router|pull ENDPOINT [ROUNDS]
 * router: the coordinator's socket (sent from a DEALER); pull: a worker's
 * ring inbox (sent from a PUSH). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "junk.h"

int main(int argc, char **argv)
{
    if (argc < 3 || (strcmp(argv[1], "router") && strcmp(argv[1], "pull"))) {
        fprintf(stderr, "usage: net_junk router|pull ENDPOINT [ROUNDS]\n");
        return 2;
    }
    int rounds = argc > 3 ? atoi(argv[3]) : 2;
    junk_blast(argv[2], !strcmp(argv[1], "router") ? ZMQ_DEALER : ZMQ_PUSH, NULL, rounds);
    return 0;
}
