/* junk.h — bad traffic for ragtag's sockets: what a confused or hostile peer
 * might send. Used by tests/test_ring.c and tests/net_junk.c.
 *
 * junk_blast sends, over a ZeroMQ socket of `type` connected to endpoint:
 * random bytes in one or several frames, MessagePack that is not a map, an
 * "array of 2^31 elements" header, nesting 200 deep, duplicate keys, a
 * wrong protocol version, a foreign run id, the right run id with every
 * field of the wrong type or out of range, a chunk of a stale generation,
 * too many frames, and one frame larger than any ragtag socket accepts;
 * then raw TCP: random bytes and a half ZMTP greeting. Nothing it sends
 * may crash, stall or corrupt a node. */
#ifndef RT_JUNK_H
#define RT_JUNK_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <msgpack.h>
#include <zmq.h>

static uint64_t junk_rng = 0x9E3779B97F4A7C15ull;
/* CurveZMQ keys to send with (server public, own public, own secret), or
 * NULL: a stranger without credentials. */
static const char *junk_curve[3];

static uint32_t junk_rand(void)
{
    junk_rng ^= junk_rng << 13;
    junk_rng ^= junk_rng >> 7;
    junk_rng ^= junk_rng << 17;
    return (uint32_t)(junk_rng >> 16);
}

static void junk_send_frames(void *s, const void *const *f, const size_t *n, int k)
{
    for (int i = 0; i < k; i++)
        zmq_send(s, f[i], n[i], (i + 1 < k ? ZMQ_SNDMORE : 0) | ZMQ_DONTWAIT);
}

static void junk_send1(void *s, const void *p, size_t n)
{
    const void *f[1] = {p};
    size_t nn[1] = {n};
    junk_send_frames(s, f, nn, 1);
}

/* Map with the envelope and then k extra key/values packed by `extra`. */
static void junk_map(msgpack_sbuffer *sb, int version, const char *run, const char *type,
                     int k, void (*extra)(msgpack_packer *pk, int i))
{
    msgpack_packer pk;
    msgpack_sbuffer_clear(sb);
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 3 + (size_t)k);
    msgpack_pack_str(&pk, 1);
    msgpack_pack_str_body(&pk, "v", 1);
    msgpack_pack_int(&pk, version);
    msgpack_pack_str(&pk, 3);
    msgpack_pack_str_body(&pk, "run", 3);
    msgpack_pack_str(&pk, strlen(run));
    msgpack_pack_str_body(&pk, run, strlen(run));
    msgpack_pack_str(&pk, 4);
    msgpack_pack_str_body(&pk, "type", 4);
    msgpack_pack_str(&pk, strlen(type));
    msgpack_pack_str_body(&pk, type, strlen(type));
    for (int i = 0; i < k; i++)
        extra(&pk, i);
}

static void junk_key(msgpack_packer *pk, const char *k)
{
    msgpack_pack_str(pk, strlen(k));
    msgpack_pack_str_body(pk, k, strlen(k));
}

/* chunk fields with wrong types */
static void junk_bad_types(msgpack_packer *pk, int i)
{
    static const char *const keys[] = {"gen", "op", "t", "j", "fl", "n", "rank", "id", "name",
                                       "endpoint", "epoch", "step"};
    junk_key(pk, keys[i % 12]);
    switch (i % 4) {
    case 0: msgpack_pack_str(pk, 3); msgpack_pack_str_body(pk, "abc", 3); break;
    case 1: msgpack_pack_int64(pk, -5); break;
    case 2: msgpack_pack_double(pk, 1e300); break;
    default: msgpack_pack_nil(pk); break;
    }
}

/* a chunk from generation 999 claiming 4 GiB */
static void junk_stale_chunk(msgpack_packer *pk, int i)
{
    static const char *const keys[] = {"gen", "op", "t", "j", "fl", "n"};
    junk_key(pk, keys[i]);
    msgpack_pack_uint64(pk, i == 0 ? 999 : i == 5 ? (4ull << 30) : 0);
}

static void junk_dup_keys(msgpack_packer *pk, int i)
{
    junk_key(pk, "type");
    msgpack_pack_int(pk, i);
}

/* hello / job / ready / chunk with plausible-looking but invalid contents */
static void junk_member(msgpack_packer *pk, int i)
{
    switch (i) {
    case 0:
        junk_key(pk, "member");
        msgpack_pack_map(pk, 2);
        junk_key(pk, "id");
        junk_key(pk, "zz");
        junk_key(pk, "endpoint");
        junk_key(pk, "ipc:///etc/passwd");
        break;
    case 1:
        junk_key(pk, "members");
        msgpack_pack_array(pk, 300);
        for (int k = 0; k < 300; k++)
            msgpack_pack_nil(pk);
        break;
    default:
        junk_key(pk, "gen");
        msgpack_pack_uint64(pk, 0);
    }
}

