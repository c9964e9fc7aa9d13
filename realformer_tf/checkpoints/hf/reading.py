"""Reading Hugging Face BERT model folders (`config.json` + `model.safetensors`).

The folder's tensors are presented under the original BERT variable names
(`bert/encoder/layer_0/attention/self/query/kernel`, ...) with PyTorch's [out, in]
Linear weights transposed to TF's [in, out] kernels, so every loader that takes an
original-named checkpoint takes a folder too (`tf_checkpoint` opens folders through
here). Files are read with `safetensors.numpy` through tf.io.gfile (gs:// works; local
files only without TensorFlow); torch and transformers are not needed.
"""

import json
import os

import numpy as np
import safetensors.numpy

from realformer_tf.checkpoints.hf.config import CONFIG_NAME, WEIGHTS_NAME
from realformer_tf.checkpoints.hf.names import HEAD_NAMES, TIED_DECODER, to_hf_name, to_original_name
from realformer_tf.errors import CheckpointError, ConfigError
from realformer_tf.fileio import gfile
from realformer_tf.models.config import read_json_file


def is_hf_folder(path):
    """True for a directory holding a Hugging Face `config.json`."""
    return gfile().isdir(path) and gfile().exists(os.path.join(path, CONFIG_NAME))


# -- weights ------------------------------------------------------------------------------
def _weight_files(folder):
    """The safetensors file(s) of a folder (one, or the shards an index names)."""
    single = os.path.join(folder, WEIGHTS_NAME)
    if gfile().exists(single):
        return [single]
    index = single + ".index.json"
    if gfile().exists(index):
        return [os.path.join(folder, shard) for shard in _index_shards(index, folder)]
    others = [n for n in ("pytorch_model.bin", "tf_model.h5") if gfile().exists(os.path.join(folder, n))]
    hint = (f"it has {' and '.join(others)}: save it again with transformers' "
            "save_pretrained(folder, safe_serialization=True)") if others else "download model.safetensors too"
    raise CheckpointError(f"{folder} is a Hugging Face folder without {WEIGHTS_NAME}; {hint}")


