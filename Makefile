# `make demo` and `make test` work on a fresh machine: they create .venv and install first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
DEMO_HOME ?= $(CURDIR)/.workbench-demo
PYTEST_ARGS ?=
DEMO_NAME := demo-$(shell date +%s)

.PHONY: setup tf-venv system-deps node demo test lint typecheck unit bench clean images screenshots constraints

# The install builds labextension/ into the package (hatch-jupyter-builder runs jlpm, which
# needs Node.js), so the venv waits for node.
$(STAMP): pyproject.toml .ci/constraints.txt labextension/package.json labextension/yarn.lock | node
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch is pinned: an open range can pull a multi-GB CUDA build. The constraints keep
	# pip's resolver from backtracking for many minutes (see .ci/constraints.txt).
	$(BIN)/python -m pip install -q -c .ci/constraints.txt 'torch==2.13.0' -e '.[test,torch]'
	touch $(STAMP)

setup: $(STAMP)

# The TFJob end-to-end test runs TensorFlow in a venv of its own (TensorFlow and torch in
# one venv would cost a second multi-GB stack of pins): built once, when missing.
TF_VENV := .venv-tf
TF_STAMP := $(TF_VENV)/.installed-stamp
$(TF_STAMP):
	test -x $(TF_VENV)/bin/python || $(PY) -m venv $(TF_VENV)
	$(TF_VENV)/bin/python -m pip install -q 'tensorflow-cpu==2.18.0'
	touch $(TF_STAMP)

tf-venv: $(TF_STAMP)

# System packages the tests need, installed when missing (as root, with apt-get) and said
# so; otherwise the exact apt-get line is printed and make stops:
#   podman + runc   the container runtime tests (Podman serving the Docker Engine API; runc
#                   because crun fails here, see tests/containers/containers.conf)
#   debootstrap     builds the containers' base image offline (no registry is reachable)
#   chromium        the browser tests drive JupyterLab in Debian's chromium via Playwright
#   openmpi-bin     mpirun for the MPIJob end-to-end test (mpi4py in the test extra uses it)
SYSTEM_DEPS := podman:podman runc:runc debootstrap:debootstrap chromium:chromium \
	chromedriver:chromium-driver mpirun:openmpi-bin
APT := DEBIAN_FRONTEND=noninteractive apt-get -qq -o DPkg::Lock::Timeout=300

system-deps:
	@missing=""; for pair in $(SYSTEM_DEPS); do \
	  command -v "$${pair%%:*}" >/dev/null 2>&1 || missing="$$missing $${pair#*:}"; \
	done; \
	if [ -z "$$missing" ]; then \
	  echo "system-deps: podman, runc, debootstrap, chromium and openmpi are installed"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "system-deps: installing what the tests need and this machine lacks:$$missing"; \
	  $(APT) update && $(APT) install -y $$missing >/dev/null && \
	  echo "system-deps: installed$$missing"; \
	else \
	  echo "system-deps: the tests need system packages this machine lacks:$$missing" >&2; \
	  echo "system-deps: install them with:  sudo apt-get install -y$$missing" >&2; \
	  exit 1; \
	fi

# Node.js builds the labextension; installed (as root, with apt-get) when missing.
node:
	@if command -v node >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "node: installing nodejs (the labextension build needs it)"; \
	  $(APT) update && $(APT) install -y nodejs >/dev/null; \
	else \
	  echo "node: the labextension build needs Node.js: sudo apt-get install -y nodejs" >&2; \
	  exit 1; \
	fi

demo: setup
	@echo "== a 2-worker DDP training on the local backend (WORKBENCH_HOME=$(DEMO_HOME))"
	WORKBENCH_HOME=$(DEMO_HOME) $(BIN)/workbench submit --name $(DEMO_NAME) --workers 2 \
	  --image pytorch --wait --follow-logs -- python -m workbench.examples.train_ddp --epochs 3 --steps 10
	@echo "== rank 1 ends with the same parameters as rank 0:"
	WORKBENCH_HOME=$(DEMO_HOME) $(BIN)/workbench logs $(DEMO_NAME) --rank 1 --tail 1
	WORKBENCH_HOME=$(DEMO_HOME) $(BIN)/workbench get $(DEMO_NAME)
	WORKBENCH_HOME=$(DEMO_HOME) $(BIN)/workbench list

lint: setup
	$(BIN)/ruff check workbench tests bench
	$(BIN)/ruff format --check workbench tests bench
	# The layer contracts of ARCHITECTURE.md ([tool.importlinter] in pyproject.toml).
	$(BIN)/lint-imports --no-cache

typecheck: setup
	$(BIN)/mypy

unit: setup system-deps tf-venv
	$(BIN)/pytest -q $(PYTEST_ARGS)

test: system-deps lint typecheck unit

# The CPU variants of docker/ (base, PyTorch, TensorFlow) with Podman, offline, on a
# debootstrap Debian base (CONTAINER_ENGINE=docker for Docker); see docker/README.md.
images: setup system-deps
	$(BIN)/python -m tests.containers.images --all

# docs/images/*.png from a real JupyterLab in Debian's chromium (the browser tests).
screenshots: setup system-deps
	WORKBENCH_UPDATE_IMAGES=1 $(BIN)/pytest -q -p no:cacheprovider tests/browser

bench: setup
	$(BIN)/python bench/bench_launch.py

# Re-pin the dev venv's versions after a dependency change (review the diff).
constraints: setup
	{ sed -n '/^#/p' .ci/constraints.txt; $(BIN)/python -m pip freeze --exclude-editable; } \
	  > .ci/constraints.txt.new && mv .ci/constraints.txt.new .ci/constraints.txt

clean:
	rm -rf $(VENV) $(TF_VENV) $(DEMO_HOME) .pytest_cache .mypy_cache .ruff_cache \
	  labextension/node_modules labextension/lib labextension/tsconfig.tsbuildinfo workbench/labextension
