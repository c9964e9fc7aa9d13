"""The package used as a Keras user would use it, on the active Keras backend.

Run per backend: `KERAS_BACKEND=jax pytest tests/test_keras_user.py` (the Makefile's
`test` target runs it under tensorflow, jax and torch). Covers: `import realformer_tf`
registering everything (a `.keras` file loads in a fresh process, safe_mode on, no
custom_objects), the Functional API, subclassed models, Keras masks from
`Embedding(mask_zero=True)`, `jit_compile=True`, both mixed-precision policies and
`model.export` (TensorFlow backend).
"""

import os
import subprocess
import sys

import keras
import numpy as np
import pytest

import realformer_tf  # noqa: F401  (registers the layers and models)
from realformer_tf import layers as rl
from realformer_tf import modeling
from realformer_tf.checkpoints import bert as bert_checkpoint

BACKEND = keras.backend.backend()
B, L, PAD, H, N, I, VOCAB = 3, 7, 4, 12, 3, 20, 31
RNG = np.random.default_rng(700)
LENGTHS = [7, 5, 2]
IDS = np.zeros((B, L), np.int32)
for row, n in enumerate(LENGTHS):
    IDS[row, :n] = RNG.integers(1, VOCAB, size=n)


def _np(x):
    return keras.ops.convert_to_numpy(x).astype(np.float64)


def _real(x):
    """The real (unpadded) positions of a [B, L', ...] output, concatenated."""
    x = _np(x)
    return np.concatenate([x[row, :n] for row, n in enumerate(LENGTHS)])


LAYERS = {
    "attention": lambda: rl.ResidualMultiHeadAttention(num_heads=N, key_dim=5, value_dim=3),
    "encoder_block": lambda: rl.TransformerEncoderBlock(
        num_heads=N, intermediate_size=I, layer_norm_type="normformer", hidden_dropout=0.0,
        attention_dropout=0.0),
    "encoder": lambda: rl.TransformerEncoder(
        num_layers=2, num_heads=N, intermediate_size=I, hidden_dropout=0.0,
        attention_dropout=0.0, use_running_mean=True),
}
# The encoder also given an explicit attention_mask tensor: Keras then fills in no
# `mask` argument and the layer reads the Keras mask of its input itself.
LAYERS["encoder_and_attention_mask"] = LAYERS["encoder"]


def _apply(kind, layer, x):
    """The layer's [B, L, H] output on a Keras-masked input, as a user calls it."""
    if kind == "attention":
        return layer(x, x)[0]
    if kind == "encoder_block":
        return layer(x)[0]
    if kind == "encoder_and_attention_mask":
        everything = keras.ops.ones_like(keras.ops.sum(x, axis=-1), dtype="int32")
        return layer(x, attention_mask=everything)["sequence_output"]
    return layer(x)["sequence_output"]


def _masked_model(kind, seed=0, mask_zero=True):
    keras.utils.set_random_seed(seed)
    ids = keras.Input(shape=(None,), dtype="int32", name="ids")
    x = keras.layers.Embedding(VOCAB, H, mask_zero=mask_zero, name="embed")(ids)
    return keras.Model(ids, _apply(kind, LAYERS[kind](), x))


# ------------------------------------------------------------------- Keras masks
@pytest.mark.parametrize("kind", list(LAYERS))
def test_padding_tokens_do_not_move_real_positions(kind):
    """Appending PAD padding ids (0) moves the real positions' outputs by float eps at
    most, as for keras.layers.MultiHeadAttention."""
    model = _masked_model(kind)
    padded = np.concatenate([IDS, np.zeros((B, PAD), np.int32)], axis=1)
    short, long = _real(model(IDS)), _real(model(padded))
    dev = float(np.max(np.abs(short - long)))
    print(f"DEV keras_mask/{BACKEND}/{kind} {dev:.3e}")
    assert dev <= 1e-6, dev
    # The mask really is used: the same model without it moves the outputs.
    unmasked = _masked_model(kind, mask_zero=False)
    unmasked.set_weights(model.get_weights())
    assert np.max(np.abs(_real(unmasked(IDS)) - _real(unmasked(padded)))) > 1e-3


