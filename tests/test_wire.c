/* test_wire.c — the MessagePack wire format: round trips, the envelope
 * (version, run id, type), every field check, the structural scan against
 * allocation bombs and deep nesting, members, and a fuzz run of random and
 * mutated messages that must all be refused or accepted without a crash. */
#include "config.h"

#include "testutil.h"

#include "datashare.h"
#include "membership.h"
#include "sha256.h"
#include "status.h"
#include "wire.h"

static const char RUN[] = "00112233445566778899aabbccddeeff";

static void test_round_trip(void **state)
{
    (void)state;
    rt_wire_writer w;
    rt_wire_writer_init(&w);
    rt_wire_begin(&w, RUN, "hello", 8);
    rt_wire_put_uint(&w, "u", 42);
    rt_wire_put_int(&w, "i", -7);
    rt_wire_put_f64(&w, "f", 0.125);
    rt_wire_put_bool(&w, "b", true);
    rt_wire_put_str(&w, "s", "text");
    rt_wire_put_bin(&w, "bin", "\x01\x02\x03", 3);
    rt_wire_put_map(&w, "m", 1);
    rt_wire_raw_str(&w, "k");
    rt_wire_raw_uint(&w, 9);
    rt_wire_put_array(&w, "a", 2);
    rt_wire_raw_str(&w, "x");
    rt_wire_raw_str(&w, "y");
    assert_int_equal(rt_wire_end(&w), RT_OK);

    rt_wire_msg m;
    rt_wire_msg_init(&m);
    assert_int_equal(rt_wire_parse(&m, w.data, w.len, RUN, false), RT_OK);
    assert_string_equal(m.type, "hello");
    assert_string_equal(m.run, RUN);
    rt_wire_map r = rt_wire_root(&m);
    uint64_t u;
    int64_t i;
    double f;
    bool b;
    char s[16];
    const void *p;
    size_t n;
    assert_int_equal(rt_wire_get_uint(r, "u", 0, 100, &u), RT_OK);
    assert_int_equal(u, 42);
    assert_int_equal(rt_wire_get_int(r, "i", -10, 10, &i), RT_OK);
    assert_int_equal(i, -7);
    assert_int_equal(rt_wire_get_f64(r, "f", 0, 1, &f), RT_OK);
    assert_true(f == 0.125);
    assert_int_equal(rt_wire_get_bool(r, "b", &b), RT_OK);
    assert_true(b);
    assert_int_equal(rt_wire_get_str(r, "s", 1, s, sizeof s), RT_OK);
    assert_string_equal(s, "text");
    assert_int_equal(rt_wire_get_bin(r, "bin", 10, &p, &n), RT_OK);
    assert_int_equal(n, 3);
    assert_memory_equal(p, "\x01\x02\x03", 3);
    rt_wire_map sub;
    assert_int_equal(rt_wire_get_map(r, "m", &sub), RT_OK);
    assert_int_equal(rt_wire_get_uint(sub, "k", 0, 9, &u), RT_OK);
    const msgpack_object *items;
    assert_int_equal(rt_wire_get_array(r, "a", 4, &items, &n), RT_OK);
    assert_int_equal(n, 2);
    assert_int_equal(rt_wire_item_str(items, 1, "a", s, sizeof s), RT_OK);
    assert_string_equal(s, "y");

    /* every getter refuses what it should, naming the field */
    assert_int_equal(rt_wire_get_uint(r, "nope", 0, 1, &u), RT_ERR_FORMAT);
    assert_non_null(strstr(rt_error_detail(), "nope"));
    assert_int_equal(rt_wire_get_uint(r, "u", 0, 41, &u), RT_ERR_FORMAT);
    assert_int_equal(rt_wire_get_uint(r, "i", 0, 100, &u), RT_ERR_FORMAT);
    assert_int_equal(rt_wire_get_uint(r, "s", 0, 100, &u), RT_ERR_FORMAT);
    assert_int_equal(rt_wire_get_int(r, "i", 0, 10, &i), RT_ERR_FORMAT);
    assert_int_equal(rt_wire_get_f64(r, "f", 0.5, 1, &f), RT_ERR_FORMAT);
    assert_int_equal(rt_wire_get_f64(r, "s", 0, 1, &f), RT_ERR_FORMAT);
    assert_int_equal(rt_wire_get_bool(r, "u", &b), RT_ERR_FORMAT);
    assert_int_equal(rt_wire_get_str(r, "s", 5, s, sizeof s), RT_ERR_FORMAT);
    assert_int_equal(rt_wire_get_str(r, "s", 1, s, 4), RT_ERR_FORMAT);
    assert_int_equal(rt_wire_get_str(r, "u", 0, s, sizeof s), RT_ERR_FORMAT);
    assert_int_equal(rt_wire_get_bin(r, "bin", 2, &p, &n), RT_ERR_FORMAT);
    assert_int_equal(rt_wire_get_map(r, "a", &sub), RT_ERR_FORMAT);
    assert_int_equal(rt_wire_get_array(r, "a", 1, &items, &n), RT_ERR_FORMAT);
    assert_int_equal(rt_wire_get_array(r, "m", 4, &items, &n), RT_ERR_FORMAT);

    /* envelope: a foreign run, no run, another version */
    static const char other[] = "ffeeddccbbaa99887766554433221100";
    assert_int_equal(rt_wire_parse(&m, w.data, w.len, other, false), RT_ERR_FORMAT);
    assert_non_null(strstr(rt_error_detail(), "foreign"));
    assert_int_equal(rt_wire_parse(&m, w.data, w.len, NULL, false), RT_OK);
    rt_wire_begin(&w, "", "hello", 0);
    assert_int_equal(rt_wire_end(&w), RT_OK);
    assert_int_equal(rt_wire_parse(&m, w.data, w.len, RUN, false), RT_ERR_FORMAT);
    assert_int_equal(rt_wire_parse(&m, w.data, w.len, RUN, true), RT_OK);
    rt_wire_begin(&w, "not-hex", "hello", 0);
    assert_int_equal(rt_wire_end(&w), RT_OK);
    assert_int_equal(rt_wire_parse(&m, w.data, w.len, NULL, true), RT_ERR_FORMAT);

    rt_wire_msg_free(&m);
    rt_wire_writer_free(&w);
}

