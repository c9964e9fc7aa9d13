"""First contact with a TPU that is not there: each mistake a new TPU user makes ends
within the --tpu_timeout_s bound with one `error:` line naming the flag, exit status 1
and no traceback (TensorFlow alone prints a 60-line traceback for an unknown name and
hangs forever at an address where nothing answers).

The cases refused before any contact run run_pretraining.py's main in this process; the
ones that contact a TPU are subprocesses (a connection changes TensorFlow's process for
good); the detection rules are unit-tested in-process.
"""

import socket
import time
from types import SimpleNamespace

import pytest

import helpers_data as h
from realformer_tf.training import tpu

MAX_SEQ, MAX_PRED = 16, 4
START_UP_S = 60  # TensorFlow import and set-up on a loaded 2-core machine


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("tpu_first_contact")
    return dict(config=h.write_config(d / "bert_config.json"),
                records=h.write_pretraining_records(d / "records.tfrecord", 4, MAX_SEQ, MAX_PRED),
                out=str(d / "out"))


@pytest.fixture()
def silent_listener():
    """A port that accepts TCP connections (the kernel completes them from the backlog)
    and never says a word: the socket probe passes, gRPC waits forever."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    yield f"grpc://127.0.0.1:{server.getsockname()[1]}"
    server.close()


def _run(files, timeout_s=60, env=None, contacts_a_tpu=True, **flags):
    """Runs run_pretraining.py; returns (CompletedProcess, seconds). A run that gets as
    far as contacting a TPU runs in a subprocess: TensorFlow's connection to a cluster
    changes its process for good (and an abandoned attempt keeps a thread in it); the
    cases refused before any contact run in this process."""
    values = dict(input_file=files["records"], output_dir=files["out"], bert_config_file=files["config"],
                  do_train=True, max_seq_length=MAX_SEQ, max_predictions_per_seq=MAX_PRED,
                  train_batch_size=2, num_train_steps=1, tpu_timeout_s=timeout_s)
    values.update(flags)
    start = time.monotonic()
    if contacts_a_tpu:
        proc = h.run_subprocess("run_pretraining.py", *h.flags(**values), timeout=timeout_s + START_UP_S + 60,
                                env=h.script_env(**(env or {})))
    else:
        proc = h.run_script("run_pretraining.py", *h.flags(**values), env=env)
    return proc, time.monotonic() - start


GS = dict(input_file="gs://no-such-bucket/records.tfrecord", output_dir="gs://no-such-bucket/out")


@pytest.mark.serial  # timed bounds
def test_unknown_tpu_name(files):
    proc, seconds = _run(files, tpu="my-tpu", **GS)
    line = h.one_error_line(proc, "--tpu=my-tpu", "could not look up", "--tpu=local", "grpc://")
    assert seconds < 60 + START_UP_S, (seconds, line)


@pytest.mark.serial  # timed bounds
def test_unreachable_address_fails_at_once(files):
    # Port 9 (discard) on localhost: nothing listens there on a test machine.
    proc, seconds = _run(files, tpu="grpc://127.0.0.1:9", **GS)
    h.one_error_line(proc, "--tpu=grpc://127.0.0.1:9", "nothing answers at 127.0.0.1:9")
    assert seconds < 60 + START_UP_S


@pytest.mark.slow
@pytest.mark.serial  # timed bounds
def test_address_that_never_answers_ends_at_the_bound(files, silent_listener):
    bound = 5
    proc, seconds = _run(files, timeout_s=bound, tpu=silent_listener, **GS)
    h.one_error_line(proc, f"--tpu={silent_listener}", f"did not start within {bound} s", "--tpu_timeout_s")
    assert bound <= seconds < bound + START_UP_S


def test_tpu_vm_without_tpu_flag(files):
    proc, _ = _run(files, env=dict(TPU_ACCELERATOR_TYPE="v4-8"), contacts_a_tpu=False)
    h.one_error_line(proc, "TPU VM", "TPU_ACCELERATOR_TYPE=v4-8", "--tpu=local")


def test_local_paths_with_a_tpu_node(files):
    proc, seconds = _run(files, tpu="grpc://10.0.0.2:8470", input_file=files["records"],
                         output_dir="gs://no-such-bucket/out", init_checkpoint="/tmp/bert_model.ckpt",
                         contacts_a_tpu=False)
    line = h.one_error_line(proc, f"--input_file={files['records']}", "--init_checkpoint=/tmp/bert_model.ckpt",
                             "--tpu=grpc://10.0.0.2:8470", "gs://")
    assert "--output_dir" not in line
    assert seconds < START_UP_S  # decided offline, before any network access


def test_local_tpu_on_a_machine_without_one(files):
    proc, _ = _run(files, tpu="local")
    h.one_error_line(proc, "--tpu=local", "could not be started", "TPU VM")


# -- the rules, in-process -------------------------------------------------------------

def test_tpu_vm_evidence_from_devices(tmp_path):
    assert tpu.tpu_vm_evidence(str(tmp_path), environ={}) is None
    (tmp_path / "accel0").touch()
    assert tpu.tpu_vm_evidence(str(tmp_path), environ={}) == f"found {tmp_path / 'accel0'}"
    assert tpu.tpu_vm_evidence("/nonexistent", environ={"TPU_ACCELERATOR_TYPE": "v5litepod-8"}) == (
        "TPU_ACCELERATOR_TYPE=v5litepod-8 is set")


def test_vfio_groups_count_only_with_libtpu(tmp_path, monkeypatch):
    (tmp_path / "vfio").mkdir()
    (tmp_path / "vfio" / "vfio").touch()  # the VFIO container: present without any device
    assert tpu.tpu_vm_evidence(str(tmp_path), environ={}) is None
    (tmp_path / "vfio" / "0").touch()
    monkeypatch.setattr(tpu.importlib.util, "find_spec", lambda name: object() if name == "libtpu" else None)
    assert tpu.tpu_vm_evidence(str(tmp_path), environ={}) == f"found {tmp_path / 'vfio' / '0'} and libtpu"
    monkeypatch.setattr(tpu.importlib.util, "find_spec", lambda name: None)
    assert tpu.tpu_vm_evidence(str(tmp_path), environ={}) is None


def _flags(**values):
    """Flag values as an options object (absl FlagValues works the same): unset ones absent."""
    return SimpleNamespace(**values)


@pytest.mark.parametrize("path, local", [
    ("/data/x", True), ("relative/x", True), ("file:///data/x", True), ("ram://x", True),
    ("gs://bucket/x", False), ("s3://bucket/x", False), ("gs://a/x,/local/y", True),
])
def test_worker_paths_must_be_remote(path, local):
    flags = _flags(tpu="grpc://10.0.0.2:8470", output_dir=path)
    if local:
        with pytest.raises(tpu.TpuSetupError, match=f"--output_dir={path}"):
            tpu.check_flags(flags, "auto", dev_root="/nonexistent", environ={})
    else:
        tpu.check_flags(flags, "auto", dev_root="/nonexistent", environ={})


def test_local_paths_are_fine_on_a_tpu_vm_and_off_tpu(tmp_path):
    (tmp_path / "accel0").touch()
    tpu.check_flags(_flags(tpu="local", output_dir="/out"), "auto", dev_root=str(tmp_path), environ={})
    # A TPU VM of a pod slice named by its name: its workers are TPU VMs with their own disks.
    tpu.check_flags(_flags(tpu="my-pod", output_dir="/out"), "auto", dev_root=str(tmp_path), environ={})
    # --tpu given but another strategy chosen: the TPU is not used.
    tpu.check_flags(_flags(tpu="my-tpu", output_dir="/out"), "default", dev_root="/nonexistent", environ={})


def test_errors_name_the_flag_the_tpu_was_given_with():
    assert tpu.tpu_flag(_flags(tpu_name="grpc://127.0.0.1:9")) == ("tpu_name", "grpc://127.0.0.1:9")
    assert tpu.tpu_flag(_flags(master="grpc://127.0.0.1:9")) == ("master", "grpc://127.0.0.1:9")
    assert tpu.tpu_flag(_flags(tpu="local", tpu_name="x")) == ("tpu", "local")
    with pytest.raises(tpu.TpuSetupError, match="--tpu_name=grpc://127.0.0.1:9: nothing answers"):
        tpu.connect("grpc://127.0.0.1:9", timeout_s=10, flag_name="tpu_name")


def test_tpu_vm_may_use_its_cpu_when_asked(tmp_path):
    (tmp_path / "accel0").touch()
    with pytest.raises(tpu.TpuSetupError, match="--tpu=local"):
        tpu.check_flags(_flags(), "auto", dev_root=str(tmp_path), environ={})
    tpu.check_flags(_flags(), "default", dev_root=str(tmp_path), environ={})


@pytest.mark.parametrize("address", ["grpc://10.0.0.2", "grpc://:8470", "http://10.0.0.2:8470", "grpc://h:port"])
def test_malformed_address(address):
    with pytest.raises(tpu.TpuSetupError, match="grpc://IP:PORT"):
        tpu.probe("tpu", address, time.monotonic() + 1)


def test_run_bounded_abandons_a_call_that_never_returns():
    import threading

    never = threading.Event()
    start = time.monotonic()
    with pytest.raises(tpu.TpuSetupError, match="gave up"):
        tpu.run_bounded(never.wait, time.monotonic() + 0.5, "gave up")
    assert 0.5 <= time.monotonic() - start < 5
    never.set()
    assert tpu.run_bounded(lambda: 7, time.monotonic() + 5, "unused") == 7
    with pytest.raises(KeyError):
        tpu.run_bounded(lambda: {}["x"], time.monotonic() + 5, "unused")


def test_a_named_tpu_whose_address_is_dead(monkeypatch):
    """The Cloud TPU API knows the name, but its node does not answer: the error names
    the flag as the user gave it, with the address it resolved to."""

    class Resolver:
        def __init__(self, tpu, zone, project):
            assert (tpu, zone, project) == ("my-tpu", "us-central1-b", "proj")

        def master(self):
            return "grpc://127.0.0.1:9"

    monkeypatch.setattr(tpu.tf.distribute.cluster_resolver, "TPUClusterResolver", Resolver)
    with pytest.raises(tpu.TpuSetupError, match=r"^--tpu=my-tpu: nothing answers at 127\.0\.0\.1:9"):
        tpu.connect("my-tpu", "us-central1-b", "proj", timeout_s=10)