def _index_shards(index, folder):
    """The shard file names a `model.safetensors.index.json` names, each a plain file
    name of `folder` (never a path: an index must not make us read other files)."""
    try:
        values = read_json_file(index)
    except ConfigError as e:
        raise CheckpointError(str(e)) from None
    weight_map = values.get("weight_map") if isinstance(values, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheckpointError(f"{index} has no weight_map object (tensor name -> shard file); "
                              "download the folder again")
    shards = sorted({shard if isinstance(shard, str) else repr(shard) for shard in weight_map.values()})
    for shard in shards:
        if os.path.basename(shard) != shard or "\\" in shard or not shard.endswith(".safetensors"):
            raise CheckpointError(
                f"{index} names the shard {shard!r}, not a .safetensors file name inside {folder}; "
                "shards must be plain file names next to the index")
        if not gfile().exists(os.path.join(folder, shard)):
            raise CheckpointError(f"{index} names the shard {shard}, which is not in {folder}; "
                                  "download it too")
    return shards


# safetensors dtype -> bytes per element (the format's table); weights must be floats.
_DTYPE_SIZES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2,
                "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}
FLOAT_DTYPES = ("F16", "BF16", "F32", "F64")
# The safetensors library's own bound on the header (100 MB); real headers are kilobytes.
_MAX_HEADER_BYTES = 100 * 2**20


def _not_safetensors(path, why):
    return CheckpointError(f"{path} is not a safetensors file ({why}); download it again")


def _read_header(path):
    """{name: (dtype, shape)} from a safetensors header (8-byte length, then JSON),
    without reading the tensors. Every entry is checked against the file's size:
    a damaged or hostile file is a CheckpointError naming it, never a crash or a
    wrongly sized read."""
    with gfile().GFile(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise _not_safetensors(path, f"it has {len(head)} bytes")
        length = int.from_bytes(head, "little")
        if head.startswith(b"version "):
            raise _not_safetensors(path, "it is a git-lfs pointer file, not the weights: run git lfs pull")
        if length > _MAX_HEADER_BYTES:
            raise _not_safetensors(path, f"its header length {length} is not plausible")
        raw = f.read(length)
        if len(raw) < length:
            raise _not_safetensors(path, f"it ends inside its {length}-byte header")
        # The data size without reading it: seek to the end.
        data_start = 8 + length
        f.seek(0, 2)
        data_size = f.tell() - data_start
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise _not_safetensors(path, f"its header is not JSON ({type(e).__name__})") from None
    if not isinstance(header, dict):
        raise _not_safetensors(path, f"its header is a JSON {type(header).__name__}, not an object")
    entries = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(entry, dict) or not {"dtype", "shape", "data_offsets"} <= set(entry):
            raise _not_safetensors(path, f"tensor {name!r} lacks dtype, shape or data_offsets")
        dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
        if not isinstance(dtype, str) or dtype not in _DTYPE_SIZES:
            raise _not_safetensors(path, f"tensor {name!r} has the unknown dtype {dtype!r}")
        if not isinstance(shape, list) or not all(
                isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
            raise _not_safetensors(path, f"tensor {name!r} has the shape {shape!r}")
        if (not isinstance(offsets, list) or len(offsets) != 2 or not all(
                isinstance(o, int) and not isinstance(o, bool) for o in offsets)
                or not 0 <= offsets[0] <= offsets[1] <= data_size):
            raise _not_safetensors(path, f"tensor {name!r} has data offsets {offsets!r} outside the "
                                   f"file's {data_size} data bytes (truncated?)")
        if offsets[1] - offsets[0] != int(np.prod(shape, dtype=object)) * _DTYPE_SIZES[dtype]:
            raise _not_safetensors(path, f"tensor {name!r} has {offsets[1] - offsets[0]} bytes, not "
                                   f"{shape} x {dtype}")
        entries[name] = (dtype, list(shape))
    return entries


def _read_tensors(path):
    with gfile().GFile(path, "rb") as f:
        raw = f.read()
    try:
        return safetensors.numpy.load(raw)
    except Exception as e:  # the library's own checks (headers were checked above)
        raise _not_safetensors(path, f"{type(e).__name__}: {e}") from None


class HfFolderWeights:
    """The tensors of a Hugging Face BERT folder under their original BERT names.

    Args:
        folder: the folder (config.json + model.safetensors, or its sharded form).

    Raises:
        CheckpointError naming the folder: no safetensors file, a tensor that is not
        part of a BERT model, an MLM decoder not tied to the word embeddings.
    """

    def __init__(self, folder):
        self.folder = folder
        self.files = _weight_files(folder)
        self.path = self.files[0] if len(self.files) == 1 else folder
        self._tensors = None
        shapes, dtypes = {}, {}
        for path in self.files:
            for name, (dtype, shape) in _read_header(path).items():
                shapes[name], dtypes[name] = shape, (dtype, path)
        self._hf_shapes = shapes
        self._names = {}  # original name -> (hf name, transpose?)
        foreign = []
        for hf_name in shapes:
            mapped = to_original_name(hf_name)
            if mapped is None:
                continue
            if not (mapped[0].startswith(("bert/", "cls/")) or hf_name in HEAD_NAMES):
                foreign.append(hf_name)
            self._names[mapped[0]] = (hf_name, mapped[1])
        if foreign:
            raise CheckpointError(
                f"{self.path} holds tensors that are not BERT's: {', '.join(sorted(foreign)[:8])}; "
                "give a BertModel / BertForPreTraining / BertForSequenceClassification / "
                "BertForQuestionAnswering folder")
        not_float = sorted(f"{hf} ({dtypes[hf][0]})" for hf, _ in self._names.values()
                           if dtypes[hf][0] not in FLOAT_DTYPES)
        if not_float:
            raise CheckpointError(
                f"{self.path}: the weight(s) {', '.join(not_float[:8])} are not floating point "
                f"({', '.join(FLOAT_DTYPES)}); the file is damaged or not a BERT model")

    def shapes(self):
        """{original name: shape} as our variables have them (kernels [in, out])."""
        return {name: self._hf_shapes[hf][::-1] if transpose else self._hf_shapes[hf]
                for name, (hf, transpose) in self._names.items()}

    def stored_name(self, name):
        """The Hugging Face name under which original name `name` is stored."""
        return self._names[name][0] if name in self._names else to_hf_name(name, self._prefixed())[0]

    def _prefixed(self):
        return any(hf.startswith("bert.") for hf, _ in self._names.values())

    def get(self, name):
        """The tensor of original name `name`, in our layout."""
        if self._tensors is None:
            self._tensors = {}
            for path in self.files:
                self._tensors.update(_read_tensors(path))
        if name.startswith("cls/predictions/"):
            self._check_tied_decoder()
        hf_name, transpose = self._names[name]
        array = self._tensors[hf_name]
        return array.T if transpose else array

    def _check_tied_decoder(self):
        decoder = self._tensors.get(TIED_DECODER)
        words = self._tensors.get(self.stored_name("bert/embeddings/word_embeddings"))
        if decoder is not None and words is not None and not np.array_equal(decoder, words):
            raise CheckpointError(
                f"{self.path}: {TIED_DECODER} differs from the word embeddings; our masked-LM "
                "head is tied to them (as BERT's), so this untied head cannot be loaded. Load "
                "the encoder only (e.g. into BertModel)")