static int parse_bytes(const void *p, size_t n)
{
    rt_wire_msg m;
    rt_wire_msg_init(&m);
    int rc = rt_wire_parse(&m, p, n, RUN, true);
    rt_wire_msg_free(&m);
    return rc;
}

static void test_envelope_and_scan(void **state)
{
    (void)state;
    /* {"v":2,"run":"","type":"x"} */
    const unsigned char v2[] = {0x83, 0xa1, 'v', 0x02, 0xa3, 'r', 'u', 'n', 0xa0,
                                0xa4, 't', 'y', 'p', 'e', 0xa1, 'x'};
    assert_int_equal(parse_bytes(v2, sizeof v2), RT_ERR_FORMAT);
    assert_non_null(strstr(rt_error_detail(), "version 2"));
    unsigned char v1[sizeof v2];
    memcpy(v1, v2, sizeof v2);
    v1[3] = 0x01;
    assert_int_equal(parse_bytes(v1, sizeof v1), RT_OK);
    /* trailing byte, truncation at every length */
    unsigned char trail[sizeof v1 + 1];
    memcpy(trail, v1, sizeof v1);
    trail[sizeof v1] = 0xc0;
    assert_int_equal(parse_bytes(trail, sizeof trail), RT_ERR_FORMAT);
    for (size_t k = 0; k < sizeof v1; k++)
        assert_int_equal(parse_bytes(v1, k), RT_ERR_FORMAT);
    /* not a map; bombs; nesting; extension; non-string and duplicate keys */
    const unsigned char arr[] = {0x91, 0x01};
    assert_int_equal(parse_bytes(arr, sizeof arr), RT_ERR_FORMAT);
    const unsigned char bomb[] = {0xdd, 0xff, 0xff, 0xff, 0xff, 0xc0};
    assert_int_equal(parse_bytes(bomb, sizeof bomb), RT_ERR_FORMAT);
    const unsigned char mbomb[] = {0xdf, 0x10, 0x00, 0x00, 0x00, 0xc0, 0xc0};
    assert_int_equal(parse_bytes(mbomb, sizeof mbomb), RT_ERR_FORMAT);
    const unsigned char sbomb[] = {0xdb, 0xff, 0xff, 0xff, 0xf0, 'a'};
    assert_int_equal(parse_bytes(sbomb, sizeof sbomb), RT_ERR_FORMAT);
    unsigned char deep[64];
    memset(deep, 0x91, sizeof deep);
    deep[63] = 0xc0;
    assert_int_equal(parse_bytes(deep, sizeof deep), RT_ERR_FORMAT);
    assert_non_null(strstr(rt_error_detail(), "nested"));
    const unsigned char ext[] = {0xd4, 0x01, 0x02};
    assert_int_equal(parse_bytes(ext, sizeof ext), RT_ERR_FORMAT);
    const unsigned char intkey[] = {0x81, 0x01, 0x02};
    assert_int_equal(parse_bytes(intkey, sizeof intkey), RT_ERR_FORMAT);
    const unsigned char dup[] = {0x84, 0xa1, 'v', 0x01, 0xa3, 'r', 'u', 'n', 0xa0, 0xa4,
                                 't', 'y', 'p', 'e', 0xa1, 'x', 0xa1, 'v', 0x01};
    assert_int_equal(parse_bytes(dup, sizeof dup), RT_ERR_FORMAT);
    assert_non_null(strstr(rt_error_detail(), "twice"));
    const unsigned char notype[] = {0x82, 0xa1, 'v', 0x01, 0xa3, 'r', 'u', 'n', 0xa0};
    assert_int_equal(parse_bytes(notype, sizeof notype), RT_ERR_FORMAT);
    const unsigned char nultype[] = {0x83, 0xa1, 'v', 0x01, 0xa3, 'r', 'u', 'n', 0xa0,
                                     0xa4, 't', 'y', 'p', 'e', 0xa2, 'x', 0x00};
    assert_int_equal(parse_bytes(nultype, sizeof nultype), RT_ERR_FORMAT);
    assert_int_equal(parse_bytes("", 0), RT_ERR_FORMAT);
    /* over the control size limit */
    size_t huge = RT_WIRE_MAX_CONTROL + 1;
    char *h = calloc(1, huge);
    assert_int_equal(parse_bytes(h, huge), RT_ERR_FORMAT);
    free(h);
}

