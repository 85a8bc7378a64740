/* tcp_stream.c — what a plain TCP stream moves between two processes on
 * this machine's loopback: the ceiling for ragtag's raw TCP ring links,
 * printed next to them by bench_dist.sh allreduce.
 *
 *   bench/tcp_stream [--bytes TOTAL] [--msg BYTES] [--port FIRST]
 *
 * Three figures, each the best of 3 runs: one direction (a sender writes
 * messages of --msg bytes, a receiver reads them), both directions at once
 * (each process sends and receives TOTAL: the traffic of a 2-process ring,
 * whose busbw is this per-direction figure), and the median round trip of
 * a 4 KiB ping-pong. Blocking sockets, TCP_NODELAY, nothing else. Listens
 * on the first free port from --port (default 57500). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int listener(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    for (int p = *port; p < *port + 100; p++) {
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)p)};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && listen(fd, 1) == 0) {
            *port = p;
            return fd;
        }
    }
    return -1;
}

static int dial(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0)
        return -1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

static int xfer(int fd, char *buf, size_t n, int send_it)
{
    while (n) {
        ssize_t k = send_it ? send(fd, buf, n, MSG_NOSIGNAL) : recv(fd, buf, n, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        buf += k;
        n -= (size_t)k;
    }
    return 0;
}

/* Send `total` and receive `total` at once: non-blocking send and receive
 * in turn, poll only when neither moves. */
static int both(int fd, char *sb, char *rb, size_t msg, size_t total)
{
    size_t sent = 0, got = 0;
    while (sent < total || got < total) {
        int moved = 0;
        if (sent < total) {
            size_t off = sent % msg, n = msg - off < total - sent ? msg - off : total - sent;
            ssize_t k = send(fd, sb + off, n, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (k > 0) {
                sent += (size_t)k;
                moved = 1;
            } else if (k < 0 && errno != EAGAIN && errno != EINTR) {
                return -1;
            }
        }
        if (got < total) {
            size_t off = got % msg, n = msg - off < total - got ? msg - off : total - got;
            ssize_t k = recv(fd, rb + off, n, MSG_DONTWAIT);
            if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR))
                return -1;
            if (k > 0) {
                got += (size_t)k;
                moved = 1;
            }
        }
        if (!moved) {
            struct pollfd p = {.fd = fd, .events = (short)((sent < total ? POLLOUT : 0) |
                                                           (got < total ? POLLIN : 0))};
            if (poll(&p, 1, 5000) <= 0)
                return -1;
        }
    }
    return 0;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* mode 0 one way, 1 both ways, 2 ping-pong; the side that listens times it. */
static double run(int fd, int server, int mode, char *sb, char *rb, size_t msg, size_t total)
{
    char go = 0;
    if (xfer(fd, &go, 1, server) < 0 || xfer(fd, &go, 1, !server) < 0)
        return -1;
    double t0 = now();
    if (mode == 0) {
        for (size_t done = 0; done < total; done += msg)
            if (xfer(fd, server ? rb : sb, msg, !server) < 0)
                return -1;
        if (xfer(fd, &go, 1, server) < 0) /* the receiver has it all */
            return -1;
        return now() - t0;
    }
    if (mode == 1) {
        if (both(fd, sb, rb, msg, total) < 0 || xfer(fd, &go, 1, server) < 0)
            return -1;
        return now() - t0;
    }
    static double rtt[2000];
    for (int i = 0; i < 2000; i++) {
        double a = now();
        if (xfer(fd, server ? sb : rb, 4096, server) < 0 ||
            xfer(fd, server ? rb : sb, 4096, !server) < 0)
            return -1;
        rtt[i] = now() - a;
    }
    qsort(rtt, 2000, sizeof rtt[0], cmp);
    return rtt[1000];
}

int main(int argc, char **argv)
{
    size_t total = (size_t)1 << 30, msg = (size_t)4 << 20;
    int port = 57500;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--bytes"))
            total = strtoull(argv[i + 1], NULL, 0);
        else if (!strcmp(argv[i], "--msg"))
            msg = strtoull(argv[i + 1], NULL, 0);
        else if (!strcmp(argv[i], "--port"))
            port = atoi(argv[i + 1]);
    }
    total = total / msg * msg;
    if (!msg || !total) {
        fprintf(stderr, "usage: %s [--bytes TOTAL] [--msg BYTES] [--port FIRST]\n", argv[0]);
        return 2;
    }
    char *sb = malloc(msg), *rb = malloc(msg);
    int lfd = listener(&port);
    if (!sb || !rb || lfd < 0) {
        fprintf(stderr, "tcp_stream: no buffer or no free port from %d\n", port);
        return 1;
    }
    memset(sb, 1, msg);
    memset(rb, 0, msg);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(lfd);
        int fd = dial(port);
        for (int mode = 0; fd >= 0 && mode < 3; mode++)
            for (int rep = 0; rep < 3; rep++)
                if (run(fd, 0, mode, sb, rb, msg, total) < 0)
                    _exit(1);
        _exit(0);
    }
    int fd = accept(lfd, NULL, NULL), one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    double best[3] = {1e9, 1e9, 1e9};
    for (int mode = 0; fd >= 0 && mode < 3; mode++)
        for (int rep = 0; rep < 3; rep++) {
            double t = run(fd, 1, mode, sb, rb, msg, total);
            if (t < 0) {
                fprintf(stderr, "tcp_stream: the transfer failed\n");
                return 1;
            }
            if (t < best[mode])
                best[mode] = t;
        }
    int st;
    waitpid(pid, &st, 0);
    printf("raw TCP stream, %zu MiB in messages of %zu KiB: one way %.2f GB/s, both ways "
           "%.2f GB/s each; 4 KiB ping-pong round trip p50 %.1f us\n",
           total >> 20, msg >> 10, (double)total / best[0] * 1e-9, (double)total / best[1] * 1e-9,
           best[2] * 1e6);
    return 0;
}
