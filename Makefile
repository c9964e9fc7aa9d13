# Two entry points for a fresh machine: `make demo` and `make test`.
# Each creates .venv and installs requirements.txt on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export TF_CPP_MIN_LOG_LEVEL ?= 2
export KERAS_BACKEND := tensorflow

.PHONY: demo test test-fast venv bench clean

$(STAMP): requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps -e .
	touch $(STAMP)

venv: $(STAMP)

# All tests, the slow end-to-end ones included (what CI runs).
test: $(STAMP)
	$(PY) -m pytest -q tests

# Only the fast unit tests, for quick iteration.
test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow" tests

demo: $(STAMP)
	$(PY) demo.py --output_dir=demo_output

bench: $(STAMP)
	$(PY) benchmarks/benchmark_encoder.py

clean:
	rm -rf demo_output
