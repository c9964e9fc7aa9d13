"""Data-parallel fine-tuning with `keras.distribution.DataParallel` on the JAX backend.

    python examples/data_parallel_jax.py [--devices 4] [--steps 40]

Without accelerators the example splits the host CPU into `--devices` virtual XLA
devices (XLA_FLAGS=--xla_force_host_platform_device_count), so it shows the real code
path anywhere: the weights are replicated, each global batch is split across the
devices, and the gradients are all-reduced by XLA. On a TPU VM or a multi-GPU machine,
drop the flag and `list_devices()` returns the accelerators.
"""

import argparse
import os
import sys
import time

os.environ["KERAS_BACKEND"] = "jax"


def _parse():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--devices", type=int, default=4, help="virtual CPU devices")
    parser.add_argument("--steps", type=int, default=40, help="training steps")
    parser.add_argument("--batch_size", type=int, default=32, help="global batch size")
    return parser.parse_args()


ARGS = _parse()
# Must be set before JAX initializes its CPU backend.
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                           + f" --xla_force_host_platform_device_count={ARGS.devices}")

import keras  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fine_tune_jax import build_model, make_data  # noqa: E402


def main():
    devices = keras.distribution.list_devices("cpu")
    if ARGS.batch_size % len(devices):
        raise SystemExit(f"error: --batch_size={ARGS.batch_size} must be a multiple of"
                         f" the {len(devices)} devices")
    keras.distribution.set_distribution(keras.distribution.DataParallel(devices=devices))
    keras.utils.set_random_seed(0)
    train_x, train_y = make_data(ARGS.steps * ARGS.batch_size, seed=1)
    eval_x, eval_y = make_data(256, seed=2)
    model = build_model()
    start = time.perf_counter()
    model.fit(train_x, train_y, batch_size=ARGS.batch_size, epochs=1, verbose=2)
    seconds = time.perf_counter() - start
    kernel = model.bert.encoder.blocks[0].attention.query_dense.kernel
    logits = model.predict(eval_x, batch_size=64, verbose=0)["logits"]
    accuracy = float(np.mean(np.argmax(logits, -1) == eval_y["logits"]))
    print(f"devices={len(devices)} weight sharding={kernel.value.sharding}")
    print(f"backend={keras.backend.backend()} steps={ARGS.steps} fit_seconds={seconds:.1f}"
          f" eval_accuracy={accuracy:.3f}")


if __name__ == "__main__":
    main()
