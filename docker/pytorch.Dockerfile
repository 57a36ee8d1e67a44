# A workbench worker image for PyTorch jobs.
#
# Build from the repository root (the context needs workbench's sources):
#   docker build -f docker/pytorch.Dockerfile -t localhost/workbench/pytorch:2.13.0-cuda .
#   docker build -f docker/pytorch.Dockerfile \
#     --build-arg BASE_IMAGE=docker.io/pytorch/pytorch:2.13.0-cuda12.8-cudnn9-runtime \
#     -t localhost/workbench/pytorch:2.13.0-cuda .
# `podman build` takes the same arguments. Wheels placed in docker/wheels/ (e.g. a local
# torch CPU wheel for a base without torch) are installed first; see docker/README.md.
ARG BASE_IMAGE=docker.io/pytorch/pytorch:2.13.0-cuda12.8-cudnn9-runtime
FROM ${BASE_IMAGE}

# Debian-based bases mark their Python as externally managed (PEP 668); this image is
# the job's whole world, so installing into it is the point.
# Extra pip options, e.g. "--no-index --no-build-isolation" for an offline build whose
# docker/wheels/ holds every wheel needed (the tests build that way).
ARG PIP_OPTIONS=""
ENV PIP_BREAK_SYSTEM_PACKAGES=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1

# Commands say `python`; some bases (Debian) only have python3.
RUN command -v python >/dev/null || ln -s "$(command -v python3)" /usr/local/bin/python

# Extra wheels first, in their own layer, so a rebuild after a workbench change is quick.
COPY docker/wheels/ /tmp/workbench-wheels/
RUN set -eux; \
    wheels="$(find /tmp/workbench-wheels -name '*.whl')"; \
    if [ -n "$wheels" ]; then \
      python3 -m pip install $PIP_OPTIONS --find-links /tmp/workbench-wheels $wheels; \
    fi; \
    rm -rf /tmp/workbench-wheels

# workbench itself goes in so `workbench.run` and the monitoring agent work inside jobs.
COPY pyproject.toml README.md /tmp/workbench-src/
COPY workbench/ /tmp/workbench-src/workbench/
COPY jupyter-config/ /tmp/workbench-src/jupyter-config/
RUN set -eux; \
    python3 -m pip install $PIP_OPTIONS /tmp/workbench-src; \
    python3 -c "import torch, workbench.run; print('torch', torch.__version__)"; \
    rm -rf /tmp/workbench-src

# The container runtime wraps each rank in the monitoring agent when an image says it can.
LABEL org.opencontainers.image.title="workbench pytorch worker" \
      org.workbench.agent="python -m workbench.agent"
WORKDIR /workspace
