"""python3 -m mode_twin eval CKPT (--data FILE [--windows N] | --record FILE) [--mode topk|causal]
   python3 -m mode_twin sample CKPT --prompt-ids I,J,... --tokens N

eval prints {"loss": L, "windows": n, "mode": M} as JSON; sample prints the
prompt and the greedy tokens as ids, as `mode-exp sample --ids` does."""
import argparse
import json
import sys

import numpy as np

from .checkpoint import CheckpointError
from .model import Model, evaluate, read_tokens


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m mode_twin")
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("eval", help="held-out loss of a checkpoint")
    e.add_argument("ckpt")
    src = e.add_mutually_exclusive_group(required=True)
    src.add_argument("--data", help="a .bin/.u32/.txt token file: its windows as mode-exp eval --data")
    src.add_argument("--record", help="an eval --record file: its /routing/tokens windows")
    e.add_argument("--windows", type=int, default=0, help="with --data: spread N windows (0: all)")
    e.add_argument("--mode", choices=("topk", "causal"), default="causal")
    s = sub.add_parser("sample", help="greedy tokens (temperature 0)")
    s.add_argument("ckpt")
    s.add_argument("--prompt-ids", required=True)
    s.add_argument("--tokens", type=int, required=True)
    a = ap.parse_args(argv)
    try:
        model = Model(a.ckpt)
        if a.cmd == "eval":
            if a.data:
                loss, ws = evaluate(model, read_tokens(a.data), a.mode, a.windows)
                n = len(ws)
            else:
                import h5py
                with h5py.File(a.record, "r") as f:
                    wins = np.asarray(f["routing/tokens"][()], dtype=np.int64)
                loss = float(np.mean([model.window_loss(w, a.mode) for w in wins]))
                n = len(wins)
            print(json.dumps({"loss": loss, "windows": n, "mode": a.mode}))
        else:
            prompt = [int(t) for t in a.prompt_ids.split(",")]
            print(" ".join(str(t) for t in model.greedy(prompt, a.tokens)))
    except (CheckpointError, NotImplementedError, KeyError, ValueError, OSError) as err:
        print(f"mode_twin: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
