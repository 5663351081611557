"""The whole model of a checkpoint: the stack, the tied head, the held-out
loss as `mode-exp eval` computes it, and greedy decoding."""
import math

import numpy as np
import torch

from . import layers as K
from .checkpoint import load


def _truth(v):
    if isinstance(v, str):
        return v.strip().lower() in ("true", "1", "yes", "on")
    return bool(v)


class LayerParams:
    """One layer's tensors and attributes, looked up by MODEL.md's names."""

    def __init__(self, ckpt, l):
        self.ckpt, self.l = ckpt, l
        self.attrs = ckpt.layers[l]

    def t(self, name):
        return self.ckpt.layer(self.l, name)

    def has(self, name):
        return self.ckpt.has(f"layers/{self.l}/{name}")

    def s(self, key, default=None):
        v = self.attrs.get(key, default)
        if v is None:
            raise KeyError(f"{self.ckpt.path}: layer {self.l} has no attribute {key}")
        return str(v)

    def f(self, key, default=None):
        v = self.attrs.get(key, default)
        if v is None:
            raise KeyError(f"{self.ckpt.path}: layer {self.l} has no attribute {key}")
        return float(v)

    def b(self, key, default=False):
        return _truth(self.attrs.get(key, default))


class Config:
    def __init__(self, ckpt):
        a = ckpt.attrs
        self.d_model = int(a["d_model"])
        self.n_heads = int(a["n_heads"])
        self.d_ff = int(a["d_ff"])
        self.vocab = int(a["vocab"])
        self.seq_len = int(a["seq_len"])
        self.n_layers = int(a["n_layers"])


class Model:
    def __init__(self, ckpt):
        if isinstance(ckpt, str):
            ckpt = load(ckpt)
        self.ckpt = ckpt
        self.cfg = Config(ckpt)
        self.layers = []
        for l in range(self.cfg.n_layers):
            kind = str(ckpt.layers[l].get("kind"))
            if kind != "exit" and kind not in K.KINDS and kind not in K.KV_KINDS:
                raise NotImplementedError(f"{ckpt.path}: layer {l}: kind {kind} is not in the twin")
            self.layers.append((kind, LayerParams(ckpt, l)))
        self.tok_emb = ckpt.get("tok_emb")
        self.final_norm = ckpt.get("final_norm")

    def logits(self, tokens, mode="causal"):
        """Next-token logits [n][V] of one sequence of n <= S input tokens."""
        tokens = torch.as_tensor(tokens, dtype=torch.long)
        x = self.tok_emb[tokens].clone()
        n = x.shape[0]
        exited = torch.zeros(n, dtype=torch.bool)
        exit_logits = torch.zeros(n, self.cfg.vocab, dtype=torch.float64)
        prev_p = None
        kv = None  # the keys and values of the cla group the layer is in
        for kind, P in self.layers:
            if kind == "exit":
                u = K.rmsnorm(x, P.t("exit_norm"))
                lg = u @ self.tok_emb.T
                p = torch.softmax(lg, -1)
                t = P.f("threshold", 0.9)
                conf = P.s("confidence", "max")
                if conf == "max":
                    leave = p.max(-1).values > t
                elif conf == "entropy":
                    leave = -(p * torch.log(p)).sum(-1) < t
                else:  # divergence: KL(p' || p), never at the first exit point
                    if prev_p is None:
                        leave = torch.zeros(n, dtype=torch.bool)
                    else:
                        leave = (prev_p * (torch.log(prev_p) - torch.log(p))).sum(-1) < t
                prev_p = p
                leave = leave & ~exited
                exit_logits[leave] = lg[leave]
                exited = exited | leave
                kv = None
                continue
            if kind in K.KV_KINDS:
                y, kv = K.KV_KINDS[kind](x, P, self.cfg, mode, kv)
            else:
                y, kv = K.KINDS[kind](x, P, self.cfg, mode), None
            # a token that left keeps its frozen state; the layer saw it for its K/V
            x = torch.where(exited[:, None], x, y)
        out = K.rmsnorm(x, self.final_norm) @ self.tok_emb.T
        out[exited] = exit_logits[exited]
        return out

    def window_loss(self, window, mode):
        """Mean next-token cross-entropy of a window of S+1 tokens."""
        window = torch.as_tensor(np.asarray(window, dtype=np.int64))
        lg = self.logits(window[:-1], mode)
        return torch.nn.functional.cross_entropy(lg, window[1:]).item()

    def greedy(self, prompt, n_tokens):
        """Greedy decoding (temperature 0): each step the causal forward of the
        sequence so far, the argmax of its last row (ties: the lower id)."""
        seq = list(prompt)
        for _ in range(n_tokens):
            if len(seq) >= self.cfg.seq_len:
                raise NotImplementedError("the twin decodes within one context (prompt + tokens < seq_len)")
            lg = self.logits(seq, "causal")[-1]
            seq.append(int(torch.argmax(lg)))  # torch returns the first maximal index
        return seq


def eval_windows(n_tokens, S, n):
    """MODEL.md: of nmax = floor((tokens - 1) / S) windows, n < nmax takes
    window floor(i nmax / n), i = 0..n-1; n >= nmax (or 0) takes them all."""
    nmax = (n_tokens - 1) // S
    if n <= 0 or n >= nmax:
        return list(range(nmax))
    return [i * nmax // n for i in range(n)]


def read_tokens(path):
    """A token file as mode reads it: .bin uint16, .u32 uint32 (LE, no
    header), anything else bytes."""
    if path.endswith(".bin"):
        return np.fromfile(path, dtype="<u2").astype(np.int64)
    if path.endswith(".u32"):
        return np.fromfile(path, dtype="<u4").astype(np.int64)
    return np.fromfile(path, dtype=np.uint8).astype(np.int64)


def evaluate(model, tokens, mode, n_windows):
    """The held-out loss as `mode-exp eval`: mean over windows of each
    window's mean loss; windows [w S, w S + S] of the split."""
    S = model.cfg.seq_len
    ws = eval_windows(len(tokens), S, n_windows)
    losses = [model.window_loss(tokens[w * S:w * S + S + 1], mode) for w in ws]
    return float(np.mean(losses)), ws
