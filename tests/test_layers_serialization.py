"""get_config/from_config round trips, `.keras` save/load (safe_mode=True) and training
a subclassed model with model.fit."""

import json

import keras
import numpy as np
import pytest

import numpy_reference as ref
from realformer_tf.layers import (
    BertEmbeddings,
    ResidualMultiHeadAttention,
    TransformerDecoderBlock,
    TransformerEncoder,
    TransformerEncoderBlock,
)

B, L, M, H, N, I = 3, 7, 5, 12, 4, 37

RNG = np.random.default_rng(400)
X = RNG.normal(size=(B, L, H)).astype(np.float32)
MEMORY = RNG.normal(size=(B, M, H)).astype(np.float32)
MASK = ref.padding_mask(B, L, [7, 5, 3])
IDS = RNG.integers(0, 29, size=(B, L)).astype(np.int32)
SEG = RNG.integers(0, 2, size=(B, L)).astype(np.int32)
PREV = RNG.normal(size=(B, N, L, L)).astype(np.float32)

NON_DEFAULT_BLOCK = dict(
    num_heads=N, intermediate_size=I, hidden_act="gelu_exact", hidden_dropout=0.05,
    attention_dropout=0.07, layer_norm_type="normformer", residual_attention=True,
    use_running_mean=True, layer_index=2, head_scale_position="after_projection",
    use_residual_scale=True, initializer_range=0.03, layer_norm_epsilon=1e-6,
)

