/* cli.c — `ragtag COMMAND [flags]`: train, eval, summary, devices, and the
 * cluster commands coord and worker (docs/cluster.md).
 *
 * Flags of `train` are the training options of train.c (the same names as
 * the model file's [train] keys, with dashes), so one table validates both
 * and a flag always overrides the file. */
#include "config.h"

#include "cli.h"
#include "plot.h"

#include <errno.h>
#include <math.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "memory.h"
#include "model.h"
#include "partition.h"
#include "net.h"
#include "clock.h"
#include "progress.h"
#include "status.h"
#include "train.h"

enum { EXIT_FAIL = 1, EXIT_USAGE = 2, EXIT_INTERRUPTED = 130 };

static int fail(int rc)
{
    const char *d = rt_error_detail();
    fprintf(stderr, "ragtag: %s\n", d[0] ? d : rt_strerror(rc));
    return rc == RT_ERR_INTERRUPTED ? EXIT_INTERRUPTED : EXIT_FAIL;
}

static int usage_error(const char *cmd, const char *fmt, const char *arg)
{
    fprintf(stderr, "ragtag %s: ", cmd);
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (see 'ragtag %s --help')\n", cmd);
    return EXIT_USAGE;
}

static void print_main_help(FILE *out)
{
    fprintf(out,
            "usage: ragtag COMMAND [ARGS]\n"
            "\n"
            "Train neural networks on CPUs and GPUs.\n"
            "\n"
            "commands:\n"
            "  train MODEL.cfg [flags]     train a model (ragtag train --help); with\n"
            "                              --workers N, N local worker processes\n"
            "  coord MODEL.cfg --workers N --listen tcp://*:PORT [flags]\n"
            "                              coordinate workers on several machines\n"
            "  worker --join tcp://HOST:PORT\n"
            "                              join a coordinator and train with it\n"
            "  keygen DIR                  credentials for a cluster: key pair and join token\n"
            "  pack --data SPEC -o DIR     a data set as checksummed shards, trained from disk\n"
            "                              with --data shards:DIR (larger than memory)\n"
            "  plot METRICS.jsonl -o F.png curves of --metrics files (.png, .svg or .pdf)\n"
            "  eval MODEL.cfg --weights F  loss, accuracy and confusion matrix of saved weights\n"
            "  summary MODEL.cfg           layer table with output shapes and parameter counts\n"
            "  export MODEL.cfg --weights F -o M.onnx\n"
            "                              the model and its weights as an ONNX file\n"
            "  import M.onnx -o DIR        an ONNX model as DIR/model.cfg + weights\n"
            "  import NET.prototxt -o DIR  a Caffe net (and --weights NET.caffemodel) as a ragtag\n"
            "                              model file (and checkpoint)\n"
            "  export MODEL.cfg --weights F -o NET.caffemodel\n"
            "                              a model's weights in Caffe's layout (+ NET.prototxt)\n"
            "  devices                     compute backends and devices, with measured GEMM speed\n"
            "\n"
            "  ragtag --version            print the version\n"
            "  ragtag COMMAND --help       help for one command\n");
}

static bool is_help(const char *a) { return !strcmp(a, "--help") || !strcmp(a, "-h"); }

/* Split "--key=value" or "--key value"; *consumed is 1 or 2 arguments. */
static int flag_value(int argc, char **argv, int i, bool is_bool, char *key, size_t kn,
                      const char **value, int *consumed)
{
    const char *a = argv[i] + 2;
    const char *eq = strchr(a, '=');
    if (eq) {
        snprintf(key, kn, "%.*s", (int)(eq - a), a);
        *value = eq + 1;
        *consumed = 1;
        return 0;
    }
    snprintf(key, kn, "%s", a);
    if (is_bool) {
        *value = "1";
        *consumed = 1;
        return 0;
    }
    if (i + 1 >= argc)
        return -1;
    *value = argv[i + 1];
    *consumed = 2;
    return 0;
}

static void on_sigint(int sig)
{
    (void)sig;
    rt_train_request_stop();
    signal(SIGINT, SIG_DFL); /* a second Ctrl-C kills at once */
}

static void on_sigint_coord(int sig)
{
    (void)sig;
    rt_coord_request_stop();
    signal(SIGINT, SIG_DFL);
}

static void on_sigint_worker(int sig)
{
    (void)sig;
    rt_worker_request_stop();
    signal(SIGINT, SIG_DFL);
}

/* A flag that takes no value: a bool training option, or one of these. */
static bool is_bool_flag(const char *key)
{
    return rt_train_config_is_bool(key) || !strcmp(key, "serve-data") || !strcmp(key, "no-shm") ||
           !strcmp(key, "quiet") || !strcmp(key, "insecure");
}

