# prefilltui developer commands.  The README's two set-up commands are:
#   make demo    set up a venv, build/fetch the local llama.cpp target, open the live demo
#   make test    set up a venv; the fast tests (unit, cli, tui) first; then obtain the real
#                components (llama-server, vLLM, Prometheus, Alertmanager, Chromium, tmux:
#                tests/components.py) and run the tests that need them
# .ci/run runs `make test` (plus checks); keep them the same.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# extra arguments: make demo ARGS='--headless'  /  make test PYTEST_ARGS='-x -k cache'
# (PYTEST_ARGS are options for both pytest runs; for one folder: make test-fast, or
# .venv/bin/python -m pytest tests/unit)
ARGS        ?=
PYTEST_ARGS ?=
FAST_TESTS  := tests/unit tests/cli tests/tui

.PHONY: setup target components demo test test-fast test-real bench torch-venv chart-files image

# The venv, with the project installed editable plus its test extras.
$(BIN)/prefilltui: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --disable-pip-version-check -e '.[test]'
	touch $@

setup: $(BIN)/prefilltui

# llama-server (built once, ~7-15 min on 2 cores, portable CPU baseline, smoke-tested) and the SmolLM2-135M model,
# cached in $${XDG_CACHE_HOME:-~/.cache}/prefilltui; instant when cached.
target: setup
	$(BIN)/prefilltui demo --prepare-only

demo: target
	$(BIN)/prefilltui demo $(ARGS)

# Every real component the slower tests use, obtained where it can be (as root, with a
# registry): apt-get for Prometheus/Alertmanager/Chromium/tmux, the llama-server build
# (~14 min on 2 cores, once) and the vLLM install (~2-2.5 min, once).  What cannot be
# had is said with its install line; its tests then skip (fail in CI).
components: setup
	$(BIN)/python -m tests.components obtain

# 1. fast feedback: no real component needed (a minute or three)
test-fast: setup
	$(BIN)/python -m pytest -q -m "not component" $(FAST_TESTS) $(PYTEST_ARGS)

# 2. the tests against real components (marker `component`: tests/integration, promtool,
#    Chromium), after obtaining them
test-real: components
	$(BIN)/python -m pytest -q -m component $(FAST_TESTS) tests/integration $(PYTEST_ARGS)

test: setup
	$(MAKE) --no-print-directory test-fast
	$(MAKE) --no-print-directory test-real

# The exporter's image (deploy/Containerfile) from Debian's packages and the project's
# wheels, no image registry (deploy/build-image.sh; docs/kubernetes.md): as root, with
# podman and mmdebstrap.  IMAGE=registry.example.com/team/prefilltui:0.1.0 names it.
image: setup
	PYTHON=$(BIN)/python deploy/build-image.sh

# The Helm chart's copies of the alert rules and the dashboard (a chart reads only its own
# directory): deploy/ is the one source, tests/unit/test_helm_chart.py fails on a stale copy.
chart-files:
	cp deploy/prefilltui-alerts.yml deploy/grafana-dashboard.json deploy/helm/prefilltui/files/

# the llama-server agreement figure is skipped, with a message, when the target is not built
bench: setup
	$(BIN)/python -m tests.bench $(ARGS)

# A python with torch (the CPU wheel: "+cpu" so pip can never pick a CUDA build) and transformers for the live FLOP-counter test
# (tests/flopcount/): its own venv in the cache, never the app's.
TORCH_VENV := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/prefilltui/torch-cpu
torch-venv:
	test -x $(TORCH_VENV)/bin/python || $(PYTHON) -m venv $(TORCH_VENV)
	$(TORCH_VENV)/bin/pip install --disable-pip-version-check 'torch==2.13.0+cpu' transformers
