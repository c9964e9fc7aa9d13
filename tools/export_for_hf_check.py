"""Writes random vanilla BERTs of every task (tanh and erf GELU) as Hugging Face folders
with realformer_tf, each with our outputs beside it (outputs.npz), for
tools/check_hf_export.py to compare against stock transformers:

  python tools/export_for_hf_check.py /tmp/ours_hf      # this package's environment
  python tools/check_hf_export.py /tmp/ours_hf/*         # an environment with transformers
"""

import os
import sys

os.environ.setdefault("KERAS_BACKEND", "tensorflow")  # before Keras is imported

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]  # this checkout's package and test helpers
import bert_numpy  # noqa: E402  (random weights under the original names)

from realformer_tf.models.bert.config import BertConfig  # noqa: E402
from realformer_tf.checkpoints import bert as bert_checkpoint  # noqa: E402
from realformer_tf.families import get_family  # noqa: E402
from realformer_tf.checkpoints import hf as hf_checkpoint  # noqa: E402

SIZES = dict(vocab_size=31, hidden_size=15, num_hidden_layers=2, num_attention_heads=3,
             intermediate_size=22, max_position_embeddings=12, type_vocab_size=3,
             residual_attention=False)
HEADS = {"pretraining": "pretraining", "classifier": "classifier", "squad": "squad", "encoder": None}
# our output key -> the transformers output it must equal
RECORDED = {"sequence_output": "last_hidden_state", "masked_lm_logits": "prediction_logits",
            "next_sentence_logits": "seq_relationship_logits", "logits": "logits",
            "start_logits": "start_logits", "end_logits": "end_logits"}


def write(out_dir, task, act, rng, inputs):
    config = BertConfig(**SIZES, hidden_act=act)
    model = get_family("bert").build_model(config, task, num_labels=4)
    weights = bert_numpy.random_weights(config.to_dict(), rng, head=HEADS[task], num_labels=4)
    for name, variable in bert_checkpoint.bert_variables(model).items():
        variable.assign(weights[name])
    feed = dict(inputs)
    if task == "pretraining":
        feed["masked_lm_positions"] = np.tile(np.arange(inputs["input_ids"].shape[1]), (2, 1))
    outputs = model(feed)
    record = {"input_ids": inputs["input_ids"], "attention_mask": inputs["input_mask"],
              "token_type_ids": inputs["segment_ids"]}
    record.update({theirs: np.asarray(outputs[ours]) for ours, theirs in RECORDED.items() if ours in outputs})
    if task == "encoder":
        record["pooler_output"] = np.asarray(outputs["pooled_output"])
    folder = bert_checkpoint.save_hf_folder(model, os.path.join(out_dir, f"{task}_{act}"))
    np.savez(os.path.join(folder, "outputs.npz"), **record)
    print("wrote", folder)


def main(out_dir):
    rng = np.random.default_rng(0)
    inputs = {"input_ids": rng.integers(1, 31, (2, 9)), "segment_ids": rng.integers(0, 3, (2, 9)),
              "input_mask": np.array([[1] * 9, [1] * 6 + [0] * 3])}
    for act in ("gelu", "gelu_exact"):
        for task in HEADS:
            write(out_dir, task, act, rng, inputs)


if __name__ == "__main__":
    main(sys.argv[1])
