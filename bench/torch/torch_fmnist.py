#!/usr/bin/python3
"""PyTorch CPU anchor: train LeNet-5, the Dist-Keras "seed" CNN or ResNet-8 on Fashion-MNIST.

A copy of ../shared/bench/torch_fmnist.py (the peers' directory, which ragtag
does not edit) with resnet8 added (examples/resnet8.cfg, torch_fmnist_models.py).

Prints one JSON line per epoch:
  {"kind":"epoch", model, threads, batch, epoch, train_seconds, images_per_s,
   test_acc, loss, cum_train_seconds, wall_seconds, ...}
then one {"kind":"summary", ...} line with time-to-target accuracy.
With --infer it instead prints {"kind":"infer", ...}: pure forward throughput
(eval mode, no_grad) over the 10k test images at --infer-batch (default 256).

Run with Debian's interpreter (/usr/bin/python3) for python3-torch, or with a
virtual environment's python for PyTorch from PyPI (bench/bench_train.sh makes
one).
"""
import argparse
import json
import os
import resource
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("--model", choices=["lenet", "seedcnn", "resnet8"], default="lenet")
p.add_argument("--threads", type=int, default=1)
p.add_argument("--blas-threads", type=int, default=0,
               help="OPENBLAS_NUM_THREADS (default: same as --threads)")
p.add_argument("--batch", type=int, default=64)
p.add_argument("--lr", type=float, default=0.05)
p.add_argument("--momentum", type=float, default=0.9)
p.add_argument("--epochs", type=int, default=5)
p.add_argument("--seed", type=int, default=1234)
p.add_argument("--target", type=float, default=None,
               help="test-acc target; default 0.90 lenet / 0.91 seedcnn")
p.add_argument("--train-limit", type=int, default=0,
               help="use only the first N training images (0 = all 60000)")
p.add_argument("--infer", action="store_true", help="inference throughput only")
p.add_argument("--infer-batch", type=int, default=256)
p.add_argument("--infer-reps", type=int, default=3,
               help="timed passes over the 10k test set (after 1 warm-up pass)")
p.add_argument("--data-dir", default=None)
p.add_argument("--tag", default="", help="free-form label copied into the JSON")
args = p.parse_args()

# Pin every thread pool BEFORE torch/numpy load: torch.set_num_threads does not
# reach OpenBLAS's own pthread pool (used by torch's addmm when libblas.so.3 is
# OpenBLAS), so without this a "1-thread" run could use 2 BLAS threads.
for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = str(args.threads)
os.environ["OPENBLAS_NUM_THREADS"] = str(args.blas_threads or args.threads)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import fmnist_data  # noqa: E402
from torch_fmnist_models import MODELS, blas_lib, evaluate  # noqa: E402


def main():
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    xtr, ytr, xte, yte, _ = fmnist_data.load(args.data_dir or fmnist_data.DEFAULT_DIR)
    if args.train_limit:
        xtr, ytr = xtr[:args.train_limit], ytr[:args.train_limit]
    xtr, ytr = torch.from_numpy(xtr), torch.from_numpy(ytr)
    xte, yte = torch.from_numpy(xte), torch.from_numpy(yte)
    model = MODELS[args.model]()
    nparams = sum(p.numel() for p in model.parameters())
    common = {"model": args.model, "threads": args.threads,
              "blas_threads": int(os.environ["OPENBLAS_NUM_THREADS"]), "torch": torch.__version__,
              "blas": blas_lib(), "params": nparams, "tag": args.tag,
              "malloc_tunables": os.environ.get("GLIBC_TUNABLES", "")}

    if args.infer:
        model.eval()
        bs = args.infer_batch
        with torch.no_grad():
            for i in range(0, xte.shape[0], bs):  # warm-up pass
                model(xte[i:i + bs])
            flt0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            t0 = time.perf_counter()
            for _ in range(args.infer_reps):
                for i in range(0, xte.shape[0], bs):
                    model(xte[i:i + bs])
            dt = time.perf_counter() - t0
            faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - flt0
        n = args.infer_reps * xte.shape[0]
        print(json.dumps(dict(kind="infer", batch=bs, images=n, seconds=round(dt, 3),
                              images_per_s=round(n / dt, 1), minor_faults=faults,
                              **common)), flush=True)
        return

    target = args.target if args.target is not None else (0.90 if args.model == "lenet" else 0.91)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    gen = torch.Generator().manual_seed(args.seed)
    n = xtr.shape[0]
    bs = args.batch
    cum_train = 0.0
    hit = None
    wall0 = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        perm = torch.randperm(n, generator=gen)  # reshuffle each epoch
        xs, ys = xtr[perm], ytr[perm]          # gather outside the timed loop
        model.train()
        loss_sum, nb = 0.0, 0
        flt0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        t0 = time.perf_counter()
        for i in range(0, n, bs):
            xb, yb = xs[i:i + bs], ys[i:i + bs]
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
            loss_sum += loss.item()
            nb += 1
        dt = time.perf_counter() - t0
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - flt0
        cum_train += dt
        acc = evaluate(model, xte, yte)
        wall = time.perf_counter() - wall0
        if hit is None and acc >= target:
            hit = {"epoch": epoch, "cum_train_seconds": round(cum_train, 2),
                   "wall_seconds": round(wall, 2), "test_acc": acc}
        print(json.dumps(dict(kind="epoch", batch=bs, epoch=epoch, train_seconds=round(dt, 3),
                              images_per_s=round(n / dt, 1), test_acc=acc,
                              loss=round(loss_sum / nb, 4), cum_train_seconds=round(cum_train, 2),
                              wall_seconds=round(wall, 2), lr=args.lr,
                              minor_faults=faults, **common)), flush=True)
    print(json.dumps(dict(kind="summary", batch=bs, epochs=args.epochs, target=target,
                          time_to_target=hit, mean_images_per_s=round(n * args.epochs / cum_train, 1),
                          final_test_acc=acc, **common)), flush=True)


if __name__ == "__main__":
    main()
