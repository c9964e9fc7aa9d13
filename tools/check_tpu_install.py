"""Checks a TPU VM environment (the last step of `make install-tpu`).

Passes when `tensorflow-tpu` is installed, plain `tensorflow` is not (both would write
the same tensorflow/ folder), and tensorflow, tensorflow_text, Model Garden and
realformer_tf import together. Exits 1 with one `error:` line otherwise.
"""

import importlib
import importlib.metadata as metadata
import os
import sys


def _installed(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def main():
    tpu_version = _installed("tensorflow-tpu")
    if tpu_version is None:
        sys.exit("error: tensorflow-tpu is not installed; run `make install-tpu`")
    for plain in ("tensorflow", "tensorflow-cpu", "tensorflow-intel"):
        if _installed(plain):
            sys.exit(f"error: {plain} {_installed(plain)} is installed beside tensorflow-tpu "
                     f"{tpu_version}; `pip uninstall {plain}` and rerun `make install-tpu`")
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import realformer_tf_launch

    realformer_tf_launch._prepare_process()  # as the console scripts: no libtpu without TPU chips
    for module in ("tensorflow", "tensorflow_text", "official.nlp.data.squad_lib", "orbit", "realformer_tf"):
        try:
            importlib.import_module(module)
        except Exception as error:  # report any import failure as the install's problem
            sys.exit(f"error: `import {module}` fails in this environment: {type(error).__name__}: {error}")
    import tensorflow as tf

    print(f"TPU stack OK: tensorflow-tpu {tpu_version} (tensorflow {tf.__version__}), "
          f"libtpu {_installed('libtpu')}, tensorflow-text {_installed('tensorflow-text')}, "
          f"tf-models-official {_installed('tf-models-official')}; no plain tensorflow")


if __name__ == "__main__":
    main()