static void sample_member(struct rt_member *m, int k)
{
    memset(m, 0, sizeof *m);
    snprintf(m->id, sizeof m->id, "%016x", 0xabc00 + k);
    snprintf(m->name, sizeof m->name, "w%d", k);
    snprintf(m->host, sizeof m->host, "box%d", k);
    snprintf(m->host_id, sizeof m->host_id, "hid/%d", k / 2);
    snprintf(m->endpoint, sizeof m->endpoint, "tcp://10.0.0.%d:5000", k + 1);
    snprintf(m->backend, sizeof m->backend, "cpu");
    snprintf(m->device, sizeof m->device, "AMD EPYC");
    m->threads = 2;
    m->images_per_s = 1234.5;
    snprintf(m->shm, sizeof m->shm, "%016x", 0x5e00 + k);
    snprintf(m->link, sizeof m->link, "%032x", 0x1e00 + k);
}

static void test_membership(void **state)
{
    (void)state;
    static struct rt_membership ms, back;
    ms.gen = 3;
    ms.n = 5;
    for (int k = 0; k < 5; k++)
        sample_member(&ms.m[k], k);
    rt_wire_writer w;
    rt_wire_writer_init(&w);
    rt_wire_begin(&w, RUN, "job", 2);
    rt_membership_put(&w, &ms);
    assert_int_equal(rt_wire_end(&w), RT_OK);
    rt_wire_msg m;
    rt_wire_msg_init(&m);
    assert_int_equal(rt_wire_parse(&m, w.data, w.len, RUN, false), RT_OK);
    assert_int_equal(rt_membership_get(rt_wire_root(&m), &back), RT_OK);
    assert_int_equal(back.gen, 3);
    assert_int_equal(back.n, 5);
    for (int k = 0; k < 5; k++) {
        assert_string_equal(back.m[k].endpoint, ms.m[k].endpoint);
        assert_string_equal(back.m[k].host_id, ms.m[k].host_id);
        assert_true(back.m[k].images_per_s == 1234.5);
    }
    assert_true(rt_membership_same_host(&back, 0, 1));
    assert_false(rt_membership_same_host(&back, 1, 2));
    /* one machine: the boot id before the '/', whatever the /dev/shm after */
    assert_true(rt_membership_same_machine(&back, 1, 2));
    snprintf(back.m[3].host_id, sizeof back.m[3].host_id, "hidden/1");
    assert_false(rt_membership_same_machine(&back, 2, 3)); /* "hid" is not "hidden" */
    snprintf(back.m[3].host_id, sizeof back.m[3].host_id, "noboot/1");
    snprintf(back.m[4].host_id, sizeof back.m[4].host_id, "noboot/2");
    assert_false(rt_membership_same_machine(&back, 3, 4)); /* boot ids unknown */
    assert_true(rt_membership_same_machine(&back, 3, 3));
    snprintf(back.m[4].host_id, sizeof back.m[4].host_id, "hid");
    assert_false(rt_membership_same_machine(&back, 4, 0)); /* no boot id at all */
    assert_false(rt_membership_same_machine(&back, 0, 4));
    assert_true(rt_membership_same_machine(&back, 4, 4));
    assert_string_equal(rt_membership_link_kind(&back, 0, true), "shm");
    assert_string_equal(rt_membership_link_kind(&back, 1, true), "tcp");
    assert_string_equal(rt_membership_link_kind(&back, 0, false), "tcp");

    /* a duplicate id, an ipc:// endpoint, generation 0, a control character */
    struct rt_member keep = ms.m[1];
    snprintf(ms.m[1].id, sizeof ms.m[1].id, "%s", ms.m[0].id);
    rt_wire_begin(&w, RUN, "job", 2);
    rt_membership_put(&w, &ms);
    assert_int_equal(rt_wire_end(&w), RT_OK);
    assert_int_equal(rt_wire_parse(&m, w.data, w.len, RUN, false), RT_OK);
    assert_int_equal(rt_membership_get(rt_wire_root(&m), &back), RT_ERR_FORMAT);
    ms.m[1] = keep;
    snprintf(ms.m[2].endpoint, sizeof ms.m[2].endpoint, "ipc:///tmp/x");
    rt_wire_begin(&w, RUN, "job", 2);
    rt_membership_put(&w, &ms);
    assert_int_equal(rt_wire_end(&w), RT_OK);
    assert_int_equal(rt_wire_parse(&m, w.data, w.len, RUN, false), RT_OK);
    assert_int_equal(rt_membership_get(rt_wire_root(&m), &back), RT_ERR_FORMAT);
    assert_non_null(strstr(rt_error_detail(), "member 2"));
    sample_member(&ms.m[2], 2);
    snprintf(ms.m[3].name, sizeof ms.m[3].name, "evil\x1b[2J");
    rt_wire_begin(&w, RUN, "job", 2);
    rt_membership_put(&w, &ms);
    assert_int_equal(rt_wire_end(&w), RT_OK);
    assert_int_equal(rt_wire_parse(&m, w.data, w.len, RUN, false), RT_OK);
    assert_int_equal(rt_membership_get(rt_wire_root(&m), &back), RT_ERR_FORMAT);
    sample_member(&ms.m[3], 3);
    ms.gen = 0;
    rt_wire_begin(&w, RUN, "job", 2);
    rt_membership_put(&w, &ms);
    assert_int_equal(rt_wire_end(&w), RT_OK);
    assert_int_equal(rt_wire_parse(&m, w.data, w.len, RUN, false), RT_OK);
    assert_int_equal(rt_membership_get(rt_wire_root(&m), &back), RT_ERR_FORMAT);
    rt_wire_msg_free(&m);
    rt_wire_writer_free(&w);
}

