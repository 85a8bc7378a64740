#!/bin/sh
# gpu_check.sh — the cuda backend on a machine with an NVIDIA GPU, in one
# prepared run: build, conformance test with the cuda column, then training
# speed (lenet and seedcnn, batch 64 and 256, --backend cuda) next to
# PyTorch on the same GPU when python3 can import torch with CUDA. Prints
# figures and test results; it never fails on speed.
#
#   bench/gpu_check.sh            on the GPU machine (needs only sh, the NVIDIA
#                                 driver, and the CUDA libraries: libcudart,
#                                 libcublas, libcudnn 9, found on the linker path,
#                                 under /usr/local/cuda, or in python3's nvidia-*
#                                 wheels)
#   bench/gpu_check.sh bundle     on a build machine (CUDA toolkit + cuDNN + the
#                                 Debian packages of README.md, no GPU needed):
#                                 builds and packs build-gpu-bundle/
#
# The GPU machine may lack autotools or ragtag's build dependencies (json-c,
# cmocka). So: where it can build (./configure exists or autoreconf runs, and
# configure passes), it builds into $BUILD; otherwise, prepare the bundle on
# a build machine and carry it there (it is ignored by git, /build*/):
#   here:   bench/gpu_check.sh bundle     (ragtag and test_backend_ops, the
#                                          module, libragtag and the few other
#                                          non-system .so they need: a few MB)
#   there:  bench/gpu_check.sh            (finds build-gpu-bundle/ and uses it)
# Data: Fashion-MNIST from RAGTAG_DATA_DIR, /usr/share/datasets or
# data/fashion-mnist under the repository (copy the four .gz files there to
# carry them, 30 MB); without it, random images with constant labels are
# written and used: the speed is the same, accuracies are then meaningless.
#
# Environment: BUILD (default build-gpu), BUNDLE (default build-gpu-bundle),
# CUDA_PATH (bundle: the toolkit, else found from nvcc), EPOCHS (timed epochs per run, the
# last is reported; default 2), LIMIT (training images, default all),
# SKIP_TEST=1 (no conformance test), SKIP_TORCH=1.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$top/build-gpu}
BUNDLE=${BUNDLE:-$top/build-gpu-bundle}
EPOCHS=${EPOCHS:-2}
LIMIT=${LIMIT:-0}
jobs=$(nproc 2>/dev/null || echo 2)
say() { printf '\n### %s\n' "$*"; }

