"""Writing Hugging Face BERT folders: `save_hf_folder` writes what `transformers`'
BertModel / BertForPreTraining / BertForSequenceClassification / BertForQuestionAnswering
load. Stock `transformers` computes only vanilla post-LN BERT; other variants are written
under the same naming scheme with the extra weights and our config fields, and read back
only by this package.

    hf.save_hf_folder(model, "out/hf", vocab_file="vocab.txt")   # BertModel or a task model
    bert_checkpoint.load_bert_checkpoint(model, "out/hf")          # and back (checkpoints.bert)
"""

import json
import os

import numpy as np
import safetensors.numpy

from realformer_tf.checkpoints import bert as bert_names
from realformer_tf.checkpoints.hf.config import (
    CONFIG_NAME, WEIGHTS_NAME, check_exportable, config_to_hf_dict)
from realformer_tf.checkpoints.hf.names import to_hf_name
from realformer_tf.checkpoints.hf.tokenizer import write_tokenizer_files
from realformer_tf.fileio import atomic_output, gfile

# The transformers class with the same weights as each model kind (checkpoints.bert.KINDS).
HF_ARCHITECTURES = {
    "encoder": "BertModel",
    "pretraining": "BertForPreTraining",
    "classifier": "BertForSequenceClassification",
    "squad": "BertForQuestionAnswering",
}


def hf_architecture(model):
    """The transformers class name of a BertModel or task model (see HF_ARCHITECTURES)."""
    return HF_ARCHITECTURES[bert_names.model_kind(model)]


def hf_tensors(model):
    """{Hugging Face name: float32 array} of a BertModel or task model's weights."""
    architecture = hf_architecture(model)
    prefixed = architecture != "BertModel"  # transformers' task classes nest it as bert.
    tensors = {}
    for name, variable in bert_names.bert_variables(model).items():
        if architecture == "BertForQuestionAnswering" and name.startswith("bert/pooler/"):
            continue  # that class has no pooler (unused by the span head)
        hf_name, transpose = to_hf_name(name, prefixed)
        array = np.asarray(variable.numpy(), np.float32)
        tensors[hf_name] = np.ascontiguousarray(array.T if transpose else array)
    return tensors


def save_hf_folder(model, folder, allow_variant=False, vocab_file=None, do_lower_case=True):
    """Writes `model` as a Hugging Face folder: config.json + model.safetensors, and
    with `vocab_file` its tokenizer (vocab.txt + tokenizer_config.json), so that
    `AutoTokenizer.from_pretrained(folder)` tokenizes as the model was trained.

    Vanilla post-LN BERT configs give what `transformers` loads and computes exactly
    (hidden_act translated: our tanh "gelu" -> "gelu_new", "gelu_exact" -> "gelu").
    Residual attention, pre-LN and NormFormer are refused: stock transformers would load
    such a folder and compute plain BERT. With `allow_variant` they are written with
    their extra weights under the same naming scheme, our config fields, and
    `model_type` "realformer_bert" (architectures "RealFormerTf<class>"), which
    transformers' Auto classes refuse; this package reads them back exactly. The opt-in
    is the caller's to report (convert_checkpoint.py prints one `warning:` line); this
    function writes no log line of its own.

    Args:
        model: a BertModel, BertPretrainingModel, BertClassifierModel or BertSquadModel.
        folder: the output directory (created; files replaced atomically).
        allow_variant: write a variant stock transformers cannot compute (see above).
        vocab_file: the WordPiece vocab the model was trained with (None: no tokenizer
            files; transformers would then load a tokenizer that maps words wrongly).
        do_lower_case: whether that training lower-cased its text.

    Returns:
        `folder`.

    Raises:
        VariantExportError: a variant without `allow_variant`.
    """
    check_exportable(model.config, folder, allow_variant)
    architecture = hf_architecture(model)
    config = config_to_hf_dict(model.config, architecture)
    if architecture == "BertForSequenceClassification":
        config["id2label"] = {str(i): f"LABEL_{i}" for i in range(model.num_labels)}
        config["label2id"] = {f"LABEL_{i}": i for i in range(model.num_labels)}
    tensors = hf_tensors(model)
    gfile().makedirs(folder)
    with atomic_output(os.path.join(folder, WEIGHTS_NAME), "wb") as f:
        f.write(safetensors.numpy.save(tensors, metadata={"format": "pt"}))
    with atomic_output(os.path.join(folder, CONFIG_NAME)) as f:
        f.write(json.dumps(config, indent=2, sort_keys=True) + "\n")
    if vocab_file:
        write_tokenizer_files(folder, vocab_file, do_lower_case, model.config.max_position_embeddings)
    return folder
