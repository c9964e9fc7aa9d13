"""tf.function (jit_compile=True, and a dynamic-shape signature) gives the same numbers
as eager execution."""

import numpy as np
import pytest
import tensorflow as tf

import numpy_reference as ref
from realformer_tf.layers import TransformerDecoderBlock, TransformerEncoder

B, L, M, H, N, I = 3, 7, 5, 12, 4, 37


@pytest.mark.parametrize(
    "kwargs",
    [dict(layer_norm_type="post", residual_attention=True, use_running_mean=True),
     dict(layer_norm_type="normformer", residual_attention=True, use_residual_scale=True,
          head_scale_position="after_projection")],
    ids=["post_realformer_mean", "normformer_after_residual_scale"],
)
def test_encoder_stack_jit_matches_eager(kwargs):
    enc = TransformerEncoder(num_layers=2, num_heads=N, intermediate_size=I, **kwargs)
    rng = np.random.default_rng(500)
    x = tf.constant(rng.normal(size=(B, L, H)), tf.float32)
    mask = tf.constant(ref.padding_mask(B, L, [7, 0, 3]))  # includes a fully masked row
    enc(x, attention_mask=mask)
    ref.randomize_weights(enc, seed=501)
    eager = enc(x, attention_mask=mask, training=False)

    @tf.function(jit_compile=True)
    def compiled(x, mask):
        return enc(x, attention_mask=mask, training=False)

    jit = compiled(x, mask)
    # One trace serves the call (no retracing from the dict of lists it returns).
    assert compiled.experimental_get_tracing_count() == 1
    name = "_".join(f"{k}={v}" for k, v in kwargs.items())
    ref.assert_close(f"xla/{name}/sequence_output", jit["sequence_output"],
                     eager["sequence_output"], 1e-5)
    for i in range(2):
        ref.assert_close(f"xla/{name}/attention_scores[{i}]", jit["attention_scores"][i],
                         eager["attention_scores"][i], 1e-5)
        ref.assert_close(f"xla/{name}/encoder_outputs[{i}]", jit["encoder_outputs"][i],
                         eager["encoder_outputs"][i], 1e-5)


def test_decoder_block_jit_matches_eager():
    block = TransformerDecoderBlock(num_heads=N, intermediate_size=I, layer_norm_type="pre")
    rng = np.random.default_rng(510)
    x = tf.constant(rng.normal(size=(B, L, H)), tf.float32)
    memory = tf.constant(rng.normal(size=(B, M, H)), tf.float32)
    memory_mask = tf.constant(ref.padding_mask(B, M, [5, 2, 4]))
    prev_self = tf.constant(rng.normal(size=(B, N, L, L)), tf.float32)
    prev_cross = tf.constant(rng.normal(size=(B, N, L, M)), tf.float32)
    args = dict(memory_mask=memory_mask, prev_self_scores=prev_self,
                prev_cross_scores=prev_cross, training=False)
    block(x, memory, **args)
    ref.randomize_weights(block, seed=511)
    eager = block(x, memory, **args)
    jit = tf.function(lambda x, m: block(x, m, **args), jit_compile=True)(x, memory)
    for name, a, b in zip(["out", "self_scores", "cross_scores"], jit, eager):
        ref.assert_close(f"xla/decoder/{name}", a, b, 1e-5)


def test_encoder_graph_with_unknown_batch_and_length():
    """A serving-style signature with unknown batch and sequence length: one trace
    serves two lengths and matches eager."""
    enc = TransformerEncoder(num_layers=2, num_heads=N, intermediate_size=I,
                             layer_norm_type="normformer", head_scale_position="after_projection")
    rng = np.random.default_rng(520)
    enc(tf.zeros((1, 3, H)))
    ref.randomize_weights(enc, seed=521)

    @tf.function(input_signature=[tf.TensorSpec([None, None, H], tf.float32),
                                  tf.TensorSpec([None, None], tf.int32)])
    def serve(x, mask):
        out = enc(x, attention_mask=mask, training=False)
        return out["sequence_output"], out["attention_scores"][-1]

    for batch, length in [(2, 5), (3, 8)]:
        x = tf.constant(rng.normal(size=(batch, length, H)), tf.float32)
        mask = tf.constant(ref.padding_mask(batch, length, [length] + [2] * (batch - 1)))
        seq, scores = serve(x, mask)
        eager = enc(x, attention_mask=mask, training=False)
        ref.assert_close(f"graph/dynamic/{batch}x{length}/sequence_output", seq,
                         eager["sequence_output"], 1e-5)
        ref.assert_close(f"graph/dynamic/{batch}x{length}/scores", scores,
                         eager["attention_scores"][-1], 1e-5)
    assert serve.experimental_get_tracing_count() == 1
