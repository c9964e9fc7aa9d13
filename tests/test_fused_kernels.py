"""The fused CPU LayerNorm kernels (realformer_tf/kernels): each op and its gradient
against float64 NumPy and central finite differences, on shapes that are not powers of
two; whole models equal with and without them; they stay out of every graph where they
are unsafe (XLA, float64, bfloat16 gelu, the layers' option off); the training loop and
a Keras user's model.fit use them by default and train as without them; a failed build
falls back with one warning; bad inputs give errors that name the input."""

import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import helpers_data as h
import numpy_reference as ref
from realformer_tf import kernels

EPS = 1e-6  # larger than BERT's 1e-12 so that epsilon's place in the formula is tested
SHAPES = [(3, 7, 37), (2, 300), (5, 1), (0, 6)]


def fused_ops():
    library = kernels.load()
    assert library is not None, "the fused kernels did not build on this machine"
    return library


def standardize_np(x):
    return ref.layer_norm(x, 1.0, 0.0, eps=EPS)


def gelu_standardize_np(x):
    return standardize_np(ref.gelu_tanh(x))


def fd_input_grad(f, x, dy, indices):
    """Finite differences of sum(f(x) * dy) over x (float64), at `indices`."""
    x = x.astype(np.float64).copy()
    if x.size == 0:
        return np.zeros(x.shape)
    return ref.numeric_grad(lambda: float(np.sum(f(x) * dy)), x, eps=1e-6, indices=indices)


def probe(size, rng, count=60):
    return rng.choice(size, size=min(size, count), replace=False) if size else []


def check(label, actual, expected, atol):
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    mask = ~np.isnan(expected)
    dev = float(np.max(np.abs(actual[mask] - expected[mask]), initial=0.0))
    print(f"DEV {label} {dev:.2e}")
    assert actual.shape == expected.shape and dev <= atol, f"{label}: {dev:.3e} > {atol:.1e}"


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_standardize_and_its_gradient(shape):
    rng = np.random.default_rng(1)
    x = rng.normal(loc=3.0, scale=2.0, size=shape).astype(np.float32)
    dy = rng.normal(size=shape).astype(np.float32)
    xhat, rstd = fused_ops().realformer_standardize(x, epsilon=EPS)
    check("xhat", xhat, standardize_np(x.astype(np.float64)), 2e-5)
    expected_rstd = 1 / np.sqrt(x.astype(np.float64).var(-1, keepdims=True) + EPS)
    check("rstd / expected", np.asarray(rstd) / expected_rstd, np.ones_like(expected_rstd), 1e-5)
    dx = fused_ops().realformer_standardize_grad(dy, xhat, rstd, tf.zeros([0]))
    fd = fd_input_grad(standardize_np, x, dy, probe(x.size, rng))
    check("dx", dx, fd, 2e-4)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_gelu_standardize_and_its_gradient(shape):
    rng = np.random.default_rng(2)
    x = rng.normal(scale=3.0, size=shape).astype(np.float32)  # both of gelu's tails
    dy = rng.normal(size=shape).astype(np.float32)
    xhat, rstd, slope = fused_ops().realformer_gelu_standardize(x, epsilon=EPS)
    check("xhat", xhat, gelu_standardize_np(x.astype(np.float64)), 3e-5)
    dx = fused_ops().realformer_standardize_grad(dy, xhat, rstd, slope)
    fd = fd_input_grad(gelu_standardize_np, x, dy, probe(x.size, rng))
    check("dx", dx, fd, 3e-4)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_layer_norm_and_its_gradients(shape):
    rng = np.random.default_rng(3)
    x = rng.normal(loc=-1.0, scale=2.0, size=shape).astype(np.float32)
    gamma, beta = (rng.normal(size=shape[-1:]).astype(np.float32) for _ in range(2))
    dy = rng.normal(size=shape).astype(np.float32)
    y, xhat, rstd = fused_ops().realformer_layer_norm(x, gamma, beta, epsilon=EPS)
    x64, g64, b64 = (a.astype(np.float64).copy() for a in (x, gamma, beta))
    check("y", y, ref.layer_norm(x64, g64, b64, eps=EPS), 5e-5)
    dx, dgamma, dbeta = fused_ops().realformer_layer_norm_grad(dy, xhat, rstd, gamma)

    def loss():
        return float(np.sum(ref.layer_norm(x64, g64, b64, eps=EPS) * dy))

    dx_fd = ref.numeric_grad(loss, x64, eps=1e-6, indices=probe(x.size, rng)) if x.size else np.zeros(shape)
    check("dx", dx, dx_fd, 5e-4)
    check("dgamma", dgamma, ref.numeric_grad(loss, g64, eps=1e-6), 5e-4)
    check("dbeta", dbeta, ref.numeric_grad(loss, b64, eps=1e-6), 5e-4)