static const char *const coord_help[] = {
    "--workers N", "number of workers (train: local worker processes on this machine)",
    "--listen ENDPOINT", "coord: where workers join, tcp://*:PORT or tcp://ADDRESS:PORT",
    "--min-workers M", "coord: start with M workers if not all joined in time; go on while "
                       "M remain",
    "--max-workers M", "coord: admit workers that join during training up to M (default: "
                       "--workers)",
    "--join-timeout S", "seconds to wait for the workers to join (default 60)",
    "--worker-timeout S", "a worker silent this long is lost; the others go on (default 30)",
    "--resume", "coord, with --checkpoint DIR: first take back the run's workers still "
                "alive (worker --coord-timeout), else resume from DIR's checkpoint",
    "--serve-data", "coord: send the data files to workers (cached there by content hash)",
    "--no-shm", "never use shared memory between workers of one machine (TCP only)",
    "--chunk BYTES", "ring pipeline chunk (default 524288)",
    "--max-restarts N", "train: start a local worker again in place of one that died, or "
                        "all from the checkpoint when none is left, at most N times (default "
                        "3; 0: never)",
    "--throttle F[,F...]", "train: testing aid: each local worker runs at fraction F of its speed",
    "--keys DIR", "coord: its key pair and join token (ragtag keygen DIR); needed to listen "
                  "beyond loopback",
    "--authorized-keys F", "coord: admit only workers whose public keys F lists (one a line), "
                           "not the join token",
    "--insecure", "no authentication or encryption on the links (a warning says so)",
    "--http ADDR:PORT", "serve a live status page, /api/status and /metrics (docs/status.md); "
                        "no ADDR: 127.0.0.1; with credentials it asks for the join token",
    "--link-security M", "curve (default: every link authenticated and encrypted), token "
                         "(links between workers authenticated, not encrypted: trusted "
                         "networks), none (= --insecure)",
    NULL, NULL,
};

static int parse_seconds(const char *cmd, const char *flag, const char *v, double *out)
{
    char *end;
    double d = strtod(v, &end);
    if (end == v || *end || !(d > 0.0 && d <= 1e7)) {
        fprintf(stderr, "ragtag %s: --%s: '%s' is not accepted (expected seconds > 0)\n", cmd,
                flag, v);
        return -1;
    }
    *out = d;
    return 0;
}

static int parse_seconds_or_zero(const char *cmd, const char *flag, const char *v, double *out)
{
    char *end;
    double d = strtod(v, &end);
    if (end == v || *end || !(d >= 0.0 && d <= 1e7)) {
        fprintf(stderr, "ragtag %s: --%s: '%s' is not accepted (expected seconds >= 0)\n", cmd,
                flag, v);
        return -1;
    }
    *out = d;
    return 0;
}

static int parse_count(const char *cmd, const char *flag, const char *v, long lo, long hi,
                       long *out)
{
    char *end;
    long n = strtol(v, &end, 10);
    if (end == v || *end || n < lo || n > hi) {
        fprintf(stderr, "ragtag %s: --%s: '%s' is not accepted (expected an integer from %ld to "
                        "%ld)\n", cmd, flag, v, lo, hi);
        return -1;
    }
    *out = n;
    return 0;
}

/* --throttle F[,F...] of train: one fraction in (0, 1] per local worker. */
static int parse_fractions(const char *cmd, const char *flag, const char *v, char *dst, size_t n)
{
    for (const char *p = v; *p;) {
        size_t k = strcspn(p, ",");
        char item[128], *end;
        snprintf(item, sizeof item, "%.*s", (int)k, p);
        errno = 0;
        double d = strtod(item, &end);
        if (k && (end == item || *end || errno || !(d > 0.0 && d <= 1.0))) {
            fprintf(stderr, "ragtag %s: --%s: '%s' is not accepted (expected a number in (0, "
                            "1])\n", cmd, flag, item);
            return -1;
        }
        p += k + (p[k] == ',');
    }
    size_t len = strlen(v);
    if (!len || len >= n || v[0] == ',' || v[len - 1] == ',' || strstr(v, ",,")) {
        fprintf(stderr, "ragtag %s: --%s: '%s' is not accepted (expected fractions in (0, 1], "
                        "comma separated)\n", cmd, flag, v);
        return -1;
    }
    snprintf(dst, n, "%s", v);
    return 0;
}

/* tcp://HOST:PORT with a port from 1 to 65535 (listen: also * or 0, a
 * free one). libzmq keeps a port's low 16 bits: tcp://HOST:99999 listened
 * on 34463, without a word. */
static bool tcp_endpoint_ok(const char *v, bool listen)
{
    const char *colon = strrchr(v, ':');
    if (strncmp(v, "tcp://", 6) != 0 || !colon || colon <= v + 6)
        return false;
    const char *port = colon + 1;
    if (listen && !strcmp(port, "*"))
        return true;
    char *end;
    errno = 0;
    long n = strtol(port, &end, 10);
    return end != port && !*end && !errno && n <= 65535 && (n >= 1 || (listen && n == 0));
}

/* A flag of train's local workers: 1 taken, 0 not one, -1 bad value. */
static int local_flag(const char *cmd, struct rt_coord_options *o, const char *key,
                      const char *v)
{
    long n;
    if (!strcmp(key, "max-restarts")) {
        if (parse_count(cmd, key, v, 0, 100, &n) < 0)
            return -1;
        o->max_restarts = (int)n;
        return 1;
    }
    if (!strcmp(key, "throttle"))
        return parse_fractions(cmd, key, v, o->local_throttle, sizeof o->local_throttle) < 0 ? -1
                                                                                             : 1;
    return 0;
}

