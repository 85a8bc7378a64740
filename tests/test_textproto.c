/* test_textproto.c — the protobuf text-format reader (src/textproto.c):
 * what it builds from a prototxt, packed by protobuf-c, is byte for byte
 * what Google's own parser (protoc-c --encode, the protoc command line)
 * makes of the same text, for Caffe nets and for a text that uses every
 * syntax the format allows; and every malformed text is an error naming
 * FILE:LINE. */
#include "config.h"

#include "testutil.h"

#include "caffe.pb-c.h"
#include "status.h"
#include "textproto.h"

/* Every form the text format has: comments, both quotes, adjacent strings,
 * escapes, lists, `< >`, separators, hex / octal / signed / exponent /
 * 'f'-suffixed numbers, inf, booleans in all spellings, enums by name and
 * number, a nested repeated message list, the V1 layers. */
static const char syntax_text[] =
    "# comment at the top\n"
    "name: 'tor' \"ture\"   # adjacent strings, single quotes\n"
    "input: \"data\\t\\x41\\101\\n\\\"q\\\"\\\\\"\n"
    "input_dim: [1, 0x3, 010, 28]\n"
    "force_backward: t\n"
    "state < phase: TEST level: -2 stage: [\"a\", 'b'] >\n"
    "layer {\n"
    "  name: \"c\"; type: \"Convolution\",\n"
    "  bottom: \"data\" top: \"c\"\n"
    "  loss_weight: [1.5e-3f, -inf, 2, 1E+2, -0.25, inf]\n"
    "  param { lr_mult: 1 } param: { lr_mult: 2.0 decay_mult: 0 }\n"
    "  convolution_param { num_output: 4 kernel_size: [3, 3]\n"
    "                      weight_filler { type: \"xavier\" std: .5 } }\n"
    "  phase: TEST\n"
    "  propagate_down: [true, false, True, 0, f, False, 1]\n"
    "}\n"
    "layer { name: \"p\" type: \"Pooling\" pooling_param { pool: 1 } }\n"
    "layer { name: \"e\" type: \"Exp\" exp_param { base_: 2 scale: -1 }\n"
    "        include: [{ phase: TRAIN }, { min_level: 1 not_stage: \"x\" }] }\n"
    "layers { name: \"v1\" type: CONVOLUTION blobs_lr: 1 }\n"
    "layer{name:\"dense\"type:\"InnerProduct\"inner_product_param{num_output:10}}";

static const char lenet_deploy[] =
    "name: \"LeNet\"\n"
    "layer { name: \"data\" type: \"Input\" top: \"data\"\n"
    "  input_param { shape: { dim: 64 dim: 1 dim: 28 dim: 28 } } }\n"
    "layer { name: \"conv1\" type: \"Convolution\" bottom: \"data\" top: \"conv1\"\n"
    "  param { lr_mult: 1 } param { lr_mult: 2 }\n"
    "  convolution_param { num_output: 20 kernel_size: 5 stride: 1\n"
    "    weight_filler { type: \"xavier\" } bias_filler { type: \"constant\" } } }\n"
    "layer { name: \"pool1\" type: \"Pooling\" bottom: \"conv1\" top: \"pool1\"\n"
    "  pooling_param { pool: MAX kernel_size: 2 stride: 2 } }\n"
    "layer { name: \"ip1\" type: \"InnerProduct\" bottom: \"pool1\" top: \"ip1\"\n"
    "  inner_product_param { num_output: 500 } }\n"
    "layer { name: \"relu1\" type: \"ReLU\" bottom: \"ip1\" top: \"ip1\" }\n"
    "layer { name: \"prob\" type: \"Softmax\" bottom: \"ip1\" top: \"prob\" }\n";

static char *tmpdir;

static int setup(void **state)
{
    char tmpl[] = "/tmp/test_textproto.XXXXXX";
    char *d = mkdtemp(tmpl);
    if (!d)
        return -1;
    tmpdir = strdup(d);
    return 0;
}

static int teardown(void **state)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    int rc = system(cmd);
    free(tmpdir);
    return rc == 0 ? 0 : -1;
}

/* What protoc-c --encode makes of `text`; NULL when protoc-c is missing. */
static uint8_t *google_encode(const char *text, size_t *len)
{
    char in[512], out[512], cmd[2048];
    snprintf(in, sizeof in, "%s/in.prototxt", tmpdir);
    snprintf(out, sizeof out, "%s/out.bin", tmpdir);
    FILE *f = fopen(in, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "protoc-c --proto_path='%s/src' --encode=caffe.NetParameter "
             "caffe.proto <'%s' >'%s'", TOP_SRCDIR, in, out);
    if (system(cmd) != 0)
        return NULL;
    f = fopen(out, "rb");
    assert_non_null(f);
    uint8_t *buf = malloc(1 << 20);
    *len = fread(buf, 1, 1 << 20, f);
    fclose(f);
    return buf;
}

static void same_as_google(const char *text)
{
    size_t glen = 0;
    uint8_t *g = google_encode(text, &glen);
    if (!g) {
        print_message("protoc-c --encode failed (is protobuf-c-compiler installed?)\n");
        fail();
    }
    ProtobufCMessage *m = NULL;
    int rc = rt_textproto_parse(text, strlen(text), "t.prototxt",
                                &caffe__net_parameter__descriptor, &m);
    if (rc < 0)
        print_message("%s\n", rt_error_detail());
    assert_int_equal(rc, RT_OK);
    size_t len = protobuf_c_message_get_packed_size(m);
    uint8_t *mine = malloc(len + 1);
    protobuf_c_message_pack(m, mine);
    assert_int_equal(len, glen);
    assert_memory_equal(mine, g, len);
    free(mine);
    free(g);
    protobuf_c_message_free_unpacked(m, NULL);
}

static void test_syntax_as_google(void **state) { same_as_google(syntax_text); }
static void test_lenet_as_google(void **state) { same_as_google(lenet_deploy); }

/* What the structs hold, seen through the generated names. */
static void test_values(void **state)
{
    ProtobufCMessage *m = NULL;
    assert_int_equal(rt_textproto_parse(syntax_text, strlen(syntax_text), "t.prototxt",
                                        &caffe__net_parameter__descriptor, &m),
                     RT_OK);
    const Caffe__NetParameter *net = (const Caffe__NetParameter *)m;
    assert_string_equal(net->name, "torture");
    assert_string_equal(net->input[0], "data\tAA\n\"q\"\\");
    assert_int_equal(net->n_input_dim, 4);
    assert_int_equal(net->input_dim[1], 3);
    assert_int_equal(net->input_dim[2], 8);
    assert_int_equal(net->state->phase, CAFFE__PHASE__TEST);
    assert_int_equal(net->state->level, -2);
    assert_int_equal(net->n_layer, 4);
    const Caffe__LayerParameter *c = net->layer[0];
    assert_true(c->loss_weight[0] == 1.5e-3f && isinf(c->loss_weight[1]) && c->loss_weight[1] < 0);
    assert_int_equal(c->n_propagate_down, 7);
    assert_int_equal(c->convolution_param->n_kernel_size, 2);
    assert_true(c->convolution_param->weight_filler->std == 0.5f);
    assert_int_equal(net->layer[1]->pooling_param->pool,
                     CAFFE__POOLING_PARAMETER__POOL_METHOD__AVE);
    /* `base` of the schema's ExpParameter is base_ for protobuf-c */
    assert_true(net->layer[2]->exp_param->base_ == 2.0f);
    assert_int_equal(net->layer[2]->n_include, 2);
    assert_int_equal(net->n_layers, 1);
    protobuf_c_message_free_unpacked(m, NULL);

    const char alias[] = "layer { exp_param { base: 3 } }";
    assert_int_equal(rt_textproto_parse(alias, strlen(alias), "t.prototxt",
                                        &caffe__net_parameter__descriptor, &m),
                     RT_OK);
    assert_true(((Caffe__NetParameter *)m)->layer[0]->exp_param->base_ == 3.0f);
    protobuf_c_message_free_unpacked(m, NULL);
}

struct bad {
    const char *text, *where, *what;
};

