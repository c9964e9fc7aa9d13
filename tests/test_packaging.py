"""The package as users install and start it: the wheel in a fresh venv outside the
repository (console scripts, their flags, one tiny pretraining, the kernel sources),
the user's Keras backend left alone by `import realformer_tf`, the programs choosing
TensorFlow themselves, and no CUDA error lines on a machine without a GPU."""

import ast
import json
import os
import shutil
import subprocess
import sys
import zipfile

import pytest

import helpers_data as h

# Console script -> a flag of its own that its --helpfull must list.
CONSOLE_SCRIPTS = {
    "realformer-pretrain": "--max_predictions_per_seq", "realformer-classifier": "--task_name",
    "realformer-squad": "--doc_stride", "realformer-export": "--export_dir",
    "realformer-convert": "--output_checkpoint", "realformer-create-pretraining-data": "--dupe_factor",
    "realformer-tpu-smoke-check": "--variants", "realformer-make-vocab": "--vocab_type",
    "realformer-generate": "--top_p", "realformer-translation": "--max_tokens",
}


def _home_with_keras_json(tmp_path, backend):
    home = tmp_path / "home"
    (home / ".keras").mkdir(parents=True)
    (home / ".keras" / "keras.json").write_text(json.dumps({"backend": backend}))
    env = {k: v for k, v in os.environ.items() if k not in ("KERAS_BACKEND", "KERAS_HOME")}
    return dict(env, HOME=str(home), PYTHONPATH=h.ROOT, TF_CPP_MIN_LOG_LEVEL="2")