/* Flags that act on local workers, given without any. */
static int local_flags_alone(const struct rt_coord_options *o)
{
    if (o->local_throttle[0])
        return rt_error(RT_ERR_CONFIG, "--throttle is a testing aid for workers (ragtag worker, "
                                       "or train --workers N)");
    if (o->max_restarts >= 0)
        return rt_error(RT_ERR_CONFIG, "--max-restarts starts local workers again: give "
                                       "--workers N");
    return RT_OK;
}

/* A cluster flag of train/coord: 1 taken, 0 not one, -1 bad value. */
static int cluster_flag(const char *cmd, bool coord, struct rt_coord_options *o, bool *multi,
                        const char *key, const char *v)
{
    long n;
    if (!strcmp(key, "workers")) {
        if (parse_count(cmd, key, v, 1, 256, &n) < 0)
            return -1;
        o->workers = (int)n;
        *multi = true;
        return 1;
    }
    if (!strcmp(key, "join-timeout"))
        return parse_seconds(cmd, key, v, &o->join_timeout) < 0 ? -1 : 1;
    if (!strcmp(key, "worker-timeout"))
        return parse_seconds(cmd, key, v, &o->worker_timeout) < 0 ? -1 : 1;
    if (!strcmp(key, "no-shm")) {
        o->allow_shm = false;
        return 1;
    }
    if (!strcmp(key, "chunk")) {
        if (parse_count(cmd, key, v, 4096, 4 << 20, &n) < 0)
            return -1;
        if (n % 64) {
            fprintf(stderr, "ragtag %s: --chunk: %ld is not a multiple of 64\n", cmd, n);
            return -1;
        }
        o->chunk_bytes = (size_t)n;
        return 1;
    }
    if (!strcmp(key, "http")) { /* train --workers N too: its coordinator serves the page */
        if (!*v || strlen(v) >= sizeof o->http) {
            fprintf(stderr, "ragtag %s: --http: '%s' is not accepted (expected PORT or "
                            "ADDRESS:PORT)\n", cmd, v);
            return -1;
        }
#ifndef RT_HAVE_HTTP
        fprintf(stderr, "ragtag %s: --http: this ragtag was built without the status page; "
                        "install the Debian package libmicrohttpd-dev, then run ./configure "
                        "and make again\n", cmd);
        return -1;
#endif
        snprintf(o->http, sizeof o->http, "%s", v);
        return 1;
    }
    if (!strcmp(key, "insecure")) { /* train --workers N too: to measure what CURVE costs */
        o->insecure = true;
        return 1;
    }
    if (!strcmp(key, "link-security")) {
        if (strcmp(v, "curve") && strcmp(v, "token") && strcmp(v, "none")) {
            fprintf(stderr, "ragtag %s: --link-security: '%s' is not curve, token or none\n",
                    cmd, v);
            return -1;
        }
        o->insecure = !strcmp(v, "none");
        o->token_links = !strcmp(v, "token");
        return 1;
    }
    if (!coord)
        return local_flag(cmd, o, key, v);
    if (!strcmp(key, "listen")) {
        if (!tcp_endpoint_ok(v, true) || strlen(v) >= sizeof o->listen) {
            fprintf(stderr, "ragtag %s: --listen: '%s' is not accepted (expected tcp://*:PORT "
                            "or tcp://ADDRESS:PORT, PORT from 1 to 65535, or * for a free "
                            "one)\n", cmd, v);
            return -1;
        }
        snprintf(o->listen, sizeof o->listen, "%s", v);
        return 1;
    }
    if (!strcmp(key, "min-workers")) {
        if (parse_count(cmd, key, v, 1, 256, &n) < 0)
            return -1;
        o->min_workers = (int)n;
        return 1;
    }
    if (!strcmp(key, "max-workers")) {
        if (parse_count(cmd, key, v, 1, 256, &n) < 0)
            return -1;
        o->max_workers = (int)n;
        return 1;
    }
    if (!strcmp(key, "serve-data")) {
        o->serve_data = true;
        return 1;
    }
    if (!strcmp(key, "keys") || !strcmp(key, "authorized-keys")) {
        char *dst = !strcmp(key, "keys") ? o->keys_dir : o->authorized_keys;
        if (!*v || strlen(v) >= sizeof o->keys_dir) {
            fprintf(stderr, "ragtag %s: --%s: '%s' is not accepted\n", cmd, key, v);
            return -1;
        }
        snprintf(dst, sizeof o->keys_dir, "%s", v);
        return 1;
    }
    return 0;
}

static void print_done(const struct rt_train_result *res)
{
    fprintf(stderr, "ragtag: done: %d epochs, %ld steps in %.1f s", res->epochs_run, res->steps,
            res->seconds);
    if (res->test_acc >= 0)
        fprintf(stderr, ", test_acc %.2f%%", 100 * res->test_acc);
    if (res->max_rss)
        fprintf(stderr, ", max RSS %.0f MB", (double)res->max_rss / (1024.0 * 1024.0));
    fprintf(stderr, "\n");
}

/* `ragtag train` and `ragtag coord`: the training options, plus the
 * cluster flags; train runs alone or, with --workers N, as a coordinator
 * of N local worker processes. */
