# Two commands for a fresh machine:  make demo  (run the main job)  and  make test.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.effdepth-installed

.PHONY: setup demo test bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml requirements-cpu.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements-cpu.txt
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

# SmolLM2-135M-Instruct (embedded, from PyPI) on Shakespeare, every control view.
demo: setup
	$(VENV)/bin/effdepth measure --views paper --out runs/demo

test: setup
	$(PY) -m pytest -q

bench: setup
	$(PY) benchmarks/overhead.py

clean:
	rm -rf runs .pytest_cache .hypothesis
