"""Writing Hugging Face BERT folders from weights under their original BERT names:
`write_hf_folder` writes what `transformers`' BertModel / BertForPreTraining /
BertForSequenceClassification / BertForQuestionAnswering load. Stock `transformers`
computes only vanilla post-LN BERT; other variants are written under the same naming
scheme with the extra weights, our config fields and the PyTorch code that computes them
(`remote_code/`, named by config.json's auto_map), which transformers runs with
`trust_remote_code=True`; this package reads them back too.
A model's folder: `checkpoints.bert.save_hf_folder(model, folder)`, which names its
weights and calls this.
"""

import json
import os

import numpy as np
import safetensors.numpy

from realformer_tf.checkpoints.hf.config import (
    CONFIG_NAME, REMOTE_CODE_DIR, REMOTE_CODE_FILES, WEIGHTS_NAME, check_exportable, config_to_hf_dict,
    stock_transformers_computes)
from realformer_tf.checkpoints.hf.names import to_hf_name
from realformer_tf.checkpoints.hf.tokenizer import write_tokenizer_files
from realformer_tf.fileio import atomic_output, gfile

# The transformers class with the same weights as each model kind (families.KINDS).
HF_ARCHITECTURES = {
    "encoder": "BertModel",
    "pretraining": "BertForPreTraining",
    "classifier": "BertForSequenceClassification",
    "squad": "BertForQuestionAnswering",
}


def hf_tensors(named_arrays, kind):
    """{Hugging Face name: float32 array} of a `kind` model's weights, given
    {original BERT name: array}."""
    architecture = HF_ARCHITECTURES[kind]
    prefixed = architecture != "BertModel"  # transformers' task classes nest it as bert.
    tensors = {}
    for name, array in named_arrays.items():
        if architecture == "BertForQuestionAnswering" and name.startswith("bert/pooler/"):
            continue  # that class has no pooler (unused by the span head)
        hf_name, transpose = to_hf_name(name, prefixed)
        array = np.asarray(array, np.float32)
        tensors[hf_name] = np.ascontiguousarray(array.T if transpose else array)
    return tensors


def write_hf_folder(folder, named_arrays, kind, config, num_labels=None, allow_variant=False,
                    vocab_file=None, do_lower_case=True):
    """Writes a Hugging Face folder: config.json + model.safetensors, and with
    `vocab_file` its tokenizer (vocab.txt + tokenizer_config.json), so that
    `AutoTokenizer.from_pretrained(folder)` tokenizes as the model was trained.

    Vanilla post-LN BERT configs give what `transformers` loads and computes exactly
    (hidden_act translated: our tanh "gelu" -> "gelu_new", "gelu_exact" -> "gelu").
    Residual attention, pre-LN and NormFormer are refused: stock transformers would load
    such a folder and compute plain BERT. With `allow_variant` they are written with
    their extra weights under the same naming scheme, our config fields,
    `model_type` "realformer_bert" (architectures "RealFormerTf<class>") and the
    PyTorch code that computes them (configuration_realformer_bert.py and
    modeling_realformer_bert.py, named by config.json's `auto_map`):
    `transformers.AutoModelFor<Task>.from_pretrained(folder, trust_remote_code=True)`
    loads them, and this package reads them back exactly. The opt-in is the caller's
    to report (convert_checkpoint.py prints one `warning:` line); this function writes
    no log line of its own.

    Args:
        folder: the output directory (created; files replaced atomically).
        named_arrays: {original BERT name: array} of the model's weights.
        kind: the model's kind ("encoder", "pretraining", "classifier", "squad").
        config: its BertConfig.
        num_labels: the classifier's label count (kind "classifier").
        allow_variant: write a variant stock transformers cannot compute (see above).
        vocab_file: the WordPiece vocab the model was trained with (None: no tokenizer
            files; transformers would then load a tokenizer that maps words wrongly).
        do_lower_case: whether that training lower-cased its text.

    Returns:
        `folder`.

    Raises:
        VariantExportError: a variant without `allow_variant`.
    """
    check_exportable(config, folder, allow_variant)
    architecture = HF_ARCHITECTURES[kind]
    hf_config = config_to_hf_dict(config, architecture)
    if architecture == "BertForSequenceClassification":
        hf_config["id2label"] = {str(i): f"LABEL_{i}" for i in range(num_labels)}
        hf_config["label2id"] = {f"LABEL_{i}": i for i in range(num_labels)}
    tensors = hf_tensors(named_arrays, kind)
    gfile().makedirs(folder)
    with atomic_output(os.path.join(folder, WEIGHTS_NAME), "wb") as f:
        f.write(safetensors.numpy.save(tensors, metadata={"format": "pt"}))
    if not stock_transformers_computes(config):
        write_remote_code(folder)  # before the config.json whose auto_map names it
    with atomic_output(os.path.join(folder, CONFIG_NAME)) as f:
        f.write(json.dumps(hf_config, indent=2, sort_keys=True) + "\n")
    if vocab_file:
        write_tokenizer_files(folder, vocab_file, do_lower_case, config.max_position_embeddings)
    return folder


def write_remote_code(folder, names=REMOTE_CODE_FILES):
    """Copies the variants' PyTorch code (`names`, package data of `REMOTE_CODE_DIR`:
    default the BERT variants' `REMOTE_CODE_FILES`; the causal LM's are
    `gpt2.REMOTE_CODE_FILES`) into `folder`, where config.json's auto_map names its
    classes."""
    for name in names:
        with open(os.path.join(REMOTE_CODE_DIR, name), "rb") as f:
            code = f.read()
        with atomic_output(os.path.join(folder, name), "wb") as f:
            f.write(code)