static int cmd_train_or_coord(const char *cmd, int argc, char **argv)
{
    bool coord = !strcmp(cmd, "coord");
    if (argc >= 2 && is_help(argv[1])) {
        if (coord)
            printf("usage: ragtag coord MODEL.cfg --workers N --listen tcp://*:PORT [flags]\n\n"
                   "Coordinates N workers (ragtag worker --join tcp://THIS-HOST:PORT) that train\n"
                   "MODEL.cfg together, synchronously: the same result as one machine with the\n"
                   "whole batch. Writes the checkpoints, metrics and --save file here.\n"
                   "See docs/cluster.md.\n\ncluster flags:\n");
        else
            printf("usage: ragtag train MODEL.cfg [flags]\n\n"
                   "Trains MODEL.cfg. Its [train] section gives defaults; flags override them.\n"
                   "With --workers N it trains with N worker processes on this machine.\n\n"
                   "cluster flags:\n");
        for (int i = 0; coord_help[i]; i += 2)
            if (strncmp(coord_help[i + 1], coord ? "train:" : "coord:", 6) != 0)
                printf("  %-18s %s\n", coord_help[i], coord_help[i + 1]);
        printf("\ntraining flags:\n");
        for (int i = 0; rt_train_option_help[i]; i += 2)
            printf("  %-18s %s\n", rt_train_option_help[i], rt_train_option_help[i + 1]);
        return 0;
    }
    const char *model = NULL;
    for (int i = 1; i < argc; i++) {
        if (strncmp(argv[i], "--", 2) != 0) {
            if (model)
                return usage_error(cmd, "more than one model file ('%s')", argv[i]);
            model = argv[i];
        } else if (!strchr(argv[i], '=') && !is_bool_flag(argv[i] + 2)) {
            i++; /* skip the flag's value */
        }
    }
    if (!model)
        return usage_error(cmd, "%s", "needs a model file, e.g. examples/lenet.cfg");

    struct rt_train_config c;
    struct rt_coord_options co;
    bool multi = coord;
    rt_train_config_defaults(&c);
    rt_coord_options_defaults(&co);
    int rc = rt_train_config_from_model(&c, model);
    if (rc < 0)
        return fail(rc);
    for (int i = 1; i < argc;) {
        if (strncmp(argv[i], "--", 2) != 0) {
            i++;
            continue;
        }
        char key[64], flag[80];
        const char *value;
        int used;
        const char *name = argv[i] + 2;
        size_t klen = strcspn(name, "=");
        snprintf(key, sizeof key, "%.*s", (int)klen, name);
        bool is_bool = is_bool_flag(key);
        if (flag_value(argc, argv, i, is_bool, key, sizeof key, &value, &used) < 0)
            return usage_error(cmd, "flag '%s' needs a value", argv[i]);
        int taken = cluster_flag(cmd, coord, &co, &multi, key, value);
        if (taken < 0)
            return EXIT_USAGE;
        if (!taken) {
            if (!rt_train_config_known(key))
                return usage_error(cmd, "unknown flag '%s'", argv[i]);
            snprintf(flag, sizeof flag, "--%s", key);
            if ((rc = rt_train_config_set(&c, key, value, flag)) < 0) {
                fprintf(stderr, "ragtag %s: %s\n", cmd, rt_error_detail());
                return EXIT_USAGE;
            }
        }
        i += used;
    }
    if (!multi && co.http[0])
        return usage_error(cmd, "%s", "--http: the status page is served by a cluster's "
                                      "coordinator: give --workers N (or run ragtag coord)");
    if (!multi && (rc = local_flags_alone(&co)) < 0)
        return fail(rc);
    struct rt_train_result res;
    if (!multi) {
        signal(SIGINT, on_sigint);
        rc = rt_train_run(&c, &res);
        signal(SIGINT, SIG_DFL);
    } else {
        if (coord && !co.listen[0])
            return usage_error(cmd, "%s", "needs --listen tcp://*:PORT (where workers join)");
        if (!coord) {
            co.spawn_local = true;
            co.local_threads = c.threads;
            co.local_device = c.device;
            snprintf(co.local_backend, sizeof co.local_backend, "%s", c.backend);
        }
        signal(SIGINT, on_sigint_coord);
        rc = rt_coord_run(&co, &c, &res);
        signal(SIGINT, SIG_DFL);
    }
    if (rc < 0)
        return fail(rc);
    print_done(&res);
    return 0;
}

/* A worker the run went on without (it was paused or cut off too long, or
 * it left on standby) comes back as a new member. Within --coord-timeout
 * (else --worker-timeout's default): a run that ended meanwhile has nobody
 * left to tell it so, and a worker of a finished run kept trying to join
 * it for good. */
static int run_worker(const struct rt_worker_options *o)
{
    signal(SIGINT, on_sigint_worker);
    static struct rt_worker_options again; /* static: the options are large */
    again = *o;
    again.rejoining = true;
    double limit = o->coord_timeout > 0.0 ? o->coord_timeout : 30.0;
    if (again.connect_timeout <= 0.0 || again.connect_timeout > limit)
        again.connect_timeout = limit;
    int rc;
    const struct rt_worker_options *cur = o;
    while ((rc = rt_worker_run(cur)) == RT_ERR_EXPELLED || rc == RT_ERR_STANDBY) {
        fprintf(stderr, "ragtag: [worker] joining %s again, as a new member%s\n", o->join,
                rc == RT_ERR_STANDBY ? " (admitted when it is fast enough)" : "");
        cur = &again;
    }
    signal(SIGINT, SIG_DFL);
    return rc < 0 ? fail(rc) : 0;
}