/* Random bytes and bit-flipped / truncated / spliced valid messages: each
 * is accepted or refused, never a crash, and parsing stays cheap. */
static void test_fuzz(void **state)
{
    (void)state;
    static struct rt_membership ms, back;
    ms.gen = 1;
    ms.n = 3;
    for (int k = 0; k < 3; k++)
        sample_member(&ms.m[k], k);
    rt_wire_writer w;
    rt_wire_writer_init(&w);
    rt_wire_begin(&w, RUN, "job", 4);
    rt_membership_put(&w, &ms);
    rt_wire_put_str(&w, "model", "[net]\nwidth=28\n");
    rt_wire_put_f64(&w, "x", 3.5);
    assert_int_equal(rt_wire_end(&w), RT_OK);
    rt_rng r;
    rt_rng_seed(&r, 99, 1);
    unsigned char buf[2048];
    rt_wire_msg m;
    rt_wire_msg_init(&m);
    long accepted = 0;
    for (int it = 0; it < 40000; it++) {
        size_t n;
        if (it % 4 == 0) {
            n = rt_rng_next(&r) % 300;
            for (size_t i = 0; i < n; i++)
                buf[i] = (unsigned char)rt_rng_next(&r);
        } else {
            n = w.len;
            memcpy(buf, w.data, n);
            int flips = 1 + (int)(rt_rng_next(&r) % 4);
            for (int k = 0; k < flips; k++)
                buf[rt_rng_next(&r) % n] ^= (unsigned char)(1u << (rt_rng_next(&r) % 8));
            if (it % 4 == 2)
                n = rt_rng_next(&r) % n;
        }
        if (rt_wire_parse(&m, buf, n, RUN, true) == RT_OK) {
            accepted++;
            rt_membership_get(rt_wire_root(&m), &back);
            char s[64];
            rt_wire_get_str(rt_wire_root(&m), "model", 0, s, sizeof s);
        }
    }
    assert_true(accepted > 0); /* some flips hit values, not structure */
    rt_wire_msg_free(&m);
    rt_wire_writer_free(&w);
}

