"""Turns a SQuAD JSON file into long multi-paragraph documents: every `--paragraphs`
consecutive paragraphs of an article become one context (joined by a blank line), each
question re-anchored in it. For long-document question answering with ETC
(`run_squad.py --model_type=etc`), where one window holds the whole context.

  python experiments/make_long_squad.py --input_file=dev-v2.0.json --paragraphs=8 \
    --train_file=/tmp/long/train.json --predict_file=/tmp/long/dev.json --held_out_every=3

Documents go alternately to the training and the held-out file (every
`--held_out_every`-th document is held out), so no context is in both; training
questions keep their first answer only, as training files have one.
"""

import json
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "tensorflow")  # before Keras is imported

from absl import flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from realformer_tf import app  # noqa: E402
from realformer_tf.jobs import cli  # noqa: E402
from realformer_tf.data.records import InputError  # noqa: E402


def define_flags(fv):
    """The program's flags on the FlagValues `fv`."""
    flags.DEFINE_string("input_file", None, "SQuAD v1.1 / v2.0 JSON.", flag_values=fv)
    flags.DEFINE_integer("paragraphs", 8, "Paragraphs per long document.", flag_values=fv)
    flags.DEFINE_integer("held_out_every", 3, "Every n-th document goes to --predict_file.", flag_values=fv)
    flags.DEFINE_string("train_file", None, "Output: training documents (SQuAD JSON).", flag_values=fv)
    flags.DEFINE_string("predict_file", None, "Output: held-out documents (SQuAD JSON).", flag_values=fv)


SEPARATOR = "\n\n"


def join_paragraphs(paragraphs):
    """One paragraph dict whose context is the paragraphs joined; answer offsets moved."""
    context, qas = "", []
    for paragraph in paragraphs:
        offset = len(context) + (len(SEPARATOR) if context else 0)
        context = (context + SEPARATOR if context else "") + paragraph["context"]
        for qa in paragraph["qas"]:
            qa = json.loads(json.dumps(qa))
            for key in ("answers", "plausible_answers"):
                for answer in qa.get(key, []):
                    answer["answer_start"] += offset
                    if not context[answer["answer_start"]:].startswith(answer["text"]):
                        raise InputError(f"question {qa.get('id')!r}: answer {answer['text']!r} is not at its "
                                         f"answer_start in its paragraph; fix the input file's offsets")
            qas.append(qa)
    return {"context": context, "qas": qas}


def first_answers_only(paragraph):
    """Training files have one answer per question (dev files list several)."""
    for qa in paragraph["qas"]:
        for key in ("answers", "plausible_answers"):
            if qa.get(key):
                qa[key] = qa[key][:1]


def long_documents(data, per_document):
    for article in data["data"]:
        paragraphs = article["paragraphs"]
        for start in range(0, len(paragraphs), per_document):
            yield article["title"], join_paragraphs(paragraphs[start:start + per_document])


def _read_squad(path):
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        raise InputError(f"--input_file {path}: {e}") from None
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise InputError(f"--input_file {path} is not SQuAD JSON (no top-level \"data\" list)")
    return data


def run(fv):
    cli.require(fv.paragraphs > 0 and fv.held_out_every > 1,
                f"--paragraphs={fv.paragraphs} must be > 0 and --held_out_every={fv.held_out_every} > 1")
    data = _read_squad(fv.input_file)
    splits = {"train": [], "held_out": []}
    for i, (title, document) in enumerate(long_documents(data, fv.paragraphs)):
        split = "held_out" if (i + 1) % fv.held_out_every == 0 else "train"
        splits[split].append({"title": f"{title} ({i})", "paragraphs": [document]})
    cli.require(splits["held_out"], f"{fv.input_file} makes {len(splits['train'])} document(s) of "
                                    f"--paragraphs={fv.paragraphs}, none held out; lower --paragraphs or "
                                    f"--held_out_every")
    for document in splits["train"]:
        first_answers_only(document["paragraphs"][0])
    for split, path in (("train", fv.train_file), ("held_out", fv.predict_file)):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"version": data.get("version", "v2.0"), "data": splits[split]}, f, ensure_ascii=False)
        docs = splits[split]
        print(f"{path}: {len(docs)} documents, {sum(len(d['paragraphs'][0]['qas']) for d in docs)} questions, "
              f"{max(len(d['paragraphs'][0]['context']) for d in docs)} characters in the longest context")


def main(argv=None):
    return app.run_program(argv, __doc__, define_flags, run, needs_tensorflow=False,
                           required_flags=["input_file", "train_file", "predict_file"])


if __name__ == "__main__":
    sys.exit(main())
