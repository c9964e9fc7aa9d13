"""Compatibility with code written for google-research/bert's TF1 `modeling.py`.

`bert_functions`: the function-style helpers that create variables under the original
names (`embedding_lookup`, `layer_norm`, `attention_layer`, `transformer_model`, ...)
and `get_assignment_map_from_checkpoint`. `realformer_tf.modeling` re-exports them with
the rest of the original API; new code uses the Keras models and layers instead.
"""
