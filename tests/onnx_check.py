#!/usr/bin/env python3
"""Helpers of tests/test_onnx.sh (one subcommand per step; each exits 1 with
a message on a failed check).

  data FMNIST_DIR OUT.csv N          the first N Fashion-MNIST test images as a
                                     ragtag CSV (label, 784 pixels)
  perturb IN.safetensors OUT         random batch-norm statistics and affine
                                     parameters, so that export must carry them
  ort MODEL.onnx DATA.csv LOGITS.csv run MODEL.onnx in onnxruntime on the images
                                     (normalised as ragtag does) and compare its
                                     "logits" with ragtag's --logits file (1e-4);
                                     the ONNX checker must pass
  check MODEL.onnx                   onnx.checker.check_model only
  torch DATA.csv OUTDIR              a small CNN (conv + bn + relu + pool +
                                     residual add + dense) trained briefly in
                                     PyTorch, exported to OUTDIR/torch.onnx; its
                                     logits on the images in OUTDIR/torch.csv
  compare A.csv B.csv                two logits files agree within 1e-4
  unsupported OUT.onnx OP            a model whose second node is OP (Sin, LSTM)
  badconv OUT.onnx ATTR              a Conv with dilations 2, asymmetric pads or
                                     group 2 (ATTR: dilations, pads, group)
  matmul OUT.onnx DATA.csv LOGITS.csv  MatMul + Add, Reshape, Dropout, a 2-D batch
                                     norm, Sigmoid, Tanh, Identity, Constant,
                                     Softmax; its logits by numpy
  shortdata OUT.onnx                 a Conv weight holding fewer values than its dims
  same A.safetensors B.safetensors NAME...   the named tensors are equal
  differ A.safetensors B.safetensors NAME... the named tensors differ
"""
import json
import struct
import sys

import numpy as np

