"""The BLEU curve of a run_translation.py run: every training checkpoint it kept, and
its averaged and final checkpoints, scored on held-out pairs (sacreBLEU of the beam or
greedy translations, as run_translation.py scores).

  python experiments/translation_curve.py --run_dir=/tmp/en_es --spm_model_file=/tmp/spm.model \
    --source_file=/tmp/dev.en --reference_file=/tmp/dev.es --max_sentences=300 --beam_size=1 \
    --output=experiments/results/translation_curve

writes `<output>.json` (step -> BLEU, the sacreBLEU signature, the settings) and
`<output>.png` (BLEU against training steps).
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import flags  # noqa: E402

from realformer_tf import app  # noqa: E402


def define_flags(fv):
    flags.DEFINE_string("run_dir", None, "run_translation.py's --output_dir.", flag_values=fv)
    flags.DEFINE_string("spm_model_file", None, "The run's SentencePiece model.", flag_values=fv)
    flags.DEFINE_string("source_file", None, "Held-out source sentences.", flag_values=fv)
    flags.DEFINE_string("reference_file", None, "Their reference translations.", flag_values=fv)
    flags.DEFINE_integer("max_sentences", 300, "The first N pairs (0: all).", flag_values=fv)
    flags.DEFINE_integer("beam_size", 1, "1: greedy.", flag_values=fv)
    flags.DEFINE_float("length_penalty", 0.6, "GNMT's alpha of the beam search.", flag_values=fv)
    flags.DEFINE_string("output", None, "Path prefix of the .json and .png.", flag_values=fv)


def checkpoints(run_dir):
    """[(label, step, prefix)] of the run's kept training checkpoints, then its averaged
    and final ones where present."""
    import tensorflow as tf

    state = tf.train.get_checkpoint_state(run_dir)
    found = [(f"step {int(p.rsplit('-', 1)[1])}", int(p.rsplit("-", 1)[1]), p)
             for p in (state.all_model_checkpoint_paths if state else [])]
    for name in ("averaged_model.ckpt", "translation_model.ckpt"):
        prefix = os.path.join(run_dir, name)
        if tf.io.gfile.exists(prefix + ".index"):
            found.append((name, found[-1][1] if found else None, prefix))
    return found


def run(f):
    from realformer_tf.data import translation as data
    from realformer_tf.data.lm_tokenizer import LmTokenizer
    from realformer_tf.families import get_family
    from realformer_tf.serving.translation_decoding import Translator, corpus_bleu

    family = get_family("translation")
    pairs = data.read_pairs(f.source_file, f.reference_file)
    pairs = pairs[:f.max_sentences] if f.max_sentences else pairs
    model, config = family.load_trained(f.run_dir)
    tokenizer = LmTokenizer.from_files(spm_model_file=f.spm_model_file)
    translator = Translator(model, tokenizer, f.beam_size, f.length_penalty)
    rows, signature = [], None
    for label, step, prefix in checkpoints(f.run_dir):
        family.load_checkpoint(model, prefix)
        bleu, signature = corpus_bleu(translator.translate([s for s, _ in pairs]), [t for _, t in pairs])
        rows.append({"checkpoint": label, "step": step, "bleu": bleu})
        print(f"{label}: BLEU {bleu:.2f}", flush=True)
    result = {"model": config.describe(), "sentences": len(pairs), "source_file": os.path.basename(f.source_file),
              "beam_size": f.beam_size, "length_penalty": f.length_penalty, "sacrebleu": signature, "points": rows}
    with open(f.output + ".json", "w") as out:
        json.dump(result, out, indent=2)
        out.write("\n")
    plot(result, f.output + ".png")
    print(f"Wrote {f.output}.json and {f.output}.png")


def main(argv=None):
    return app.run_program(argv, __doc__, define_flags, run,
                           required_flags=["run_dir", "spm_model_file", "source_file", "reference_file", "output"])


def plot(result, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [(p["step"], p["bleu"]) for p in result["points"] if p["checkpoint"].startswith("step ")]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot([s for s, _ in steps], [b for _, b in steps], marker="o", label="training checkpoints")
    for point in result["points"]:
        if point["checkpoint"] == "averaged_model.ckpt":
            ax.scatter([point["step"]], [point["bleu"]], color="C3", zorder=3, label="averaged")
    search = "greedy" if result["beam_size"] == 1 else f"beam {result['beam_size']}"
    ax.set(xlabel="training step", ylabel="BLEU", title=f"{result['model'].split(' [')[0]}\n"
           f"{result['sentences']} sentences of {result['source_file']}, {search}")
    ax.title.set_fontsize(8)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    sys.exit(main())
