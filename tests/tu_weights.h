/* tu_weights.h — comparing the weights two runs saved (safetensors), for
 * the tests that need a bitwise answer. */
#ifndef RT_TU_WEIGHTS_H
#define RT_TU_WEIGHTS_H

#include "checkpoint.h"
#include "testutil.h"

/* Every tensor of two safetensors files bitwise equal. */
static inline void tu_assert_same_weights(const char *a_path, const char *b_path)
{
    rt_st_file *a = NULL, *b = NULL;
    assert_int_equal(rt_safetensors_read(a_path, &a), 0);
    assert_int_equal(rt_safetensors_read(b_path, &b), 0);
    assert_int_equal(rt_st_count(a), rt_st_count(b));
    for (int i = 0; i < rt_st_count(a); i++) {
        struct rt_st_tensor ta, tb;
        assert_int_equal(rt_st_get(a, i, &ta), 0);
        assert_int_equal(rt_st_find(b, ta.name, &tb), 0);
        size_t n = 1;
        for (int d = 0; d < ta.ndim; d++)
            n *= (size_t)ta.dims[d];
        if (memcmp(ta.data, tb.data, n * sizeof(float)) != 0)
            fail_msg("tensor %s differs between %s and %s", ta.name, a_path, b_path);
    }
    rt_st_file_destroy(&a);
    rt_st_file_destroy(&b);
}

#endif
