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

# Performance (README "Performance"): variant ratios side by side, which parts to
# compile with XLA, and the distance to the matmul limit (~10 min on 2 idle cores).
bench: $(STAMP)
	$(PY) benchmarks/benchmark_encoder.py --repeats 40 --steps 1 --memory_repeats 2 \
	    --variants vanilla,realformer,normformer,realformer_normformer,model_garden \
	    --json_out benchmarks/results/latest_small.json --markdown_out benchmarks/results/latest_small.md
	$(PY) benchmarks/benchmark_encoder.py --repeats 20 --steps 1 --memory_repeats 2 \
	    --variants vanilla,pre_ln,normformer,normformer+composite_ffn,normformer+unfolded_head_scale,vanilla+keras_gelu,vanilla+keras_dropout,vanilla+tf_ops,normformer+tf_ops \
	    --json_out benchmarks/results/latest_small_patches.json --markdown_out benchmarks/results/latest_small_patches.md
	$(PY) benchmarks/benchmark_jit.py --repeats 14 --json_out benchmarks/results/latest_jit.json
	$(PY) benchmarks/benchmark_limit.py --repeats 4 --json_out benchmarks/results/latest_limit.json

clean:
	rm -rf demo_output
