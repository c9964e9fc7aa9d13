"""Keras 3 layers: residual (RealFormer) attention, NormFormer blocks, encoder stack."""

from realformer_tf.layers.activations import get_activation
from realformer_tf.layers.admin import AdminProfile
from realformer_tf.layers.attention import ResidualMultiHeadAttention
from realformer_tf.layers.decoder import TransformerDecoder, TransformerDecoderBlock
from realformer_tf.layers.dropout import Dropout
from realformer_tf.layers.embeddings import BertEmbeddings
from realformer_tf.layers.encoder import TransformerEncoder
from realformer_tf.layers.etc import (
    EtcFeedForward,
    GlobalLocalAttention,
    GlobalLocalBlock,
    GlobalLocalEncoder,
)
from realformer_tf.layers.transformer import LAYER_NORM_TYPES, TransformerEncoderBlock

__all__ = [
    "AdminProfile",
    "BertEmbeddings",
    "Dropout",
    "LAYER_NORM_TYPES",
    "ResidualMultiHeadAttention",
    "TransformerDecoder",
    "TransformerDecoderBlock",
    "TransformerEncoder",
    "TransformerEncoderBlock",
    "get_activation",
    "EtcFeedForward",
    "GlobalLocalAttention",
    "GlobalLocalBlock",
    "GlobalLocalEncoder",
]
