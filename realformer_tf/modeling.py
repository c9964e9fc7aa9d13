"""The public BERT API in one import, named as google-research/bert's `modeling.py`.

    from realformer_tf import modeling

    config = modeling.BertConfig.from_json_file("bert_config.json")
    model = modeling.BertModel(config)
    modeling.load_bert_checkpoint(model, "bert_model.ckpt")  # or a Hugging Face folder
    out = model({"input_ids": ids, "input_mask": mask, "segment_ids": seg})

The classes live in `realformer_tf.models.bert`; the original module functions are in
`realformer_tf.models.bert.original_api` (those that name no variable) and
`realformer_tf.compat.bert_functions` (`transformer_model`,
`get_assignment_map_from_checkpoint`, ...), described in docs/original_api.md;
checkpoint I/O (`save_bert_checkpoint(model, prefix)`, `save_hf_folder(model, folder)`)
is `realformer_tf.checkpoints.bert`; `load_bert_checkpoint(model, path)`, which also
decides an unstated variant from the weights, is the BERT family's
(`realformer_tf.families.bert`). This module only re-exports.
"""

from realformer_tf.checkpoints.bert import bert_variables, save_bert_checkpoint, save_hf_folder  # noqa: F401
from realformer_tf.families.bert import load_bert_checkpoint  # noqa: F401
from realformer_tf.errors import CheckpointError, ConfigError  # noqa: F401
from realformer_tf.models.bert.config import BertConfig  # noqa: F401
from realformer_tf.models.bert.model import (  # noqa: F401
    BertClassifierModel, BertModel, BertPretrainingModel, BertSquadModel,
)
from realformer_tf.models.bert.original_api import (  # noqa: F401
    assert_rank, create_attention_mask_from_input_mask, create_initializer, dropout, gelu,
    get_activation, get_shape_list, reshape_from_matrix, reshape_to_matrix,
)
from realformer_tf.compat.bert_functions import (  # noqa: F401
    attention_layer, embedding_lookup, embedding_postprocessor, function_variables,
    get_assignment_map_from_checkpoint, layer_norm, layer_norm_and_dropout, realformer_model,
    reset_variables, residual_attention_layer, transformer_model,
)
