"""Checkpoints as MODEL.md names them: HDF5 (h5py) or safetensors (plain Python).

A checkpoint is read into a Checkpoint: `tensors` maps MODEL.md's names
("tok_emb", "layers/3/wq", ...) to float64 torch tensors, `attrs` holds the
root's scalar attributes (d_model, n_heads, d_ff, vocab, seq_len, n_layers),
`layers` the attributes of each layer group (kind and hyper-parameters, named
like the config keys), and `config` the resolved INI text.
"""
import json
import os
import struct

import numpy as np
import torch


class CheckpointError(Exception):
    pass


class Checkpoint:
    def __init__(self, tensors, attrs, layers, config, path):
        self.tensors = tensors
        self.attrs = attrs
        self.layers = layers
        self.config = config
        self.path = path

    def get(self, name):
        if name not in self.tensors:
            raise CheckpointError(f"{self.path}: tensor {name} is missing")
        return self.tensors[name]

    def layer(self, l, name):
        return self.get(f"layers/{l}/{name}")

    def has(self, name):
        return name in self.tensors


def _plain(v):
    """An HDF5 attribute as a Python str, int or float."""
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, np.ndarray):
        if v.size != 1:
            return v.tolist()
        v = v.reshape(())[()]
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return float(v)
    return v


def _as_f64(a):
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float64))


def load_h5(path):
    """Read a mode-exp HDF5 checkpoint (the 512-byte user block is skipped by HDF5)."""
    import h5py
    tensors, layers = {}, {}
    with h5py.File(path, "r") as f:
        attrs = {k: _plain(v) for k, v in f.attrs.items()}
        config = attrs.pop("config", "")

        def visit(name, obj):
            if isinstance(obj, h5py.Dataset) and not name.startswith("optim/"):
                tensors[name] = _as_f64(obj[()])
        f.visititems(visit)
        for l in range(int(attrs["n_layers"])):
            g = f[f"layers/{l}"]
            layers[l] = {k: _plain(v) for k, v in g.attrs.items()}
    return Checkpoint(tensors, attrs, layers, config, path)


_ST_DTYPES = {"F32": ("<f4", 4), "F64": ("<f8", 8), "F16": ("<f2", 2),
              "I32": ("<i4", 4), "I64": ("<i8", 8), "U8": ("u1", 1), "I8": ("i1", 1)}


def read_safetensors(path):
    """The tensors of a .safetensors file as float64 torch tensors.

    The format: an 8-byte little-endian header length n, n bytes of JSON
    mapping each name to {dtype, shape, data_offsets: [begin, end]} (offsets
    into the data after the header) plus an optional "__metadata__", then the
    raw little-endian data. A header that lies (offsets past the end, tensors
    that overlap, a size that does not match dtype x shape) is refused naming
    the tensor.
    """
    with open(path, "rb") as fh:
        blob = fh.read()
    if len(blob) < 8:
        raise CheckpointError(f"{path}: {len(blob)} bytes, shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", blob[:8])
    if 8 + n > len(blob):
        raise CheckpointError(f"{path}: header length {n} past the end of the file ({len(blob)} bytes)")
    try:
        header = json.loads(blob[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path}: header is not JSON ({e})")
    meta = header.pop("__metadata__", {}) or {}
    data = memoryview(blob)[8 + n:]
    spans, out = [], {}
    for name, h in header.items():
        dt = h.get("dtype")
        if dt not in _ST_DTYPES:
            raise CheckpointError(f"{path}: tensor {name}: dtype {dt!r} not one of {sorted(_ST_DTYPES)}")
        np_dt, size = _ST_DTYPES[dt]
        shape = [int(s) for s in h.get("shape", [])]
        b, e = (int(x) for x in h.get("data_offsets", [-1, -1]))
        count = int(np.prod(shape)) if shape else 1
        if not (0 <= b <= e <= len(data)):
            raise CheckpointError(f"{path}: tensor {name}: data_offsets [{b}, {e}] outside the "
                                  f"{len(data)} bytes of data")
        if e - b != count * size:
            raise CheckpointError(f"{path}: tensor {name}: {e - b} bytes for {dt} {shape} "
                                  f"(expected {count * size})")
        spans.append((b, e, name))
        a = np.frombuffer(data[b:e], dtype=np_dt).reshape(shape)
        out[name] = _as_f64(a)
    spans.sort()
    for (b0, e0, n0), (b1, e1, n1) in zip(spans, spans[1:]):
        if b1 < e0:
            raise CheckpointError(f"{path}: tensors {n0} and {n1} overlap ([{b0}, {e0}] and [{b1}, {e1}])")
    return out, meta


def load_safetensors(path, json_path=None):
    """Read `mode-exp export CKPT OUT`'s OUT.safetensors and OUT.json.

    OUT.json holds the config: the root attributes (d_model, n_heads, ...,
    "config" the INI text) and "layers", a list of each layer's attributes, as
    the HDF5 checkpoint has them. Accepted shapes: {"attrs": {...}, "layers":
    [...]} or the root attributes at top level beside "layers".
    """
    tensors, _ = read_safetensors(path)
    if json_path is None:
        json_path = os.path.splitext(path)[0] + ".json"
    with open(json_path) as fh:
        j = json.load(fh)
    root = dict(j.get("attrs", j))
    if isinstance(root.get("model"), dict):  # mode-exp export's OUT.json: the sizes under "model"
        root.update(root.pop("model"))
    layer_list = root.pop("layers", j.get("layers"))
    if layer_list is None:
        raise CheckpointError(f"{json_path}: no \"layers\" list")
    if isinstance(layer_list, dict):
        layer_list = [layer_list[str(i)] for i in range(len(layer_list))]
    config = root.pop("config", "")
    if isinstance(config, dict):
        config = ""
    layers = {i: dict(a) for i, a in enumerate(layer_list)}
    if "n_layers" not in root:
        root["n_layers"] = len(layers)
    return Checkpoint(tensors, root, layers, config, path)


def load(path):
    """A checkpoint by its extension: .safetensors, else HDF5."""
    if path.endswith(".safetensors"):
        return load_safetensors(path)
    return load_h5(path)


def write_safetensors(ckpt, out):
    """Write a Checkpoint as OUT.safetensors (float32, MODEL.md's names) and
    OUT.json ({"attrs": root attributes with "config", "layers": [...]}):
    the layout load_safetensors reads. The float64 tensors came from float32,
    so the round trip is exact."""
    header, chunks, off = {}, [], 0
    for name in sorted(ckpt.tensors):
        a = ckpt.tensors[name].numpy().astype("<f4")
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        chunks.append(a.tobytes())
        off += a.nbytes
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)  # the data 8-byte aligned, as the format's writers do
    with open(out + ".safetensors", "wb") as fh:
        fh.write(struct.pack("<Q", len(h)) + h + b"".join(chunks))
    attrs = dict(ckpt.attrs, config=ckpt.config)
    with open(out + ".json", "w") as fh:
        json.dump({"attrs": attrs, "layers": [ckpt.layers[l] for l in sorted(ckpt.layers)]}, fh, indent=1)