# ---- bundle mode: build here, pack what the GPU machine needs -----------------------
if [ "${1:-}" = bundle ]; then
  set -e
  [ -x "$top/configure" ] || (cd "$top" && autoreconf -fi)
  mkdir -p "$BUILD"
  cd "$BUILD"
  # no BLAS (libopenblas is large), no OpenCL, no ZeroMQ: fewer libraries
  # to carry; the cpu backend is then only the conformance test's reference
  "$top/configure" -q --with-blas=none --without-opencl --without-zmq \
    --with-cuda${CUDA_PATH:+=$CUDA_PATH}
  make -s clean # objects of an earlier configuration (static, say) would be reused
  make -j"$jobs" src/ragtag tests/test_backend_ops backends/cuda/ragtag-cuda.la
  rm -rf "$BUNDLE"
  mkdir -p "$BUNDLE/bin" "$BUNDLE/lib" "$BUNDLE/backends"
  # the programs themselves, not libtool's wrapper scripts (which hold this
  # machine's paths); libragtag.so goes to lib/ with the rest below
  cp src/.libs/ragtag tests/.libs/test_backend_ops "$BUNDLE/bin/"
  cp backends/cuda/.libs/ragtag-cuda.so "$BUNDLE/backends/"
  # every library they load, except the C library's, the C++ runtime (the
  # GPU machine's is newer) and CUDA's own (the GPU machine's match its driver)
  for f in "$BUNDLE"/bin/* "$BUNDLE"/backends/*; do LD_LIBRARY_PATH="$BUILD/.libs" ldd "$f"; done |
    awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u |
    grep -v -E '/(libc|libm|libdl|librt|libpthread|ld-linux[^/]*|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas[^/]*|libcudnn[^/]*|libnvrtc[^/]*|libz)\.so' |
    while read -r lib; do cp -L "$lib" "$BUNDLE/lib/"; done
  du -sh "$BUNDLE"
  echo "packed $BUNDLE: carry it (it is ignored by git) and run bench/gpu_check.sh there"
  exit 0
fi

# ---- the machine ----------------------------------------------------------------------
say "machine"
date -u +%Y-%m-%dT%H:%MZ
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1
else
  echo "nvidia-smi: not found"
fi
echo "cores: $jobs"

# The CUDA libraries: the linker's, the toolkit's, or python3's nvidia-* wheels.
libpath=""
add_lib() { [ -d "$1" ] && case ":$libpath:" in *":$1:"*) ;; *) libpath="$libpath:$1" ;; esac; }
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
  add_lib "$d"
done
if command -v python3 >/dev/null 2>&1; then
  for d in $(python3 - <<'EOF' 2>/dev/null
import importlib
for name in ("nvidia.cudnn", "nvidia.cublas", "nvidia.cuda_runtime", "nvidia.cu13", "nvidia.cuda_nvrtc"):
    try:
        m = importlib.import_module(name)
    except Exception:
        continue
    for p in getattr(m, "__path__", []):
        print(p + "/lib")
EOF
  ); do add_lib "$d"; done
fi
export LD_LIBRARY_PATH="${libpath#:}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"

# ---- ragtag: a bundle carried in, or a build here ---------------------------------------
say "build"
RAGTAG="" TESTOPS="" MODDIR=""
if [ -x "$BUNDLE/bin/ragtag" ] &&
   LD_LIBRARY_PATH="$BUNDLE/lib:$LD_LIBRARY_PATH" "$BUNDLE/bin/ragtag" --version >/dev/null 2>&1; then
  export LD_LIBRARY_PATH="$BUNDLE/lib:$LD_LIBRARY_PATH"
  RAGTAG=$BUNDLE/bin/ragtag TESTOPS=$BUNDLE/bin/test_backend_ops MODDIR=$BUNDLE/backends
  echo "using the bundle $BUNDLE"
else
  # a build needs the link-time names (libcudnn.so, ...) that wheels lack
  links=$BUILD/cuda-links
  mkdir -p "$links"
  for lib in cudnn cublas cudart; do
    for d in $(echo "$LD_LIBRARY_PATH" | tr ':' ' '); do
      [ -e "$d/lib$lib.so" ] && break
      so=$(ls "$d/lib$lib.so."* 2>/dev/null | head -n 1)
      [ -n "$so" ] && { ln -sf "$so" "$links/lib$lib.so"; break; }
    done
  done
  incs=""
  for d in $(echo "$LD_LIBRARY_PATH" | tr ':' ' '); do
    [ -f "$d/../include/cudnn.h" ] && incs="$incs -I$(cd "$d/../include" && pwd)"
  done
  if [ ! -x "$top/configure" ]; then
    (cd "$top" && autoreconf -fi) || {
      echo "FAIL: no ./configure and autoreconf failed: run 'bench/gpu_check.sh bundle' on a"
      echo "build machine and carry build-gpu-bundle/ here"; exit 1; }
  fi
  mkdir -p "$BUILD"
  (cd "$BUILD" &&
   "$top/configure" -q --with-cuda --without-opencl CPPFLAGS="$incs" \
     LDFLAGS="-L$links $(echo ":$LD_LIBRARY_PATH" | sed 's/:\([^:][^:]*\)/ -L\1/g')" &&
   make -j"$jobs" && make -j"$jobs" tests/test_backend_ops) || {
    echo "FAIL: building here failed (above); run 'bench/gpu_check.sh bundle' on a build"
    echo "machine and carry build-gpu-bundle/ here"; exit 1; }
  RAGTAG=$BUILD/src/ragtag TESTOPS=$BUILD/tests/test_backend_ops MODDIR=$BUILD/backends/cuda/.libs
fi
export RAGTAG_BACKEND_PATH=$MODDIR

say "ragtag devices"
RAGTAG_BACKEND_VERBOSE=1 "$RAGTAG" devices

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# ---- conformance: every op against the cpu backend ------------------------------------------
# Twice: as configured (cuDNN where it applies), and with RAGTAG_CUDA_CUDNN=0
# (own kernels, convolutions as im2col + cuBLAS), which tells a cuDNN
# disagreement from one of ragtag's kernels.
conformance() { # label, then environment assignments
  label=$1
  shift
  say "tests/test_backend_ops: $label"
  env "$@" "$TESTOPS" >"$tmp/ops.log" 2>&1
  rc=$?
  grep -v -e '^\[       OK \]' -e '^\[ RUN      \]' "$tmp/ops.log"
  echo "test_backend_ops ($label): exit status $rc"
}
if [ "${SKIP_TEST:-0}" != 1 ]; then
  if [ -x "$TESTOPS" ]; then
    conformance "cuDNN where it applies" RAGTAG_CUDA_CUDNN=1
    conformance "RAGTAG_CUDA_CUDNN=0" RAGTAG_CUDA_CUDNN=0
  else
    echo "tests/test_backend_ops not built (cmocka missing?): conformance not run"
  fi
fi

# ---- data ---------------------------------------------------------------------------------------
data=""
for d in "${RAGTAG_DATA_DIR:+$RAGTAG_DATA_DIR/fashion-mnist}" /usr/share/datasets/fashion-mnist \
         "$top/data/fashion-mnist"; do
  [ -n "$d" ] && [ -f "$d/train-images-idx3-ubyte.gz" ] && { data=$d; break; }
done
if [ -n "$data" ]; then
  spec="idx:$data"
  echo "data: Fashion-MNIST in $data"
else
  # IDX files: big-endian magic and sizes, then the bytes
  data=$tmp/synthetic
  mkdir -p "$data"
  idx() { # file magic count rows cols bytes-per-item source
    { printf "$2$3"; [ -n "$4" ] && printf "$4$5"; head -c "$6" "$7"; } >"$data/$1"
  }
  idx train-images-idx3-ubyte '\0\0\10\3' '\0\0\352\140' '\0\0\0\34' '\0\0\0\34' $((60000 * 784)) /dev/urandom
  idx t10k-images-idx3-ubyte '\0\0\10\3' '\0\0\47\20' '\0\0\0\34' '\0\0\0\34' $((10000 * 784)) /dev/urandom
  idx train-labels-idx1-ubyte '\0\0\10\1' '\0\0\352\140' '' '' 60000 /dev/zero
  idx t10k-labels-idx1-ubyte '\0\0\10\1' '\0\0\47\20' '' '' 10000 /dev/zero
  spec="idx:$data"
  echo "data: no Fashion-MNIST found; random images, every label 0 (accuracy meaningless)"
fi

# ---- training speed ---------------------------------------------------------------------------
json_field() { grep -v '"event"' | sed -n "s/.*\"$1\": *\([0-9.e+-]*\).*/\1/p" | tail -n 1; } # not the coordinator's event lines
train() { # model batch label [VAR=VALUE...]
  model=$1 batch=$2 label=$3
  shift 3
  rm -f "$tmp/m.jsonl"
  if env RAGTAG_BACKEND_VERBOSE=1 "$@" "$RAGTAG" train "$top/examples/$model.cfg" --data "$spec" \
       --val 0 --limit "$LIMIT" --epochs "$EPOCHS" --batch "$batch" --lr 0.01 --momentum 0.9 \
       --optimizer sgd --seed 1 --backend cuda --progress off --metrics "$tmp/m.jsonl" \
       >"$tmp/out" 2>"$tmp/err"; then
    printf '%-8s %6d %-24s %12.0f %9s\n' "$model" "$batch" "$label" \
      "$(json_field images_per_s <"$tmp/m.jsonl")" "$(json_field test_acc <"$tmp/m.jsonl")"
  else
    printf '%-8s %6d %-24s failed: %s\n' "$model" "$batch" "$label" "$(tail -n 1 "$tmp/err")"
  fi
  grep '^ragtag: cuda: conv' "$tmp/err" | sort -u >"$tmp/algos.$model.$batch.$label"
}
say "ragtag training, --backend cuda, SGD momentum 0.9, last of $EPOCHS epochs"
printf '%-8s %6s %-24s %12s %9s\n' model batch variant images/s test_acc
for model in lenet seedcnn; do
  for batch in 64 256; do
    train "$model" "$batch" default
  done
