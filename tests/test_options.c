/* test_options.c — the option table (src/options.def): every option set
 * from text, sent to a worker by rt_train_config_each and read back there
 * gives the same field, bit for bit; options that stay local are not sent;
 * bad values are refused naming the key and what is accepted; the table's
 * enum names agree with the optimiser's. The table is expanded here on its
 * own, so a generated function that forgot an option fails. */
#include "testutil.h"

#include <limits.h>
#include <stdbool.h>

#include "status.h"
#include "train.h"

enum type { FLOAT, FLOAT_GT, INT, LONG, U64, BOOL, STR, ENUM };
enum workers { WORKERS, IF_SET, LOCAL };

struct opt {
    const char *usage, *help;
    enum type type;
    enum workers workers;
    size_t off, size;
    double lo, hi;
    const char *const *names;
};

#define RT_NAMES(...) ((const char *const[]){__VA_ARGS__, NULL})
static const struct opt opts[] = {
#define RT_OPTION(usage_, type_, field_, def_, lo_, hi_, names_, workers_, help_)             \
    {.usage = usage_, .help = help_, .type = type_, .workers = workers_,                       \
     .off = offsetof(struct rt_train_config, field_),                                          \
     .size = sizeof(((struct rt_train_config *)0)->field_), .lo = (double)(lo_),               \
     .hi = (double)(hi_), .names = names_},
#include "options.def"
#undef RT_OPTION
};
#define N_OPTS ((int)(sizeof opts / sizeof opts[0]))

static const char *key_of(const struct opt *o, char *k, size_t n)
{
    size_t len = strcspn(o->usage + 2, " ");
    assert_true(len < n);
    for (size_t i = 0; i < len; i++)
        k[i] = o->usage[2 + i] == '-' ? '_' : o->usage[2 + i];
    k[len] = '\0';
    return k;
}

static int n_names(const struct opt *o)
{
    int n = 0;
    while (o->names[n])
        n++;
    return n;
}

/* A valid value other than the default, as text. */
static void sample(const struct opt *o, const char *key, char *v, size_t n,
                   const struct rt_train_config *def)
{
    switch (o->type) {
    case FLOAT:
    case FLOAT_GT:
        snprintf(v, n, "%.17g", o->lo + (o->hi - o->lo) / 3.0);
        break;
    case INT:
    case LONG:
        snprintf(v, n, "%ld", (long)(o->lo + (o->hi - o->lo) / 3.0));
        break;
    case U64:
        snprintf(v, n, "18446744073709551615");
        break;
    case BOOL:
        /* the other value than the default (--overlap is on) */
        snprintf(v, n, "%s", *(const bool *)((const char *)def + o->off) ? "no" : "yes");
        break;
    case STR:
        snprintf(v, n, "/some/%s", key);
        break;
    case ENUM:
        snprintf(v, n, "%s", o->names[n_names(o) - 1]); /* the default is the first */
        break;
    }
}

struct sink {
    struct rt_train_config *c;
    char keys[RT_TRAIN_OPTIONS_MAX][32];
    int n;
};

static int receive(void *arg, const char *key, const char *value)
{
    struct sink *s = arg;
    assert_true(s->n < RT_TRAIN_OPTIONS_MAX);
    snprintf(s->keys[s->n++], sizeof s->keys[0], "%s", key);
    assert_true(rt_train_config_is_sent(key));
    assert_int_equal(rt_train_config_set(s->c, key, value, "the coordinator's job"), RT_OK);
    return RT_OK;
}

static bool was_sent(const struct sink *s, const char *key)
{
    int times = 0;
    for (int i = 0; i < s->n; i++)
        times += !strcmp(s->keys[i], key);
    assert_true(times <= 1);
    return times == 1;
}

static void test_every_option_round_trips(void **state)
{
    (void)state;
    struct rt_train_config def, a, b;
    rt_train_config_defaults(&def);
    rt_train_config_defaults(&a);
    char k[32], v[64];
    for (int i = 0; i < N_OPTS; i++) {
        sample(&opts[i], key_of(&opts[i], k, sizeof k), v, sizeof v, &def);
        assert_int_equal(rt_train_config_set(&a, k, v, "test"), RT_OK);
        /* the value landed in the field the table names, and only there */
        assert_memory_not_equal((char *)&a + opts[i].off, (char *)&def + opts[i].off,
                                opts[i].size);
    }
    rt_train_config_defaults(&b);
    struct sink s = {.c = &b};
    assert_int_equal(rt_train_config_each(&a, receive, &s), RT_OK);
    int sent = 0;
    for (int i = 0; i < N_OPTS; i++) {
        const struct opt *o = &opts[i];
        key_of(o, k, sizeof k);
        bool local = o->workers == LOCAL;
        assert_int_equal(was_sent(&s, k), !local);
        assert_int_equal(rt_train_config_is_sent(k), !local);
        sent += !local;
        /* a worker has the field bit for bit, or its own default */
        assert_memory_equal((char *)&b + o->off, (char *)(local ? &def : &a) + o->off, o->size);
    }
    assert_int_equal(s.n, sent);

    /* an unset IF_SET option (its default is out of range) is not sent */
    rt_train_config_defaults(&b);
    s = (struct sink){.c = &b};
    assert_int_equal(rt_train_config_each(&def, receive, &s), RT_OK);
    for (int i = 0; i < N_OPTS; i++)
        if (opts[i].workers == IF_SET)
            assert_false(was_sent(&s, key_of(&opts[i], k, sizeof k)));
    assert_memory_equal(&b, &def, sizeof b);
}

/* Each float option at its upper bound reaches a worker: the job carries
 * the float as 9 digits (--clip-norm 1e30 went as 1.00000002e+30, past the
 * bound as a double, and every worker refused the job). */
static void test_float_bounds_reach_workers(void **state)
{
    (void)state;
    char k[32], v[64];
    int tried = 0;
    for (int i = 0; i < N_OPTS; i++) {
        const struct opt *o = &opts[i];
        if ((o->type != FLOAT && o->type != FLOAT_GT) || o->workers == LOCAL || o->hi >= 1e300)
            continue;
        struct rt_train_config a, b;
        rt_train_config_defaults(&a);
        rt_train_config_defaults(&b);
        snprintf(v, sizeof v, "%.17g", o->hi);
        assert_int_equal(rt_train_config_set(&a, key_of(o, k, sizeof k), v, "test"), RT_OK);
        struct sink s = {.c = &b};
        assert_int_equal(rt_train_config_each(&a, receive, &s), RT_OK);
        assert_memory_equal((char *)&b + o->off, (char *)&a + o->off, o->size);
        tried++;
    }
    assert_true(tried > 0);
}

/* A value that is 0 as a float is refused where 0 is not accepted: --lr
 * 1e-46 was taken, stored as 0, the "not given" of an IF_SET option, and
 * the model file's lr trained instead, silently. */
static void test_values_that_round_to_an_open_bound(void **state)
{
    (void)state;
    char k[32];
    int tried = 0;
    for (int i = 0; i < N_OPTS; i++) {
        const struct opt *o = &opts[i];
        if (o->type != FLOAT_GT || o->lo != 0.0)
            continue;
        struct rt_train_config c;
        rt_train_config_defaults(&c);
        assert_int_equal(rt_train_config_set(&c, key_of(o, k, sizeof k), "1e-46", "--flag"),
                         RT_ERR_CONFIG);
        assert_non_null(strstr(rt_error_detail(), "'1e-46' is not accepted (expected a number "
                                                   "in (0,"));
        tried++;
    }
    assert_true(tried > 0);
}

