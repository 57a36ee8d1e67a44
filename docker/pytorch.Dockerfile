# The workbench PyTorch image, CPU variant: catalogue `pytorch:2.13-cpu`, the image the
# container tests run a 2-worker DDP job in.
#
# Build from the repository root (the context needs workbench's sources):
#   podman build -f docker/pytorch.Dockerfile -t localhost/workbench/pytorch:2.13.0-cpu .
# BASE defaults to the local Debian bookworm image that `make images` makes by debootstrap
# (no registry needed); any Debian/Ubuntu image with Python 3.11 works. torch comes from
# docker/wheels/ when a wheel is there (offline), else from the CPU wheel index.
# The CUDA variant is pytorch-cuda.Dockerfile.
ARG BASE=localhost/debian-py:bookworm
FROM ${BASE}

ARG PYTORCH_VERSION=2.13.0
ARG PYTHON_VERSION=3.11
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
# Extra pip options, e.g. "--no-index" for an offline build whose
# docker/wheels/ holds every wheel needed (`make images` and the tests build that way).
ARG PIP_OPTIONS=""
# The image is the job's whole world, so installing into its system Python (PEP 668) is the point.
ENV PIP_BREAK_SYSTEM_PACKAGES=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1

# Commands say `python`; Debian only has python3.
RUN set -eux; \
    command -v python >/dev/null || ln -s "$(command -v python3)" /usr/local/bin/python; \
    python3 -c "import sys; v = '%d.%d' % sys.version_info[:2]; assert v == '${PYTHON_VERSION}', f'base has Python {v}, not ${PYTHON_VERSION}'"

# The framework first, in its own layer, so a rebuild after a workbench change is quick.
COPY docker/wheels/ /tmp/workbench-wheels/
RUN set -eux; \
    python3 -m pip install $PIP_OPTIONS --find-links /tmp/workbench-wheels \
      --extra-index-url "${TORCH_INDEX_URL}" "torch==${PYTORCH_VERSION}" numpy; \
    python3 -c "import torch; v = torch.__version__.split('+')[0]; assert v == '${PYTORCH_VERSION}', v"

# workbench itself, so `workbench.run` and the monitoring agent work inside jobs.
# Without its build hook: the JupyterLab extension is the notebook front end's, not a
# worker's, and building it needs Node.js and jupyterlab in the image.
COPY pyproject.toml README.md /tmp/workbench-src/
COPY workbench/ /tmp/workbench-src/workbench/
COPY jupyter-config/ /tmp/workbench-src/jupyter-config/
RUN set -eux; \
    python3 -m pip install $PIP_OPTIONS --find-links /tmp/workbench-wheels hatchling; \
    HATCH_BUILD_NO_HOOKS=true python3 -m pip install $PIP_OPTIONS --no-build-isolation \
      --find-links /tmp/workbench-wheels /tmp/workbench-src; \
    python3 -c "import torch, workbench.monitor.agent, workbench.run; print('torch', torch.__version__)"; \
    rm -rf /tmp/workbench-src /tmp/workbench-wheels

COPY docker/workbench-entrypoint.sh /usr/local/bin/workbench-entrypoint
RUN chmod 0755 /usr/local/bin/workbench-entrypoint
# The local container runtime wraps each rank in the agent when an image says it can; the
# entrypoint does it for everyone else (a cluster's pods, `docker run`).
LABEL org.opencontainers.image.title="workbench pytorch worker (CPU)" \
      org.workbench.agent="python -m workbench.monitor.agent" \
      org.workbench.pytorch="${PYTORCH_VERSION}"
ENTRYPOINT ["/usr/local/bin/workbench-entrypoint"]
CMD ["python3"]
WORKDIR /workspace
