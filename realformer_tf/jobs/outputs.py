"""Output paths checked before a job starts, and the lock that keeps two runs out of one
--output_dir.

A bad output path (a file where a folder is needed, a folder that cannot be created or
written) is reported as one error before anything is read, built or trained, not as a
traceback at the first write or, for --export_dir, after the whole training run.

Two runs writing one --output_dir would overwrite each other's checkpoints and
temporary files. The run that claims an output_dir holds `output_dir/run.lock`, which
names it (host, pid, start time); a second run into it ends with one error naming the
first. The lock is released when the run ends, also on an error. A run that was killed
(kill -9, a preemption) cannot release it; the next run takes it over with a log line:

- local paths: the lock is an `fcntl.flock` on run.lock, which the kernel drops when the
  holding process dies, so a killed run's lock is always free again;
- other file systems (gs://, ...): run.lock is written, read back and checked (the
  closest to exclusive creation that `tf.io.gfile` offers; a race between two runs
  started in the same second is caught on a best-effort basis). A lock written on this
  host whose process is gone (or is another process now) is taken over; one from
  another host is refused, and the message says to delete it if that run is gone.
"""

import datetime
import json
import os
import socket
import time
import uuid

from realformer_tf.errors import OutputDirInUseError, OutputPathError
from realformer_tf.fileio import atomic_output, gfile

LOCK_FILE = "run.lock"
_HELD = set()  # tokens of the locks this process holds (a pid match alone is not ours: containers reuse pids)

try:
    import fcntl
except ImportError:  # not POSIX: the gfile protocol below
    fcntl = None


def is_local(path):
    """Whether `path` is a local file system path (no `scheme://` prefix)."""
    return "://" not in str(path)