TOL = 1e-4


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def read_st(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    head = json.loads(raw[8:8 + n])
    meta = head.pop("__metadata__", {})
    out = {}
    for name, t in head.items():
        a, b = t["data_offsets"]
        assert t["dtype"] == "F32", t
        out[name] = np.frombuffer(raw[8 + n + a:8 + n + b], dtype="<f4").reshape(t["shape"])
    return out, meta


def write_st(path, tensors, meta):
    head, off, blobs = {}, 0, []
    for name, a in tensors.items():
        b = np.ascontiguousarray(a, dtype="<f4").tobytes()
        head[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    if meta:
        head["__metadata__"] = meta
    h = json.dumps(head).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_csv_images(path):
    rows = np.loadtxt(path, delimiter=",", dtype=np.float64, ndmin=2)
    return rows[:, 0].astype(np.int64), rows[:, 1:]


def normalised(path, shape=(1, 28, 28)):
    """The images as ragtag feeds them: v/255, minus the mean, over the std
    of the training set (here the same file: csv:F,F)."""
    labels, pix = read_csv_images(path)
    x = (pix.astype(np.float32) / np.float32(255.0))
    mean = x.astype(np.float64).mean()
    std = np.sqrt(max((x.astype(np.float64) ** 2).mean() - mean * mean, 0.0))
    x = (x - np.float32(mean)) / np.float32(std)
    return labels, x.reshape((-1,) + shape).astype(np.float32)


def read_logits(path):
    return np.loadtxt(path, delimiter=",", dtype=np.float64, ndmin=2)


def compare(a, b, what):
    if a.shape != b.shape:
        fail(f"{what}: shapes {a.shape} and {b.shape}")
    d = float(np.abs(a - b).max())
    print(f"{what}: {a.shape[0]} images, max |difference| {d:.3g} (tolerance {TOL})")
    if not d <= TOL:
        fail(f"{what}: logits differ by {d}")


def cmd_data(src, out, n):
    import gzip
    n = int(n)
    with gzip.open(f"{src}/t10k-images-idx3-ubyte.gz") as f:
        img = np.frombuffer(f.read(), dtype=np.uint8, offset=16).reshape(-1, 784)[:n]
    with gzip.open(f"{src}/t10k-labels-idx1-ubyte.gz") as f:
        lab = np.frombuffer(f.read(), dtype=np.uint8, offset=8)[:n]
    np.savetxt(out, np.column_stack([lab, img]), fmt="%d", delimiter=",")


def cmd_perturb(src, out):
    t, meta = read_st(src)
    rng = np.random.default_rng(7)
    for name in list(t):
        a = t[name]
        if name.endswith("running_mean") or name.endswith("bn.bias") or \
                (name.startswith("bn") and name.endswith(".bias")):
            t[name] = rng.normal(0, 0.3, a.shape).astype(np.float32)
        elif name.endswith("running_var"):
            t[name] = rng.uniform(0.5, 2.0, a.shape).astype(np.float32)
        elif name.endswith("bn.weight") or (name.startswith("bn") and name.endswith(".weight")):
            t[name] = rng.uniform(0.5, 1.5, a.shape).astype(np.float32)
    write_st(out, t, meta)


def cmd_check(model):
    import onnx
    m = onnx.load(model)
    onnx.checker.check_model(m, full_check=True)
    print(f"{model}: onnx.checker passes (opset {m.opset_import[0].version}, "
          f"{len(m.graph.node)} nodes)")


def cmd_ort(model, data, logits):
    import onnxruntime as ort
    _, x = normalised(data)
    s = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    got = s.run(["logits"], {"input": x})[0].astype(np.float64)
    compare(got, read_logits(logits), f"onnxruntime {ort.__version__} vs ragtag eval")


class Net:
    """Built inside torch() so that importing this file needs no torch."""


def cmd_torch(data, outdir):
    import torch
    import torch.nn as nn

    torch.manual_seed(3)

    class Block(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.c1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
            self.b1 = nn.BatchNorm2d(c)
            self.c2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
            self.b2 = nn.BatchNorm2d(c)

        def forward(self, x):
            y = torch.relu(self.b1(self.c1(x)))
            return torch.relu(self.b2(self.c2(y)) + x)

    net = nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
        nn.MaxPool2d(2), Block(8), nn.AvgPool2d(2), nn.Flatten(),
        nn.Linear(8 * 7 * 7, 32), nn.LeakyReLU(0.1), nn.Dropout(0.25), nn.Linear(32, 10))
    labels, x = normalised(data)
    xt, yt = torch.from_numpy(x), torch.from_numpy(labels)
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    net.train()
    for step in range(30):  # brief: enough to move every weight and statistic
        i = torch.randint(0, len(x), (32,))
        opt.zero_grad()
        loss = nn.functional.cross_entropy(net(xt[i]), yt[i])
        loss.backward()
        opt.step()
    net.eval()
    with torch.no_grad():
        out = net(xt).double().numpy()
    np.savetxt(f"{outdir}/torch.csv", out, fmt="%.9g", delimiter=",")
    # PRESERVE keeps BatchNormalization nodes (EVAL would fold them into Conv)
    torch.onnx.export(net, xt[:1], f"{outdir}/torch.onnx", input_names=["input"],
                      output_names=["logits"], dynamic_axes={"input": {0: "N"}},
                      opset_version=13, training=torch.onnx.TrainingMode.PRESERVE,
                      do_constant_folding=False)
    import onnx
    ops = sorted({n.op_type for n in onnx.load(f"{outdir}/torch.onnx").graph.node})
    print(f"torch {torch.__version__}: loss {loss.item():.3f} after 30 steps; "
          f"exported ops: {', '.join(ops)}")


def cmd_compare(a, b):
    compare(read_logits(a), read_logits(b), f"{a} vs {b}")


def cmd_unsupported(out, op):
    import onnx
    from onnx import TensorProto, helper
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, [None, 1, 28, 28])
    y = helper.make_tensor_value_info("logits", TensorProto.FLOAT, [None, 10])
    nodes = [helper.make_node("Relu", ["input"], ["r"], name="first_relu")]
    inits = []
    if op == "LSTM":
        inits = [helper.make_tensor("W", TensorProto.FLOAT, [1, 4, 28],
                                    np.zeros(4 * 28, np.float32)),
                 helper.make_tensor("R", TensorProto.FLOAT, [1, 4, 1], np.zeros(4, np.float32))]
        nodes.append(helper.make_node("Flatten", ["r"], ["f"], name="flat", axis=1))
        nodes.append(helper.make_node("LSTM", ["f", "W", "R"], ["logits"], name="the_lstm",
                                      hidden_size=1))
    else:
        nodes.append(helper.make_node(op, ["r"], ["logits"], name="odd_node"))
    g = helper.make_graph(nodes, "unsupported", [x], [y], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), out)


def cmd_badconv(out, attr):
    """A Conv node 'odd_conv' with one attribute ragtag cannot express."""
    import onnx
    from onnx import TensorProto, helper
    bad = {"dilations": [2, 2], "pads": [0, 0, 1, 1], "group": 2}
    c = 2 if attr == "group" else 1
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, [None, c, 28, 28])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    cin = 1 if attr == "group" else c
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, cin, 3, 3], np.ones(36 * cin, np.float32))
    n = helper.make_node("Conv", ["input", "w"], ["y"], name="odd_conv", **{attr: bad[attr]})
    g = helper.make_graph([n], "dilated", [x], [y], [w])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), out)


