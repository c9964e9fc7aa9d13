"""Hugging Face BERT model folders (`config.json` + `model.safetensors`, and the
tokenizer's `vocab.txt` + `tokenizer_config.json`), both ways.

- `config`: the config.json dialect and the export policy (which variants stock
  transformers computes).
- `names`: Hugging Face tensor names <-> original BERT names.
- `reading`: a folder's tensors under the original names (`HfFolderWeights`), so every
  loader that takes an original-named checkpoint takes a folder too.
- `writing`: `write_hf_folder` (from weights under their original names; a variant's
  folder gets the PyTorch remote code of `remote_code/`, which transformers runs with
  trust_remote_code=True; package data, never imported here).
- `tokenizer`: the tokenizer files.

A model's folder is `checkpoints.bert.save_hf_folder(model, folder)` (this package
knows names, not models):

    bert_checkpoint.save_hf_folder(model, "out/hf", vocab_file="vocab.txt")
    config = hf.load_hf_config("out/hf")
    bert_checkpoint.load_bert_checkpoint(model, "out/hf")
"""

from realformer_tf.checkpoints.hf.config import (  # noqa: F401
    CONFIG_NAME, REMOTE_CODE_DIR, REMOTE_CODE_FILES, VARIANT_ARCHITECTURE_PREFIX, VARIANT_AUTO_MAP,
    VARIANT_FIELDS, VARIANT_MODEL_TYPE, WEIGHTS_NAME, check_exportable, config_from_hf_dict, config_to_hf_dict,
    load_bert_config, load_hf_config, stock_transformers_computes, variant_folder_warning)
from realformer_tf.checkpoints.hf.names import to_hf_name, to_original_name  # noqa: F401
from realformer_tf.checkpoints.hf.reading import FLOAT_DTYPES, HfFolderWeights, is_hf_folder  # noqa: F401
from realformer_tf.checkpoints.hf.tokenizer import (  # noqa: F401
    TOKENIZER_CONFIG_NAME, VOCAB_NAME, folder_tokenizer, write_tokenizer_files)
from realformer_tf.checkpoints.hf.writing import HF_ARCHITECTURES, hf_tensors, write_hf_folder  # noqa: F401
