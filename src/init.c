/* init.c — seeded initialisation of a model's parameters and state.
 *
 * Weights are drawn on the host from rt_rng (one stream per tensor, so
 * adding a layer never shifts another's weights) and uploaded once. He and
 * Glorot use their uniform forms: the same variance as the normal forms,
 * but only +, * and sqrt, so every machine draws bit-identical weights. */
#include "config.h"

#include <math.h>
#include <stdlib.h>

#include "layer.h"
#include "rng.h"
#include "status.h"

static void fill_tensor(float *dst, size_t count, const struct rt_init_spec *in,
                        uint64_t seed, int index)
{
    double limit = 0.0;
    switch (in->kind) {
    case RT_INIT_CONST:
        for (size_t i = 0; i < count; i++)
            dst[i] = in->value;
        return;
    case RT_INIT_HE: /* variance 2 / ((1 + a^2) fan_in) = limit^2 / 3 */
        limit = sqrt(6.0 / ((1.0 + (double)in->alpha * in->alpha) * in->fan_in));
        break;
    case RT_INIT_AUTO: /* resolved at load; Glorot if it ever is not */
    case RT_INIT_GLOROT: /* variance 2 / (fan_in + fan_out) */
        limit = sqrt(6.0 / ((double)in->fan_in + in->fan_out));
        break;
    }
    rt_rng r;
    rt_rng_seed(&r, seed, (uint64_t)index);
    for (size_t i = 0; i < count; i++)
        dst[i] = (float)((2.0 * rt_rng_uniform(&r) - 1.0) * limit);
}

int rt_model_init(rt_model *m, uint64_t seed)
{
    RT_ASSERT(m);
    size_t np = rt_model_param_count(m), ns = rt_model_state_count(m);
    size_t n = np > ns ? np : ns;
    float *host = malloc((n ? n : 1) * sizeof *host);
    if (!host)
        return rt_error(RT_ERR_NOMEM, "out of host memory initialising %zu parameters", n);
    int rc = RT_OK;
    for (int pass = 0; pass < 2 && rc == RT_OK; pass++) {
        bool state = pass == 1;
        for (int i = 0; i < rt_model_tensor_count(m); i++) {
            struct rt_tensor_info t;
            rt_model_tensor_info(m, i, &t);
            if (t.state == state)
                fill_tensor(host + t.offset, t.count, rt_model_tensor_init(m, i), seed, i);
        }
        rt_view dst = state ? rt_model_state(m) : rt_model_params(m);
        rc = rt_upload(rt_model_dev(m), dst, host, (state ? ns : np) * sizeof *host);
    }
    if (rc == RT_OK)
        rc = rt_op_fill(rt_model_dev(m), np, 0.0f, rt_model_grads(m));
    free(host);
    return rc;
}
