/* keygen.c — `ragtag keygen DIR`: the credentials of a cluster run (a key
 * pair and a join token, docs/cluster.md "Security"). */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "net.h"
#include "status.h"

static const char keygen_help[] =
    "usage: ragtag keygen DIR\n\n"
    "Makes DIR (mode 700) with a CurveZMQ key pair and a join token:\n"
    "  DIR/secret.key   the key pair (600): coord --keys DIR, or a worker's own\n"
    "                   identity (worker --keys DIR) for coord --authorized-keys\n"
    "  DIR/token        the join token (600)\n"
    "  DIR/join         the join string workers need (600): worker --join-file\n"
    "  DIR/public.key   the public key alone: a line of an --authorized-keys file\n"
    "Existing files are never overwritten. See docs/cluster.md, \"Security\".\n";

int rt_cli_keygen(int argc, char **argv)
{
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        fputs(keygen_help, stdout);
        return 0;
    }
    if (argc != 2 || !strncmp(argv[1], "--", 2)) {
        fprintf(stderr, "ragtag keygen: takes exactly one directory (see 'ragtag keygen "
                        "--help')\n");
        return 2;
    }
    char pub[64];
    int rc = rt_net_keygen(argv[1], pub, sizeof pub);
    if (rc < 0) {
        fprintf(stderr, "ragtag keygen: %s\n", rt_error_detail());
        return 1;
    }
    printf("wrote %s/secret.key, %s/token, %s/join and %s/public.key\n", argv[1], argv[1],
           argv[1], argv[1]);
    printf("public key: %s\n", pub);
    printf("coordinator: ragtag coord MODEL.cfg --keys %s --listen tcp://*:PORT ...\n", argv[1]);
    return 0;
}
