"""benchmarks/profile_serving_matmuls.py: both sides time the same product (checked
against NumPy), and the table reads its medians."""

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
import profile_serving_matmuls as psm  # noqa: E402


def numpy_chain(kernels, x):
    h = x
    for i in range(0, len(kernels), 6):
        w = kernels[i:i + 6]
        q, k, v = (h @ w[j] for j in range(3))
        h = (((q + k) + v) @ w[3]) @ w[4] @ w[5]
    return h


@pytest.mark.parametrize("projection", psm.TF_PROJECTIONS)
def test_tensorflow_chain_is_the_72_products(projection):
    kernels, x = psm.random_kernels(1), psm.request_features(5)
    assert [k.shape for k in kernels] == [(768, 768)] * 4 + [(768, 3072), (3072, 768)]
    got = psm.tf_chain(kernels, projection)(x).numpy()
    np.testing.assert_allclose(got, numpy_chain(kernels, x), rtol=1e-4, atol=1e-5)


def test_onnxruntime_chain_is_the_same_product():
    ort = pytest.importorskip("onnxruntime")
    kernels, x = psm.random_kernels(2), psm.request_features(3)
    session = ort.InferenceSession(psm.onnx_chain(kernels, 3), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(session.run(None, {"x": x})[0], numpy_chain(kernels, x), rtol=1e-4, atol=1e-5)


def test_table_gives_the_rest_and_the_ratio():
    result = {"tokens": 16, "medians": {"2": {"whole call": 34.0, "tf tensordot": 27.0, "tf einsum": 25.0,
                                              "onnxruntime": 18.0}}}
    row = psm.markdown(result).splitlines()[-1]
    assert row == "| 2 | 34.0 ms | 27.0 ms | 25.0 ms | 18.0 ms | 7.0 ms | 1.50x |"
