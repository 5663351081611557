"""The twin's side of tests/cli/test_twin.sh (one Python start a kind: torch
is slow to import).

  twin_check.py prep RECORD OUT.bin    write RECORD's windows back to back as a
                                       uint16 token file; print an 8-token prompt
  twin_check.py check NAME CKPT DIR    compare mode-exp's outputs in DIR with the twin's
"""
import json
import os
import sys

import h5py
import numpy as np

import struct

from mode_twin import CheckpointError, Model, evaluate, load_h5, load_safetensors, read_tokens
from mode_twin.layers import skipdecode_rows


def recorded(path):
    with h5py.File(path, "r") as f:
        return np.asarray(f["routing/tokens"][()], dtype=np.int64)


def close(what, c, t):
    if abs(c - t) > 1e-5 * abs(c):
        print(f"FAIL: {what}: mode-exp {c!r}, twin {t!r} (relative difference over 1e-5)")
        return False
    print(f"ok: {what}: mode-exp {c!r}, twin {t!r}")
    return True


def skipdecode_example():
    """docs/kinds/skipdecode.md's example (L 8, S 128, max 0, min 2): T_1..T_5."""
    got = [skipdecode_rows(8, l, 128, 0, 2) for l in range(1, 6)]
    if got != [32, 53, 75, 96, 117]:
        print(f"FAIL: skipdecode's schedule on the document's example: {got}, not 32 53 75 96 117")
        return False
    return True


def check(name, ckpt, d):
    if name == "skipdecode" and not skipdecode_example():
        return False
    # the model as `mode-exp export` wrote it (OUT.safetensors + OUT.json)
    model = Model(load_safetensors(os.path.join(d, "export.safetensors")))
    ok = True
    for mode in ("topk", "causal"):
        wins = recorded(os.path.join(d, f"rec-{mode}.h5"))
        twin = float(np.mean([model.window_loss(w, mode) for w in wins]))
        with open(os.path.join(d, f"rec-{mode}.json")) as fh:
            ok &= close(f"{name} {mode} (recorded windows)", json.load(fh)["loss"], twin)
        twin, _ = evaluate(model, read_tokens(os.path.join(d, "held.bin")), mode, 4)
        with open(os.path.join(d, f"data-{mode}.json")) as fh:
            ok &= close(f"{name} {mode} (token file)", json.load(fh)["loss"], twin)
    with open(os.path.join(d, "prompt.txt")) as fh:
        prompt = [int(t) for t in fh.read().split(",")]
    with open(os.path.join(d, "sample.txt")) as fh:
        c = [int(t) for t in fh.readline().split()]
    t = model.greedy(prompt, len(c) - len(prompt))
    ok &= safetensors_round_trip(name, ckpt, d, model, recorded(os.path.join(d, "rec-topk.h5"))[0])
    if c != t:
        print(f"FAIL: {name}: greedy tokens differ: mode-exp {c}, twin {t}")
        return False
    print(f"ok: {name} greedy: {' '.join(map(str, t))}")
    return ok


def safetensors_round_trip(name, ckpt, d, model, window):
    """`mode-exp export`'s safetensors file gives the loss of the HDF5
    checkpoint, to the bit; headers that lie are refused naming the tensor."""
    out = os.path.join(d, "export")
    a = Model(load_h5(ckpt)).window_loss(window, "topk")
    b = model.window_loss(window, "topk")
    if a != b:
        print(f"FAIL: {name}: loss from HDF5 {a!r}, from safetensors {b!r}")
        return False
    blob = open(out + ".safetensors", "rb").read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    first, second = sorted((k for k in header if k != "__metadata__"),
                           key=lambda k: header[k]["data_offsets"][0])[:2]
    lies = {"past the end": (first, lambda h: h.update(data_offsets=[0, len(blob)])),
            "overlap": (second, lambda h: h.update(data_offsets=[0, header[second]["data_offsets"][1]
                                                               - header[second]["data_offsets"][0]])),
            "size": (first, lambda h: h.update(shape=h["shape"] + [2]))}
    for what, (victim, lie) in lies.items():
        bad = json.loads(json.dumps(header))
        lie(bad[victim])
        hb = json.dumps(bad).encode()
        path = os.path.join(d, "lie.safetensors")
        with open(path, "wb") as fh:
            fh.write(struct.pack("<Q", len(hb)) + hb + blob[8 + n:])
        try:
            load_safetensors(path, out + ".json")
        except CheckpointError as e:
            if victim not in str(e):
                print(f"FAIL: {name}: header lie ({what}) refused without naming {victim}: {e}")
                return False
            continue
        print(f"FAIL: {name}: a safetensors header that lies ({what}, {victim}) was read")
        return False
    print(f"ok: {name}: safetensors round trip, the same loss {a!r}; 3 lying headers refused")
    return True


def main():
    if sys.argv[1] == "prep":
        t = recorded(sys.argv[2])
        t.reshape(-1).astype("<u2").tofile(sys.argv[3])
        print(",".join(str(int(v)) for v in t[0][:8]))
        return 0
    return 0 if check(sys.argv[2], sys.argv[3], sys.argv[4]) else 1


if __name__ == "__main__":
    sys.exit(main())
