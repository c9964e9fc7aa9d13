"""The benchmarks' encoder inputs as NumPy arrays and their model config, with no
framework imported, so the TensorFlow benchmarks and the JAX-only GPU benchmark build the
same models and feed them the same batches."""

import numpy as np

VOCAB_SIZE = 30522
TYPE_VOCAB_SIZE = 2
MAX_POSITIONS = 512


def bert_config(shape, variant, dropout):
    """The `modeling.BertConfig` of a preset `shape` as `variant`, a name of the variant
    table (`realformer_tf.models.variants`)."""
    from realformer_tf.models import variants

    return variants.variant_config(
        variant,
        vocab_size=VOCAB_SIZE,
        hidden_size=shape["hidden_size"],
        num_hidden_layers=shape["num_layers"],
        num_attention_heads=shape["num_heads"],
        intermediate_size=shape["intermediate_size"],
        hidden_act="gelu",
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout,
        max_position_embeddings=MAX_POSITIONS,
        type_vocab_size=TYPE_VOCAB_SIZE,
    )


def input_arrays(shape, seed):
    """(token ids, padding mask, segment ids), int32 [batch, length]: ragged lengths from
    half to full (the first row full), two segments per row, ids 0 on padding."""
    rng = np.random.default_rng(seed)
    b, l = shape["batch_size"], shape["seq_length"]
    ids = rng.integers(1000, VOCAB_SIZE, size=(b, l), dtype=np.int32)
    lengths = rng.integers(l // 2, l + 1, size=b)
    lengths[0] = l
    pos = np.arange(l)[None, :]
    mask = (pos < lengths[:, None]).astype(np.int32)
    segments = ((pos >= (lengths[:, None] // 2)) & (mask == 1)).astype(np.int32)
    return ids * mask, mask, segments
