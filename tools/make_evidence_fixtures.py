"""Trains the two copy-task models of tests/test_variant_evidence.py (residual attention
on and off, 4 layers, 1000 steps each, ~1 min on 2 cores) and writes their final
checkpoints and configs under tests/fixtures/copy_task_residual_{on,off}/.

  .venv/bin/python tools/make_evidence_fixtures.py
"""

import os
import shutil
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, ROOT)
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import test_variant_evidence as tve  # noqa: E402


def main():
    with tempfile.TemporaryDirectory() as work:
        for value, prefix in tve.train_copy_models(work, log=print).items():
            target = tve.fixture_dir(value)
            shutil.rmtree(target, ignore_errors=True)
            os.makedirs(target)
            folder = os.path.dirname(prefix)
            for name in os.listdir(folder):
                if name.startswith("bert_model.ckpt") or name == "bert_config.json":
                    shutil.copy(os.path.join(folder, name), target)
            print(f"wrote {target}: {sorted(os.listdir(target))}")


if __name__ == "__main__":
    main()