def test_layer_norm_gradient_sums_over_many_rows_and_threads():
    """dgamma and dbeta add up per-thread partial sums: many rows, so every worker gets some."""
    rng = np.random.default_rng(4)
    x = rng.normal(size=(4099, 19)).astype(np.float32)
    dy = rng.normal(size=x.shape).astype(np.float32)
    gamma = rng.normal(size=19).astype(np.float32)
    _, xhat, rstd = fused_ops().realformer_layer_norm(x, gamma, np.zeros(19, np.float32), epsilon=EPS)
    _, dgamma, dbeta = fused_ops().realformer_layer_norm_grad(dy, xhat, rstd, gamma)
    check("dgamma", dgamma, np.sum(dy * standardize_np(x.astype(np.float64)), 0), 2e-3)
    check("dbeta", dbeta, dy.astype(np.float64).sum(0), 2e-3)


def test_zero_width_rows_give_nan_statistics_as_tensorflow():
    """Rows of width 0: outputs are empty and rstd is NaN (0/0), as TensorFlow's ops give,
    never uninitialized memory."""
    library = fused_ops()
    x = tf.zeros((4, 3, 0))
    xhat, rstd = library.realformer_standardize(x, epsilon=EPS)
    y, _, rstd_affine = library.realformer_layer_norm(x, tf.zeros((0,)), tf.zeros((0,)), epsilon=EPS)
    _, rstd_gelu, _ = library.realformer_gelu_standardize(x, epsilon=EPS)
    variance = tf.reduce_mean(tf.square(x - tf.reduce_mean(x, -1, keepdims=True)), -1, keepdims=True)
    expected = tf.math.rsqrt(variance + EPS).numpy()
    assert xhat.shape == y.shape == (4, 3, 0) and np.isnan(expected).all()
    for got in (rstd, rstd_affine, rstd_gelu):
        assert got.shape == expected.shape and np.isnan(got.numpy()).all()


def test_bad_inputs_name_the_input():
    x = np.ones((2, 5), np.float32)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"gamma must have shape \[5\], got \[4\]"):
        fused_ops().realformer_layer_norm(x, np.ones(4, np.float32), np.ones(5, np.float32), epsilon=EPS)
    with pytest.raises(tf.errors.InvalidArgumentError, match="rank >= 1"):
        fused_ops().realformer_standardize(np.float32(1.0), epsilon=EPS)
    with pytest.raises(tf.errors.InvalidArgumentError, match="slope must have shape"):
        fused_ops().realformer_standardize_grad(x, x, np.ones((2, 1), np.float32), np.ones((2, 4), np.float32))


# -- where the layers use them ------------------------------------------------------------

def custom_op_types(fn, *args):
    graph = fn.get_concrete_function(*args).graph
    return sorted({op.type for op in graph.get_operations() if op.type.startswith("Realformer")})


def model_and_step(layer_norm_type, dtype="float32", fused_kernels=True):
    from realformer_tf import modeling

    config = h.tiny_config(hidden_size=24, num_attention_heads=3, intermediate_size=37, layer_norm_type=layer_norm_type,
                           hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, residual_attention=True)
    model = modeling.BertModel(config, dtype=dtype)
    ids = tf.constant(np.random.default_rng(5).integers(0, config.vocab_size, size=(2, 11)), tf.int32)
    mask = tf.constant([[1] * 11, [1] * 6 + [0] * 5], tf.int32)
    features = {"input_ids": ids, "input_mask": mask, "segment_ids": tf.zeros_like(ids)}
    if not fused_kernels:
        with pytest.raises(ValueError, match="not built yet"):
            kernels.use_fused_kernels(model, False)
    model(features)
    kernels.use_fused_kernels(model, fused_kernels)

    def step():
        with tf.GradientTape() as tape:
            out = model(features, training=True)["sequence_output"]
            loss = tf.reduce_sum(tf.cast(out, tf.float32) * tf.cast(tf.range(24), tf.float32))
        return out, tape.gradient(loss, model.trainable_variables)

    step.model = model
    return step


