"""Bad output paths and shared output folders: checked before training, one clear error.

- --output_dir / --export_dir / convert's and create_pretraining_data's outputs that are
  files, lie under a file, or are not writable: one `error:` line before anything is
  built or trained (the subprocess cases are in test_cli_errors.py);
- two runs into one --output_dir: the second ends with one line naming the first (host,
  pid, start time); a killed run's lock is taken over with a log line;
- temporary file names are unique per process and call;
- in a multi-worker run only the chief writes into the shared output_dir.
"""

import json
import os
import socket
import subprocess
import sys
import time
import types

import pytest

import helpers_data as h
from realformer_tf import fileio
from realformer_tf.jobs import outputs
from realformer_tf.jobs import runner
from realformer_tf.errors import UsageError
from realformer_tf.jobs.outputs import OutputDirLock
from realformer_tf.errors import OutputDirInUseError, OutputPathError


@pytest.fixture()
def a_file(tmp_path):
    path = tmp_path / "a_file.txt"
    path.write_text("not a folder\n")
    return str(path)


# -- the path checks ----------------------------------------------------------------------
def test_output_dir_that_is_a_file_or_lies_under_one_is_refused(tmp_path, a_file):
    with pytest.raises(OutputPathError, match=rf"--output_dir={a_file} is a file, not a folder"):
        outputs.check_output_dir(a_file, "--output_dir")
    under = os.path.join(a_file, "run1", "more")
    with pytest.raises(OutputPathError, match=rf"--export_dir={under} cannot be created: {a_file} is a file"):
        outputs.check_output_dir(under, "--export_dir")
    # Creatable (missing parents too) and existing folders pass, and nothing is created.
    outputs.check_output_dir(str(tmp_path / "new" / "deeper"))
    outputs.check_output_dir(str(tmp_path))
    assert not (tmp_path / "new").exists()


def test_read_only_output_dir_is_refused(tmp_path, monkeypatch):
    # Tests run as root, which chmod does not stop; os.access is what the check asks (it
    # also answers False on a read-only mount), so it stands in for the file system.
    real_access = os.access
    read_only = str(tmp_path / "read_only")
    os.mkdir(read_only)
    monkeypatch.setattr(os, "access", lambda p, mode: False if str(p).startswith(read_only) else real_access(p, mode))
    with pytest.raises(OutputPathError, match=rf"--output_dir={read_only} is not writable"):
        outputs.check_output_dir(read_only)
    with pytest.raises(OutputPathError, match=rf"cannot be created: {read_only} is not writable"):
        outputs.check_output_dir(os.path.join(read_only, "out"))


def test_makedirs_failure_is_one_user_error(a_file):
    with pytest.raises(OutputPathError, match=rf"--output_dir={a_file}/x cannot be created"):
        outputs.makedirs(a_file + "/x")


def test_output_file_and_checkpoint_prefix_checks(tmp_path, a_file):
    with pytest.raises(OutputPathError, match=r"--output_checkpoint=.* is a folder; give a file name .*model.ckpt"):
        outputs.check_output_prefix(str(tmp_path), "--output_checkpoint")
    with pytest.raises(OutputPathError, match=rf"--output_file={a_file}/x.tfrecord: its folder {a_file} is a file"):
        outputs.check_output_file(a_file + "/x.tfrecord", "--output_file")
    outputs.check_output_prefix(str(tmp_path / "new" / "bert_model.ckpt"), "--output_checkpoint")


def test_run_options_are_checked_before_anything_else(tmp_path, a_file):
    ok = str(tmp_path / "out")
    runner.check_output_paths(runner.RunOptions(output_dir=ok, export_dir=str(tmp_path / "export")))
    with pytest.raises(OutputPathError, match="--export_dir="):
        runner.check_output_paths(runner.RunOptions(output_dir=ok, export_dir=a_file))
    with pytest.raises(UsageError, match="--output_dir is required"):
        runner.check_output_paths(runner.RunOptions())
    assert not os.path.exists(ok)