def test_keras_mask_propagates_to_the_outputs():
    ids = keras.ops.convert_to_tensor(IDS)
    x = keras.layers.Embedding(VOCAB, H, mask_zero=True)(ids)
    encoder = LAYERS["encoder"]()
    out = encoder(x)
    from realformer_tf.layers.masking import keras_mask_of

    want = IDS != 0
    np.testing.assert_array_equal(_np(keras_mask_of(out["sequence_output"])), want)
    np.testing.assert_array_equal(_np(keras_mask_of(out["encoder_outputs"][0])), want)
    block_out, scores = LAYERS["encoder_block"]()(x)
    np.testing.assert_array_equal(_np(keras_mask_of(block_out)), want)
    assert keras_mask_of(scores) is None


def test_keras_mask_and_explicit_attention_mask_combine():
    """A Keras mask plus an attention_mask that hides one more key equals an
    attention_mask alone that hides both."""
    layer = rl.ResidualMultiHeadAttention(num_heads=N, key_dim=4)
    x_plain = RNG.normal(size=(B, L, H)).astype("float32")
    layer(x_plain, x_plain)
    keras_mask = (IDS != 0).astype("int32")
    extra = np.ones((B, L), np.int32)
    extra[:, 0] = 0
    out_both, _ = layer(x_plain, x_plain, query_mask=keras_mask, value_mask=keras_mask,
                        attention_mask=extra)
    out_explicit, _ = layer(x_plain, x_plain,
                            attention_mask=keras_mask[:, None, :] * extra[:, None, :]
                            * keras_mask[:, :, None])
    np.testing.assert_allclose(_np(out_both), _np(out_explicit), atol=1e-6)


# --------------------------------------------------------- Functional + .keras
def _functional_classifier():
    keras.utils.set_random_seed(1)
    ids = keras.Input(shape=(None,), dtype="int32", name="ids")
    segments = keras.Input(shape=(None,), dtype="int32", name="segments")
    x = rl.BertEmbeddings(VOCAB, H, max_position_embeddings=16, name="emb")(ids, segments)
    out = rl.TransformerEncoder(num_layers=2, num_heads=N, intermediate_size=I,
                                layer_norm_type="pre", name="encoder")(x)
    att, scores = rl.ResidualMultiHeadAttention(num_heads=N, key_dim=4, name="att")(
        out["sequence_output"], out["sequence_output"],
        prev_scores=out["attention_scores"][-1])
    logits = keras.layers.Dense(2, name="logits")(keras.layers.GlobalAveragePooling1D()(att))
    return keras.Model({"ids": ids, "segments": segments}, {"logits": logits, "scores": scores})


FRESH_PROCESS_LOAD = """
import sys
import keras, numpy as np
import realformer_tf
model = keras.saving.load_model(sys.argv[1], safe_mode=True)
inputs = dict(np.load(sys.argv[2]))
out = model(inputs)
np.save(sys.argv[3], keras.ops.convert_to_numpy(out["logits"]))
"""


def test_keras_file_loads_in_a_fresh_process(tmp_path):
    model = _functional_classifier()
    inputs = {"ids": IDS, "segments": (IDS % 2).astype(np.int32)}
    want = _np(model(inputs)["logits"])
    path = str(tmp_path / "model.keras")
    model.save(path)
    np.savez(tmp_path / "inputs.npz", **inputs)
    env = dict(os.environ, KERAS_BACKEND=BACKEND)
    subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS_LOAD, path, str(tmp_path / "inputs.npz"),
         str(tmp_path / "out.npy")],
        check=True, env=env, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), want, atol=1e-6)


def test_bert_embeddings_in_functional_api_and_too_long_input_names_the_table():
    model = _functional_classifier()
    long_ids = np.ones((1, 17), np.int32)
    with pytest.raises(ValueError, match="max_position_embeddings=16"):
        model({"ids": long_ids, "segments": long_ids})