done
for model in lenet seedcnn; do
  train "$model" 256 RAGTAG_CUDA_CONV_FIND=1 RAGTAG_CUDA_CONV_FIND=1
  train "$model" 256 RAGTAG_CUDA_TF32=1 RAGTAG_CUDA_TF32=1
  train "$model" 256 RAGTAG_CUDA_CUDNN=0 RAGTAG_CUDA_CUDNN=0
done
say "convolution algorithms picked (RAGTAG_BACKEND_VERBOSE), batch 256"
cat "$tmp"/algos.*.256.default "$tmp"/algos.*.256.RAGTAG_CUDA_CONV_FIND=1 2>/dev/null

# ---- a cpu worker and a cuda worker in one run (docs/heterogeneous.md) -------------------------
say "mixed run: train --workers 2 --backend cpu,cuda (lenet, 1 epoch of $LIMIT images)"
if "$RAGTAG" train "$top/examples/lenet.cfg" --data "$spec" --val 0 --limit "$LIMIT" --epochs 1 \
     --workers 2 --backend cpu,cuda --progress off >"$tmp/mixed" 2>&1; then
  grep -e ' cpu  ' -e ' cuda  ' -e 'replicas identical' -e '\[plan\] step 0' -e 'done:' "$tmp/mixed"
else
  echo "mixed run failed:"; tail -n 5 "$tmp/mixed"