static const char worker_help[] =
    "usage: ragtag worker --join tcp://HOST:PORT [flags]\n\n"
    "Joins the coordinator at HOST:PORT (retrying until it is there), receives\n"
    "the model, options and, with coord --serve-data, the data, and trains.\n"
    "See docs/cluster.md.\n\nflags:\n"
    "  --join ENDPOINT      the coordinator, tcp://HOST:PORT\n"
    "  --advertise HOST     address other workers reach this one at (default:\n"
    "                       this machine's address on the route to the coordinator)\n"
    "  --name NAME          name in the cluster table (default HOST-PID); workers\n"
    "                       are ranked by name\n"
    "  --ring-port PORT     TCP port other workers send to (default: any free one)\n"
    "  --backend NAME       compute backend (default cpu; see ragtag devices)\n"
    "  --device N           device index within the backend (default 0)\n"
    "  --threads N          compute threads (default 0: all cores)\n"
    "  --cache DIR          data cache (default $RAGTAG_CACHE_DIR or ~/.cache/ragtag)\n"
    "  --connect-timeout S  give up when no coordinator answers in S seconds\n"
    "                       (default: keep trying)\n"
    "  --coord-timeout S    during training, a coordinator silent past the run's\n"
    "                       --worker-timeout may come back (resumed, or restarted\n"
    "                       with --checkpoint DIR --resume on the same address):\n"
    "                       keep this worker's state and wait S seconds more for\n"
    "                       it, then exit with an error (default 120; 0: exit at\n"
    "                       once); also how long a worker that left the run\n"
    "                       (standby, expelled) tries to join it again (0: 30 s)\n"
    "  --quiet              print errors only\n"
    "  --parent PID         die with process PID (how train --workers N starts\n"
    "                       its local workers: none outlives a killed parent)\n"
    "  --join-file FILE     the join string the coordinator printed, in a file\n"
    "                       of mode 600 (else $RAGTAG_JOIN; a coordinator on\n"
    "                       this machine's loopback needs neither)\n"
    "  --keys DIR           this worker's own key pair (ragtag keygen DIR), for\n"
    "                       a coordinator that admits by --authorized-keys\n"
    "  --data-dir DIR       the job may name data files under DIR (repeatable);\n"
    "                       otherwise only served data or this machine's default\n"
    "                       fashion-mnist are opened\n"
    "  --insecure           plain links, for a coordinator that runs --insecure\n"
    "  --throttle F         testing aid: run at fraction F (0 < F <= 1) of this\n"
    "                       machine's speed by sleeping (docs/heterogeneous.md)\n"
    "  --stall-at STEP:S    testing aid: the training thread hangs S seconds at\n"
    "                       STEP (its heartbeats stop: the run goes on without it)\n"
    "  --stall-setup S      testing aid: the set-up hangs S seconds once the job\n"
    "                       came, as a slow data read would (silent meanwhile)\n"
    "  --stall-end S        testing aid: after its last step it waits S seconds\n"
    "                       before it reports its end (a joiner admitted meanwhile\n"
    "                       finds members that never form its generation)\n";