def test_remote_paths_are_checked_for_files_only():
    import tensorflow as tf

    with tf.io.gfile.GFile("ram://paths/a_file", "w") as f:
        f.write("x")
    with pytest.raises(OutputPathError, match="ram://paths/a_file is a file"):
        outputs.check_output_dir("ram://paths/a_file", "--output_dir")
    outputs.check_output_dir("ram://paths/new_folder", "--output_dir")


# -- temporary names ------------------------------------------------------------------------
def test_temporary_names_are_unique_per_process_and_call(tmp_path):
    path = str(tmp_path / "train.tf_record")
    names = {fileio.temporary_name(path) for _ in range(100)}
    assert len(names) == 100
    assert all(n.startswith(f"{path}.incomplete-{os.getpid()}-") for n in names)
    read, write = os.pipe()
    pid = os.fork()  # another process (no TensorFlow call in it)
    if pid == 0:
        os.write(write, fileio.temporary_name(path).encode())
        os._exit(0)
    os.close(write)
    other = os.read(read, 4096).decode()
    os.waitpid(pid, 0)
    os.close(read)
    assert other.startswith(f"{path}.incomplete-{pid}-") and other not in names


# -- the lock -------------------------------------------------------------------------------
def test_lock_is_exclusive_names_its_holder_and_is_released(tmp_path):
    out = str(tmp_path / "out")
    with OutputDirLock(out) as lock:
        info = json.loads(open(lock.path).read())
        assert info["pid"] == os.getpid() and info["host"] == socket.gethostname()
        with pytest.raises(OutputDirInUseError, match=rf"pid {os.getpid()}"):
            OutputDirLock(out).check_free()
        with pytest.raises(OutputDirInUseError) as e:
            OutputDirLock(out).acquire()
        message = str(e.value)
        assert f"--output_dir={out} is in use by another run" in message
        assert f"host {socket.gethostname()}, pid {os.getpid()}, started {info['started']}" in message
    assert not os.path.exists(os.path.join(out, outputs.LOCK_FILE))
    OutputDirLock(out).check_free()
    OutputDirLock(out).acquire().release()  # free again


HOLDER = r"""
import sys, time
from realformer_tf.jobs.outputs import OutputDirLock
OutputDirLock(sys.argv[1]).acquire()
print("locked", flush=True)
time.sleep(120)
"""


def _start_holder(out):
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, out], cwd=h.ROOT, env=h.script_env(),
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_second_run_into_a_used_output_dir_ends_with_one_line_naming_the_first(tmp_path):
    """A real run_pretraining.py started while another process holds --output_dir."""
    out = str(tmp_path / "out")
    records = h.write_pretraining_records(tmp_path / "records.tfrecord", 4, 16, 4)
    config = h.write_config(tmp_path / "bert_config.json")
    holder = _start_holder(out)
    try:
        started = time.time()
        proc = h.run_script("run_pretraining.py", *h.flags(
            input_file=records, output_dir=out, do_train=True, bert_config_file=config, max_seq_length=16,
            max_predictions_per_seq=4, train_batch_size=2, num_train_steps=1000), timeout=300)
        elapsed = time.time() - started
    finally:
        holder.kill()
        holder.wait()
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    assert f"host {socket.gethostname()}, pid {holder.pid}, started " in errors[0]
    assert sorted(os.listdir(out)) == [outputs.LOCK_FILE], os.listdir(out)  # no run_config.json, no checkpoint
    print(f"second run refused after {elapsed:.1f} s (TensorFlow import included)")

    # The holder was killed (kill -9): its lock is stale and the next run takes it over.
    lines = []
    OutputDirLock(out).check_free()  # a killed run's lock file does not count as held
    lock = OutputDirLock(out, log=lines.append).acquire()
    lock.release()
    assert len(lines) == 1 and "Taking over" in lines[0] and f"pid {holder.pid}" in lines[0], lines


