"""Checks on raw-text inputs (create_pretraining_data.py's corpus files)."""

import codecs

import tensorflow as tf

from realformer_tf.errors import InputError

_CHUNK_BYTES = 1 << 20


def check_utf8(files, flag_name="input_file"):
    """Every file must be UTF-8: Model Garden's reader decodes with errors="ignore",
    which would silently drop the bytes of any other encoding. Streams each file, so
    large corpora are not held in memory; names the first bad line."""
    for path in files:
        decoder = codecs.getincrementaldecoder("utf-8")()
        line, offset = 1, 0
        with tf.io.gfile.GFile(path, "rb") as f:
            while True:
                chunk = f.read(_CHUNK_BYTES)
                pending = decoder.getstate()[0]  # a character cut by the previous chunk
                try:
                    decoder.decode(chunk, final=not chunk)
                except UnicodeDecodeError as e:
                    data = pending + chunk  # what e.start / e.end index
                    line += data[:e.start].count(b"\n")
                    raise InputError(
                        f"--{flag_name} {path} is not UTF-8 text: line {line} (byte "
                        f"{offset - len(pending) + e.start}) holds {data[e.start:e.end]!r}; convert it, e.g. "
                        "`iconv -f latin1 -t utf-8 in.txt > out.txt`"
                    ) from None
                if not chunk:
                    break
                line += chunk.count(b"\n")
                offset += len(chunk)


def check_text_files(files, flag_name="input_file"):
    """Every input file is readable UTF-8 text; else one InputError naming the file."""
    for path in files:
        try:
            check_utf8([path], flag_name)
        except (tf.errors.OpError, OSError) as e:
            reason = getattr(e, "message", None) or str(e)
            raise InputError(f"--{flag_name} {path} cannot be read as a text file ({reason.splitlines()[0]})") from None
