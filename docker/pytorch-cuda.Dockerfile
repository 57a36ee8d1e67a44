# The workbench PyTorch image, CUDA variant: catalogue `pytorch:2.13-cuda`. Built on a GPU
# host (or any host that reaches the registry) on top of the official PyTorch image:
#   docker build -f docker/pytorch-cuda.Dockerfile -t localhost/workbench/pytorch:2.13.0-cuda12.8 .
#   docker build -f docker/pytorch-cuda.Dockerfile --build-arg PYTORCH_VERSION=2.7.1 \
#     --build-arg CUDA_VERSION=12.6 -t localhost/workbench/pytorch:2.7.1-cuda12.6 .
# `podman build` takes the same arguments. The CPU variant is pytorch.Dockerfile.
ARG PYTORCH_VERSION=2.13.0
ARG CUDA_VERSION=12.8
ARG CUDNN_VERSION=9
ARG BASE=docker.io/pytorch/pytorch:${PYTORCH_VERSION}-cuda${CUDA_VERSION}-cudnn${CUDNN_VERSION}-runtime
FROM ${BASE}

# Declared again: an ARG before FROM is only visible in FROM.
ARG PYTORCH_VERSION
ARG CUDA_VERSION
# Extra pip options, e.g. "--no-index" with every wheel (hatchling too) in docker/wheels/.
ARG PIP_OPTIONS=""
ENV PIP_BREAK_SYSTEM_PACKAGES=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1

# The official image already has torch (checked, so a wrong BASE fails the build) and
# conda's python; workbench goes into that same Python.
COPY docker/wheels/ /tmp/workbench-wheels/
# Without its build hook: the JupyterLab extension is the notebook front end's, not a
# worker's, and building it needs Node.js and jupyterlab in the image.
COPY pyproject.toml README.md /tmp/workbench-src/
COPY workbench/ /tmp/workbench-src/workbench/
COPY jupyter-config/ /tmp/workbench-src/jupyter-config/
RUN set -eux; \
    python -c "import torch; v = torch.__version__.split('+')[0]; assert v == '${PYTORCH_VERSION}', v; assert torch.version.cuda.startswith('${CUDA_VERSION}'), torch.version.cuda"; \
    python -m pip install $PIP_OPTIONS --find-links /tmp/workbench-wheels hatchling; \
    HATCH_BUILD_NO_HOOKS=true python -m pip install $PIP_OPTIONS --no-build-isolation \
      --find-links /tmp/workbench-wheels /tmp/workbench-src; \
    python -c "import torch, workbench.monitor.agent, workbench.run; print('torch', torch.__version__, 'cuda', torch.version.cuda)"; \
    rm -rf /tmp/workbench-src /tmp/workbench-wheels

COPY docker/workbench-entrypoint.sh /usr/local/bin/workbench-entrypoint
RUN chmod 0755 /usr/local/bin/workbench-entrypoint
LABEL org.opencontainers.image.title="workbench pytorch worker (CUDA)" \
      org.workbench.agent="python -m workbench.monitor.agent" \
      org.workbench.pytorch="${PYTORCH_VERSION}" \
      org.workbench.cuda="${CUDA_VERSION}"
ENTRYPOINT ["/usr/local/bin/workbench-entrypoint"]
CMD ["python"]
WORKDIR /workspace
