# ragtag in a container: the CPU + OpenCL (PoCL) image, or the CUDA one.
#
#   docker build -t ragtag .
#   docker run --rm ragtag devices
#
# CUDA variant (docs/cluster.md "Containers"): the build stage needs nvcc,
# cuBLAS and cuDNN 9 headers (a -devel image with cuDNN), the runtime stage
# the libraries (the matching -runtime image):
#
#   docker build -t ragtag:cuda \
#     --build-arg BASE=nvidia/cuda:12.6.3-cudnn-devel-ubuntu24.04 \
#     --build-arg RUNTIME_BASE=nvidia/cuda:12.6.3-cudnn-runtime-ubuntu24.04 .
#
# Classic builder syntax only (Debian's docker.io has no BuildKit): no
# RUN --mount, no heredocs. The source is copied after the packages are
# installed, so a change of the source rebuilds only from there.
ARG BASE=debian:12
ARG RUNTIME_BASE=debian:12

# ---- build: the -dev packages, ./configure && make && make install ------------------
FROM ${BASE} AS build
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update && apt-get install -y --no-install-recommends \
      build-essential autoconf automake libtool pkg-config \
      libopenblas-openmp-dev libjson-c-dev zlib1g-dev \
      ocl-icd-opencl-dev opencl-headers libclblast-dev \
      libzmq3-dev libmsgpack-dev \
      libmicrohttpd-dev libcairo2-dev libjs-chart.js \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . /src
# .dockerignore keeps an in-place build out of the context; say so if one
# slipped through rather than link its stale objects
RUN if [ -e config.status ] || [ -e src/.libs ]; then \
      echo "the build context holds a configured tree: check .dockerignore" >&2; exit 1; fi \
    && autoreconf -fi && ./configure --disable-static \
    && make -j"$(nproc)" && make install \
    && sh deploy/docker/runtime-deps.sh /usr/local > /runtime-packages \
    && cat /runtime-packages

# ---- runtime: the libraries, ragtag, its modules, the example models -----------------
FROM ${RUNTIME_BASE}
ENV DEBIAN_FRONTEND=noninteractive
# Added to the libraries ragtag links: the OpenCL driver that runs on any
# CPU, and the Fashion-MNIST files the default data spec reads (the
# coordinator serves them to workers with --serve-data). Set to "" to leave
# them out (e.g. a CUDA image whose coordinator has its data elsewhere).
ARG EXTRA_PACKAGES="pocl-opencl-icd dataset-fashion-mnist"
COPY --from=build /runtime-packages /usr/local/share/ragtag/runtime-packages
RUN missing=$(for p in $(cat /usr/local/share/ragtag/runtime-packages); do \
                dpkg -s "$p" >/dev/null 2>&1 || echo "$p"; done) \
    && apt-get update && apt-get install -y --no-install-recommends $missing $EXTRA_PACKAGES \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --uid 10001 --user-group --create-home --home-dir /home/ragtag ragtag \
    && install -d -o ragtag -g ragtag -m 700 /keys /join \
    && install -d -o ragtag -g ragtag -m 755 /out
COPY --from=build /usr/local/bin/ragtag /usr/local/bin/ragtag
COPY --from=build /usr/local/lib/libragtag.so.0.0.0 /usr/local/lib/
COPY --from=build /usr/local/lib/ragtag /usr/local/lib/ragtag
COPY --from=build /usr/local/share/ragtag/examples /usr/local/share/ragtag/examples
RUN ln -s libragtag.so.0.0.0 /usr/local/lib/libragtag.so.0 && ldconfig \
    && ragtag --version
# A non-root user (uid 10001): credentials mounted from the host must be
# owned by 10001 and of mode 600 (docs/cluster.md "Containers").
#   /keys  the coordinator's `ragtag keygen` directory (coord --keys /keys)
#   /join  the join string for workers (worker --join-file /join/join)
#   /out   checkpoints and metrics of a coordinator
USER ragtag
WORKDIR /out
ENTRYPOINT ["ragtag"]
CMD ["--help"]
