"""The fused kernels' cache cannot break a run (realformer_tf/kernels): a corrupt cached
library means one warning and TensorFlow's ops, with the same outputs as with the kernels
off; processes starting on an empty cache compile once; a killed build leaves no
compiler running and no scratch folder after the next build; the compiler's version is
part of the cache key. The compiler here is a stand-in script (a real build takes
15-60 s), which copies the library this test process built."""

import os
import signal
import stat
import subprocess
import sys
import textwrap
import time

import pytest

from realformer_tf import kernels

# Runs one LayerNorm (its fused kernels off when the first argument is "off"); prints
# the output and whether the kernels loaded.
LAYER_NORM_SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np, tensorflow as tf
    from realformer_tf import kernels
    from realformer_tf.layers.normalization import LayerNorm
    layer = LayerNorm(epsilon=1e-6, fused_kernels=sys.argv[1:] != ["off"])
    x = tf.constant(np.linspace(-2.0, 3.0, 21).reshape(3, 7), tf.float32)
    y = tf.function(layer)(x)
    print("LOADED", kernels.load() is not None)
    print("OUT", " ".join(f"{v:.6f}" for v in y.numpy().ravel()))
""")


def _fake_compiler(tmp_path, library, sleep_s=0.0):
    """A $CXX that counts its builds, records its pid, sleeps, then copies `library`."""
    script = tmp_path / "fake-cxx"
    script.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        if [ "$1" = "--version" ]; then echo "fake-cxx 1.0"; exit 0; fi
        echo $$ >> {tmp_path}/compiler.pids
        sleep {sleep_s}
        while [ $# -gt 0 ]; do
          if [ "$1" = "-o" ]; then cp {library} "$2"; exit 0; fi
          shift
        done
        exit 1
    """))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def _env(tmp_path, **extra):
    return dict(os.environ, REALFORMER_TF_CACHE=str(tmp_path / "cache"), **extra)


def _run(script, env, *args):
    return subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, env=env,
                          timeout=300)


def _output(proc):
    assert proc.returncode == 0, proc.stderr[-3000:]
    loaded = [line for line in proc.stdout.splitlines() if line.startswith("LOADED")][0]
    out = [line for line in proc.stdout.splitlines() if line.startswith("OUT")][0]
    return loaded == "LOADED True", out


@pytest.fixture(scope="module")
def built_library():
    library = kernels.load()
    assert library is not None, "the fused kernels did not build on this machine"
    return kernels.library_path()


def _library_path_in(env, monkeypatch):
    for name in ("CXX", "REALFORMER_TF_CACHE"):
        monkeypatch.setenv(name, env[name])
    kernels._compiler_version.cache_clear()
    return str(kernels.library_path())


def test_corrupt_cached_library_warns_once_and_matches_kernels_off(tmp_path, built_library, monkeypatch):
    env = _env(tmp_path, CXX=str(_fake_compiler(tmp_path, built_library)))
    path = _library_path_in(env, monkeypatch)
    os.makedirs(os.path.dirname(path))
    with open(path, "wb") as f:
        f.write(b"\x7fELF garbage, not a library" * 10)
    corrupt = _run(LAYER_NORM_SCRIPT, env)
    loaded, out = _output(corrupt)
    warnings = [line for line in corrupt.stderr.splitlines() if "Fused CPU kernels unavailable" in line]
    assert not loaded and len(warnings) == 1 and "does not load" in warnings[0], corrupt.stderr[-3000:]
    _, out_off = _output(_run(LAYER_NORM_SCRIPT, env, "off"))
    assert out == out_off
    # The bad file was removed: the next run builds (the stand-in copies the real library).
    loaded, out_rebuilt = _output(_run(LAYER_NORM_SCRIPT, env))
    assert loaded and out_rebuilt.split()[1:] and os.path.getsize(path) == os.path.getsize(built_library)


@pytest.mark.serial  # concurrent processes and a kill
def test_processes_starting_together_compile_once(tmp_path, built_library):
    env = _env(tmp_path, CXX=str(_fake_compiler(tmp_path, built_library, sleep_s=3)))
    procs = [subprocess.Popen([sys.executable, "-c", LAYER_NORM_SCRIPT], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [p.communicate(timeout=300) for p in procs]
    for proc, (stdout, stderr) in zip(procs, outputs):
        assert proc.returncode == 0 and "LOADED True" in stdout, stderr[-3000:]
    assert len((tmp_path / "compiler.pids").read_text().split()) == 1


@pytest.mark.serial  # concurrent processes and a kill
def test_killed_build_leaves_no_compiler_and_no_litter(tmp_path, built_library):
    env = _env(tmp_path, CXX=str(_fake_compiler(tmp_path, built_library, sleep_s=60)))
    builder = subprocess.Popen([sys.executable, "-c", LAYER_NORM_SCRIPT], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pids = tmp_path / "compiler.pids"
    deadline = time.time() + 120
    while not (pids.exists() and pids.read_text().strip()) and time.time() < deadline:
        time.sleep(0.2)
    compiler_pid = int(pids.read_text().split()[0])
    builder.send_signal(signal.SIGKILL)
    builder.wait()
    deadline = time.time() + 10
    while os.path.exists(f"/proc/{compiler_pid}") and time.time() < deadline:
        time.sleep(0.1)
    assert not os.path.exists(f"/proc/{compiler_pid}"), "the compiler outlived the killed build"
    # The next build (a quick one) clears the killed build's scratch folder.
    fast = _fake_compiler(tmp_path, built_library)
    loaded, _ = _output(_run(LAYER_NORM_SCRIPT, dict(env, CXX=str(fast))))
    assert loaded
    cache = tmp_path / "cache"
    assert not [p.name for p in cache.iterdir() if p.name.startswith(".build-")]


def test_compiler_version_is_part_of_the_key(tmp_path, built_library, monkeypatch):
    compiler = _fake_compiler(tmp_path, built_library)
    env = _env(tmp_path, CXX=str(compiler))
    first = _library_path_in(env, monkeypatch)
    # The same compiler command, upgraded: another library.
    compiler.write_text(compiler.read_text().replace("fake-cxx 1.0", "fake-cxx 2.0"))
    second = _library_path_in(env, monkeypatch)
    kernels._compiler_version.cache_clear()
    assert first != second
