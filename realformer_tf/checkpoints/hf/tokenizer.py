"""A Hugging Face folder's tokenizer files, both ways: vocab.txt and
tokenizer_config.json, what transformers' BertTokenizer(Fast) reads, so that
`AutoTokenizer.from_pretrained(folder)` tokenizes as the model was trained."""

import json
import os

from realformer_tf.checkpoints.hf.reading import is_hf_folder
from realformer_tf.errors import ConfigError
from realformer_tf.fileio import atomic_output, gfile

VOCAB_NAME = "vocab.txt"
TOKENIZER_CONFIG_NAME = "tokenizer_config.json"


def write_tokenizer_files(folder, vocab_file, do_lower_case, max_length):
    """vocab.txt (a copy of `vocab_file`) and tokenizer_config.json: what
    transformers' BertTokenizer(Fast) reads, with BERT's special tokens."""
    with gfile().GFile(vocab_file, "rb") as f:
        vocab = f.read()
    with atomic_output(os.path.join(folder, VOCAB_NAME), "wb") as f:
        f.write(vocab)
    settings = {"tokenizer_class": "BertTokenizer", "do_lower_case": bool(do_lower_case),
                "model_max_length": int(max_length), "unk_token": "[UNK]", "sep_token": "[SEP]",
                "pad_token": "[PAD]", "cls_token": "[CLS]", "mask_token": "[MASK]",
                "tokenize_chinese_chars": True, "strip_accents": None}
    with atomic_output(os.path.join(folder, TOKENIZER_CONFIG_NAME)) as f:
        f.write(json.dumps(settings, indent=2, sort_keys=True) + "\n")


def folder_tokenizer(folder):
    """(vocab path, do_lower_case) of a Hugging Face folder that has vocab.txt (its
    tokenizer_config.json's do_lower_case, default true as BertTokenizer's), or None."""
    vocab = os.path.join(folder, VOCAB_NAME)
    if not (is_hf_folder(folder) and gfile().exists(vocab)):
        return None
    settings = {}
    path = os.path.join(folder, TOKENIZER_CONFIG_NAME)
    if gfile().exists(path):
        with gfile().GFile(path) as f:
            try:
                settings = json.load(f)
            except ValueError:
                raise ConfigError(f"{path} is not valid JSON") from None
    return vocab, bool(settings.get("do_lower_case", True))
