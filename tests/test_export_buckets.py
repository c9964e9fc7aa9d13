"""ETC serving runs a batch at the smallest length bucket it fits (signatures.ETC_LENGTH_BUCKETS)
instead of always at max_seq_length: the outputs must be those of the model on the rows
padded to max_seq_length (padding is masked), for batches in each bucket."""

import numpy as np
import pytest
import tensorflow as tf

from realformer_tf import etc_modeling
from realformer_tf.checkpoints import etc_official
from realformer_tf.serving import signatures, text_encoder
from realformer_tf.families import get_family
from realformer_tf.jobs.runner import RunOptions

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(40)]
MAX_SEQ_LENGTH = 160  # > the 128 bucket: two traced lengths, 128 and 160


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    vocab = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    vocab.write_text("".join(t + "\n" for t in VOCAB), encoding="utf-8")
    config = etc_modeling.EtcConfig(
        vocab_size=len(VOCAB), hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=32, max_absolute_position_embeddings=MAX_SEQ_LENGTH, local_radius=5)
    model = etc_modeling.EtcClassifierModel(config, num_labels=3)
    rng = np.random.default_rng(0)
    for name, var in etc_official.etc_variables(model).items():
        base = 1.0 if name.endswith("gamma") else 0.0
        var.assign(base + rng.normal(0, 0.3, var.shape).astype(np.float32))
    options = RunOptions(etc_tokens_per_global=4, max_seq_length=MAX_SEQ_LENGTH)
    encoder = text_encoder.BertTextEncoder(str(vocab), True, MAX_SEQ_LENGTH)
    family = get_family("etc")
    serving = signatures.ServingFunctions(model, "classifier", encoder, ["a", "b", "c"], family=family,
                                      input_options=options)
    assert serving.length_buckets() == [128, MAX_SEQ_LENGTH]
    return serving, model, family, options


def _reference_logits(model, family, options, ids, mask, seg):
    """The model on the rows padded to max_seq_length (what the export did before buckets)."""
    pad = [[0, 0], [0, MAX_SEQ_LENGTH - ids.shape[1]]]
    features = {"input_ids": np.pad(ids, pad), "input_mask": np.pad(mask, pad), "segment_ids": np.pad(seg, pad)}
    features = {k: tf.constant(v, tf.int32) for k, v in features.items()}
    return model(family.adapt_features(features, model.config, options), training=False)["logits"].numpy()


@pytest.mark.slow  # tracing the model at two lengths: ~50 s on 2 busy cores
@pytest.mark.parametrize("width", [9, 128, 129, MAX_SEQ_LENGTH])
def test_each_bucket_equals_padding_to_max(served, width):
    serving, model, family, options = served
    rng = np.random.default_rng(width)
    lengths = np.array([width, max(3, width // 2), 3])
    mask = (np.arange(width)[None, :] < lengths[:, None]).astype(np.int32)
    ids = np.where(mask == 1, rng.integers(5, len(VOCAB), (3, width)), 0).astype(np.int32)
    ids[:, 0] = 2
    seg = ((np.arange(width)[None, :] >= lengths[:, None] // 2) & (mask == 1)).astype(np.int32)
    out = serving.serve_token_ids(tf.constant(ids), tf.constant(mask), tf.constant(seg))
    np.testing.assert_allclose(out["logits"].numpy(), _reference_logits(model, family, options, ids, mask, seg),
                               rtol=1e-5, atol=1e-5)
