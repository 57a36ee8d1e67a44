# The workbench base image: Python, workbench and its agent as the entrypoint wrapper, no
# framework. For data preparation and CPU-only jobs; catalogue `cpu:3.11-workbench`.
#
# Build from the repository root (the context needs workbench's sources):
#   podman build -f docker/base.Dockerfile -t localhost/workbench/base:3.11 .
# BASE defaults to the local Debian bookworm image that `make images` makes by debootstrap
# (no registry needed); any Debian/Ubuntu image works, e.g.
#   --build-arg BASE=docker.io/library/python:3.11-slim-bookworm
#   --build-arg BASE=docker.io/nvidia/cuda:12.8.1-runtime-ubuntu24.04 --build-arg PYTHON_VERSION=3.12
# (a base without Python gets Debian's python3 by apt-get, which needs the network).
ARG BASE=localhost/debian-py:bookworm
FROM ${BASE}

# The Python the base must have; the build fails if it has another.
ARG PYTHON_VERSION=3.11
# Extra pip options, e.g. "--no-index" for an offline build whose
# docker/wheels/ holds every wheel needed (`make images` and the tests build that way).
ARG PIP_OPTIONS=""
# The image is the job's whole world, so installing into its system Python (PEP 668) is the point.
ENV PIP_BREAK_SYSTEM_PACKAGES=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1

RUN set -eux; \
    if ! command -v python3 >/dev/null || ! python3 -m pip --version >/dev/null 2>&1; then \
      apt-get update; \
      DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 python3-pip; \
      rm -rf /var/lib/apt/lists/*; \
    fi; \
    command -v python >/dev/null || ln -s "$(command -v python3)" /usr/local/bin/python; \
    python3 -c "import sys; v = '%d.%d' % sys.version_info[:2]; assert v == '${PYTHON_VERSION}', f'base has Python {v}, not ${PYTHON_VERSION}'"

# workbench's own dependencies from docker/wheels/ when present (offline builds).
COPY docker/wheels/ /tmp/workbench-wheels/
# Without its build hook: the JupyterLab extension is the notebook front end's, not a
# worker's, and building it needs Node.js and jupyterlab in the image.
COPY pyproject.toml README.md /tmp/workbench-src/
COPY workbench/ /tmp/workbench-src/workbench/
COPY jupyter-config/ /tmp/workbench-src/jupyter-config/
RUN set -eux; \
    python3 -m pip install $PIP_OPTIONS --find-links /tmp/workbench-wheels hatchling; \
    HATCH_BUILD_NO_HOOKS=true python3 -m pip install $PIP_OPTIONS --no-build-isolation \
      --find-links /tmp/workbench-wheels /tmp/workbench-src; \
    python3 -c "import workbench.monitor.agent, workbench.run"; \
    rm -rf /tmp/workbench-src /tmp/workbench-wheels

COPY docker/workbench-entrypoint.sh /usr/local/bin/workbench-entrypoint
RUN chmod 0755 /usr/local/bin/workbench-entrypoint
# The local container runtime wraps each rank in the agent when an image says it can; the
# entrypoint does it for everyone else (a cluster's pods, `docker run`).
LABEL org.opencontainers.image.title="workbench base" \
      org.workbench.agent="python -m workbench.monitor.agent" \
      org.workbench.python="${PYTHON_VERSION}"
ENTRYPOINT ["/usr/local/bin/workbench-entrypoint"]
CMD ["python3"]
WORKDIR /workspace