def check_output_dir(path, flag="--output_dir", label=None):
    """Raises OutputPathError unless `path` is, or can be created as, a writable folder.

    Local paths are checked fully (read-only: nothing is created). On other file systems
    only "is it a file" is checked: a write probe there would cost a round trip and leave
    an object behind.

    Args:
        path: str, the folder a job will write into.
        flag: str, how to name it in the message (e.g. "--export_dir").
        label: str, the message's name for it instead of "<flag>=<path>".

    Example:
        >>> check_output_dir("/etc/hostname", "--output_dir")  # doctest: +SKIP
        OutputPathError: --output_dir=/etc/hostname is a file, not a folder; ...
    """
    path = str(path)
    label = label or f"{flag}={path}"
    if not is_local(path):
        fs = gfile()
        try:
            is_file = fs.exists(path) and not fs.isdir(path)
        except Exception:  # noqa: BLE001  (unreachable now: no network, no credentials yet)
            # The run's own set-up (TPU, credentials) may be what makes the bucket
            # reachable, and its first contact reports such errors in one line; the
            # first write reports anything left.
            return
        if is_file:
            raise OutputPathError(f"{label} is a file, not a folder; give a folder path")
        return
    absolute = os.path.abspath(path)
    if os.path.exists(absolute):
        if not os.path.isdir(absolute):
            raise OutputPathError(f"{label} is a file, not a folder; give a folder path (or move the file)")
        if not os.access(absolute, os.W_OK | os.X_OK):
            raise OutputPathError(f"{label} is not writable (permissions or a read-only file system); "
                                  "give a folder you can write to")
        return
    parent = os.path.dirname(absolute)
    while not os.path.exists(parent):  # the nearest existing folder above it
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise OutputPathError(f"{label} cannot be created: {parent} is a file, not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputPathError(f"{label} cannot be created: {parent} is not writable (permissions or a "
                              "read-only file system); give a folder you can write to")


def check_output_file(path, flag, example="out.tfrecord"):
    """Raises OutputPathError unless the file `path` (or files named `path*`, e.g. a
    checkpoint prefix's .index) can be written: its folder can be created and `path`
    is no folder.

    Args:
        path: str, the file (or prefix) a job will write.
        flag: str, how to name it in the message (e.g. "--output_checkpoint").
        example: str, a file name inside `path` to suggest when `path` is a folder.
    """
    path = str(path)
    folder = os.path.dirname(path)
    if folder:
        check_output_dir(folder, flag, label=f"{flag}={path}: its folder {folder}")
    if gfile().isdir(path):
        raise OutputPathError(f"{flag}={path} is a folder; give a file name (e.g. {path.rstrip('/')}/{example})")


def check_output_prefix(prefix, flag):
    """`check_output_file` for a checkpoint prefix."""
    check_output_file(prefix, flag, example="model.ckpt")


def makedirs(path, flag="--output_dir"):
    """`gfile().makedirs(path)`, a failure (a file in the way, no permission, a
    read-only file system) raised as one OutputPathError naming the flag."""
    try:
        gfile().makedirs(path)
    except Exception as e:  # tf.errors.OpError or OSError, depending on the file system
        if not _is_io_error(e):
            raise
        raise OutputPathError(f"{flag}={path} cannot be created: {_reason(e)}") from None


def _is_io_error(e):
    if isinstance(e, OSError):
        return True
    try:
        import tensorflow as tf
    except ImportError:
        return False
    return isinstance(e, tf.errors.OpError)


def _reason(e):
    text = getattr(e, "message", None) or str(e) or type(e).__name__
    return text.strip().splitlines()[0]


# -- the lock -----------------------------------------------------------------------------
def _process_start(pid):
    """The start time of process `pid` in clock ticks since boot (Linux), or None: with
    the pid it tells a live process from another one that got the same pid later."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, someone else's
        return True
    except OSError:
        return False
    return True


def describe_holder(info):
    """'host H, pid P, started T' for a lock's content (a dict; {} if unreadable)."""
    if not info:
        return "details not readable"
    return f"host {info.get('host', '?')}, pid {info.get('pid', '?')}, started {info.get('started', '?')}"


def is_stale(info, host=None):
    """Whether a lock written by `info`'s run can be taken over: written on this host by
    a process that is gone (or whose pid now belongs to another process, this one
    included). A lock from another host is never stale: its process cannot be seen."""
    host = host or socket.gethostname()
    if not info or info.get("host") != host:
        return False
    pid = info.get("pid")
    if pid == os.getpid():
        return info.get("token") not in _HELD  # an earlier process that had this pid
    if not isinstance(pid, int) or not _pid_alive(pid):
        return True
    started = info.get("process_start")
    return started is not None and _process_start(pid) not in (None, started)


class OutputDirLock:
    """The lock of one output_dir: `acquire` it before writing there, `release` it at
    the end. Also a context manager.

    Args:
        output_dir: str, the folder (created if missing).
        log: callable(str), where a takeover of a killed run's lock is reported.

    Example:
        >>> with OutputDirLock("/tmp/run1"):  # doctest: +SKIP
        ...     train()
    """

    def __init__(self, output_dir, log=print):
        self.output_dir = str(output_dir)
        self.path = os.path.join(self.output_dir, LOCK_FILE)
        self.log = log
        self.info = None
        self._fd = None

    def __enter__(self):
        return self if self.info is not None else self.acquire()  # acquired already: keep it

    def __exit__(self, *exc):
        self.release()

    def _content(self):
        return {"host": socket.gethostname(), "pid": os.getpid(), "process_start": _process_start(os.getpid()),
                "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
                "token": uuid.uuid4().hex}

    def _in_use(self, holder, hint=""):
        return OutputDirInUseError(
            f"--output_dir={self.output_dir} is in use by another run ({describe_holder(holder)}); wait for it "
            f"to end or give another --output_dir{hint}")

    def check_free(self):
        """Raises OutputDirInUseError if another run holds the lock now; takes nothing
        and writes nothing (a cheap early check: `acquire` decides)."""
        if fcntl is not None and is_local(self.output_dir):
            try:
                fd = os.open(self.path, os.O_RDONLY)
            except OSError:
                return  # no lock file (or none readable: acquire reports it)
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError:
                raise self._in_use(_read_fd(fd)) from None
            finally:
                os.close(fd)  # drops the shared lock at once
        elif gfile().exists(self.path):
            holder = _read_json(self.path)
            if not is_stale(holder):
                raise self._in_use(holder, f" (if that run is no longer running, delete {self.path})")

    def acquire(self):
        """Takes the lock; raises OutputDirInUseError naming the run that holds it."""
        makedirs(self.output_dir)
        info = self._content()
        if fcntl is not None and is_local(self.output_dir):
            self._fd = self._acquire_local(info)
        else:
            self._acquire_gfile(info)
        self.info = info
        _HELD.add(info["token"])
        return self

    def _acquire_local(self, info):
        for _ in range(5):  # the file can be removed by its releasing holder between open and flock
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as e:
                raise OutputPathError(f"--output_dir={self.output_dir}: cannot write {self.path}: "
                                      f"{e.strerror or e}") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                holder = _read_fd(fd)
                for _ in range(10):  # the holder may not have written its details yet
                    if holder:
                        break
                    time.sleep(0.1)
                    holder = _read_fd(fd)
                os.close(fd)
                raise self._in_use(holder) from None
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if not same:
                os.close(fd)
                continue
            previous = _read_fd(fd)
            if previous or os.fstat(fd).st_size:
                self.log(f"Taking over {self.path} from a run that did not end cleanly "
                         f"({describe_holder(previous)}; its process is gone)")
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(info) + "\n").encode(), 0)
            os.fsync(fd)
            return fd
        raise self._in_use(_read_json(self.path))

    def _acquire_gfile(self, info):
        fs = gfile()
        if fs.exists(self.path):
            holder = _read_json(self.path)
            if not is_stale(holder):
                raise self._in_use(holder, f" (if that run is no longer running, delete {self.path})")
            self.log(f"Taking over {self.path} from a run that did not end cleanly "
                     f"({describe_holder(holder)}; its process is gone)")
        with atomic_output(self.path) as f:
            f.write(json.dumps(info) + "\n")
        written = _read_json(self.path)  # another run that wrote at the same time: the last one wins
        if written.get("token") != info["token"]:
            raise self._in_use(written)

    def release(self):
        """Drops the lock (removes run.lock if it is still this run's). Idempotent."""
        if self.info is None:
            return
        token, self.info = self.info["token"], None
        _HELD.discard(token)
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                if os.fstat(fd).st_ino == os.stat(self.path).st_ino:
                    os.remove(self.path)
            except OSError:
                pass
            os.close(fd)  # drops the flock
        else:
            try:
                if _read_json(self.path).get("token") == token:
                    gfile().remove(self.path)
            except Exception:  # a lock that cannot be removed is taken over by the next run on this host
                pass


def _read_fd(fd):
    try:
        text = os.pread(fd, 4096, 0).decode("utf-8", "replace")
        return json.loads(text) if text.strip() else {}
    except (OSError, ValueError):
        return {}


def _read_json(path):
    try:
        with gfile().GFile(path, "r") as f:
            return json.loads(f.read())
    except Exception:  # missing, half-written or not JSON: described as unreadable
        return {}


# -- results files --------------------------------------------------------------------------
def write_results(path, results):
    """Writes `key = value` lines, sorted by key, like the original eval_results.txt."""
    with atomic_output(path) as f:
        for key in sorted(results):
            f.write(f"{key} = {results[key]}\n")


def report_results(output_dir, results, log, heading="Eval results"):
    """Writes output_dir/eval_results.txt and sends the same lines to `log`; returns
    its path."""
    path = os.path.join(output_dir, "eval_results.txt")
    write_results(path, results)
    log(f"***** {heading} *****")
    for key in sorted(results):
        log(f"  {key} = {results[key]}")
    log(f"Written to {path}")
    return path