static const struct bad bad_texts[] = {
    {"name: \"x\"\n\nlayr { }\n", "t.prototxt:3:", "unknown field 'layr' in caffe.NetParameter"},
    {"name \"x\"\n", "t.prototxt:1:", "expected ':' after name"},
    {"name: [\"x\"]\n", "t.prototxt:1:", "name is not a repeated field of caffe.NetParameter"},
    {"name: x\n", "t.prototxt:1:", "name takes a quoted string"},
    {"name: \"x\n\"\n", "t.prototxt:1:", "string not closed before the end of the line"},
    {"name: \"a\\qb\"\n", "t.prototxt:1:", "unknown escape '\\q'"},
    {"name: \"a\\777\"\n", "t.prototxt:1:", "larger than a byte"},
    {"layer {\n  name: \"x\"\n", "t.prototxt:1:", "'{' opened here (caffe.LayerParameter) is never closed"},
    {"layer <\n", "t.prototxt:1:", "'<' opened here"},
    {"layer { }\n}\n", "t.prototxt:2:", "unexpected '}'"},
    {"layer { name: \"x\" >\n", "t.prototxt:1:", "unexpected '>'"},
    {"layer: \"x\"\n", "t.prototxt:1:", "layer is a message: expected '{', found '\"'"},
    {"[caffe.ext]: 1\n", "t.prototxt:1:", "extensions and Any fields"},
    {"\n\nlayer { convolution_param { num_output: -1 } }\n", "t.prototxt:3:",
     "num_output: -1 is out of range (an unsigned 32-bit integer)"},
    {"layer { convolution_param { axis: 2147483648 } }\n", "t.prototxt:1:",
     "axis: 2147483648 is out of range (a signed 32-bit integer)"},
    {"layer { convolution_param { num_output: 3.5 } }\n", "t.prototxt:1:",
     "num_output: '3.5' is not an integer"},
    {"layer { loss_weight: 1.2.3 }\n", "t.prototxt:1:", "loss_weight: '1.2.3' is not a number"},
    {"layer { loss_weight: 1e39 }\n", "t.prototxt:1:", "loss_weight: 1e39 is out of range for a float"},
    {"force_backward: yes\n", "t.prototxt:1:", "force_backward: 'yes' is not a boolean"},
    {"layer { phase: TRIAN }\n", "t.prototxt:1:",
     "phase: 'TRIAN' is not a caffe.Phase (accepted: TRAIN, TEST)"},
    {"layer { phase: 7 }\n", "t.prototxt:1:", "phase: '7' is not a caffe.Phase"},
    {"name: \"a\"\n# twice\nname: \"b\"\n", "t.prototxt:3:", "'name' is given twice"},
    {"layer { convolution_param { } convolution_param { } }\n", "t.prototxt:1:",
     "'convolution_param' is given twice"},
    {"input_dim: [1, 2\n", "t.prototxt:2:", "in the list of input_dim: expected ',' or ']'"},
    {"input_dim: \n", "t.prototxt:2:", "input_dim: expected a value, found the end of the file"},
    {"3: 4\n", "t.prototxt:1:", "expected a field name of caffe.NetParameter, found 3"},
};

static void test_errors(void **state)
{
    for (size_t i = 0; i < sizeof bad_texts / sizeof bad_texts[0]; i++) {
        const struct bad *b = &bad_texts[i];
        ProtobufCMessage *m = (ProtobufCMessage *)1;
        int rc = rt_textproto_parse(b->text, strlen(b->text), "t.prototxt",
                                    &caffe__net_parameter__descriptor, &m);
        const char *d = rt_error_detail();
        if (rc != RT_ERR_FORMAT || strncmp(d, b->where, strlen(b->where)) != 0 ||
            !strstr(d, b->what))
            print_message("text %zu: %s\n  got rc %d: %s\n  expected %s ... %s\n", i, b->text,
                          rc, d, b->where, b->what);
        assert_int_equal(rc, RT_ERR_FORMAT);
        assert_null(m);
        assert_memory_equal(d, b->where, strlen(b->where));
        assert_non_null(strstr(d, b->what));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_syntax_as_google),
        cmocka_unit_test(test_lenet_as_google),
        cmocka_unit_test(test_values),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
