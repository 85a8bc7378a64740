#!/usr/bin/env python3
"""caffe_check.py — helper of tests/test_caffe.sh (Python 3, standard library).

  caffe_check.py blobs OUT.txt
      writes the blobs of the test's small BatchNorm / Scale / Eltwise net as
      a text-format caffe.NetParameter (protoc-c --encode makes the binary
      .caffemodel from it), with values chosen to show Caffe's conventions:
      a BatchNorm scale factor of 0.5, an InnerProduct with transpose, a
      bias in the legacy num/channels/height/width form.
  caffe_check.py check NET.safetensors
      checks the tensors `ragtag import` made from them, by ragtag's names.
  caffe_check.py same A.safetensors B.safetensors
      the model tensors of two checkpoints are bitwise equal.
"""
import array
import json
import struct
import sys


def values(n, seed):
    """n distinct values k/64, exactly representable as float32."""
    return [(k - n // 2 + seed * 100) / 64.0 for k in range(n)]


def f32(v):
    return [struct.unpack("<f", struct.pack("<f", x))[0] for x in v]


CONV1_W = values(2 * 1 * 3 * 3, 1)          # (2, 1, 3, 3)
BN_MEAN, BN_VAR, BN_SF = [1.5, -3.0], [2.0, 4.5], 0.5
GAMMA, BETA = [0.5, 2.0], [0.125, -0.25]
CONV2_W = values(2 * 2 * 3 * 3, 2)          # (2, 2, 3, 3)
CONV2_B = [0.75, -0.5]
IP_W_IN_OUT = values(2 * 10, 3)             # transpose: true stores (in = 2, out = 10)
IP_B = values(10, 4)


def blob(shape, data, legacy=False):
    data = " ".join("data: %r" % float(v) for v in data)
    if legacy:  # Caffe's old 4-D form: num, channels, height, width
        dims = [1] * (4 - len(shape)) + list(shape)
        return "blobs { num: %d channels: %d height: %d width: %d %s }" % (*dims, data)
    return "blobs { shape { %s } %s }" % (" ".join("dim: %d" % d for d in shape), data)


def write_blobs(path):
    layers = [
        ("conv1", "Convolution", [blob((2, 1, 3, 3), CONV1_W)]),
        ("bn1", "BatchNorm", [blob((2,), BN_MEAN), blob((2,), BN_VAR), blob((1,), [BN_SF])]),
        ("scale1", "Scale", [blob((2,), GAMMA), blob((2,), BETA)]),
        ("conv2", "Convolution", [blob((2, 2, 3, 3), CONV2_W), blob((2,), CONV2_B)]),
        ("ip", "InnerProduct", [blob((2, 10), IP_W_IN_OUT), blob((10,), IP_B, legacy=True)]),
    ]
    with open(path, "w") as f:
        f.write('name: "tiny"\n')
        for name, typ, blobs in layers:
            f.write('layer { name: "%s" type: "%s" %s }\n' % (name, typ, " ".join(blobs)))


def read_safetensors(path):
    """name -> (shape, raw little-endian F32 bytes) of the model tensors."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__" or name.startswith("optimizer."):
            continue
        assert t["dtype"] == "F32", (name, t["dtype"])
        a, b = t["data_offsets"]
        out[name] = (list(t["shape"]), raw[8 + n + a:8 + n + b])
    return out


def floats(raw):
    a = array.array("f")
    a.frombytes(raw)
    if sys.byteorder != "little":
        a.byteswap()
    return list(a)


def check(path):
    t = read_safetensors(path)
    transposed = [IP_W_IN_OUT[i * 10 + o] for o in range(10) for i in range(2)]
    expect = {
        "conv1.weight": ([2, 1, 3, 3], CONV1_W),
        "conv1.bias": ([2], [0.0, 0.0]),  # bias_term: false
        "bn2.running_mean": ([2], [m / BN_SF for m in BN_MEAN]),
        "bn2.running_var": ([2], [v / BN_SF for v in BN_VAR]),
        "bn2.weight": ([2], GAMMA),
        "bn2.bias": ([2], BETA),
        "conv4.weight": ([2, 2, 3, 3], CONV2_W),
        "conv4.bias": ([2], CONV2_B),
        "dense9.weight": ([10, 2], transposed),
        "dense9.bias": ([10], IP_B),
    }
    if sorted(t) != sorted(expect):
        print("FAIL: tensors %s, expected %s" % (sorted(t), sorted(expect)))
        return 1
    bad = 0
    for name, (shape, want) in expect.items():
        got = floats(t[name][1])
        if t[name][0] != shape or got != f32(want):
            print("FAIL: %s is %s %s..., expected %s %s..." % (name, t[name][0], got[:6], shape,
                                                             want[:6]))
            bad += 1
    print("%s: %d of %d tensors as Caffe's conventions make them" % (path, len(expect) - bad,
                                                                    len(expect)))
    return 1 if bad else 0


def same(a, b):
    ta, tb = read_safetensors(a), read_safetensors(b)
    if sorted(ta) != sorted(tb):
        print("FAIL: %s has %s, %s has %s" % (a, sorted(ta), b, sorted(tb)))
        return 1
    diff = [k for k in ta if ta[k] != tb[k]]
    for k in diff:
        print("FAIL: %s differs" % k)
    if not diff:
        print("%s and %s: %d tensors bitwise equal" % (a, b, len(ta)))
    return 1 if diff else 0


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "blobs":
        write_blobs(sys.argv[2])
        sys.exit(0)
    sys.exit(check(sys.argv[2]) if cmd == "check" else same(sys.argv[2], sys.argv[3]))
