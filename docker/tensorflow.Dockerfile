# A workbench worker image for TensorFlow jobs (TF_CONFIG comes from workbench's contract).
#
# Build from the repository root:
#   docker build -f docker/tensorflow.Dockerfile -t localhost/workbench/tensorflow:2.19.0-gpu .
#   docker build -f docker/tensorflow.Dockerfile \
#     --build-arg BASE_IMAGE=docker.io/tensorflow/tensorflow:2.19.0 \
#     -t localhost/workbench/tensorflow:2.19.0-cpu .
ARG BASE_IMAGE=docker.io/tensorflow/tensorflow:2.19.0-gpu
FROM ${BASE_IMAGE}

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
    python3 -c "import tensorflow as tf, workbench.run; print('tensorflow', tf.__version__)"; \
    rm -rf /tmp/workbench-src

# The container runtime wraps each rank in the monitoring agent when an image says it can.
LABEL org.workbench.agent="python -m workbench.agent"
WORKDIR /workspace
