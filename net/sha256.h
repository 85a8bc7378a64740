/* sha256.h — SHA-256 (FIPS 180-4), for naming cached data files by their
 * content: a worker keeps what it was sent under its hash and never needs
 * it again, whoever sends it. */
#ifndef RT_SHA256_H
#define RT_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct rt_sha256 {
    uint32_t h[8];
    uint64_t len;
    unsigned char buf[64];
    size_t fill;
} rt_sha256;

void rt_sha256_init(rt_sha256 *s);
void rt_sha256_update(rt_sha256 *s, const void *data, size_t n);
/* 64 hex digits and a NUL. */
void rt_sha256_hex(rt_sha256 *s, char out[65]);
/* The hash of a whole file; RT_ERR_IO naming it. */
int rt_sha256_file(const char *path, char out[65], uint64_t *size);

#endif