static void test_run_ids(void **state)
{
    (void)state;
    char a[RT_RUN_ID_LEN + 1], b[RT_RUN_ID_LEN + 1];
    rt_wire_new_run_id(a);
    rt_wire_new_run_id(b);
    assert_true(rt_wire_run_id_valid(a));
    assert_true(rt_wire_run_id_valid(b));
    assert_string_not_equal(a, b);
    assert_false(rt_wire_run_id_valid("abc"));
    assert_false(rt_wire_run_id_valid("0123456789ABCDEF0123456789abcdef"));
    rt_wire_droplog d;
    rt_wire_droplog_init(&d, "test");
    for (int i = 0; i < 50; i++)
        rt_wire_drop(&d, "127.0.0.9", "testing the rate limit");
    assert_int_equal(d.total, 50);
    assert_int_equal(d.suppressed, 45);
}

static void test_sha256_and_manifest(void **state)
{
    (void)state;
    /* FIPS 180-4 examples */
    struct {
        const char *in, *out;
    } v[] = {
        {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        rt_sha256 h;
        char hex[65];
        rt_sha256_init(&h);
        /* fed in pieces, to cross block boundaries */
        for (const char *p = v[i].in; *p; p++)
            rt_sha256_update(&h, p, 1);
        rt_sha256_hex(&h, hex);
        assert_string_equal(hex, v[i].out);
    }

    /* A manifest survives the wire; unsafe names, bad hashes, unknown
     * kinds and bad suffixes do not. */
    struct rt_data_manifest m, back;
    memset(&m, 0, sizeof m);
    snprintf(m.files.kind, sizeof m.files.kind, "idx");
    m.files.n = 2;
    snprintf(m.files.name[0], sizeof m.files.name[0], "train-images-idx3-ubyte.gz");
    snprintf(m.files.name[1], sizeof m.files.name[1], "train-labels-idx1-ubyte.gz");
    m.size[0] = 1000;
    m.size[1] = 10;
    snprintf(m.sha[0], sizeof m.sha[0], "%s", v[1].out);
    snprintf(m.sha[1], sizeof m.sha[1], "%s", v[2].out);
    rt_wire_writer w;
    rt_wire_writer_init(&w);
    rt_wire_msg msg;
    rt_wire_msg_init(&msg);
    const char *bad_names[] = {"../etc/passwd", "a/b", ".hidden", "", NULL};
    for (int k = -1; k < 7; k++) {
        struct rt_data_manifest t = m;
        if (k >= 0 && k < 4)
            snprintf(t.files.name[1], sizeof t.files.name[1], "%s", bad_names[k]);
        if (k == 4)
            t.sha[0][5] = 'G';
        if (k == 5)
            snprintf(t.files.kind, sizeof t.files.kind, "tfrecord");
        if (k == 6)
            snprintf(t.files.suffix, sizeof t.files.suffix, ";rm -rf");
        rt_wire_begin(&w, RUN, "job", 1);
        rt_manifest_put(&w, &t);
        assert_int_equal(rt_wire_end(&w), RT_OK);
        assert_int_equal(rt_wire_parse(&msg, w.data, w.len, RUN, false), RT_OK);
        int rc = rt_manifest_get(rt_wire_root(&msg), &back);
        if (k < 0) {
            assert_int_equal(rc, RT_OK);
            assert_string_equal(back.files.name[1], m.files.name[1]);
            assert_string_equal(back.sha[0], m.sha[0]);
            assert_int_equal(back.size[0], 1000);
        } else {
            assert_int_equal(rc, RT_ERR_FORMAT);
        }
    }
    rt_wire_msg_free(&msg);
    rt_wire_writer_free(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_envelope_and_scan),
        cmocka_unit_test(test_membership),
        cmocka_unit_test(test_fuzz),
        cmocka_unit_test(test_run_ids),
        cmocka_unit_test(test_sha256_and_manifest),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
