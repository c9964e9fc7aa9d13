"""The demo: pretrain a tiny RealFormer on bundled public-domain text, fine-tune it on
a bundled classification task, predict, and report — with the original BERT command
lines, each printed before it runs.

  make demo            (or: python demo.py --output_dir=demo_output)

Data (all in data/, see data/make_sample_data.py): the King James Bible's verses for
pretraining (every 10th document held out, to measure what the model learned), a
WordPiece vocab learned from them, and "Old or New Testament?" verse classification in
the GLUE SST-2 layout (verses disjoint from the pretraining text).
"""

import argparse
import json
import lzma
import os
import subprocess
import sys
import time

PRETRAIN_STEPS = 5000
PRETRAIN_LEARNING_RATE = 3e-3
ROOT = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(ROOT, "data")
VOCAB = os.path.join(DATA, "kjv", "vocab.txt")

# Small enough to leave the context-free plateau (the copy + unigram baseline the report
# prints) within PRETRAIN_STEPS on two cores: at lr 3e-3 it leaves it after about 3,000
# steps. Dropout 0: the pretraining sees each of its 78k sequences about twice.
TINY_REALFORMER = {
    "hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
    "intermediate_size": 256, "hidden_act": "gelu", "hidden_dropout_prob": 0.0,
    "attention_probs_dropout_prob": 0.0, "max_position_embeddings": 64, "type_vocab_size": 2,
    "initializer_range": 0.02, "residual_attention": True,
}


