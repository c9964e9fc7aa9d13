"""ETC (Extended Transformer Construction) global-local attention with RealFormer scores.

Modules, one concern each:
  relative   the relative-id scheme (clipped offsets, l2g/g2l sentence ids, padding id)
             and the relative scores q . rel_emb[id] + rel_bias[id]
  blocked    the blocked layout of local attention: blocking, skewing ETC's local
             layout into blocks, band and padding masks
  attention  `GlobalLocalAttention`, the fused long-side and global-side attention
  encoder    `EtcFeedForward`, `GlobalLocalBlock`, `GlobalLocalEncoder`
"""

from realformer_tf.layers.etc.attention import GlobalLocalAttention
from realformer_tf.layers.etc.blocked import GLOBAL_SCORE_LAYOUT, LONG_SCORE_LAYOUT
from realformer_tf.layers.etc.encoder import (
    SIDE_INPUT_NAMES,
    EtcFeedForward,
    GlobalLocalBlock,
    GlobalLocalEncoder,
)
from realformer_tf.layers.etc.relative import (
    l2g_other_id,
    l2g_same_sentence_id,
    padding_relative_id,
    relative_position_ids,
    relative_vocab_size_needed,
    validate_etc_options,
)

__all__ = [
    "GLOBAL_SCORE_LAYOUT",
    "LONG_SCORE_LAYOUT",
    "SIDE_INPUT_NAMES",
    "EtcFeedForward",
    "GlobalLocalAttention",
    "GlobalLocalBlock",
    "GlobalLocalEncoder",
    "l2g_other_id",
    "l2g_same_sentence_id",
    "padding_relative_id",
    "relative_position_ids",
    "relative_vocab_size_needed",
    "validate_etc_options",
]