static void junk_blast(const char *endpoint, int type, const char *run, int rounds)
{
    void *ctx = zmq_ctx_new();
    void *s = zmq_socket(ctx, type);
    int zero = 0, hwm = 100000;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof hwm);
    if (junk_curve[0]) {
        zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, junk_curve[0], 40);
        zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, junk_curve[1], 40);
        zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, junk_curve[2], 40);
    }
    zmq_connect(s, endpoint);
    usleep(50000);
    static char big[6 << 20];
    char buf[512];
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    static const char foreign[] = "0123456789abcdef0123456789abcdef";
    const char *types[] = {"chunk", "hello", "job", "ready", "start", "abort", "stop", "hb",
                           "fetch", "file", "progress", "epoch", "ckpt", "done", "bye", "error"};
    for (int round = 0; round < rounds; round++) {
        /* random bytes, one and two frames */
        for (int k = 0; k < 8; k++) {
            size_t n = junk_rand() % sizeof buf;
            for (size_t i = 0; i < n; i++)
                buf[i] = (char)junk_rand();
            if (k % 2) {
                const void *f[2] = {buf, buf};
                size_t nn[2] = {n, n / 2};
                junk_send_frames(s, f, nn, 2);
            } else {
                junk_send1(s, buf, n);
            }
        }
        /* an array, not a map; an array header promising 2^31 elements */
        unsigned char arr[] = {0x93, 0x01, 0x02, 0x03};
        junk_send1(s, arr, sizeof arr);
        unsigned char bomb[] = {0xdd, 0x80, 0x00, 0x00, 0x00, 0xc0};
        junk_send1(s, bomb, sizeof bomb);
        unsigned char mbomb[] = {0xdf, 0x7f, 0xff, 0xff, 0xff};
        junk_send1(s, mbomb, sizeof mbomb);
        /* nesting 200 deep */
        memset(buf, 0x91, 200);
        buf[200] = (char)0xc0;
        junk_send1(s, buf, 201);
        for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
            const void *f[2];
            size_t nn[2];
            /* wrong version, foreign run, no run, duplicate keys */
            junk_map(&sb, 7, run ? run : foreign, types[t], 0, NULL);
            junk_send1(s, sb.data, sb.size);
            junk_map(&sb, 1, foreign, types[t], 0, NULL);
            junk_send1(s, sb.data, sb.size);
            junk_map(&sb, 1, "", types[t], 0, NULL);
            junk_send1(s, sb.data, sb.size);
            junk_map(&sb, 1, run ? run : foreign, types[t], 2, junk_dup_keys);
            junk_send1(s, sb.data, sb.size);
            /* the right run, fields of the wrong type */
            junk_map(&sb, 1, run ? run : foreign, types[t], 12, junk_bad_types);
            f[0] = sb.data;
            nn[0] = sb.size;
            f[1] = buf;
            nn[1] = 64;
            junk_send_frames(s, f, nn, 2);
            junk_map(&sb, 1, run ? run : foreign, types[t], 3, junk_member);
            junk_send1(s, sb.data, sb.size);
        }
        /* a chunk of a stale generation, claiming 4 GiB */
        junk_map(&sb, 1, run ? run : foreign, "chunk", 6, junk_stale_chunk);
        {
            const void *f[2] = {sb.data, buf};
            size_t nn[2] = {sb.size, 100};
            junk_send_frames(s, f, nn, 2);
        }
        /* too many frames */
        {
            const void *f[20];
            size_t nn[20];
            for (int i = 0; i < 20; i++) {
                f[i] = buf;
                nn[i] = 8;
            }
            junk_send_frames(s, f, nn, 20);
        }
    }
    /* a frame larger than any ragtag socket accepts: libzmq drops the
     * connection, which must not disturb anybody else */
    junk_send1(s, big, sizeof big);
    usleep(100000);
    msgpack_sbuffer_destroy(&sb);
    zmq_close(s);

    /* raw TCP: random bytes, then a truncated ZMTP greeting */
    const char *hp = strstr(endpoint, "tcp://");
    if (hp) {
        char host[64];
        int port = 0;
        if (sscanf(hp + 6, "%63[^:]:%d", host, &port) == 2) {
            for (int k = 0; k < 2; k++) {
                int fd = socket(AF_INET, SOCK_STREAM, 0);
                struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
                inet_pton(AF_INET, host, &a.sin_addr);
                if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0) {
                    if (k == 0) {
                        for (size_t i = 0; i < sizeof buf; i++)
                            buf[i] = (char)junk_rand();
                        (void)!write(fd, buf, sizeof buf);
                    } else {
                        unsigned char greet[] = {0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0x7f, 3};
                        (void)!write(fd, greet, sizeof greet);
                    }
                    usleep(20000);
                }
                if (fd >= 0)
                    close(fd);
            }
        }
    }
    zmq_ctx_term(ctx);
}

#endif