# ----------------------------------------------------------- subclassed + fit
class UserClassifier(keras.Model):
    """What a user writes: embeddings, our encoder, a pooled head."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.embed = keras.layers.Embedding(VOCAB, H, mask_zero=True)
        self.encoder = rl.TransformerEncoder(num_layers=2, num_heads=N, intermediate_size=I,
                                             layer_norm_type="normformer")
        self.pool = keras.layers.GlobalAveragePooling1D()
        self.head = keras.layers.Dense(2)

    def call(self, ids, training=None):
        x = self.encoder(self.embed(ids), training=training)["sequence_output"]
        return self.head(self.pool(x))


def _labels():
    return (IDS[:, 0] % 2).astype(np.int32)


# jit_compile=True is XLA on TensorFlow and jax.jit on JAX. On PyTorch it means
# torch.compile, which works with these layers but takes minutes per model on a CPU
# (measured: 260 s for the fit below), too long for the test suite.
JIT = BACKEND != "torch"


def test_subclassed_model_fits():
    keras.utils.set_random_seed(2)
    model = UserClassifier()
    model.compile(optimizer=keras.optimizers.Adam(1e-2), jit_compile=JIT,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    ids, labels = np.tile(IDS, (4, 1)), np.tile(_labels(), 4)
    history = model.fit(ids, labels, batch_size=6, epochs=4, verbose=0)
    losses = history.history["loss"]
    assert np.all(np.isfinite(losses)) and losses[-1] < losses[0], losses


@pytest.mark.skipif(not JIT, reason="torch.compile takes minutes on CPU (see JIT)")
def test_jit_compiled_predict_matches_eager():
    model = _masked_model("encoder", seed=3)
    eager = _np(model(IDS))
    model.compile(jit_compile=True)
    np.testing.assert_allclose(model.predict(IDS, verbose=0), eager, atol=2e-5)


# ------------------------------------------------------------- mixed precision
@pytest.fixture
def restore_policy():
    yield
    keras.mixed_precision.set_global_policy("float32")


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_mixed_precision_model_trains_and_stays_close(policy, restore_policy):
    want = _np(_masked_model("encoder", seed=4)(IDS))
    keras.mixed_precision.set_global_policy(policy)
    model = _masked_model("encoder", seed=4)
    got = model(IDS)
    assert keras.backend.standardize_dtype(got.dtype) == policy.split("_")[1]
    tol = 0.1 if policy == "mixed_bfloat16" else 0.02
    assert np.max(np.abs(_real(got) - want[IDS != 0])) < tol
    classifier = UserClassifier()
    classifier.compile(optimizer="adam",
                       loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    loss = classifier.fit(IDS, _labels(), epochs=1, verbose=0).history["loss"][-1]
    assert np.isfinite(loss)


# --------------------------------------------------------------- BertModel
def test_bert_classifier_fits_on_this_backend():
    config = modeling.BertConfig(vocab_size=VOCAB, hidden_size=H, num_hidden_layers=2,
                                 num_attention_heads=N, intermediate_size=I,
                                 max_position_embeddings=16, layer_norm_type="normformer")
    model = modeling.BertClassifierModel(config, num_labels=2)
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss={"logits": keras.losses.SparseCategoricalCrossentropy(from_logits=True)})
    features = {"input_ids": IDS, "input_mask": (IDS != 0).astype(np.int32),
                "segment_ids": np.zeros_like(IDS)}
    loss = model.fit(features, {"logits": _labels()}, epochs=1, verbose=0).history["loss"]
    assert np.all(np.isfinite(loss))


# ------------------------------------------------------------------- export
@pytest.mark.skipif(BACKEND != "tensorflow", reason="SavedModel export is TensorFlow only")
def test_model_export_serves_the_same_numbers(tmp_path):
    import tensorflow as tf

    model = _masked_model("encoder", seed=5)
    want = _np(model(IDS))
    model.export(str(tmp_path / "saved"), format="tf_saved_model")
    loaded = tf.saved_model.load(str(tmp_path / "saved"))  # keep: it owns the variables
    served = loaded.serve(tf.constant(IDS))
    np.testing.assert_allclose(served.numpy(), want, atol=1e-5)


# ------------------------------------------------------------------ docstrings
@pytest.mark.parametrize("module", ["attention", "transformer", "encoder", "embeddings", "folding"])
def test_docstring_examples_run(module):
    import doctest
    import importlib

    mod = importlib.import_module(f"realformer_tf.layers.{module}")
    result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0, result


# ------------------------------------------------------- original-name checkpoints
def test_original_name_checkpoint_round_trip_on_this_backend(tmp_path):
    """save_bert_checkpoint / load_bert_checkpoint (TF1 name-based files, read with
    TensorFlow's reader) move the weights of a model on any backend."""
    config = modeling.BertConfig(vocab_size=VOCAB, hidden_size=H, num_hidden_layers=2,
                                 num_attention_heads=N, intermediate_size=I,
                                 max_position_embeddings=16)
    features = {"input_ids": IDS, "input_mask": (IDS != 0).astype(np.int32)}
    keras.utils.set_random_seed(8)
    source = modeling.BertPretrainingModel(config)
    source.build()
    positions = np.tile(np.array([[1, 0]], np.int32), (B, 1))
    heads = source(dict(features, masked_lm_positions=positions), training=False)
    assert tuple(heads["masked_lm_logits"].shape) == (B, 2, VOCAB)
    assert tuple(heads["next_sentence_logits"].shape) == (B, 2)
    prefix = str(tmp_path / "bert_model.ckpt")
    bert_checkpoint.save_bert_checkpoint(source, prefix)
    keras.utils.set_random_seed(9)
    target = modeling.BertModel(config)
    bert_checkpoint.load_bert_checkpoint(target, prefix)
    want = source.bert(features, training=False)["pooled_output"]
    got = target(features, training=False)["pooled_output"]
    np.testing.assert_array_equal(_np(got), _np(want))


# ------------------------------------------------ what stays TensorFlow says so
@pytest.mark.skipif(BACKEND == "tensorflow", reason="checks the other backends' error")
def test_tensorflow_only_features_name_the_backend():
    from realformer_tf.errors import BackendError
    from realformer_tf.training import distribution
    from realformer_tf.serving import export

    with pytest.raises(BackendError, match=f"tf.distribute training.*KERAS_BACKEND='{BACKEND}'"):
        distribution.get_strategy("one_device")
    with pytest.raises(BackendError, match="SavedModel export is TensorFlow only"):
        export.export_model(None, "/nonexistent", task="classifier", vocab_file="v.txt",
                            do_lower_case=True, max_seq_length=8)


# ------------------------------------------------------- without TensorFlow at all
WITHOUT_TENSORFLOW = r"""
import importlib.util, json, sys
sys.path.append(sys.argv[2])  # run with -S: site-packages minus TensorFlow's packages
assert importlib.util.find_spec("tensorflow") is None
import keras
import numpy as np
import realformer_tf
from realformer_tf import modeling
from realformer_tf.checkpoints import bert as bert_checkpoint

folder = sys.argv[1]
config = modeling.BertConfig(vocab_size=31, hidden_size=12, num_hidden_layers=2,
                             num_attention_heads=3, intermediate_size=20,
                             layer_norm_type="normformer", residual_attention=True)
config.to_json_file(folder + "/bert_config.json")
config = modeling.BertConfig.from_json_file(folder + "/bert_config.json")
model = modeling.BertModel(config)
ids = np.array([[5, 6, 7, 0], [8, 9, 0, 0]], np.int32)
features = {"input_ids": ids, "input_mask": (ids > 0).astype(np.int32)}
want = keras.ops.convert_to_numpy(model(features)["pooled_output"])
model.save(folder + "/model.keras")
got = keras.ops.convert_to_numpy(keras.saving.load_model(folder + "/model.keras")(features)["pooled_output"])
open(folder + "/bert_model.ckpt.index", "wb").close()  # a TF1 checkpoint's visible file
try:
    bert_checkpoint.load_bert_checkpoint(model, folder + "/bert_model.ckpt")
    error = None
except realformer_tf.UserError as e:
    error = str(e)
print(json.dumps({"backend": keras.backend.backend(),
                  "tensorflow_loaded": "tensorflow" in sys.modules,
                  "max_dev": float(np.max(np.abs(got - want))), "checkpoint_error": error}))
"""


# Distributions a Keras user on JAX or PyTorch would not have installed.
TENSORFLOW_DISTRIBUTIONS = {"tensorflow", "tensorflow_text", "tf_keras", "tf_models_official",
                            "official", "tensorboard", "tensorflow_io_gcs_filesystem"}


def _site_packages_without_tensorflow(folder):
    """A folder of links to every installed package except TensorFlow's."""
    folder.mkdir()
    for site in {p for p in sys.path if os.path.basename(p) == "site-packages"}:
        for entry in os.listdir(site):
            name = entry.split("-")[0].split(".")[0].lower()
            if name not in TENSORFLOW_DISTRIBUTIONS and not (folder / entry).exists():
                os.symlink(os.path.join(site, entry), folder / entry)
    return folder


def test_package_imports_and_runs_without_tensorflow(tmp_path):
    """With TensorFlow not installed (a JAX or PyTorch user who never installed it),
    `import realformer_tf` works; configs read from files, BertModel runs, saves and
    loads as a .keras file; a TF1 checkpoint says it needs TensorFlow."""
    backend = "jax" if BACKEND == "tensorflow" else BACKEND
    site = _site_packages_without_tensorflow(tmp_path / "site")
    result = subprocess.run(
        [sys.executable, "-S", "-c", WITHOUT_TENSORFLOW, str(tmp_path), str(site)],
        capture_output=True, text=True, env=dict(os.environ, KERAS_BACKEND=backend),
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    import json

    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["backend"] == backend and not report["tensorflow_loaded"]
    assert report["max_dev"] <= 1e-6
    assert "needs TensorFlow" in report["checkpoint_error"], report["checkpoint_error"]


# ------------------------------------- BertModel / heads inside Functional models
def _functional_bert(head):
    """A Functional model on `keras.Input((None,), "int32")` inputs around BertModel or
    BertClassifierModel, its weights set from fixed NumPy values by original name."""
    import bert_numpy

    cfg = dict(vocab_size=VOCAB, hidden_size=H, num_hidden_layers=2, num_attention_heads=N,
               intermediate_size=I, max_position_embeddings=16, type_vocab_size=2,
               residual_attention=True)
    weights = bert_numpy.random_weights(cfg, np.random.default_rng(27), head=head)
    config = modeling.BertConfig(**cfg)
    inputs = {name: keras.Input((None,), dtype="int32", name=name)
              for name in ("input_ids", "input_mask", "segment_ids")}
    if head is None:
        inner = modeling.BertModel(config)
        outputs = inner(inputs)["pooled_output"]
    else:
        inner = modeling.BertClassifierModel(config, num_labels=2)
        outputs = inner(inputs)["logits"]
    for name, var in bert_checkpoint.bert_variables(inner).items():
        var.assign(weights[name])
    features = {"input_ids": IDS, "input_mask": (IDS != 0).astype(np.int32),
                "segment_ids": (np.arange(L)[None] >= 3).astype(np.int32) * np.ones_like(IDS)}
    want = bert_numpy.bert_forward(weights, cfg, IDS, features["input_mask"],
                                   features["segment_ids"])
    return keras.Model(inputs, outputs), features, want["pooled_output" if head is None else "logits"]


@pytest.mark.parametrize("head", [None, "classifier"])
def test_bert_in_a_functional_model_fits_saves_and_matches_numpy(head, tmp_path):
    """Same numbers as the NumPy BERT (so as the TensorFlow backend's) within 1e-5 on
    every backend; fit two steps; .keras round trip."""
    model, features, want = _functional_bert(head)
    assert np.max(np.abs(_np(model(features)) - want)) <= 1e-5
    target = np.zeros_like(want, np.float32) if head is None else _labels()
    loss = "mse" if head is None else keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=loss)
    history = model.fit(features, target, batch_size=2, epochs=1, steps_per_epoch=2, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    trained = _np(model(features))
    assert np.max(np.abs(trained - want)) > 1e-5  # the fit moved the weights
    path = str(tmp_path / "bert.keras")
    model.save(path)
    reloaded = keras.saving.load_model(path)
    np.testing.assert_allclose(_np(reloaded(features)), trained, atol=1e-6)


def test_functional_bert_too_long_input_names_max_position_embeddings():
    model, features, _ = _functional_bert(None)
    long_ids = np.ones((1, 17), np.int32)
    with pytest.raises(ValueError, match="max_position_embeddings=16"):
        model({"input_ids": long_ids, "input_mask": long_ids, "segment_ids": 0 * long_ids})
