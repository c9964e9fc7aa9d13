"""Bad configurations and inputs fail early with a ValueError naming the culprit."""

import numpy as np
import pytest

from realformer_tf.layers import (
    BertEmbeddings,
    ResidualMultiHeadAttention,
    TransformerDecoderBlock,
    TransformerEncoder,
    TransformerEncoderBlock,
)

BLOCKS = [TransformerEncoderBlock, TransformerDecoderBlock]


@pytest.mark.parametrize("cls", BLOCKS + [TransformerEncoder])
def test_invalid_head_scale_position(cls):
    extra = {"num_layers": 2} if cls is TransformerEncoder else {}
    with pytest.raises(ValueError, match="head_scale_position.*'before_fc'"):
        cls(num_heads=4, intermediate_size=8, layer_norm_type="normformer",
            head_scale_position="before_fc", **extra)


def test_invalid_head_scale_position_attention():
    with pytest.raises(ValueError, match="head_scale_position.*'middle'"):
        ResidualMultiHeadAttention(num_heads=2, key_dim=3, use_head_scale=True,
                                   head_scale_position="middle")


@pytest.mark.parametrize("cls", BLOCKS + [TransformerEncoder])
@pytest.mark.parametrize("bad", ["Post", "sandwich", ""])
def test_invalid_layer_norm_type(cls, bad):
    extra = {"num_layers": 2} if cls is TransformerEncoder else {}
    with pytest.raises(ValueError, match=f"layer_norm_type={bad!r}.*normformer"):
        cls(num_heads=4, intermediate_size=8, layer_norm_type=bad, **extra)


@pytest.mark.parametrize("cls", BLOCKS + [TransformerEncoder])
def test_hidden_not_divisible_by_heads(cls):
    extra = {"num_layers": 2} if cls is TransformerEncoder else {}
    layer = cls(num_heads=4, intermediate_size=8, **extra)
    x = np.zeros((2, 3, 10), np.float32)
    args = (x, x) if cls is TransformerDecoderBlock else (x,)
    with pytest.raises(ValueError, match=r"10.*num_heads=4"):
        layer(*args)


@pytest.mark.parametrize("cls", BLOCKS + [TransformerEncoder])
def test_unknown_hidden_act(cls):
    extra = {"num_layers": 2} if cls is TransformerEncoder else {}
    with pytest.raises(ValueError, match=r"hidden_act='gelu_fast'.*gelu"):
        cls(num_heads=4, intermediate_size=8, hidden_act="gelu_fast", **extra)


def test_residual_scale_requires_normformer():
    with pytest.raises(ValueError, match="use_residual_scale.*normformer"):
        TransformerEncoderBlock(num_heads=4, intermediate_size=8, layer_norm_type="pre",
                                use_residual_scale=True)


def test_after_projection_needs_output_divisible_by_heads():
    layer = ResidualMultiHeadAttention(num_heads=4, key_dim=3, output_dim=10,
                                       use_head_scale=True,
                                       head_scale_position="after_projection")
    x = np.zeros((2, 3, 12), np.float32)
    with pytest.raises(ValueError, match="after_projection.*10.*4"):
        layer(x, x)


def test_attention_mask_of_wrong_rank():
    layer = ResidualMultiHeadAttention(num_heads=2, key_dim=3)
    x = np.zeros((2, 3, 6), np.float32)
    with pytest.raises(ValueError, match="attention_mask must have rank"):
        layer(x, x, attention_mask=np.ones((3,), np.int32))


def test_prev_scores_with_other_heads_names_the_argument():
    layer = ResidualMultiHeadAttention(num_heads=3, key_dim=2)
    x = np.zeros((2, 5, 6), np.float32)
    with pytest.raises(ValueError, match=r"prev_scores has shape \(2, 2, 5, 5\).*num_heads=3"):
        layer(x, x, prev_scores=np.zeros((2, 2, 5, 5), np.float32))
    with pytest.raises(ValueError, match="prev_scores.*key_len=5"):
        layer(x, x, prev_scores=np.zeros((2, 3, 5, 4), np.float32))
    block = TransformerEncoderBlock(num_heads=3, intermediate_size=7)
    with pytest.raises(ValueError, match="prev_scores"):
        block(x, prev_scores=np.zeros((2, 4, 5, 5), np.float32))


def test_keras_mask_of_wrong_rank_names_the_argument():
    layer = ResidualMultiHeadAttention(num_heads=2, key_dim=3)
    x = np.zeros((2, 4, 6), np.float32)
    with pytest.raises(ValueError, match=r"query_mask must have rank 2.*\(2, 4, 1\)"):
        layer(x, x, query_mask=np.ones((2, 4, 1), bool))
    with pytest.raises(ValueError, match="value_mask must have rank 2"):
        layer(x, x, value_mask=np.ones((2,), bool))


def test_sequence_longer_than_position_table_names_the_table():
    emb = BertEmbeddings(vocab_size=10, hidden_size=4, max_position_embeddings=6)
    with pytest.raises(ValueError, match="input_ids has sequence length 7.*max_position_embeddings=6"):
        emb(np.zeros((1, 7), np.int32))
    assert tuple(emb(np.zeros((1, 6), np.int32)).shape) == (1, 6, 4)


def test_output_dim_and_output_shape_are_one_argument():
    with pytest.raises(ValueError, match="output_dim=8 and output_shape=8"):
        ResidualMultiHeadAttention(num_heads=2, key_dim=3, output_dim=8, output_shape=8)
    with pytest.raises(ValueError, match=r"output_shape=\(2, 4\)"):
        ResidualMultiHeadAttention(num_heads=2, key_dim=3, output_shape=(2, 4))