def cmd_shortdata(out):
    """A Conv whose weight tensor 'w' says 4x1x3x3 but holds 10 floats."""
    import onnx
    from onnx import TensorProto, helper
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, [None, 1, 28, 28])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 1, 3, 3], np.ones(36, np.float32))
    w.ClearField("float_data")  # the helper checks the count: cut it afterwards
    w.raw_data = np.ones(10, np.float32).tobytes()
    n = helper.make_node("Conv", ["input", "w"], ["y"], name="short_conv")
    g = helper.make_graph([n], "short", [x], [y], [w])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), out)


def cmd_matmul(out, data, logits_out):
    """A graph of the operators torch's exporter does not write for a CNN:
    Constant shape -> Reshape -> MatMul + Add -> Tanh -> Dropout (ratio
    input) -> BatchNormalization on N x 16 -> Sigmoid -> Identity -> MatMul +
    Add -> Softmax; its logits computed here with numpy, independently."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(11)
    w1 = rng.normal(0, 0.05, (784, 16)).astype(np.float32)
    b1 = rng.normal(0, 0.1, 16).astype(np.float32)
    g, be = rng.uniform(0.5, 1.5, 16).astype(np.float32), rng.normal(0, .2, 16).astype(np.float32)
    mu, var = rng.normal(0, .2, 16).astype(np.float32), rng.uniform(.5, 2, 16).astype(np.float32)
    w2 = rng.normal(0, 0.3, (16, 10)).astype(np.float32)
    b2 = rng.normal(0, 0.1, 10).astype(np.float32)
    inits = [numpy_helper.from_array(a, n) for a, n in
             [(w1, "w1"), (b1, "b1"), (g, "g"), (be, "be"), (mu, "mu"), (var, "var"),
              (w2, "w2"), (b2, "b2"), (np.array(0.2, np.float32), "ratio")]]
    shape = helper.make_tensor("shape_value", TensorProto.INT64, [2], [0, 784])
    nodes = [
        helper.make_node("Constant", [], ["shape"], name="shape", value=shape),
        helper.make_node("Reshape", ["input", "shape"], ["flat"], name="reshape"),
        helper.make_node("MatMul", ["flat", "w1"], ["m1"], name="mm1"),
        helper.make_node("Add", ["m1", "b1"], ["a1"], name="bias1"),
        helper.make_node("Tanh", ["a1"], ["t1"], name="tanh1"),
        helper.make_node("Dropout", ["t1", "ratio"], ["d1"], name="drop1"),
        helper.make_node("BatchNormalization", ["d1", "g", "be", "mu", "var"], ["bn1"],
                         name="bn1", epsilon=1e-3, momentum=0.8),
        helper.make_node("Sigmoid", ["bn1"], ["s1"], name="sig1"),
        helper.make_node("Identity", ["s1"], ["i1"], name="same"),
        helper.make_node("MatMul", ["i1", "w2"], ["m2"], name="mm2"),
        helper.make_node("Add", ["b2", "m2"], ["logits"], name="bias2"),
        helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=-1)]
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 1, 28, 28])
    y = helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["N", 10])
    gr = helper.make_graph(nodes, "matmul", [x], [y], inits)
    m = helper.make_model(gr, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(m)
    onnx.save(m, out)
    _, xs = normalised(data)
    h = np.tanh(xs.reshape(len(xs), -1).astype(np.float64) @ w1 + b1)
    h = (h - mu) / np.sqrt(var.astype(np.float64) + 1e-3) * g + be
    h = 1 / (1 + np.exp(-h))
    np.savetxt(logits_out, h @ w2 + b2, fmt="%.9g", delimiter=",")


def tensors_cmp(a, b, names, want_same):
    ta, _ = read_st(a)
    tb, _ = read_st(b)
    for n in names:
        if n not in ta or n not in tb:
            fail(f"tensor {n} missing from {a if n not in ta else b}")
        same = np.array_equal(ta[n], tb[n])
        if same != want_same:
            fail(f"tensor {n} {'changed' if want_same else 'did not change'} ({a} -> {b})")
    print(f"{len(names)} tensors {'unchanged' if want_same else 'changed'}: {' '.join(names)}")


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    table = {"data": cmd_data, "perturb": cmd_perturb, "check": cmd_check, "ort": cmd_ort,
             "torch": cmd_torch, "compare": cmd_compare, "unsupported": cmd_unsupported,
             "badconv": cmd_badconv, "shortdata": cmd_shortdata, "matmul": cmd_matmul,
             "same": lambda a, b, *n: tensors_cmp(a, b, n, True),
             "differ": lambda a, b, *n: tensors_cmp(a, b, n, False)}
    table[cmd](*args)


if __name__ == "__main__":
    main()