def run(step, args):
    """Runs one of the repository's scripts, echoing its command line and output."""
    command = [sys.executable, os.path.join(ROOT, args[0])] + args[1:]
    print(f"\n=== {step} ===\n$ python " + " \\\n    ".join([args[0]] + args[1:]), flush=True)
    start = time.time()
    subprocess.run(command, check=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    return time.time() - start


def read_results(path):
    with open(path) as f:
        return dict(line.strip().split(" = ", 1) for line in f if " = " in line)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output_dir", default=os.path.join(ROOT, "demo_output"))
    parser.add_argument("--pretrain_steps", type=int, default=PRETRAIN_STEPS)
    parser.add_argument("--finetune_epochs", type=float, default=8.0)
    args = parser.parse_args()
    out = os.path.abspath(args.output_dir)
    os.makedirs(out, exist_ok=True)
    config = os.path.join(out, "bert_config.json")
    with open(config, "w") as f:
        json.dump(dict(TINY_REALFORMER, vocab_size=count_lines(VOCAB)), f, indent=2)

    started = time.time()
    timings = {}
    records = make_pretraining_data(out, timings)
    pretrain_dir = os.path.join(out, "pretraining")
    timings["pretraining"] = run("2/3 Pretrain a tiny RealFormer (4 layers, hidden 64), evaluate on held-out text", [
        "run_pretraining.py", f"--input_file={records['train']}", f"--output_dir={pretrain_dir}",
        "--do_train=True", f"--bert_config_file={config}",
        "--train_batch_size=32", "--max_seq_length=64", "--max_predictions_per_seq=10",
        f"--num_train_steps={args.pretrain_steps}", f"--num_warmup_steps={args.pretrain_steps // 10}",
        f"--learning_rate={PRETRAIN_LEARNING_RATE}", "--iterations_per_loop=250",
        f"--save_checkpoints_steps={args.pretrain_steps // 2}", "--seed=1",
    ])
    timings["pretraining"] += run("2/3 (held-out evaluation)", [
        "run_pretraining.py", f"--input_file={records['heldout']}", f"--output_dir={pretrain_dir}",
        "--do_eval=True", f"--bert_config_file={config}", "--eval_batch_size=32",
        "--max_seq_length=64", "--max_predictions_per_seq=10", "--max_eval_steps=1000",
    ])
    classifier_dir = os.path.join(out, "testament_classifier")
    timings["fine-tuning"] = run("3/3 Fine-tune (Old or New Testament?), evaluate, predict", [
        "run_classifier.py", "--task_name=SST-2", "--do_train=True", "--do_eval=True",
        "--do_predict=True", f"--data_dir={DATA}/testament", f"--vocab_file={VOCAB}",
        f"--bert_config_file={config}", f"--init_checkpoint={pretrain_dir}/bert_model.ckpt",
        "--max_seq_length=64", "--train_batch_size=32", "--learning_rate=1e-3",
        f"--num_train_epochs={args.finetune_epochs}", "--iterations_per_loop=25",
        f"--output_dir={classifier_dir}", "--seed=1",
    ])
    report(pretrain_dir, classifier_dir, records["heldout"], timings, time.time() - started)


def count_lines(path):
    with open(path, encoding="utf-8") as f:
        return sum(1 for line in f if line.strip())


def make_pretraining_data(out, timings):
    """The bundled texts, unpacked, as TFRecords: {"train": path, "heldout": path}."""
    data_dir = os.path.join(out, "pretraining_data")
    os.makedirs(data_dir, exist_ok=True)
    records, start = {}, time.time()
    for name, dupe_factor in (("train", 5), ("heldout", 1)):
        text = os.path.join(data_dir, f"{name}.txt")
        with lzma.open(os.path.join(DATA, "kjv", f"{name}.txt.xz"), "rb") as packed, open(text, "wb") as f:
            f.write(packed.read())
        records[name] = os.path.join(data_dir, f"{name}.tfrecord")
        run(f"1/3 Create pretraining data ({name})", [
            "create_pretraining_data.py", f"--input_file={text}", f"--output_file={records[name]}",
            f"--vocab_file={VOCAB}", "--do_lower_case=True", "--max_seq_length=64",
            "--max_predictions_per_seq=10", "--masked_lm_prob=0.15", "--random_seed=12345",
            f"--dupe_factor={dupe_factor}",
        ])
    timings["data"] = time.time() - start
    return records


def report(pretrain_dir, classifier_dir, heldout_records, timings, total):
    from experiments.study.study_stats import plateau_baselines
    from realformer_tf import app

    # The baselines read the records with TensorFlow: probe its devices without the cuInit line.
    app.start_devices_quietly()
    pre = read_results(os.path.join(pretrain_dir, "eval_results.txt"))
    unigram, copy_unigram = plateau_baselines(heldout_records, 64, 10)
    fin = read_results(os.path.join(classifier_dir, "eval_results.txt"))
    with open(os.path.join(DATA, "testament", "test.tsv"), encoding="utf-8") as f:
        sentences = [line.rstrip("\n").split("\t", 1)[1] for line in f][1:]
    with open(os.path.join(DATA, "testament", "test_labels.txt")) as f:
        gold = [int(line) for line in f]
    with open(os.path.join(classifier_dir, "test_results.tsv")) as f:
        probs = [[float(p) for p in line.split("\t")] for line in f]
    predicted = [int(p[1] > p[0]) for p in probs]
    test_accuracy = sum(p == g for p, g in zip(predicted, gold)) / len(gold)
    names = ("Old", "New")

    print("\n=== Demo results ===")
    print(f"pretraining  (step {pre['global_step']}, held-out text): masked LM accuracy "
          f"{float(pre['masked_lm_accuracy']):.3f}, masked LM loss {float(pre['masked_lm_loss']):.3f}, "
          f"next-sentence accuracy {float(pre['next_sentence_accuracy']):.3f}")
    print(f"             context-free baselines on the same masks: copy + unigram {copy_unigram:.3f} "
          f"(the shown token, else the most frequent one), unigram {unigram:.3f}; above them, "
          "the model uses the context")
    print(f"fine-tuning  dev accuracy {float(fin['eval_accuracy']):.3f} (chance 0.5), dev loss "
          f"{float(fin['eval_loss']):.3f}")
    print(f"prediction   test accuracy {test_accuracy:.3f} on {len(gold)} held-out verses; a few of them:")
    for sentence, p, g in list(zip(sentences, probs, gold))[:4]:
        print(f"  [{names[int(p[1] > p[0])]} {max(p):.2f} | true {names[g]}] {sentence[:90]}")
    print("time: " + ", ".join(f"{k} {v:.0f}s" for k, v in timings.items()) + f"; total {total:.0f}s")
    print(f"outputs: {pretrain_dir}/ (bert_model.ckpt, eval_results.txt, summaries/) and "
          f"{classifier_dir}/ (eval_results.txt, test_results.tsv)")


if __name__ == "__main__":
    main()
