/* test_errors.c — the thread-local error detail (base/status.c): a new
 * error may quote the detail it replaces, as callers do when they add
 * where to an inner failure ("... (%s)", rt_error_detail()); wrapping
 * keeps the inner detail after its prefix. */
#include "config.h"

#include "testutil.h"

#include "status.h"

/* rt_error formatted straight into the detail it read from: the worker's
 * "no coordinator made loopback credentials ... (%s)" came out as its own
 * first words again and "(ectory)". */
static void test_error_quotes_the_detail_it_replaces(void **state)
{
    (void)state;
    rt_error(RT_ERR_NOTFOUND, "cannot open %s: %s", "/no/such/file", "No such file or directory");
    assert_int_equal(rt_error(RT_ERR_TIMEOUT, "no coordinator within %d s (%s)", 1,
                              rt_error_detail()),
                     RT_ERR_TIMEOUT);
    assert_string_equal(rt_error_detail(), "no coordinator within 1 s (cannot open /no/such/file: "
                                           "No such file or directory)");
    /* the detail quoted twice, and past its own length */
    rt_error(RT_ERR_IO, "x%s", "yz");
    rt_error(RT_ERR_IO, "%s-%s", rt_error_detail(), rt_error_detail());
    assert_string_equal(rt_error_detail(), "xyz-xyz");
}

static void test_wrap_keeps_the_inner_detail(void **state)
{
    (void)state;
    rt_error(RT_ERR_FORMAT, "byte %d: bad tag", 7);
    assert_int_equal(rt_error_wrap(RT_ERR_FORMAT, "model %s", "a.cfg"), RT_ERR_FORMAT);
    assert_string_equal(rt_error_detail(), "model a.cfg: byte 7: bad tag");
    rt_error_clear();
    assert_string_equal(rt_error_detail(), "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_error_quotes_the_detail_it_replaces),
        cmocka_unit_test(test_wrap_keeps_the_inner_detail),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
