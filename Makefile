# prefilltui developer commands.  The README's two set-up commands are:
#   make demo    set up a venv, build/fetch the local llama.cpp target, open the live demo
#   make test    set up a venv, build/fetch the target, run the whole test suite
# .ci/run runs `make test` (plus checks); keep them the same.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# extra arguments: make demo ARGS='--headless'  /  make test PYTEST_ARGS='tests/unit -x'
ARGS        ?=
PYTEST_ARGS ?=

.PHONY: setup target demo test bench torch-venv

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

test: target
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

# the llama-server agreement figure is skipped, with a message, when the target is not built
bench: setup
	$(BIN)/python -m tests.bench $(ARGS)

# A python with torch (the CPU wheel: "+cpu" so pip can never pick a CUDA build) and transformers for the live FLOP-counter test
# (tests/flopcount/): its own venv in the cache, never the app's.
TORCH_VENV := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/prefilltui/torch-cpu
torch-venv:
	test -x $(TORCH_VENV)/bin/python || $(PYTHON) -m venv $(TORCH_VENV)
	$(TORCH_VENV)/bin/pip install --disable-pip-version-check 'torch==2.13.0+cpu' transformers