# (factory, call on a built layer -> list of output tensors)
CASES = {
    "attention": (
        lambda: ResidualMultiHeadAttention(
            num_heads=N, key_dim=5, output_dim=16, dropout=0.1, use_running_mean=True,
            layer_index=3, use_head_scale=True, head_scale_position="after_projection",
            kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.05),
            bias_initializer="ones", value_dim=6, kernel_regularizer=keras.regularizers.L2(1e-3),
            bias_constraint="non_neg", seed=5, name="attn"),
        lambda layer: list(layer(X, MEMORY, attention_mask=MASK[:, :M], prev_scores=PREV[..., :M])),
    ),
    "encoder_block": (
        lambda: TransformerEncoderBlock(name="block", **NON_DEFAULT_BLOCK),
        lambda layer: list(layer(X, attention_mask=MASK, prev_scores=PREV)),
    ),
    "decoder_block": (
        lambda: TransformerDecoderBlock(name="dec", **NON_DEFAULT_BLOCK),
        lambda layer: list(layer(X, MEMORY, self_attention_mask=MASK,
                                 memory_mask=MASK[:, :M], prev_self_scores=PREV,
                                 prev_cross_scores=PREV[..., :M])),
    ),
    "encoder": (
        lambda: TransformerEncoder(
            num_layers=2, kernel_initializer="he_normal", bias_regularizer=keras.regularizers.L1(0.1),
            **{k: v for k, v in NON_DEFAULT_BLOCK.items() if k != "layer_index"}),
        lambda layer: [layer(X, attention_mask=MASK)["sequence_output"]]
        + layer(X, attention_mask=MASK)["attention_scores"],
    ),
    "embeddings": (
        lambda: BertEmbeddings(vocab_size=29, hidden_size=H, max_position_embeddings=9,
                               type_vocab_size=2, hidden_dropout=0.2, initializer_range=0.05,
                               layer_norm_epsilon=1e-7),
        lambda layer: [layer(IDS, SEG)],
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_get_config_from_config_round_trip(case):
    factory, run = CASES[case]
    layer = factory()
    outputs = run(layer)  # builds
    ref.randomize_weights(layer, seed=401)
    outputs = run(layer)
    config = layer.get_config()
    json.dumps(config)  # plain JSON, as bert_config-style tools expect
    clone = type(layer).from_config(config)
    assert clone.get_config() == config
    run(clone)
    assert len(clone.weights) == len(layer.weights)
    assert [w.path.split("/", 1)[1] for w in clone.weights] == [
        w.path.split("/", 1)[1] for w in layer.weights]
    clone.set_weights(layer.get_weights())
    for a, b in zip(run(clone), outputs):
        np.testing.assert_array_equal(ref.to_numpy(a), ref.to_numpy(b))
    # Also through Keras' generic (registered) serialization.
    revived = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert type(revived) is type(layer)
    assert revived.get_config() == config


def test_weight_options_reach_every_projection():
    """Blocks and stacks pass kernel/bias options to every Dense, as KerasHub layers do."""
    encoder = TransformerEncoder(num_layers=2, num_heads=N, intermediate_size=I,
                                 kernel_initializer="zeros", bias_initializer="ones",
                                 kernel_regularizer=keras.regularizers.L2(0.5))
    encoder(X)
    dense = [layer for block in encoder.blocks for layer in (
        block.attention.query_dense, block.attention.output_dense, block.intermediate_dense,
        block.output_dense)]
    for layer in dense:
        assert not np.any(ref.to_numpy(layer.kernel)), layer.path
        assert np.all(ref.to_numpy(layer.bias) == 1.0), layer.path
    assert len(encoder.losses) == 2 * 6  # q, k, v, output, intermediate, output per block


def test_config_preserves_every_option():
    block = TransformerEncoderBlock(**NON_DEFAULT_BLOCK)
    config = block.get_config()
    for key, value in NON_DEFAULT_BLOCK.items():
        assert config[key] == value, key
    enc = TransformerEncoder(num_layers=2, **{k: v for k, v in NON_DEFAULT_BLOCK.items()
                                             if k != "layer_index"})
    clone = TransformerEncoder.from_config(enc.get_config())
    for i, blk in enumerate(clone.blocks):
        assert blk.layer_index == i
        for key, value in NON_DEFAULT_BLOCK.items():
            if key != "layer_index":
                assert getattr(blk, key) == value, key


def _functional_encoder(**kwargs):
    x = keras.Input(shape=(L, H), name="x")
    mask = keras.Input(shape=(L,), dtype="int32", name="mask")
    out = TransformerEncoder(num_layers=2, num_heads=N, intermediate_size=I, name="encoder",
                             **kwargs)(x, attention_mask=mask)
    return keras.Model(
        {"x": x, "mask": mask},
        {"sequence_output": out["sequence_output"], "scores": out["attention_scores"][-1]},
    )


@pytest.mark.parametrize(
    "kwargs",
    [dict(layer_norm_type="post", residual_attention=True, use_running_mean=True),
     dict(layer_norm_type="normformer", residual_attention=True, use_residual_scale=True,
          head_scale_position="after_projection")],
    ids=["post_realformer", "normformer"],
)
def test_keras_file_save_load_identical_outputs(tmp_path, kwargs):
    model = _functional_encoder(**kwargs)
    ref.randomize_weights(model, seed=402)
    inputs = {"x": X, "mask": MASK}
    before = model(inputs, training=False)
    path = str(tmp_path / "encoder.keras")
    keras.saving.save_model(model, path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    after = loaded(inputs, training=False)
    for key in ("sequence_output", "scores"):
        np.testing.assert_array_equal(ref.to_numpy(after[key]), ref.to_numpy(before[key]))
    encoder = loaded.get_layer("encoder")
    assert isinstance(encoder, TransformerEncoder)
    assert encoder.get_config() == model.get_layer("encoder").get_config()


@keras.saving.register_keras_serializable(package="realformer_tf_tests")
class TinyClassifier(keras.Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.encoder = TransformerEncoder(num_layers=2, num_heads=N, intermediate_size=I,
                                          layer_norm_type="pre", use_running_mean=True)
        self.head = keras.layers.Dense(1)

    def call(self, inputs, training=None):
        out = self.encoder(inputs["x"], attention_mask=inputs["mask"], training=training)
        return self.head(out["sequence_output"][:, 0])


def test_subclassed_model_trains_with_fit():
    keras.utils.set_random_seed(403)
    model = TinyClassifier()
    y = RNG.normal(size=(6, 1)).astype(np.float32)
    data = {"x": np.concatenate([X, X[::-1]]), "mask": np.concatenate([MASK, MASK])}
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse", jit_compile=False)
    model(data)  # build
    before = [np.array(w) for w in model.trainable_weights]
    history = model.fit(data, y, batch_size=3, epochs=1, verbose=0)
    losses = history.history["loss"]
    assert len(losses) == 1 and np.isfinite(losses[0])
    assert model.optimizer.iterations.numpy() == 2  # 6 examples / batch 3
    after = [np.array(w) for w in model.trainable_weights]
    changed = [not np.array_equal(a, b) for a, b in zip(before, after)]
    assert len(before) > 10 and all(changed)
