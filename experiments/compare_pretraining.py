"""Learning curves of this package's run_pretraining.py next to an independent
implementation: Hugging Face transformers' BertForPreTraining (--variant=bert) or
x-transformers' NormFormer (--variant=normformer), on the same TFRecords, settings and
data order (experiments/study/compare_pretraining.py says exactly what is shared). Writes
compare_pretraining.json (resumable: finished runs are kept), compare_pretraining.md
and compare_pretraining.png into --output_dir.

  python experiments/compare_pretraining.py --train_file=train.tfrecord \
    --eval_file=eval.tfrecord --vocab_file=kjv_vocab.txt --seeds=1,2,3 \
    --num_train_steps=6000 --num_warmup_steps=600 --learning_rate=3e-3 \
    --output_dir=experiments/results/compare_pretraining

  # NormFormer against x-transformers' encoder with its NormFormer options, 12 layers
  python experiments/compare_pretraining.py --variant=normformer --num_hidden_layers=12 ... \
    --output_dir=experiments/results/compare_normformer

Needs torch and transformers, and x-transformers for --variant=normformer (all in
requirements-test.txt).
"""

import dataclasses
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "tensorflow")  # before Keras is imported
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from absl import flags  # noqa: E402

from experiments.study import compare_pretraining as cp  # noqa: E402
from realformer_tf import app  # noqa: E402
from realformer_tf.errors import UsageError  # noqa: E402

# Every Settings field with a default is a flag of the same name.
_DEFAULTS = {field.name: field.default for field in dataclasses.fields(cp.Settings)
             if field.default is not dataclasses.MISSING}


def define_flags(fv):
    """The comparison's flags on the FlagValues `fv` (run_pretraining.py's names)."""
    flags.DEFINE_string("train_file", None, "Pretraining TFRecords both sides train on.", flag_values=fv)
    flags.DEFINE_string("eval_file", None, "Held-out pretraining TFRecords both sides are evaluated on.",
                        flag_values=fv)
    flags.DEFINE_string("vocab_file", None, "The records' WordPiece vocab (sets vocab_size).", flag_values=fv)
    flags.DEFINE_string("output_dir", None, "Where the results, table, plot and runs go.", flag_values=fv)
    flags.DEFINE_list("seeds", ["1", "2", "3"], "Seeds: initial weights and data order.", flag_values=fv)
    flags.DEFINE_list("sides", None, "Which sides to run: ours and/or the variant's peer (default: both).",
                      flag_values=fv)
    for name, default in _DEFAULTS.items():
        if name == "variant":
            flags.DEFINE_enum(name, default, list(cp.PEERS), "The model both sides train: bert (peer: "
                              "transformers) or normformer (peer: x-transformers).", flag_values=fv)
            continue
        define = flags.DEFINE_float if isinstance(default, float) else flags.DEFINE_integer
        define(name, default, f"Settings.{name} (default {default}).", flag_values=fv)


def run(fv):
    from realformer_tf.data.records import InputError, expand_input_files
    from realformer_tf.data.vocab import check_vocab

    if fv.threads:  # our side's TensorFlow threads (the peer's torch threads: Settings.threads)
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(fv.threads)
        tf.config.threading.set_inter_op_parallelism_threads(fv.threads)
    for name in ("train_file", "eval_file"):
        try:
            expand_input_files(fv[name].value, flag_name=name)
        except InputError:
            raise UsageError(f"--{name}={fv[name].value}: no file matches; give the pretraining TFRecords") from None

    try:
        seeds = [int(s) for s in fv.seeds]
    except ValueError:
        raise UsageError(f"--seeds={','.join(fv.seeds)}: expected comma-separated integers") from None
    settings = cp.Settings(train_file=fv.train_file, eval_file=fv.eval_file,
                           vocab_size=len(check_vocab(fv.vocab_file)),
                           **{name: fv[name].value for name in _DEFAULTS})
    unknown = set(fv.sides or ()) - set(settings.sides)
    if unknown:
        raise UsageError(f"--sides: {', '.join(sorted(unknown))} is not one of {', '.join(settings.sides)} "
                         f"(the sides of --variant={settings.variant})")
    try:
        results = cp.compare(settings, seeds, fv.output_dir, sides=fv.sides)
    except ValueError as e:
        raise UsageError(str(e)) from None
    table = cp.report_markdown(results)
    with open(os.path.join(fv.output_dir, "compare_pretraining.md"), "w") as f:
        f.write(table)
    print(table)
    print(f"plot: {cp.plot(results, os.path.join(fv.output_dir, 'compare_pretraining.png'))}")


def main(argv=None):
    return app.run_program(argv, __doc__, define_flags, run,
                           required_flags=["train_file", "eval_file", "vocab_file", "output_dir"])


if __name__ == "__main__":
    sys.exit(main())
