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

# All tests, the slow end-to-end ones included (what CI runs), then the backend-agnostic
# layer tests (NumPy reference, Keras user) again on the JAX and PyTorch backends.
BACKEND_TESTS := tests/test_layers_reference.py tests/test_layers_scores.py tests/test_keras_user.py
test: $(STAMP)
	$(PY) -m pytest -q tests
	KERAS_BACKEND=jax $(PY) -m pytest -q $(BACKEND_TESTS)
	KERAS_BACKEND=torch $(PY) -m pytest -q $(BACKEND_TESTS)

# Only the fast unit tests, for quick iteration.
test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow" tests

demo: $(STAMP)
	$(PY) demo.py --output_dir=demo_output

bench: $(STAMP)
	$(PY) benchmarks/benchmark_encoder.py

clean:
	rm -rf demo_output