static int cmd_worker(int argc, char **argv)
{
    if (argc >= 2 && is_help(argv[1])) {
        fputs(worker_help, stdout);
        return 0;
    }
    struct rt_worker_options o;
    rt_worker_options_defaults(&o);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0)
            return usage_error("worker", "unexpected argument '%s'", a);
        char key[64];
        const char *v;
        int used;
        const char *name = a + 2;
        snprintf(key, sizeof key, "%.*s", (int)strcspn(name, "="), name);
        if (flag_value(argc, argv, i, is_bool_flag(key), key, sizeof key, &v, &used) < 0)
            return usage_error("worker", "flag '%s' needs a value", a);
        i += used - 1;
        long n;
        struct {
            const char *key;
            char *dst;
            size_t cap;
        } strs[] = {{"join", o.join, sizeof o.join},
                    {"advertise", o.advertise, sizeof o.advertise},
                    {"name", o.name, sizeof o.name},
                    {"backend", o.backend, sizeof o.backend},
                    {"cache", o.cache_dir, sizeof o.cache_dir},
                    {"join-file", o.join_file, sizeof o.join_file},
                    {"keys", o.keys_dir, sizeof o.keys_dir},
                    {"throttle", o.throttle, sizeof o.throttle},
                    {"stall-at", o.stall_at, sizeof o.stall_at}};
        bool taken = false;
        for (size_t k = 0; k < sizeof strs / sizeof strs[0]; k++) {
            if (strcmp(key, strs[k].key) != 0)
                continue;
            if (!*v || strlen(v) >= strs[k].cap) {
                fprintf(stderr, "ragtag worker: --%s: '%s' is not accepted\n", key, v);
                return EXIT_USAGE;
            }
            snprintf(strs[k].dst, strs[k].cap, "%s", v);
            taken = true;
        }
        if (taken)
            continue;
        if (!strcmp(key, "device") || !strcmp(key, "threads")) {
            if (parse_count("worker", key, v, 0, 1 << 16, &n) < 0)
                return EXIT_USAGE;
            *(!strcmp(key, "device") ? &o.device : &o.threads) = (int)n;
        } else if (!strcmp(key, "ring-port")) {
            if (parse_count("worker", key, v, 1, 65535, &n) < 0)
                return EXIT_USAGE;
            o.ring_port = (int)n;
        } else if (!strcmp(key, "connect-timeout")) {
            if (parse_seconds("worker", key, v, &o.connect_timeout) < 0)
                return EXIT_USAGE;
        } else if (!strcmp(key, "coord-timeout")) {
            if (parse_seconds_or_zero("worker", key, v, &o.coord_timeout) < 0)
                return EXIT_USAGE;
        } else if (!strcmp(key, "stall-setup") || !strcmp(key, "stall-end")) {
            if (parse_seconds("worker", key, v,
                              !strcmp(key, "stall-end") ? &o.stall_end : &o.stall_setup) < 0)
                return EXIT_USAGE;
        } else if (!strcmp(key, "quiet")) {
            o.quiet = true;
        } else if (!strcmp(key, "insecure")) {
            o.insecure = true;
        } else if (!strcmp(key, "data-dir")) {
            if (o.ndata_dirs == 8 || !*v || strlen(v) >= sizeof o.data_dirs[0])
                return usage_error("worker", "--data-dir '%s': at most 8, each a directory", v);
            snprintf(o.data_dirs[o.ndata_dirs++], sizeof o.data_dirs[0], "%s", v);
        } else if (!strcmp(key, "parent")) {
            if (parse_count("worker", key, v, 1, INT_MAX, &n) < 0)
                return EXIT_USAGE;
            o.parent = n;
            o.any_data = true; /* train --workers N: its own command line names the data */
        } else {
            return usage_error("worker", "unknown flag '%s'", a);
        }
    }
    if (o.throttle[0]) {
        char *end;
        float f = strtof(o.throttle, &end);
        if (*end || !(f > 0.0f && f <= 1.0f))
            return usage_error("worker", "--throttle '%s': a fraction in (0, 1]", o.throttle);
    }
    if (!o.join[0])
        return usage_error("worker", "%s", "needs --join tcp://HOST:PORT (the coordinator)");
    if (!tcp_endpoint_ok(o.join, false))
        return usage_error("worker", "--join '%s': expected tcp://HOST:PORT, PORT from 1 to "
                                     "65535", o.join);
    return run_worker(&o);
}

static int cmd_eval(int argc, char **argv)
{
    if (argc >= 2 && is_help(argv[1])) {
        printf("usage: ragtag eval MODEL.cfg --weights FILE [--data SPEC] [--backend NAME]\n"
               "                  [--device N] [--threads N] [--batch N] [--limit N]\n"
               "                  [--classes LIST] [--logits FILE]\n\n"
               "Loss, accuracy and confusion matrix (rows: true class, columns: predicted)\n"
               "of saved weights (a checkpoint or --save file) on the test set, or on the\n"
               "training set when the data has no test set.\n"
               "--logits FILE writes each image's logits (the input of [softmax]) as one\n"
               "CSV line of `classes` values, in data order (docs/onnx.md).\n");
        return 0;
    }
    const char *model = NULL, *weights = NULL, *data = "fashion-mnist", *backend = "cpu";
    const char *classes = NULL; /* --classes, as train takes it */
    const char *logits = NULL;
    long device = 0, threads = 0, batch = 256, limit = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0) {
            if (model)
                return usage_error("eval", "more than one model file ('%s')", a);
            model = a;
            continue;
        }
        char key[64];
        const char *v;
        int used;
        if (flag_value(argc, argv, i, false, key, sizeof key, &v, &used) < 0)
            return usage_error("eval", "flag '%s' needs a value", a);
        i += used - 1;
        char *end;
        if (!strcmp(key, "weights"))
            weights = v;
        else if (!strcmp(key, "logits"))
            logits = v;
        else if (!strcmp(key, "data"))
            data = v;
        else if (!strcmp(key, "backend"))
            backend = v;
        else if (!strcmp(key, "classes"))
            classes = v;
        else if (!strcmp(key, "device") || !strcmp(key, "threads") || !strcmp(key, "batch") ||
                 !strcmp(key, "limit")) {
            long n = strtol(v, &end, 10);
            if (end == v || *end || n < 0 || (n == 0 && !strcmp(key, "batch")) || n > (1L << 30)) {
                fprintf(stderr, "ragtag eval: --%s: '%s' is not accepted (expected a %s integer)\n",
                        key, v, strcmp(key, "batch") ? "non-negative" : "positive");
                return EXIT_USAGE;
            }
            *(!strcmp(key, "device") ? &device : !strcmp(key, "threads") ? &threads
                                                 : !strcmp(key, "batch")   ? &batch
                                                                           : &limit) = n;
        } else
            return usage_error("eval", "unknown flag '%s'", a);
    }
    if (!model)
        return usage_error("eval", "%s", "needs a model file");
    if (!weights)
        return usage_error("eval", "%s", "needs --weights FILE");
    struct rt_eval_result r;
    int rc = rt_eval_run(model, weights, data, backend, (int)device, (int)threads, (int)batch,
                         limit, classes, logits, &r);
    if (rc < 0) {
        free(r.confusion);
        return fail(rc);
    }
    printf("%s set: %ld images, loss %.4f, accuracy %.2f%%\n", r.set_name, r.n, r.loss,
           100 * r.acc);
    printf("confusion matrix (rows: true class, columns: predicted class)\n      ");
    for (int k = 0; k < r.classes; k++)
        printf(" %6d", k);
    printf("\n");
    for (int t = 0; t < r.classes; t++) {
        printf("%6d", t);
        for (int k = 0; k < r.classes; k++)
            printf(" %6ld", r.confusion[(size_t)t * r.classes + k]);
        printf("\n");
    }
    free(r.confusion);
    return 0;
}

