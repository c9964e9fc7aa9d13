"""Fine-tune a small RealFormer classifier with `model.fit` on the JAX backend.

    python examples/fine_tune_jax.py [--steps 60]

The task is synthetic so the example runs anywhere in seconds: label 1 when token 7
occurs in the (variably padded) sequence. The model is `BertClassifierModel` with
residual attention on (the RealFormer default); swap in
`realformer_tf.checkpoints.bert.load_bert_checkpoint(model, path, skip_heads=True)` to
start from a pretrained
original-name checkpoint instead (reading it uses TensorFlow's checkpoint reader, the
weights then live in JAX arrays).
"""

import argparse
import os
import time

os.environ["KERAS_BACKEND"] = "jax"  # before Keras is imported

import keras  # noqa: E402
import numpy as np  # noqa: E402

from realformer_tf import modeling  # noqa: E402

VOCAB, SEQ_LEN, TARGET = 50, 24, 7


def make_data(n, seed):
    """input_ids / input_mask / segment_ids and labels: does token TARGET occur?"""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(4, SEQ_LEN + 1, size=n)
    ids = rng.integers(8, VOCAB, size=(n, SEQ_LEN)).astype(np.int32)
    labels = rng.integers(0, 2, size=n).astype(np.int32)
    for row in np.flatnonzero(labels):
        ids[row, rng.integers(1, lengths[row])] = TARGET
    mask = (np.arange(SEQ_LEN)[None, :] < lengths[:, None]).astype(np.int32)
    ids = ids * mask
    ids[:, 0] = 2  # a [CLS]-like first token: the pooler reads position 0
    features = {"input_ids": ids, "input_mask": mask, "segment_ids": np.zeros_like(ids)}
    return features, {"logits": labels}


def build_model():
    config = modeling.BertConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=SEQ_LEN, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    model = modeling.BertClassifierModel(config, num_labels=2)
    model.compile(
        optimizer=keras.optimizers.Adam(3e-3),
        loss={"logits": keras.losses.SparseCategoricalCrossentropy(from_logits=True)},
        jit_compile=True,
    )
    return model


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=60, help="training steps (batch 32)")
    args = parser.parse_args()
    keras.utils.set_random_seed(0)
    train_x, train_y = make_data(args.steps * 32, seed=1)
    eval_x, eval_y = make_data(256, seed=2)
    model = build_model()
    start = time.perf_counter()
    model.fit(train_x, train_y, batch_size=32, epochs=1, verbose=2)
    seconds = time.perf_counter() - start
    logits = model.predict(eval_x, batch_size=64, verbose=0)["logits"]
    accuracy = float(np.mean(np.argmax(logits, -1) == eval_y["logits"]))
    print(f"backend={keras.backend.backend()} steps={args.steps} fit_seconds={seconds:.1f}"
          f" eval_accuracy={accuracy:.3f}")


if __name__ == "__main__":
    main()