@pytest.mark.parametrize("layer_norm_type,expected_ops", [
    ("post", ["RealformerLayerNorm", "RealformerLayerNormGrad"]),
    ("pre", ["RealformerLayerNorm", "RealformerLayerNormGrad", "RealformerStandardize",
             "RealformerStandardizeGrad"]),
    ("normformer", ["RealformerGeluStandardize", "RealformerLayerNorm", "RealformerLayerNormGrad",
                    "RealformerStandardize", "RealformerStandardizeGrad"]),
])
def test_models_equal_with_and_without_kernels(layer_norm_type, expected_ops):
    step = model_and_step(layer_norm_type, fused_kernels=False)
    plain = tf.function(step)
    out, grads = plain()
    kernels.use_fused_kernels(step.model, True)  # the default, for the same weights
    fused = tf.function(step)
    fused_out, fused_grads = fused()
    assert custom_op_types(fused) == expected_ops
    assert custom_op_types(plain) == []
    check("sequence_output", fused_out, out, 2e-5)
    for g, fg in zip(grads, fused_grads):
        assert (g is None) == (fg is None)
        if g is None:  # the pooler: the loss uses the sequence output only
            continue
        check("gradient", tf.convert_to_tensor(fg), tf.convert_to_tensor(g), 5e-5 * max(1.0, float(tf.reduce_max(tf.abs(g)))))


def test_kept_out_of_xla_float64_and_bfloat16_gelu():
    assert custom_op_types(tf.function(model_and_step("normformer"), jit_compile=True)) == []
    assert custom_op_types(tf.function(model_and_step("normformer", dtype="float64"))) == []
    # Under mixed precision gelu runs in bfloat16 (as in the composite): no fused gelu op.
    bf16_ops = custom_op_types(tf.function(model_and_step("normformer", dtype="mixed_bfloat16")))
    assert "RealformerGeluStandardize" not in bf16_ops and "RealformerLayerNorm" in bf16_ops
    assert custom_op_types(tf.function(model_and_step("post", fused_kernels=False))) == []


def test_the_option_and_the_call_decide_in_any_thread():
    """No ambient switch: a layer traced in a bare thread or a MirroredStrategy replica
    thread uses the kernels by its option and its call's `training` alone; an inference
    call (the default) never does, so a model's inference graph holds none of them."""
    import threading

    from realformer_tf.layers.normalization import LayerNorm

    x = tf.constant(np.random.default_rng(2).normal(size=(3, 7)), tf.float32)
    on, off = LayerNorm(epsilon=EPS), LayerNorm(epsilon=EPS, fused_kernels=False)

    def training_call(layer):
        return tf.function(lambda x: layer(x, training=True))

    seen = {}
    thread = threading.Thread(target=lambda: seen.update(
        on=custom_op_types(training_call(on), x), off=custom_op_types(training_call(off), x),
        inference=custom_op_types(tf.function(on), x)))
    thread.start()
    thread.join()
    assert seen == {"on": ["RealformerLayerNorm"], "off": [], "inference": []}
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    replica = tf.function(lambda: strategy.run(lambda t: on(t, training=True), (x,)))
    assert custom_op_types(replica) == ["RealformerLayerNorm"]
    step = model_and_step("normformer")
    assert custom_op_types(tf.function(step)) != []
    features = {"input_ids": tf.ones((2, 9), tf.int32)}
    assert custom_op_types(tf.function(lambda f: step.model(f)), features) == []
    assert custom_op_types(tf.function(lambda f: step.model(f, training=False)), features) == []
    assert LayerNorm.from_config(off.get_config()).fused_kernels is False


def test_training_loop_uses_kernels_and_trains_as_without(tmp_path, monkeypatch):
    """Three AdamW steps with the kernels end at the weights of three without them."""
    used = []
    ops_for = kernels.ops_for
    monkeypatch.setattr(kernels, "ops_for", lambda x, enabled=True: used.append(ops_for(x, enabled)) or used[-1])
    with_kernels = train_classifier(tmp_path / "fused")
    assert any(u is not None for u in used)
    used.clear()
    without = train_classifier(tmp_path / "plain", fused_kernels=False)
    assert used and all(u is None for u in used)
    for a, b in zip(with_kernels, without):
        check("weights after training", a, b, 2e-5)


