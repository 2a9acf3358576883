# Two commands for a fresh machine:  make demo  (run the main job)  and  make test.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.effdepth-installed

.PHONY: setup demo test lint format test-fast test-integration test-acceptance bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml requirements-cpu.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements-cpu.txt
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

# The paper's protocol (passage mode) on the two embedded real models (from PyPI) over Shakespeare
# passages of equal length (windows of 128 tokens): every control view under both CKA estimators, the
# confounds table (position 0 and passage length) and the sample-size curve, then Table 2 beside ours
# and the claims.
DEMO := --views paper --passage-split windows --seq-len 128 --num-seqs 128
demo: setup
	$(VENV)/bin/effdepth measure smollm2-135m $(DEMO) --out runs/demo/smollm2-135m
	$(VENV)/bin/effdepth measure gemma-3-270m $(DEMO) --out runs/demo/gemma-3-270m
	$(VENV)/bin/effdepth claims runs/demo

# Everything: ruff (lint and format), then the unit, integration and acceptance tiers (what CI runs);
# gpu tests skip without CUDA. One worker per core, at most four (each holds its own models), a test file
# to a worker (its module fixtures made once).
PARALLEL := -n auto --maxprocesses 4 --dist loadfile
test: lint
	$(PY) -m pytest -q $(PARALLEL)

# ruff as pyproject.toml configures it: the lint rules and the format, checked (make format fixes them).
lint: setup
	$(VENV)/bin/ruff check src tests benchmarks examples
	$(VENV)/bin/ruff format --check src tests benchmarks examples

format: setup
	$(VENV)/bin/ruff check --fix src tests benchmarks examples
	$(VENV)/bin/ruff format src tests benchmarks examples

# One tier each (markers given by tests/conftest.py).
# unit: tests/unit and the doctests, no model, under a minute (the two paths only spare
# collecting tests/integration; the marker alone picks the same tests).
test-fast: setup
	$(PY) -m pytest -q -m unit tests/unit src/effdepth

# integration: tests/integration on tiny random models, the CLI, the reports.
test-integration: setup
	$(PY) -m pytest -q -m integration

# acceptance: the real pretrained models (SmolLM2, Gemma-3) and the report in a real browser.
test-acceptance: setup
	$(PY) -m pytest -q -m acceptance

# The CPU benchmarks, their output written into docs/benchmarks.md (benchmarks/document.py).
bench: setup
	$(PY) benchmarks/document.py

clean:
	rm -rf runs .pytest_cache .hypothesis