def test_import_keeps_the_users_backend(tmp_path):
    env = _home_with_keras_json(tmp_path, "jax")
    proc = subprocess.run([sys.executable, "-c", "import realformer_tf, keras, os; "
                           "print(keras.backend.backend(), os.environ.get('KERAS_BACKEND'))"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["jax", "None"]


def test_programs_choose_tensorflow_unless_the_user_set_a_backend(tmp_path):
    """keras.json says jax, KERAS_BACKEND unset: the job runs on TensorFlow (it gets as far
    as checking its flags). KERAS_BACKEND=jax set by the user: one BackendError line. Neither
    prints TensorFlow's CUDA probe errors on this machine without a GPU."""
    env = _home_with_keras_json(tmp_path, "jax")
    args = [sys.executable, os.path.join(h.ROOT, "run_pretraining.py"), "--input_file=x",
            "--bert_config_file=y", f"--output_dir={tmp_path / 'out'}"]
    chosen = subprocess.run(args, capture_output=True, text=True, env=env, timeout=300)
    assert chosen.returncode == 1 and chosen.stderr.strip().splitlines() == [
        "error: at least one of --do_train or --do_eval must be True"], chosen.stderr[-3000:]
    explicit = subprocess.run(args, capture_output=True, text=True, env=dict(env, KERAS_BACKEND="jax"), timeout=300)
    lines = explicit.stderr.strip().splitlines()
    assert explicit.returncode == 1 and len(lines) == 1, explicit.stderr[-3000:]
    assert lines[0].startswith("error: run_pretraining.py is TensorFlow only") and "KERAS_BACKEND='jax'" in lines[0]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """The wheel built from a copy of the repository's top-level files and package: a
    build/ folder left in the checkout would add the modules of earlier builds to it."""
    source, out = tmp_path_factory.mktemp("source"), tmp_path_factory.mktemp("dist")
    for name in os.listdir(h.ROOT):
        if os.path.isfile(os.path.join(h.ROOT, name)):
            shutil.copy(os.path.join(h.ROOT, name), source / name)
    shutil.copytree(os.path.join(h.ROOT, "realformer_tf"), source / "realformer_tf",
                    ignore=shutil.ignore_patterns("__pycache__"))
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(source)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (path,) = out.glob("realformer_tf-*.whl")
    return path


def test_wheel_ships_the_launcher_and_the_kernel_sources(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert "realformer_tf_launch.py" in names
    kernel_sources = {os.path.basename(n) for n in names if n.startswith("realformer_tf/kernels/")}
    expected = {p for p in os.listdir(os.path.join(h.ROOT, "realformer_tf", "kernels")) if p.endswith((".cc", ".h"))}
    assert expected and expected <= kernel_sources
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert all(f"{script} = " in text for script in CONSOLE_SCRIPTS)


def _imported_roots(source):
    """The top-level names a Python file imports, by any import statement."""
    roots = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


# The Hugging Face remote code of the BERT and causal-LM variants: package data the
# writers copy into folders, for transformers (torch) to run; the package never imports it.
REMOTE_CODE = tuple(f"realformer_tf/checkpoints/hf/remote_code/{kind}_realformer_{family}.py"
                    for family in ("bert", "causal_lm") for kind in ("configuration", "modeling"))


def test_wheel_holds_no_study_code(wheel):
    """The seeded study and its PyTorch peers stay in the repository (experiments/): the
    wheel holds no realformer_tf.research module, nothing of experiments/, and no file
    that imports torch or x_transformers but the Hugging Face remote code, which it
    ships (as data: no package of its own)."""
    archive = zipfile.ZipFile(wheel)
    names = archive.namelist()
    assert not [n for n in names if n.startswith(("realformer_tf/research/", "experiments/"))]
    assert "realformer_tf/analysis/attention_stats.py" in names  # the user feature stays
    study_imports = {n: _imported_roots(archive.read(n)) & {"torch", "x_transformers", "experiments"}
                     for n in names if n.endswith(".py") and n not in REMOTE_CODE}
    assert not {n: roots for n, roots in study_imports.items() if roots}
    assert set(REMOTE_CODE) <= set(names)
    assert not [n for n in names if n.startswith("realformer_tf/checkpoints/hf/remote_code/__init__")]
    for name in REMOTE_CODE:
        with open(os.path.join(h.ROOT, name), "rb") as f:
            assert archive.read(name) == f.read(), name
        assert _imported_roots(archive.read(name)) <= {"torch", "transformers"}, name


HELP_OF_EVERY_CONSOLE_SCRIPT = r"""
import contextlib, importlib.metadata, io, json, sys
dist = importlib.metadata.distribution("realformer_tf")
helps = {}
for ep in dist.entry_points:
    if ep.group != "console_scripts":
        continue
    entry = ep.load()  # the console script's function, from the installed wheel
    sys.argv = [ep.name, "--helpfull"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            entry()
        except SystemExit as e:
            helps[ep.name] = (e.code, out.getvalue())
print(json.dumps({"location": str(dist.locate_file("")), "helps": helps}))
"""


@pytest.fixture(scope="module")
def wheel_venv(wheel, tmp_path_factory):
    """A new venv with the wheel installed (`pip install --no-deps`) and this
    environment's packages (TensorFlow, ...) behind it through a .pth file, so the
    install takes seconds. Returns (python, bin_dir)."""
    import site
    import sysconfig

    venv = tmp_path_factory.mktemp("wheel_venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
    python = str(venv / "bin" / "python")
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             capture_output=True, text=True, check=True).stdout.strip()
    # Appended after the venv's own site-packages: the wheel's realformer_tf comes first.
    ours = [p for p in site.getsitepackages() if os.path.isdir(p)] or [sysconfig.get_path("purelib")]
    with open(os.path.join(purelib, "zz_test_environment.pth"), "w") as f:
        f.write("\n".join(ours) + "\n")
    install = subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--ignore-installed",
                              "--no-build-isolation", str(wheel)], capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stderr[-3000:]
    return python, venv / "bin"


@pytest.mark.slow
def test_wheel_in_a_fresh_venv_runs_the_console_scripts(wheel, wheel_venv, tmp_path):
    """The wheel installed in a new venv, used from a folder outside the repository:
    every console script of its metadata loads and prints its --helpfull, `pip check`
    finds its requirements met, its [cpu] extra resolves within requirements.txt's pins, the realformer-pretrain executable runs a tiny
    pretraining, and realformer_tf is imported from the venv, not the repository."""
    python, bin_dir = wheel_venv
    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KERAS_BACKEND")}
    check = subprocess.run([python, "-m", "pip", "check"], capture_output=True, text=True, timeout=300)
    assert check.returncode == 0, check.stdout[-3000:]
    # The [cpu] extra resolves within the repository's pins, from what is installed.
    extra = subprocess.run([python, "-m", "pip", "install", "--dry-run", "--no-index", "-c",
                            os.path.join(h.ROOT, "requirements.txt"), f"{wheel}[cpu]"],
                           capture_output=True, text=True, timeout=600)
    assert extra.returncode == 0, extra.stderr[-3000:]
    proc = subprocess.run([python, "-c", HELP_OF_EVERY_CONSOLE_SCRIPT], capture_output=True, text=True,
                          cwd=work, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert os.path.realpath(found["location"]).startswith(os.path.realpath(str(bin_dir.parent)))
    assert set(found["helps"]) == set(CONSOLE_SCRIPTS)
    for script, own_flag in CONSOLE_SCRIPTS.items():
        status, text = found["helps"][script]
        assert status == 0 and own_flag in text, (script, status, text[-2000:])
    records = h.write_pretraining_records(work / "train.tfrecord", 16, 16, 4)
    config = h.write_config(work / "bert_config.json")
    proc = subprocess.run([str(bin_dir / "realformer-pretrain"), f"--input_file={records}",
                           f"--bert_config_file={config}", f"--output_dir={work / 'out'}", "--do_train=True",
                           "--train_batch_size=4", "--max_seq_length=16", "--max_predictions_per_seq=4",
                           "--num_train_steps=3", "--num_warmup_steps=1", "--save_checkpoints_steps=3",
                           "--iterations_per_loop=3"],
                          capture_output=True, text=True, cwd=work, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (work / "out" / "bert_model.ckpt.index").exists()
    imported_from = subprocess.run([python, "-c", "import realformer_tf; print(realformer_tf.__file__)"],
                                   capture_output=True, text=True, cwd=work, env=env, timeout=300).stdout
    assert str(bin_dir.parent) in imported_from and h.ROOT not in imported_from
