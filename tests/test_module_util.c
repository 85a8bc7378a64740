/* test_module_util.c — what the loadable backend modules share
 * (backends/module-util.c, compiled in here as it is into each module): the
 * device list enumerated once, with its reason when there is no device, and
 * how a copy's views lie. */
#include "config.h"

#include "testutil.h"

#include "module-util.h"
#include "status.h"

static struct mod_devices none = MOD_DEVICES_INIT, two = MOD_DEVICES_INIT;
static int none_calls, two_calls;

static void enum_none(void)
{
    none_calls++;
    mod_devices_fail(&none, RT_ERR_NOTFOUND, "no driver (%s)", "libfoo.so.1");
}

static void enum_two(void)
{
    two_calls++;
    two.n = 2;
    two.status = RT_OK;
}

static void test_no_device(void **state)
{
    (void)state;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(mod_devices_count(&none, enum_none), RT_ERR_NOTFOUND);
        assert_string_equal(rt_error_detail(), "no driver (libfoo.so.1)");
    }
    assert_int_equal(mod_devices_check(&none, enum_none, "foo", 0), RT_ERR_NOTFOUND);
    assert_int_equal(none_calls, 1); /* enumerated once per process */
}

static void test_two_devices(void **state)
{
    (void)state;
    assert_int_equal(mod_devices_count(&two, enum_two), 2);
    assert_int_equal(mod_devices_init(&two, enum_two), RT_OK);
    assert_int_equal(mod_devices_check(&two, enum_two, "foo", 1), RT_OK);
    assert_int_equal(mod_devices_check(&two, enum_two, "foo", 2), RT_ERR_NOTFOUND);
    assert_string_equal(rt_error_detail(), "foo: 2 device(s); device 2 does not exist");
    assert_int_equal(mod_devices_check(&two, enum_two, "foo", -1), RT_ERR_NOTFOUND);
    assert_int_equal(two_calls, 1);
}

static void test_buffers(void **state)
{
    (void)state;
    rt_buf a = {.bytes = 0}, b = {.bytes = 400};
    assert_int_equal(mod_buf_bytes(&a), 4); /* a zero-byte buffer still gets a handle */
    assert_int_equal(mod_buf_bytes(&b), 400);
    char what[96];
    assert_string_equal(mod_buf_what(&b, what, sizeof what), "allocating 400 bytes");

    rt_view b0 = {&b, 0}, b10 = {&b, 10}, b20 = {&b, 20}, a0 = {&a, 0};
    assert_int_equal(mod_copy_kind(b0, b0, 10), MOD_COPY_SAME);
    assert_int_equal(mod_copy_kind(b10, b0, 10), MOD_COPY_APART); /* touching, not overlapping */
    assert_int_equal(mod_copy_kind(b10, b0, 11), MOD_COPY_OVERLAP);
    assert_int_equal(mod_copy_kind(b0, b10, 11), MOD_COPY_OVERLAP);
    assert_int_equal(mod_copy_kind(b20, b0, 10), MOD_COPY_APART);
    assert_int_equal(mod_copy_kind(a0, b0, 10), MOD_COPY_APART); /* two buffers never overlap */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_device),
        cmocka_unit_test(test_two_devices),
        cmocka_unit_test(test_buffers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
