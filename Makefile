# progressive-sync: the commands a newcomer and CI run. `make test` works on a fresh clone:
# it creates the virtualenv, builds the real components if the cache lacks them, and runs the suite.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
PYTEST_ARGS ?=
# pytest-xdist workers for `make test` (0: one process, no xdist). The suite waits far more than it
# computes, so more workers than cores pays; the tests of one shared stack stay on one worker (the real
# node's on two: tests/support/realstack.py). Six workers (three on the node) took longer on 2 cores:
# the suite is bound by CPU, and each worker's own control plane costs some (docs/design/dev-stack.md).
PYTEST_WORKERS ?= 4

.PHONY: help venv tools test unit lint fmt clean crds docs bench demo image

help:
	@echo "make demo    run a staged rollout over a simulated 12-cluster fleet on a local control plane"
	@echo "make test    the whole test suite (builds the tools on first use)"
	@echo "make lint    ruff + mypy + the import contract (lint-imports)"
	@echo "make tools   build the real components (control plane, node, Argo, Argo CD) into the cache"
	@echo "make image   build the image users install (an OCI archive in dist/, to push to a registry)"
	@echo "make crds    regenerate the CRD from the models"
	@echo "make docs    regenerate docs/troubleshooting.md (reason catalog), docs/reference/ (models), docs/cli-reference.md"
	@echo "make bench   benchmarks (ratios measured side by side)"
	@echo "make clean   remove the virtualenv and caches in the tree (not the tool cache)"

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

# Installs the Debian packages the stack runs when missing (as root; hack/tools/debian-packages.sh),
# builds what the tool cache lacks and prints the folder that holds all of it (hack/tools/build.sh
# says what and how): etcd, kube-apiserver, kubectl, helm; kubelet, kube-scheduler,
# kube-controller-manager for the real node; Argo Workflows (controller, argoexec, the argo CLI and
# server with the Argo UI embedded); Argo CD (application controller, ApplicationSet controller,
# repo-server); the Argo Rollouts controller (run as its analysis controller alone, for analysis
# gates; Debian's prometheus beside it); the three projects' CRDs. Cold, on an otherwise idle
# 2-core machine: 24-28 min, bound by CPU (each component's time, measured in CI with every cache
# empty: docs/design/dev-stack.md, "The cold tools build"); on a shared machine, longer. Warm:
# under a second.
# test, demo and bench run it first and pass the folder on as PROGRESSIVE_SYNC_TOOLS_DIR (the Python
# side's orchestrator/devenv/tools.py) and KUBEBUILDER_ASSETS.
tools:
	@hack/tools/build.sh

test: $(STAMP)
	tools="$$(hack/tools/build.sh)" && KUBEBUILDER_ASSETS="$$tools" PROGRESSIVE_SYNC_TOOLS_DIR="$$tools" \
		$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

unit: $(STAMP)
	$(BIN)/pytest tests/unit $(PYTEST_ARGS)

# The image users install (the watcher and every step run it): an OCI image archive in dist/, built
# from Debian packages like the dev node's step image (orchestrator/devenv/release_image.py says how),
# never from a pulled base image. Push it with skopeo (or docker load + push); README.md, Install.
image: $(STAMP)
	@hack/tools/debian-packages.sh
	@$(BIN)/python -m orchestrator.devenv.release_image

# The first thing to run: builds the control plane and the CRDs on a cold cache (build.sh core crds,
# not every tool: the default demo needs no node, Argo, Argo CD or Argo Rollouts), then a 3-stage
# rollout over a simulated 12-cluster fleet on a local control plane (about a minute). Options that
# need more (--argocd real, --engine argo, --ui, --analysis, --bad-metrics) build their parts before
# they start and say so (orchestrator/devenv/demo_tools.py). DEMO_ARGS="--fail-cluster NAME" shows a
# canary failing, DEMO_ARGS="--bad-metrics NAME" a Healthy canary stopped by its analysis gate (a real
# Prometheus and Argo Rollouts analysis controller); everything the demo starts is stopped and removed
# when it ends.
DEMO_ARGS ?=
demo: $(STAMP)
	@tools="$$(hack/tools/build.sh core crds)" && KUBEBUILDER_ASSETS="$$tools" PROGRESSIVE_SYNC_TOOLS_DIR="$$tools" \
		$(BIN)/progressive-sync demo $(DEMO_ARGS)

# Every bench/*.py script in turn; each prints its own figures (reports, not pass/fail). The
# rollout benchmarks start a local control plane, so the tools are built first. bench_many.py (200
# ProgressiveSyncs x 20 clusters released together, issue 33) is the longest: it waits up to
# its --timeout (40 min) for each engine's rollouts (docs/design/workflow.md, "Many rollouts at once").
bench: $(STAMP)
	@tools="$$(hack/tools/build.sh)" && for script in bench/*.py; do echo "== $$script"; \
		KUBEBUILDER_ASSETS="$$tools" PROGRESSIVE_SYNC_TOOLS_DIR="$$tools" $(BIN)/python $$script || exit 1; done

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy orchestrator steps workflow_templates
	$(BIN)/lint-imports

# The chart's CRD is generated from orchestrator/api/models.py; a golden test fails when they differ.
crds: $(STAMP)
	$(BIN)/python -m orchestrator.api.crdgen

# docs/troubleshooting.md is generated from the reason catalog (orchestrator/api/reasons.py, rendered
# with the phases, states and cluster failures by orchestrator/api/troubleshooting.py) and
# docs/reference/progressivesync.md from the models (orchestrator/api/fieldref.py); golden tests
# (tests/unit/test_reasons.py, tests/unit/test_fieldref.py) fail when they differ.
docs: $(STAMP)
	$(BIN)/python -m orchestrator.api.troubleshooting --write docs/troubleshooting.md
	$(BIN)/python -m orchestrator.api.fieldref --write docs/reference/progressivesync.md
	$(BIN)/python -m orchestrator.cli.help_catalog --write docs/cli-reference.md

fmt: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache .ruff_cache .mypy_cache .hypothesis .bench
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