fi

# ---- PyTorch on the same GPU ----------------------------------------------------------------
[ "${SKIP_TORCH:-0}" = 1 ] && exit 0
if ! python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  say "PyTorch: not importable with CUDA here: no comparison"
  exit 0
fi
say "PyTorch, same models, SGD momentum 0.9, FP32 (no TF32), last of $EPOCHS epochs"
python3 - "$data" "$EPOCHS" "$LIMIT" <<'EOF'
# The data sits on the GPU as float tensors and losses are summed there,
# read once per epoch: PyTorch's fastest loop. ragtag reads every batch from
# host memory and reads the losses back every step, so this favours PyTorch.
import gzip, os, sys, time
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

data, epochs, limit = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
torch.backends.cudnn.allow_tf32 = False
torch.backends.cuda.matmul.allow_tf32 = False
dev = torch.device("cuda")

def idx(name):
    p = os.path.join(data, name)
    raw = gzip.open(p + ".gz").read() if os.path.exists(p + ".gz") else open(p, "rb").read()
    dims = raw[3]
    shape = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * dims).reshape(shape)

x = torch.tensor(idx("train-images-idx3-ubyte"), dtype=torch.float32, device=dev)
x = (x / 255.0).unsqueeze(1)
y = torch.tensor(idx("train-labels-idx1-ubyte").astype(np.int64), device=dev)
if limit:
    x, y = x[:limit], y[:limit]

class LeNet(nn.Module):  # examples/lenet.cfg
    def __init__(self):
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(1, 6, 5, padding=2), nn.Conv2d(6, 16, 5)
        self.f1, self.f2, self.f3 = nn.Linear(400, 120), nn.Linear(120, 84), nn.Linear(84, 10)
    def forward(self, t):
        t = F.max_pool2d(F.relu(self.c1(t)), 2)
        t = F.max_pool2d(F.relu(self.c2(t)), 2)
        t = torch.flatten(t, 1)
        return self.f3(F.relu(self.f2(F.relu(self.f1(t)))))

class SeedCNN(nn.Module):  # examples/seedcnn.cfg
    def __init__(self):
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(1, 32, 3), nn.Conv2d(32, 32, 3)
        self.f1, self.f2 = nn.Linear(4608, 225), nn.Linear(225, 10)
    def forward(self, t):
        t = F.max_pool2d(F.relu(self.c2(F.relu(self.c1(t)))), 2)
        return self.f2(F.relu(self.f1(torch.flatten(t, 1))))

print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {torch.cuda.get_device_name()}")
print(f"{'model':8} {'batch':>6} {'images/s':>12}")
for name, cls in (("lenet", LeNet), ("seedcnn", SeedCNN)):
    for batch in (64, 256):
        torch.manual_seed(1)
        model = cls().to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        n = x.shape[0]
        for _ in range(epochs):
            perm = torch.randperm(n, device=dev)
            total = torch.zeros((), device=dev)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for i in range(0, n, batch):
                j = perm[i:i + batch]
                opt.zero_grad(set_to_none=True)
                loss = F.cross_entropy(model(x[j]), y[j])
                loss.backward()
                opt.step()
                total += loss.detach()
            total.item()
            dt = time.perf_counter() - t0
        print(f"{name:8} {batch:6d} {n / dt:12.0f}")
EOF
