"""Finding and starting the TPU, with an answer in bounded time.

A TPU is named three ways (TPUClusterResolver's rules):
  --tpu=local                 this machine is a TPU VM (its chips are local devices);
  --tpu=grpc://10.1.2.3:8470  a TPU node's address (older Cloud TPUs);
  --tpu=my-tpu                a TPU's name, looked up through the Cloud TPU API, which
                              works only on a Google Cloud VM of the TPU's project.

TensorFlow itself answers a wrong name with a long urllib traceback and an address
where nothing answers with a silent hang, so before anything reaches TensorFlow:
the flags are checked offline (a TPU VM used without --tpu, local paths given to a TPU
node), a grpc:// address is probed with a plain socket connect, and the resolver,
`experimental_connect_to_cluster` and `initialize_tpu_system` run in a helper thread
that is abandoned at the deadline (`--tpu_timeout_s`). Every failure is a
`TpuSetupError` naming the flag, its value and what to do.
"""

import glob
import importlib.util
import os
import socket
import threading
import time
from urllib.parse import urlparse

import tensorflow as tf

from realformer_tf.errors import TpuSetupError

DEFAULT_TIMEOUT_S = 60
# Flags whose files a TPU node's workers open themselves (the input pipeline runs on
# them; checkpoints are saved by ops on their CPUs): they must be on Cloud Storage.
WORKER_PATH_FLAGS = ("input_file", "output_dir", "init_checkpoint")
# Environment variables Google Cloud sets on TPU VMs run by GKE (and some TPU VM images).
TPU_VM_ENV_VARS = ("TPU_ACCELERATOR_TYPE", "TPU_WORKER_HOSTNAMES")
# Schemes the TPU node's workers cannot read: this machine's disk and memory.
LOCAL_SCHEMES = ("", "file", "ram")


def tpu_vm_evidence(dev_root="/dev", environ=None):
    """Why this machine looks like a TPU VM, or None.

    A TPU VM shows its chips as /dev/accel0.. (TPU v2-v4, v5p) or as numbered VFIO
    groups /dev/vfio/0.. (v5e, v6e; these count only when libtpu is installed, since
    VFIO also serves other pass-through devices); GKE's TPU VMs set TPU_ACCELERATOR_TYPE.
    """
    environ = os.environ if environ is None else environ
    for name in TPU_VM_ENV_VARS:
        if environ.get(name):
            return f"{name}={environ[name]} is set"
    accel = sorted(glob.glob(os.path.join(dev_root, "accel[0-9]*")))
    if accel:
        return f"found {accel[0]}"
    vfio = sorted(p for p in glob.glob(os.path.join(dev_root, "vfio", "*")) if os.path.basename(p).isdigit())
    if vfio and importlib.util.find_spec("libtpu") is not None:
        return f"found {vfio[0]} and libtpu"
    return None


def tpu_flag(flag_values):
    """(flag name, value) of the TPU the flags name: --tpu, --tpu_name or --master.
    `flag_values`: absl FlagValues or any object with those attributes (missing: unset)."""
    for name in ("tpu", "tpu_name", "master"):
        value = getattr(flag_values, name, None)
        if value:
            return name, value
    return "tpu", None


def is_remote(tpu):
    """A TPU node (address or name) whose workers are other machines; not --tpu=local."""
    return bool(tpu) and tpu != "local"


def is_local_path(path):
    return urlparse(path).scheme in LOCAL_SCHEMES


def check_worker_paths(flag_name, tpu, paths):
    """`paths` ({flag: value}) must be gs:// (or another remote file system) when the
    TPU node's workers, not this machine, open them."""
    local = [f"--{flag}={value}" for flag, value in paths.items()
             if value and any(is_local_path(p.strip()) for p in value.split(","))]
    if local:
        raise TpuSetupError(
            f"{', '.join(local)} {'is a local path' if len(local) == 1 else 'are local paths'}, but "
            f"--{flag_name}={tpu} is a remote TPU node, whose workers read the input and write "
            "checkpoints themselves and cannot see this machine's files; use gs://BUCKET/... paths "
            "(or, on a TPU VM, --tpu=local with any paths)")


def check_flags(flag_values, strategy_name, dev_root="/dev", environ=None):
    """The offline checks: a TPU VM used without --tpu (training would silently run on
    its CPU), and local paths handed to a TPU node."""
    flag_name, tpu = tpu_flag(flag_values)
    evidence = tpu_vm_evidence(dev_root, environ)
    if not tpu and evidence and strategy_name in ("auto", "tpu"):
        raise TpuSetupError(
            f"this machine is a TPU VM ({evidence}) but no --tpu was given, so the run would "
            "use only its CPU; add --tpu=local (or --distribution_strategy=default to use the CPU)")
    if strategy_name == "tpu" and not tpu:
        raise TpuSetupError("TPU training needs --tpu naming the TPU: --tpu=local on a TPU VM, "
                            "else the TPU's name or grpc://IP:8470 address")
    if is_remote(tpu) and strategy_name in ("auto", "tpu") and not evidence:
        check_worker_paths(flag_name, tpu, {name: getattr(flag_values, name, None) for name in WORKER_PATH_FLAGS})


def grpc_host_port(address):
    """(host, port) of a grpc://HOST:PORT address."""
    parsed = urlparse(address)
    try:
        port = parsed.port
    except ValueError:
        port = None
    if parsed.scheme != "grpc" or not parsed.hostname or not port:
        raise ValueError(address)
    return parsed.hostname, port


