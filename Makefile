# Drivetrain: `make run` (install + main job on synthetic logs) and `make test` on a fresh clone.
# The exact torch build is pinned here, in the install command (torch==2.13.0: its CPU wheel is
# on these machines, any other spec pulls a multi-GB CUDA build); pyproject.toml declares the
# compatible range (>=2.13,<2.14).

PYTHON3  ?= python3
VENV     := .venv
BIN      := $(VENV)/bin
PANDASET ?= ../shared/data/pandaset/002
IMAGE    ?= localhost/drivetrain:dev
OUT      ?= build

# Where MLflow (mlflow.db, mlartifacts/) and the elastic run folders go; see README.md.
export DRIVETRAIN_HOME ?= $(HOME)/.drivetrain
# A local `pyflyte run` is the elastic agent: a fresh rendezvous store per in-place restart
# (pytorch#135712, still needed by torch 2.13); pods get it from the task's environment.
export TORCH_DISABLE_SHARE_RDZV_TCP_STORE ?= 1

.PHONY: install dev run run-pandaset test test-unit test-all lint package register deploy-check mlflow-ui clean-cache bench-env

$(BIN)/python:
	$(PYTHON3) -m venv $(VENV)

# Runtime install: torch==2.13.0 + the package (editable, so elastic workers spawned by
# flytekit import platform_lib/tasks/workflows from this checkout).
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install 'torch==2.13.0' -e .
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed
	$(BIN)/pip install -e '.[dev]'
	touch $@

install: $(VENV)/.installed
dev: $(VENV)/.installed-dev

run: install
	$(BIN)/pyflyte run workflows/training_pipeline.py training_pipeline

run-pandaset: install
	$(BIN)/pyflyte run workflows/training_pipeline.py training_pipeline \
		--source pandaset --raw_logs $(PANDASET) --preset pandaset_smoke

# Tests by cost (README "Tests"): tests/unit runs in one process without servers (the inner
# loop); tests/integration starts processes, servers, browsers and network namespaces.
# pytest-xdist runs whole files on TEST_WORKERS processes (a file's module fixtures are built
# once), in collection order: each worker runs a subsequence of the one-process order.
# 0 = one process (CI's default: no test competes with another for the 2 cores and their
# deadlines); `make test TEST_WORKERS=3` runs three (602 s of pytest against 826-1,133 s here).
TEST_WORKERS ?= 0
XDIST := -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

test: dev
	$(BIN)/python -m pytest -m "not slow" $(XDIST) tests/unit tests/integration

test-unit: dev
	$(BIN)/python -m pytest -m "not slow" $(XDIST) tests/unit

test-all: dev
	$(BIN)/python -m pytest tests/unit tests/integration

# Lint, format check, import-layer contracts (pyproject [tool.importlinter]) and the type checker.
lint: dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/mypy

# Serialise every Flyte entity (what `pyflyte register` would upload) into $(OUT)/.
package: install
	mkdir -p $(OUT)
	$(BIN)/pyflyte --pkgs workflows package --image $(IMAGE) --output $(OUT)/flyte-package.tgz --force

# Register on a cluster (deploy/README.md): the team's LocalQueue must exist in the target
# namespace (tasks/placement.py), checked before anything is uploaded.
PROJECT ?= drivetrain
DOMAIN ?= development
VERSION ?= $(shell git rev-parse --short HEAD)
register: install
	$(BIN)/python -m tasks.placement --project $(PROJECT) --domain $(DOMAIN)
	$(BIN)/pyflyte register --project $(PROJECT) --domain $(DOMAIN) --version $(VERSION) workflows

# Validate deploy/ offline: CRD schemas + CEL rules, Kubernetes schemas, cross-references with
# tasks/placement.py (see deploy/README.md).
deploy-check: dev
	$(BIN)/python deploy/check.py

mlflow-ui: install
	$(BIN)/mlflow ui --backend-store-uri sqlite:///$(DRIVETRAIN_HOME)/mlflow.db \
		--default-artifact-root $(DRIVETRAIN_HOME)/mlartifacts --host 127.0.0.1 --port 5000

# Forget flytekit's local task cache (~/.flyte/local-cache): the next run executes every task.
clean-cache: install
	$(BIN)/pyflyte local-cache clear

# Loader benchmark environment (not used by CI; ~6.6 GB): a separate venv with the peer
# libraries, never .venv. Then: .bench-venv/bin/python bench/loader.py (see bench/README.md).
bench-env:
	$(PYTHON3) -m venv .bench-venv
	.bench-venv/bin/pip install 'torch==2.14.1' 'torchvision==0.29.1' 'transformers<5' mosaicml-streaming
	.bench-venv/bin/pip install pyarrow pandas numpy 'webdataset>=1.0,<2' pandera pillow simplejpeg \
		fsspec s3fs filelock tqdm tenacity safetensors 'spdl==0.8.0'
	.bench-venv/bin/pip install --no-deps -e .