static int cmd_summary(int argc, char **argv)
{
    if (argc >= 2 && is_help(argv[1])) {
        printf("usage: ragtag summary MODEL.cfg\n\n"
               "Prints every layer with its output shape and parameter count, and the totals.\n");
        return 0;
    }
    if (argc != 2 || !strncmp(argv[1], "--", 2))
        return usage_error("summary", "%s", "takes exactly one model file");
    rt_dev *dev = rt_dev_open("cpu", 0, 1);
    if (!dev)
        return fail(RT_ERR_DEVICE);
    rt_model *m = rt_model_load(argv[1], dev, 1);
    if (!m) {
        rt_dev_close(&dev);
        return fail(RT_ERR_CONFIG);
    }
    int rc = rt_model_summary(m, stdout);
    rt_model_destroy(&m);
    rt_dev_close(&dev);
    return rc < 0 ? fail(rc) : 0;
}

/* SGEMM GFLOP/s of a device at n x n x n: best of a few runs after a warm-up. */
static double measure_gemm(rt_dev *d, int n)
{
    size_t bytes = (size_t)n * n * sizeof(float);
    rt_buf *a = rt_buf_new(d, bytes), *b = rt_buf_new(d, bytes), *c = rt_buf_new(d, bytes);
    double best = 0.0;
    if (a && b && c && rt_op_fill(d, (size_t)n * n, 0.5f, rt_buf_view(a)) >= 0 &&
        rt_op_fill(d, (size_t)n * n, 0.25f, rt_buf_view(b)) >= 0) {
        for (int rep = 0; rep < 4; rep++) {
            double t0 = rt_now();
            if (rt_op_gemm(d, 0, 0, n, n, n, 1.0f, rt_buf_view(a), n, rt_buf_view(b), n, 0.0f,
                           rt_buf_view(c), n) < 0 ||
                rt_sync(d) < 0)
                break;
            double t = rt_now() - t0;
            double gf = 2.0 * n * n * (double)n / t * 1e-9;
            if (rep > 0 && gf > best)
                best = gf;
        }
    }
    rt_buf_destroy(&a);
    rt_buf_destroy(&b);
    rt_buf_destroy(&c);
    return best;
}

/* The model file's text (malloc'ed), or NULL with the error set. */
static char *read_text(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        rt_error(RT_ERR_NOTFOUND, "%s: %s", path, strerror(errno));
        return NULL;
    }
    char *text = NULL;
    size_t len = 0, cap = 0, got;
    char buf[4096];
    while ((got = fread(buf, 1, sizeof buf, f)) > 0) {
        if (len + got + 1 > cap) {
            cap = (len + got + 1) * 2;
            char *t = realloc(text, cap);
            if (!t)
                break;
            text = t;
        }
        memcpy(text + len, buf, got);
        len += got;
    }
    fclose(f);
    if (text)
        text[len] = '\0';
    else
        rt_error(RT_ERR_IO, "%s: empty or unreadable", path);
    return text;
}

/* The memory this process may use and, for a model (and training flags),
 * what a worker here would need to train it: the figures a worker says at
 * join (docs/cluster.md, "Memory"). */
static int devices_memory(int argc, char **argv)
{
    uint64_t limit = rt_mem_limit();
    if (limit)
        printf("memory: limit %.0f MB (this process's cgroup)\n", (double)limit / RT_MB);
    else
        printf("memory: no limit (this process's cgroup)\n");
    if (argc < 2)
        return 0;
    struct rt_train_config c;
    rt_train_config_defaults(&c);
    int rc = rt_train_config_from_model(&c, argv[1]);
    for (int i = 2; rc >= 0 && i < argc; i += 2) {
        if (strncmp(argv[i], "--", 2) != 0 || i + 1 >= argc || !rt_train_config_known(argv[i] + 2))
            return usage_error("devices", "expected training flags with values after the model, "
                                          "found '%s'", argv[i]);
        rc = rt_train_config_set(&c, argv[i] + 2, argv[i + 1], argv[i]);
    }
    char *text = rc >= 0 ? read_text(argv[1]) : NULL;
    struct rt_mem_need n;
    if (!text || (rc = rt_mem_estimate(text, &c, 1, &n)) < 0) {
        free(text);
        return fail(rc < 0 ? rc : RT_ERR_IO);
    }
    free(text);
    long rows;
    uint64_t need;
    char d[400];
    rc = rt_mem_fit(&n, &c, 1, limit, &rows, &need);
    rt_mem_describe(&n, rc < 0 ? 1 : rows, d, sizeof d);
    printf("memory need of %s, batch %d, data %s: %s%s\n", argv[1], c.batch, c.data_spec, d,
           rc < 0 ? ": MORE THAN THE LIMIT, a worker here is turned away"
                  : rows < c.batch ? ": a balanced sync share here is capped" : "");
    return 0;
}