/* A value out of range or of the wrong kind is refused with what is accepted. */
static void test_bad_values_are_refused(void **state)
{
    (void)state;
    struct rt_train_config c, def;
    rt_train_config_defaults(&def);
    char k[32], want[160];
    for (int i = 0; i < N_OPTS; i++) {
        const struct opt *o = &opts[i];
        key_of(o, k, sizeof k);
        const char *bad = o->type == STR ? "" : o->type == INT ? "2147483648"
                          : o->type == LONG ? "9223372036854775808" : o->type == U64 ? "-1"
                          : o->type == FLOAT || o->type == FLOAT_GT ? "1e31" : "nosuch";
        rt_train_config_defaults(&c);
        assert_int_equal(rt_train_config_set(&c, k, bad, "--flag"), RT_ERR_CONFIG);
        snprintf(want, sizeof want, "--flag: %s: '%s' is not accepted (expected ", k, bad);
        assert_non_null(strstr(rt_error_detail(), want));
        assert_memory_equal(&c, &def, sizeof c);
        if (o->type == FLOAT_GT) { /* the lower bound is excluded */
            snprintf(want, sizeof want, "%g", o->lo);
            assert_int_equal(rt_train_config_set(&c, k, want, "--flag"), RT_ERR_CONFIG);
        }
        if (o->type == ENUM) { /* the names, in the table's order */
            snprintf(want, sizeof want, "%s or %s)", o->names[n_names(o) - 2],
                     o->names[n_names(o) - 1]);
            assert_non_null(strstr(rt_error_detail(), want));
        }
    }
    assert_int_equal(rt_train_config_set(&c, "weight-decay", "1e-4", "x"), RT_OK);
    assert_int_equal(rt_train_config_set(&c, "bogus", "1", "x.cfg:3"), RT_ERR_CONFIG);
    assert_string_equal(rt_error_detail(),
                        "x.cfg:3: unknown training option 'bogus' (see ragtag train --help)");
}

static void test_lookups_and_help(void **state)
{
    (void)state;
    char k[32], flag[32];
    for (int i = 0; i < N_OPTS; i++) {
        const struct opt *o = &opts[i];
        key_of(o, k, sizeof k);
        snprintf(flag, sizeof flag, "%.*s", (int)strcspn(o->usage + 2, " "), o->usage + 2);
        assert_true(rt_train_config_known(k));
        assert_true(rt_train_config_known(flag)); /* "weight-decay" as well as "weight_decay" */
        assert_int_equal(rt_train_config_is_bool(k), o->type == BOOL);
        assert_int_equal(rt_train_config_is_bool(flag), o->type == BOOL);
        assert_string_equal(rt_train_option_help[2 * i], o->usage);
        assert_string_equal(rt_train_option_help[2 * i + 1], o->help);
    }
    assert_null(rt_train_option_help[2 * N_OPTS]);
    assert_false(rt_train_config_known("throttle")); /* a cluster flag, not an option */
    assert_false(rt_train_config_known("workers"));
    assert_true(N_OPTS <= RT_TRAIN_OPTIONS_MAX);
}

/* The names in options.def are those the optimiser and the driver use. */
static void test_enum_names_agree(void **state)
{
    (void)state;
    char k[32];
    int checked = 0;
    for (int i = 0; i < N_OPTS; i++) {
        const struct opt *o = &opts[i];
        key_of(o, k, sizeof k);
        if (!strcmp(k, "optimizer")) {
            for (int e = 0; e < n_names(o); e++)
                assert_string_equal(o->names[e], rt_optim_kind_name((enum rt_optim_kind)e));
            assert_string_equal(rt_optim_kind_name((enum rt_optim_kind)n_names(o)), "?");
            checked++;
        }
        if (!strcmp(k, "schedule")) {
            for (int e = 0; e < n_names(o); e++)
                assert_string_equal(o->names[e], rt_sched_kind_name((enum rt_sched_kind)e));
            assert_string_equal(rt_sched_kind_name((enum rt_sched_kind)n_names(o)), "?");
            checked++;
        }
    }
    assert_int_equal(checked, 2);
    assert_string_equal(rt_train_mode_name(RT_MODE_GOSSIP), "gossip");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_option_round_trips),
        cmocka_unit_test(test_float_bounds_reach_workers),
        cmocka_unit_test(test_values_that_round_to_an_open_bound),
        cmocka_unit_test(test_bad_values_are_refused),
        cmocka_unit_test(test_lookups_and_help),
        cmocka_unit_test(test_enum_names_agree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
