"""Is every input TFRecord whole? Checks that name the damaged file and record.

Two kinds of damage: a corrupt record (its CRC fails: TF raises a data-loss error when
it reaches it) and a file cut off inside a record (an interrupted copy or write: TF
reads it as a shorter file, without any error). Inputs up to `FULL_CHECK_BYTES` are read
through once before training, which finds both; for larger ones only each file's tail is
read up front (it must end exactly after a record), and a corrupt record is named when
training reaches it, the checkpoints so far kept.
"""

import contextlib

import numpy as np
import tensorflow as tf

from realformer_tf.errors import InputError

FULL_CHECK_BYTES = 1 << 30
# A record is framed by its length (8 bytes), the length's CRC (4) and the data's CRC (4).
_LENGTH_BYTES, _CRC_BYTES = 8, 4
_FRAMING_BYTES = _LENGTH_BYTES + 2 * _CRC_BYTES
# The least a quick check reads of each file's end (pretraining records: a few KiB).
_TAIL_BYTES = 1 << 20


def check_records_readable(files, max_bytes=FULL_CHECK_BYTES):
    """Reads every record of `files` (CRC-checked) when they total at most `max_bytes`,
    else checks that each file ends after a whole record. Returns the record count, or
    None when the files were too large to count."""
    sizes = [tf.io.gfile.stat(f).length for f in files]
    if sum(sizes) > max_bytes:
        for path, size in zip(files, sizes):
            _check_tail(path, size)
        return None
    total = 0
    for path, size in zip(files, sizes):
        try:
            count, read = _count_and_measure(path)
        except tf.errors.DataLossError:
            raise _damaged(path, *find_unreadable_record(path)) from None
        if int(read) != size:
            raise _damaged(path, f"record {int(count)}", f"the file ends {size - int(read)} bytes into it")
        total += int(count)
    return total


def _count_and_measure(path):
    """(records, bytes they span in the file); batched, as per-record steps are slow."""
    def add(totals, batch):
        lengths = tf.cast(tf.strings.length(batch), tf.int64) + _FRAMING_BYTES
        return totals[0] + tf.size(batch, tf.int64), totals[1] + tf.reduce_sum(lengths)

    zero = tf.constant(0, tf.int64)
    return tf.data.TFRecordDataset(path, buffer_size=8 << 20).batch(4096).reduce((zero, zero), add)


@contextlib.contextmanager
def unreadable_records_named(files):
    """Turns a data-loss error met while training or evaluating on `files` into one
    message naming the file and record (found by re-reading the files, only then)."""
    try:
        yield
    except tf.errors.DataLossError as e:
        for path in files:
            found = find_unreadable_record(path)
            if found:
                raise InputError(f"{_damaged(path, *found)}; the run stopped there and its "
                                 "checkpoints are kept, so a rerun resumes") from None
        raise InputError(f"reading the input failed ({e.message.splitlines()[0]}); "
                         "its checkpoints are kept, so a rerun resumes") from None


def find_unreadable_record(path):
    """("record N" for the first record that cannot be read, TF's reason), or None."""
    index = 0
    try:
        for _ in tf.data.TFRecordDataset(path):
            index += 1
    except tf.errors.DataLossError as e:
        return f"record {index}", e.message.splitlines()[0]
    return None


def _damaged(path, record, reason):
    return InputError(
        f"{path} is corrupt or truncated: {record} cannot be read ({reason}); "
        "regenerate the file (or drop it from --input_file)"
    )


def _check_tail(path, size):
    """The file must end exactly after a record: some offset in its tail must hold a
    length (with a valid CRC) that reaches the end of the file. The tail spans several
    times the first record's size (the records of one file are of similar size)."""
    with tf.io.gfile.GFile(path, "rb") as f:
        first_length = int.from_bytes(f.read(_LENGTH_BYTES), "little")
        start = max(0, size - max(_TAIL_BYTES, 4 * (first_length + _FRAMING_BYTES)))
        f.seek(start)
        tail = np.frombuffer(f.read(), np.uint8)
    if len(tail) < _FRAMING_BYTES:
        if size:
            raise _damaged(path, "record 0", f"the file holds only {size} bytes")
        return
    # The little-endian length stored at every offset, vectorized over the tail.
    offsets = np.arange(len(tail) - _LENGTH_BYTES + 1)
    lengths = np.zeros(len(offsets), np.uint64)
    for k in range(_LENGTH_BYTES):
        lengths |= tail[offsets + k].astype(np.uint64) << np.uint64(8 * k)
    remaining = (size - start - offsets - _FRAMING_BYTES).astype(np.int64)
    for offset in np.flatnonzero((remaining >= 0) & (lengths == remaining.astype(np.uint64))):
        header = tail[offset:offset + _LENGTH_BYTES + _CRC_BYTES].tobytes()
        if int.from_bytes(header[_LENGTH_BYTES:], "little") == _masked_crc32c(header[:_LENGTH_BYTES]):
            return
    raise _damaged(path, "the last record", "the file ends inside it: was it cut off?")


def _crc32c_table():
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
        table.append(crc)
    return table


_CRC32C_TABLE = _crc32c_table()


def _masked_crc32c(data):
    """TFRecord's checksum: CRC-32C (Castagnoli), rotated and offset."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC32C_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF
