# The workbench TensorFlow image, CUDA variant: catalogue `tensorflow:2.19-cuda`. Built on
# a GPU host (or any host that reaches the registry) on top of the official image:
#   docker build -f docker/tensorflow-cuda.Dockerfile -t localhost/workbench/tensorflow:2.19.0-cuda .
# `podman build` takes the same arguments. TF_CONFIG comes from workbench's contract. The
# official -gpu image brings the CUDA libraries its TensorFlow was built for.
ARG TENSORFLOW_VERSION=2.19.0
ARG BASE=docker.io/tensorflow/tensorflow:${TENSORFLOW_VERSION}-gpu
FROM ${BASE}

# Declared again: an ARG before FROM is only visible in FROM.
ARG TENSORFLOW_VERSION
# Extra pip options, e.g. "--no-index" with every wheel (hatchling too) in docker/wheels/.
ARG PIP_OPTIONS=""
ENV PIP_BREAK_SYSTEM_PACKAGES=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1 \
    TF_CPP_MIN_LOG_LEVEL=1

COPY docker/wheels/ /tmp/workbench-wheels/
# Without its build hook: the JupyterLab extension is the notebook front end's, not a
# worker's, and building it needs Node.js and jupyterlab in the image.
COPY pyproject.toml README.md /tmp/workbench-src/
COPY workbench/ /tmp/workbench-src/workbench/
COPY jupyter-config/ /tmp/workbench-src/jupyter-config/
RUN set -eux; \
    command -v python >/dev/null || ln -s "$(command -v python3)" /usr/local/bin/python; \
    python3 -c "import tensorflow as tf; assert tf.__version__ == '${TENSORFLOW_VERSION}', tf.__version__"; \
    python3 -m pip install $PIP_OPTIONS --find-links /tmp/workbench-wheels hatchling; \
    HATCH_BUILD_NO_HOOKS=true python3 -m pip install $PIP_OPTIONS --no-build-isolation \
      --find-links /tmp/workbench-wheels /tmp/workbench-src; \
    python3 -c "import workbench.monitor.agent, workbench.run"; \
    rm -rf /tmp/workbench-src /tmp/workbench-wheels

COPY docker/workbench-entrypoint.sh /usr/local/bin/workbench-entrypoint
RUN chmod 0755 /usr/local/bin/workbench-entrypoint
LABEL org.opencontainers.image.title="workbench tensorflow worker (CUDA)" \
      org.workbench.agent="python -m workbench.monitor.agent" \
      org.workbench.tensorflow="${TENSORFLOW_VERSION}"
ENTRYPOINT ["/usr/local/bin/workbench-entrypoint"]
CMD ["python3"]
WORKDIR /workspace