def probe(flag_name, address, deadline, given=None):
    """Fails unless something accepts a TCP connection at a grpc:// address in time;
    the error names the flag with the value the user `given` (a name or the address)."""
    given = given or address
    try:
        host, port = grpc_host_port(address)
    except ValueError:
        raise TpuSetupError(f"--{flag_name}={address} is not an address of the form grpc://IP:PORT "
                            "(a TPU node listens on port 8470)") from None
    try:
        socket.create_connection((host, port), timeout=max(deadline - time.monotonic(), 0.1)).close()
    except OSError as e:
        reason = "no answer in time" if isinstance(e, socket.timeout) else (e.strerror or str(e))
        raise TpuSetupError(
            f"--{flag_name}={given}: nothing answers at {host}:{port} ({reason}); check the TPU is "
            "READY and its address (gcloud compute tpus list), or on a TPU VM use --tpu=local") from None


def run_bounded(fn, deadline, on_timeout):
    """fn() in a daemon thread; its result, its exception, or TpuSetupError(on_timeout)
    once the deadline passes (the thread is abandoned: a gRPC call blocked inside
    TensorFlow cannot be interrupted)."""
    box = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as e:  # re-raised in the caller's thread
            box["error"] = e

    thread = threading.Thread(target=target, name="tpu-first-contact", daemon=True)
    thread.start()
    thread.join(max(deadline - time.monotonic(), 0.0))
    if thread.is_alive():
        raise TpuSetupError(on_timeout)
    if "error" in box:
        raise box["error"]
    return box["value"]


def _first_line(error):
    """`Type: first sentence` of an exception, for a one-line message."""
    text = (str(error).strip().splitlines() or [""])[0]
    if len(text) > 120 and ". " in text:
        text = text.split(". ")[0]
    return f"{type(error).__name__}: {text}".rstrip(": ")


def resolve(flag_name, tpu, zone, project, deadline):
    """The TPUClusterResolver, its TPU's address probed when it is a TPU node."""
    if tpu.startswith("grpc://"):
        probe(flag_name, tpu, deadline)

    def lookup():
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu, zone=zone, project=project)
        return resolver, resolver.master()

    try:
        resolver, master = run_bounded(lookup, deadline, f"--{flag_name}={tpu}: looking up the TPU got "
                                       "no answer within --tpu_timeout_s; check the name, --tpu_zone "
                                       "and --gcp_project")
    except TpuSetupError:
        raise
    except Exception as e:  # the resolver's errors are urllib/HTTP/ValueError, not ours
        raise TpuSetupError(
            f"--{flag_name}={tpu}: could not look up this Cloud TPU ({_first_line(e)}); a TPU name "
            "works only on a Google Cloud VM in the TPU's project (add --tpu_zone/--gcp_project if "
            "they differ); on a TPU VM use --tpu=local, elsewhere the TPU's grpc://IP:8470 address") from None
    if master.startswith("grpc://") and master != tpu:
        probe(flag_name, master, deadline, given=tpu)
    return resolver


def master_device(resolver):
    """The device scope `experimental_connect_to_cluster` enters for a TPU node (the
    task whose address is the resolver's master), or None for a local TPU."""
    master = resolver.master()
    if master in ("", "local"):
        return None
    spec = resolver.cluster_spec()
    for job in spec.jobs:
        for task in spec.task_indices(job):
            address = spec.task_address(job, task)
            if address in master or master in address:
                return f"/job:{job}/replica:0/task:{task}"
    return None


def connect(tpu, zone=None, project=None, timeout_s=DEFAULT_TIMEOUT_S, flag_name="tpu"):
    """Resolves, connects to and initializes the TPU within `timeout_s` seconds in all;
    returns the resolver for tf.distribute.TPUStrategy.

    Args:
        tpu: "local", a grpc://IP:PORT address, or a Cloud TPU name.
        zone, project: where to look a TPU name up (default: this VM's).
        timeout_s: the bound on the whole first contact.
        flag_name: the flag the TPU was given with, for the error messages.

    Raises:
        TpuSetupError: one line saying what failed and what to do.
    """
    deadline = time.monotonic() + timeout_s
    resolver = resolve(flag_name, tpu, zone, project, deadline)

    def start():
        # The master device scope is thread-local: entered below, in the caller's thread.
        tf.config.experimental_connect_to_cluster(resolver, make_master_device_default=False)
        return tf.tpu.experimental.initialize_tpu_system(resolver)

    try:
        run_bounded(start, deadline, (
            f"--{flag_name}={tpu}: the TPU did not start within {timeout_s:g} s; check it is READY and "
            "runs this TensorFlow version (gcloud compute tpus describe), or raise --tpu_timeout_s"))
    except TpuSetupError:
        raise
    except (tf.errors.OpError, RuntimeError, ValueError) as e:
        raise TpuSetupError(
            f"--{flag_name}={tpu}: the TPU could not be started ({_first_line(e)}); "
            + ("is this a TPU VM? Elsewhere name the TPU or give its grpc://IP:8470 address"
               if tpu == "local" else "check it is READY and runs this TensorFlow version")) from None
    device = master_device(resolver)
    if device:
        # What experimental_connect_to_cluster does by default: ops without a device
        # (file reads, dataset creation) run on the TPU node's host, not here.
        tf.device(device).__enter__()
    return resolver
