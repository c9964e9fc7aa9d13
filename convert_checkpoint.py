"""Converts a training checkpoint of run_pretraining/run_classifier/run_squad (e.g.
output_dir/ckpt-2000, or output_dir for the latest) into an original-named BERT
checkpoint that the original scripts and other BERT tools load.

  python convert_checkpoint.py --bert_config_file=out/bert_config.json \
    --input_checkpoint=out/ckpt-2000 --output_checkpoint=/tmp/bert_model.ckpt --task=pretraining

(The other direction needs no conversion: every script takes an original-named
checkpoint as --init_checkpoint.)
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow is imported

from absl import app, flags

from realformer_tf import cli, convert
from realformer_tf.config import BertConfig

flags.DEFINE_string("bert_config_file", None, "The model's bert_config.json.")
flags.DEFINE_string("input_checkpoint", None, "Training checkpoint prefix, or its directory (latest).")
flags.DEFINE_string("output_checkpoint", None, "Prefix of the original-named checkpoint to write.")
flags.DEFINE_enum("task", "pretraining", convert.TASK_MODELS, "Which model the checkpoint holds.")
flags.DEFINE_integer("num_labels", 2, "Classifier labels (task=classifier).")


def main(argv):
    del argv
    f = flags.FLAGS
    config = BertConfig.from_json_file(f.bert_config_file)
    print(config.describe())
    source, written = convert.training_to_original(
        config, f.input_checkpoint, f.output_checkpoint, f.task, f.num_labels
    )
    print(f"Converted {source} -> {written}")


if __name__ == "__main__":
    flags.mark_flags_as_required(["bert_config_file", "input_checkpoint", "output_checkpoint"])
    app.run(cli.run(main))