static int cmd_devices(int argc, char **argv)
{
    if (argc >= 2 && is_help(argv[1])) {
        printf("usage: ragtag devices [MODEL.cfg [TRAINING FLAGS]]\n\n"
               "Lists every compute backend and device found, with a measured SGEMM speed\n"
               "(1024^3, all threads), this process's CPU quota and memory limit (cgroup)\n"
               "and, given a model (and flags such as --batch 64 --data SPEC), the memory\n"
               "a worker here would need to train it.\n");
        return 0;
    }
    /* first, while this process is as small as a worker at its hello (the
     * backends' libraries are not loaded yet) */
    int rc = devices_memory(argc, argv);
    if (rc != 0)
        return rc;
    printf("%-8s %-3s %-44s %10s %5s %12s\n", "backend", "dev", "name", "memory", "units",
           "SGEMM");
    for (int b = 0; b < rt_backend_count(); b++) {
        const char *name = rt_backend_name(b);
        int n = rt_backend_device_count(name);
        if (n < 0) {
            printf("%-8s     unavailable: %s\n", name, rt_error_detail());
            continue;
        }
        for (int i = 0; i < n; i++) {
            struct rt_device_info info;
            if (rt_backend_device_info(name, i, &info) < 0) {
                printf("%-8s %-3d unavailable: %s\n", name, i, rt_error_detail());
                continue;
            }
            rt_dev *d = rt_dev_open(name, i, 0);
            if (!d) {
                printf("%-8s %-3d %-44.44s cannot open: %s\n", name, i, info.name,
                       rt_error_detail());
                continue;
            }
            double gf = measure_gemm(d, 1024);
            rt_dev_close(&d);
            printf("%-8s %-3d %-44.44s %7.1f GiB %5d %6.1f GFLOP/s\n", name, i, info.name,
                   (double)info.mem_bytes / (1u << 30), info.compute_units, gf);
            if (info.platform[0])
                printf("%-8s %-3s platform: %s\n", "", "", info.platform);
        }
    }
    double q = rt_cpu_quota();
    if (q > 0.0)
        printf("cpu quota: %.2f cores (this process's cgroup): a worker here reports its speed "
               "x quota / threads\n", q);
    return 0;
}

static int cmd_plot(int argc, char **argv)
{
    if (argc < 2 || is_help(argv[1])) {
        FILE *o = argc < 2 ? stderr : stdout;
        fprintf(o, "usage: ragtag plot METRICS.jsonl [MORE.jsonl ...] [-o FILE.png|.svg|.pdf]\n\n"
                   "Draws the curves of --metrics files: loss and accuracy (train/val/test),\n"
                   "images/s, and each worker's share of the batch when the file has the\n"
                   "coordinator's plans. Several files share the panels (one dash per file).\n"
                   "Default output: plot.png. See docs/status.md.\n");
        return argc < 2 ? EXIT_USAGE : 0;
    }
    int rc = rt_cli_plot(argc, argv);
    return rc < 0 ? fail(rc) : 0;
}

int rt_cli_main(int argc, char **argv)
{
    if (argc < 2) {
        print_main_help(stderr);
        return EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (is_help(cmd) || !strcmp(cmd, "help")) {
        print_main_help(stdout);
        return 0;
    }
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
        printf("ragtag %s\n", PACKAGE_VERSION);
        return 0;
    }
    if (!strcmp(cmd, "train") || !strcmp(cmd, "coord"))
        return cmd_train_or_coord(cmd, argc - 1, argv + 1);
    if (!strcmp(cmd, "worker"))
        return cmd_worker(argc - 1, argv + 1);
    if (!strcmp(cmd, "eval"))
        return cmd_eval(argc - 1, argv + 1);
    if (!strcmp(cmd, "summary"))
        return cmd_summary(argc - 1, argv + 1);
    if (!strcmp(cmd, "devices"))
        return cmd_devices(argc - 1, argv + 1);
    if (!strcmp(cmd, "keygen"))
        return rt_cli_keygen(argc - 1, argv + 1);
    if (!strcmp(cmd, "plot"))
        return cmd_plot(argc - 1, argv + 1);
    if (!strcmp(cmd, "export"))
        return rt_cli_export(argc - 1, argv + 1);
    if (!strcmp(cmd, "import"))
        return rt_cli_import(argc - 1, argv + 1);
    if (!strcmp(cmd, "pack"))
        return rt_cli_pack(argc - 1, argv + 1);
    fprintf(stderr, "ragtag: unknown command '%s' (commands: train, eval, summary, devices, "
                    "coord, worker, keygen, plot, export, import, pack; "
                    "see ragtag --help)\n",
            cmd);
    return EXIT_USAGE;
}