def _dead_pid():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_lock_on_other_file_systems(tmp_path):
    """gs:// and the like (ram:// here): written, read back; a killed run's lock on this
    host is taken over, one from another host refused with how to clear it."""
    import tensorflow as tf

    out = "ram://locks/out"
    lock = OutputDirLock(out).acquire()
    with pytest.raises(OutputDirInUseError, match=rf"pid {os.getpid()}"):
        OutputDirLock(out).acquire()
    lock.release()
    assert not tf.io.gfile.exists(lock.path)

    def write(info):
        if tf.io.gfile.exists(lock.path):
            tf.io.gfile.remove(lock.path)  # ram:// "w" does not truncate
        with tf.io.gfile.GFile(lock.path, "w") as f:
            f.write(json.dumps(info))

    write({"host": socket.gethostname(), "pid": _dead_pid(), "started": "earlier"})
    lines = []
    OutputDirLock(out, log=lines.append).acquire().release()
    assert len(lines) == 1 and "Taking over" in lines[0]
    write({"host": "another-host", "pid": 1, "started": "earlier"})
    with pytest.raises(OutputDirInUseError, match=r"host another-host, pid 1, .*delete ram://locks/out/run.lock"):
        OutputDirLock(out).acquire()
    with pytest.raises(OutputDirInUseError, match=r"host another-host"):
        OutputDirLock(out).check_free()
    # A lock left by an earlier process that had this process's pid (a restarted container).
    write({"host": socket.gethostname(), "pid": os.getpid(), "started": "earlier", "token": "old"})
    OutputDirLock(out, log=lines.append).acquire().release()
    assert len(lines) == 2


def test_stale_means_this_host_and_a_gone_process():
    host = socket.gethostname()
    assert outputs.is_stale({"host": host, "pid": _dead_pid()})
    assert not outputs.is_stale({"host": host, "pid": os.getppid()})
    assert not outputs.is_stale({"host": "elsewhere", "pid": _dead_pid()})
    assert not outputs.is_stale({})
    # A live pid that now belongs to another process than the one that wrote the lock.
    assert outputs.is_stale({"host": host, "pid": os.getppid(), "process_start": "not-its-start"})


# -- multi-worker: only the chief writes ------------------------------------------------------
def _worker(task_type, task_id, cluster):
    spec = types.SimpleNamespace(as_dict=lambda: cluster)
    resolver = types.SimpleNamespace(task_type=task_type, task_id=task_id, cluster_spec=lambda: spec)
    return types.SimpleNamespace(cluster_resolver=resolver, num_replicas_in_sync=2)


def test_only_the_chief_locks_and_claims_the_shared_output_dir(tmp_path):
    config = h.tiny_config()
    out = str(tmp_path / "shared")
    cluster = {"worker": ["host0:1", "host1:1"]}
    worker = _worker("worker", 1, cluster)
    scratch = runner.worker_output_dir(out, worker)
    assert scratch == os.path.join(out, "tmp_worker_1")
    with runner.take_output_dir(out, worker, config, {"task": "pretraining"}):
        assert os.listdir(out) == ["tmp_worker_1"] and os.listdir(scratch) == []
    chief = _worker("worker", 0, cluster)
    assert runner.worker_output_dir(out, chief) == out
    with runner.take_output_dir(out, chief, config, {"task": "pretraining"}):
        assert sorted(os.listdir(out)) == [outputs.LOCK_FILE, "run_config.json", "tmp_worker_1"]
    assert sorted(os.listdir(out)) == ["run_config.json", "tmp_worker_1"]  # lock released
    # A non-chief still refuses an output_dir of another model (read-only check).
    other = h.tiny_config(num_hidden_layers=3)
    with pytest.raises(UsageError, match="another model"):
        runner.take_output_dir(out, worker, other, {"task": "pretraining"})


def test_lock_is_released_when_the_claim_fails(tmp_path):
    out = tmp_path / "foreign"
    out.mkdir()
    (out / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-5"\n')
    (out / "model.ckpt-5.index").write_bytes(b"")
    single = types.SimpleNamespace(cluster_resolver=None)
    with pytest.raises(UsageError, match="not written by this tool"):
        runner.take_output_dir(str(out), single, h.tiny_config(), {"task": "pretraining"})
    assert not (out / outputs.LOCK_FILE).exists()