def train_classifier(model_dir, fused_kernels=True):
    import keras

    from realformer_tf import optimization
    from realformer_tf.jobs.tasks.classifier import ClassifierTask
    from realformer_tf.training.trainer import Trainer

    keras.utils.set_random_seed(1)
    config = h.tiny_config(layer_norm_type="normformer", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    batch = h.fixed_pretraining_batch(8, 12, 2, seed=3)
    examples = {k: batch[k] for k in ("input_ids", "input_mask", "segment_ids")}
    examples["label_ids"] = np.arange(8, dtype=np.int32) % 2
    examples["is_real_example"] = np.ones(8, np.int32)
    def optimizer_fn():
        optimizer = optimization.create_optimizer("adamw", 1e-2, 3, 1)
        optimizer.fused_kernels = fused_kernels
        return optimizer

    trainer = Trainer(ClassifierTask(config, num_labels=2, is_regression=False), tf.distribute.get_strategy(),
                      str(model_dir), optimizer_fn=optimizer_fn,
                      steps_per_loop=3, save_checkpoints_steps=1000, global_batch_size=4, jit_compile=False)
    trainer.restore_or_initialize()
    kernels.use_fused_kernels(trainer.model, fused_kernels)
    trainer.train(lambda input_context=None, start_step=0: tf.data.Dataset.from_tensor_slices(examples).batch(4).repeat(),
                  3, log_fn=lambda _: None)
    return trainer.model.get_weights()


def test_failed_build_falls_back_with_one_warning(tmp_path):
    """No compiler: one warning that says so, then TensorFlow's ops with the same result."""
    script = (
        "import numpy as np, tensorflow as tf\n"
        "from realformer_tf import kernels\n"
        "from realformer_tf.layers.normalization import LayerNorm\n"
        "layer = LayerNorm(epsilon=1e-6)\n"
        "x = tf.constant(np.arange(12.0).reshape(3, 4), tf.float32)\n"
        "y = tf.function(layer)(x); y = tf.function(layer)(x + 1)\n"
        "print('OUT', kernels.load(), [round(float(v), 4) for v in y.numpy()[0]])\n"
    )
    env = dict(os.environ, CXX=str(tmp_path / "no-such-compiler"), REALFORMER_TF_CACHE=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "OUT None [-1.3416, -0.4472, 0.4472, 1.3416]" in proc.stdout
    warnings = [line for line in proc.stderr.splitlines() if "Fused CPU kernels unavailable" in line]
    assert len(warnings) == 1 and "no-such-compiler" in warnings[0], proc.stderr[-3000:]
    assert not (tmp_path / "cache").exists() or not list((tmp_path / "cache").glob("*.so"))



def test_keras_fit_uses_them_by_default(monkeypatch):
    """A Keras user's model.fit runs the kernels with no setting at all and trains; its
    predict runs none; with the option off (`use_fused_kernels(model, False)`) the same
    model's fit runs TensorFlow's ops."""
    import keras

    from realformer_tf.layers import TransformerEncoder

    used = []
    ops_for = kernels.ops_for
    monkeypatch.setattr(kernels, "ops_for", lambda x, enabled=True: used.append(ops_for(x, enabled)) or used[-1])
    ids = keras.Input(shape=(None,), dtype="int32")
    x = keras.layers.Embedding(50, 24, mask_zero=True)(ids)
    out = TransformerEncoder(num_layers=2, num_heads=3, intermediate_size=37, layer_norm_type="normformer")(x)
    model = keras.Model(ids, keras.layers.Dense(2)(keras.layers.GlobalAveragePooling1D()(out["sequence_output"])))
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=False)
    rng = np.random.default_rng(7)
    data = rng.integers(1, 50, size=(16, 9)), rng.integers(0, 2, size=16)
    history = model.fit(*data, batch_size=8, epochs=2, verbose=0)
    assert any(u is not None for u in used) and np.all(np.isfinite(history.history["loss"]))
    used.clear()
    model.predict(data[0], verbose=0)
    assert used == []  # inference calls never ask for the kernels
    kernels.use_fused_kernels(model, False)
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=False)
    model.fit(*data, batch_size=8, epochs=1, verbose=0)  # a new trace, with the option off
    assert used and all(u is None for u in used)
