/* creds.c — key files, join tokens and join strings (see creds.h). */
#include "config.h"

#include "net.h"

#include "creds.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zmq.h>

#include "sha256.h"
#include "status.h"
#include "transport.h"

#define JOIN_PREFIX "rtj1-"

/* ---- hex ------------------------------------------------------------------------------- */

static void to_hex(const uint8_t *b, size_t n, char *out)
{
    static const char d[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = d[b[i] >> 4];
        out[2 * i + 1] = d[b[i] & 15];
    }
    out[2 * n] = '\0';
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                         : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static bool from_hex(const char *s, size_t n, uint8_t *out)
{
    for (size_t i = 0; i < n; i++) {
        int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return false;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return true;
}

/* ---- the token ---------------------------------------------------------------------------- */

/* The invitation key pair: its secret is SHA-256 of a fixed label and the
 * token, so the token itself never travels. */
static int token_keys(struct rt_creds *c)
{
    rt_sha256 h;
    char hex[65];
    uint8_t seed[32];
    rt_sha256_init(&h);
    rt_sha256_update(&h, "ragtag join token v1:", 21);
    rt_sha256_update(&h, c->token, RT_TOKEN_HEX);
    rt_sha256_hex(&h, hex);
    from_hex(hex, 32, seed);
    int rc = rt_keypair_from_secret(seed, &c->invite);
    memset(seed, 0, sizeof seed);
    return rc;
}

static bool token_valid(const char *t)
{
    uint8_t raw[RT_TOKEN_HEX / 2];
    return strlen(t) == RT_TOKEN_HEX && from_hex(t, RT_TOKEN_HEX / 2, raw);
}

int rt_creds_generate(struct rt_creds *c)
{
    memset(c, 0, sizeof *c);
    uint8_t raw[RT_TOKEN_HEX / 2];
    if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw)
        return rt_error(RT_ERR_IO, "cannot draw a random join token: %s", strerror(errno));
    to_hex(raw, sizeof raw, c->token);
    RT_TRY(rt_keypair_new(&c->coord));
    return token_keys(c);
}

void rt_creds_join_string(const struct rt_creds *c, char *out, size_t cap)
{
    uint8_t pub[32];
    char hex[65];
    zmq_z85_decode(pub, c->coord.pub);
    to_hex(pub, 32, hex);
    snprintf(out, cap, JOIN_PREFIX "%s-%s", hex, c->token);
}

int rt_creds_from_join(const char *join, struct rt_creds *c)
{
    memset(c, 0, sizeof *c);
    size_t lp = strlen(JOIN_PREFIX);
    uint8_t pub[32];
    if (strncmp(join, JOIN_PREFIX, lp) != 0 || strlen(join) != lp + 64 + 1 + RT_TOKEN_HEX ||
        join[lp + 64] != '-' || !from_hex(join + lp, 32, pub) ||
        !token_valid(join + lp + 65))
        return rt_error(RT_ERR_CONFIG, "not a join string (expected %s<64 hex digits>-<32 hex "
                                       "digits>, as ragtag coord prints it)", JOIN_PREFIX);
    zmq_z85_encode(c->coord.pub, pub, 32);
    snprintf(c->token, sizeof c->token, "%s", join + lp + 65);
    return token_keys(c);
}

/* ---- files ------------------------------------------------------------------------------- */

int rt_secret_file_read(const char *path, char *buf, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return rt_error(errno == ENOENT ? RT_ERR_NOTFOUND : RT_ERR_IO, "cannot open %s: %s",
                        path, strerror(errno));
    struct stat st;
    int rc = RT_OK;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        rc = rt_error(RT_ERR_IO, "%s is not a regular file", path);
    else if (st.st_mode & 077)
        rc = rt_error(RT_ERR_CONFIG, "%s may be read by group or others (mode %04o): a secret "
                                     "must be private (chmod 600 %s)",
                      path, (unsigned)(st.st_mode & 07777), path);
    ssize_t n = rc == RT_OK ? read(fd, buf, cap - 1) : 0;
    close(fd);
    if (rc == RT_OK && n < 0)
        rc = rt_error(RT_ERR_IO, "cannot read %s: %s", path, strerror(errno));
    if (rc < 0)
        return rc;
    buf[n] = '\0';
    buf[strcspn(buf, "\r\n")] = '\0';
    return RT_OK;
}

int rt_creds_read_join_file(const char *path, struct rt_creds *c)
{
    char buf[RT_JOIN_MAX];
    RT_TRY(rt_secret_file_read(path, buf, sizeof buf));
    int rc = rt_creds_from_join(buf, c);
    memset(buf, 0, sizeof buf);
    return rc < 0 ? rt_error_wrap(rc, "%s", path) : RT_OK;
}

/* Write a whole file of mode `mode` (exclusively: an existing one is an
 * error, never overwritten). */
static int write_file(const char *path, const char *text, mode_t mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
    if (fd < 0)
        return rt_error(RT_ERR_IO, "cannot create %s: %s", path, strerror(errno));
    size_t n = strlen(text);
    bool ok = write(fd, text, n) == (ssize_t)n && fchmod(fd, mode) == 0 && fsync(fd) == 0;
    int e = errno;
    close(fd);
    if (!ok) {
        unlink(path);
        return rt_error(RT_ERR_IO, "cannot write %s: %s", path, strerror(e));
    }
    return RT_OK;
}

/* A private directory: made 0700, or an existing one refused when others
 * may enter it. */
static int private_dir(const char *dir)
{
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return rt_error(RT_ERR_IO, "cannot make directory %s: %s", dir, strerror(errno));
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return rt_error(RT_ERR_IO, "%s is not a directory", dir);
    if (st.st_mode & 077)
        return rt_error(RT_ERR_CONFIG, "directory %s may be entered by group or others (mode "
                                       "%04o): chmod 700 %s", dir,
                        (unsigned)(st.st_mode & 07777), dir);
    return RT_OK;
}

int rt_creds_write_dir(const char *dir, const struct rt_creds *c)
{
    RT_TRY(private_dir(dir));
    char path[4200], text[400], join[RT_JOIN_MAX];
    snprintf(path, sizeof path, "%s/secret.key", dir);
    snprintf(text, sizeof text, "# ragtag key pair (keep this file private)\npublic %s\n"
                                "secret %s\n", c->coord.pub, c->coord.sec);
    int rc = write_file(path, text, 0600);
    snprintf(path, sizeof path, "%s/token", dir);
    snprintf(text, sizeof text, "%s\n", c->token);
    if (rc == RT_OK)
        rc = write_file(path, text, 0600);
    rt_creds_join_string(c, join, sizeof join);
    snprintf(path, sizeof path, "%s/join", dir);
    snprintf(text, sizeof text, "%s\n", join);
    if (rc == RT_OK)
        rc = write_file(path, text, 0600);
    snprintf(path, sizeof path, "%s/public.key", dir);
    snprintf(text, sizeof text, "%s\n", c->coord.pub);
    if (rc == RT_OK)
        rc = write_file(path, text, 0644);
    memset(text, 0, sizeof text);
    return rc;
}

int rt_keypair_load(const char *path, struct rt_keypair *k)
{
    char buf[512];
    /* rt_secret_file_read keeps the first line only: read the lines here */
    RT_TRY(rt_secret_file_read(path, buf, 2));
    FILE *f = fopen(path, "r");
    if (!f)
        return rt_error(RT_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    memset(k, 0, sizeof *k);
    while (fgets(buf, sizeof buf, f)) {
        char key[16], val[64];
        if (buf[0] == '#' || sscanf(buf, "%15s %63s", key, val) != 2)
            continue;
        if (!strcmp(key, "public"))
            snprintf(k->pub, sizeof k->pub, "%.40s", val);
        else if (!strcmp(key, "secret"))
            snprintf(k->sec, sizeof k->sec, "%.40s", val);
    }
    fclose(f);
    memset(buf, 0, sizeof buf);
    char derived[RT_KEY_LEN + 1];
    if (!rt_key_valid(k->sec) || zmq_curve_public(derived, k->sec) != 0 ||
        strcmp(derived, k->pub) != 0)
        return rt_error(RT_ERR_FORMAT, "%s: not a ragtag key pair (a 'public' and a matching "
                                       "'secret' line of 40 Z85 characters)", path);
    return RT_OK;
}

int rt_creds_load_dir(const char *dir, struct rt_creds *c)
{
    memset(c, 0, sizeof *c);
    char path[4200];
    snprintf(path, sizeof path, "%s/secret.key", dir);
    RT_TRY(rt_keypair_load(path, &c->coord));
    snprintf(path, sizeof path, "%s/token", dir);
    char buf[128];
    RT_TRY(rt_secret_file_read(path, buf, sizeof buf));
    if (!token_valid(buf))
        return rt_error(RT_ERR_FORMAT, "%s: not a join token (32 hex digits)", path);
    snprintf(c->token, sizeof c->token, "%s", buf);
    memset(buf, 0, sizeof buf);
    return token_keys(c);
}

int rt_authorized_keys_load(const char *path, rt_curve *c, int *n)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return rt_error(RT_ERR_NOTFOUND, "cannot open %s: %s", path, strerror(errno));
    if (st.st_mode & 022) /* public keys, but who may add one decides who joins */
        return rt_error(RT_ERR_CONFIG, "%s may be written by group or others (mode %04o): "
                                       "chmod go-w %s", path, (unsigned)(st.st_mode & 07777),
                        path);
    FILE *f = fopen(path, "r");
    if (!f)
        return rt_error(RT_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    char line[512];
    int lineno = 0, rc = RT_OK;
    *n = 0;
    while (rc == RT_OK && fgets(line, sizeof line, f)) {
        lineno++;
        char key[64] = "";
        if (sscanf(line, "%63s", key) != 1 || key[0] == '#')
            continue;
        if (!rt_key_valid(key))
            rc = rt_error(RT_ERR_FORMAT, "%s:%d: not a public key (40 Z85 characters, as "
                                         "DIR/public.key of ragtag keygen)", path, lineno);
        else {
            rt_curve_allow_one(c, key);
            (*n)++;
        }
    }
    fclose(f);
    if (rc == RT_OK && *n == 0)
        rc = rt_error(RT_ERR_CONFIG, "%s lists no key: nobody could join", path);
    return rc;
}

int rt_net_keygen(const char *dir, char *public_key, size_t cap)
{
    struct rt_creds c;
    RT_TRY(rt_creds_generate(&c));
    int rc = rt_creds_write_dir(dir, &c);
    snprintf(public_key, cap, "%s", c.coord.pub);
    memset(&c, 0, sizeof c);
    return rc;
}

/* ---- loopback ------------------------------------------------------------------------------ */

bool rt_endpoint_is_loopback(const char *endpoint)
{
    char host[256];
    if (rt_net_endpoint_host(endpoint, host, sizeof host) < 0)
        return false;
    return !strncmp(host, "127.", 4) || !strcmp(host, "::1") || !strcmp(host, "localhost");
}

static int local_path(const char *endpoint, char *path, size_t cap)
{
    char host[256], dir[1024];
    RT_TRY(rt_net_endpoint_host(endpoint, host, sizeof host));
    const char *port = strrchr(endpoint, ':');
    if (!port || !port[1] || port[1] == '*' || !strcmp(port, ":0"))
        return rt_error(RT_ERR_CONFIG, "%s: loopback credentials need a fixed port", endpoint);
    if (!strcmp(host, "localhost"))
        snprintf(host, sizeof host, "127.0.0.1");
    const char *rt = getenv("XDG_RUNTIME_DIR"), *home = getenv("HOME");
    struct stat st;
    if (rt && rt[0] == '/' && stat(rt, &st) == 0) {
        snprintf(dir, sizeof dir, "%s/ragtag", rt);
    } else if (home && home[0] == '/') {
        snprintf(dir, sizeof dir, "%s/.cache", home);
        mkdir(dir, 0700);
        snprintf(dir, sizeof dir, "%s/.cache/ragtag", home);
        mkdir(dir, 0700);
        snprintf(dir, sizeof dir, "%s/.cache/ragtag/local", home);
    } else {
        return rt_error(RT_ERR_CONFIG, "neither XDG_RUNTIME_DIR nor HOME is set: give "
                                       "credentials (ragtag keygen) or --insecure");
    }
    RT_TRY(private_dir(dir));
    for (char *p = host; *p; p++)
        if (*p == ':' || *p == '/')
            *p = '_';
    snprintf(path, cap, "%s/join-%s-%s", dir, host, port + 1);
    return RT_OK;
}

int rt_creds_local(const char *endpoint, bool create, struct rt_creds *c)
{
    char path[1400], buf[RT_JOIN_MAX + RT_KEY_LEN + 8];
    RT_TRY(local_path(endpoint, path, sizeof path));
    int rc = rt_secret_file_read(path, buf, sizeof buf);
    if (rc == RT_OK) { /* line 1: the join string (workers read only this) */
        bool good = rt_creds_from_join(buf, c) == RT_OK;
        if (!create)
            return good ? RT_OK : rt_error(RT_ERR_FORMAT, "%s: no join string (yet)", path);
        FILE *f = fopen(path, "r"); /* line 2: the coordinator's secret */
        char line[RT_JOIN_MAX], sec[RT_KEY_LEN + 2] = "";
        bool ok = f && fgets(line, sizeof line, f) && fgets(sec, sizeof sec, f);
        if (f)
            fclose(f);
        sec[strcspn(sec, "\n")] = '\0';
        char pub[RT_KEY_LEN + 1];
        if (good && ok && rt_key_valid(sec) && zmq_curve_public(pub, sec) == 0 &&
            !strcmp(pub, c->coord.pub)) {
            snprintf(c->coord.sec, sizeof c->coord.sec, "%s", sec);
            return RT_OK;
        }
        unlink(path); /* a stale or broken file: made anew */
    } else if (rc != RT_ERR_NOTFOUND || !create) {
        return rc;
    }
    RT_TRY(rt_creds_generate(c));
    char join[RT_JOIN_MAX];
    rt_creds_join_string(c, join, sizeof join);
    snprintf(buf, sizeof buf, "%s\n%s\n", join, c->coord.sec);
    rc = write_file(path, buf, 0600);
    memset(buf, 0, sizeof buf);
    return rc;
}
