"""The benchmark's PyTorch peer: one training step of MODEL.md's dense model
and of its `mod` layers, written plainly in PyTorch, timed as `mode-exp
bench` times its own steps (forward, backward, AdamW; warm-up steps apart).

    python3 python/bench_peer.py experiments/bench/mod-12.ini [--precision bf16]
        [--threads 2] [--steps 10] [--warmup 2]

Reads [data] seq_len, batch and [model] d_model, n_heads, d_ff, layers
(`dense x N`, `(dense, mod) x N` or a list of those two) and [mod] capacity,
gate, causal, aux_weight from the INI file; refuses anything else by name.
bf16 is `torch.autocast("cpu", torch.bfloat16)` over the forward (its
products go through oneDNN, on AMX where the CPU has it), fp32 master
weights and AdamW, as in mode.  Prints one JSON line.

This is a peer for speed, not the twin (python/mode_twin checks numbers):
its initialisation and data are PyTorch's own draws, which change no
product's shape.  Attention is the plain softmax(q k^T) v of PyTorch 1.13
(Debian 12's; scaled_dot_product_attention came in 2.0).
"""
import argparse
import configparser
import json
import math
import re
import sys
import time

import torch
import torch.nn.functional as F


def parse_layers(spec):
    spec = spec.strip()
    m = re.fullmatch(r"\(([^()]*)\)\s*x\s*(\d+)", spec) or re.fullmatch(r"(\w+)\s*x\s*(\d+)", spec)
    if m:
        kinds = [k.strip() for k in m.group(1).split(",")] * int(m.group(2))
    else:
        kinds = [k.strip() for k in spec.split(",")]
    for k in kinds:
        if k not in ("dense", "mod"):
            raise SystemExit(f"bench_peer: layer kind '{k}' has no peer (dense and mod only)")
    return kinds


def rope(x, pos, dh):
    """Half-split RoPE, base 10000, at the rows' original positions pos[B, n]."""
    half = dh // 2
    th = 10000.0 ** (-2.0 * torch.arange(half, dtype=torch.float32) / dh)
    ang = pos.to(torch.float32)[:, None, :, None] * th  # B, 1, n, half
    c, s = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    a, b = x[..., :half], x[..., half:]
    return torch.cat((a * c - b * s, b * c + a * s), dim=-1)


class RMSNorm(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.g = torch.nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5).to(x.dtype) * self.g


class Block(torch.nn.Module):
    def __init__(self, d, H, dff, L):
        super().__init__()
        self.H, self.dh = H, d // H
        self.n1, self.n2 = RMSNorm(d), RMSNorm(d)
        lin = lambda i, o, std: torch.nn.Parameter(torch.randn(i, o) * std)
        self.wq, self.wk, self.wv = lin(d, d, 0.02), lin(d, d, 0.02), lin(d, d, 0.02)
        self.wo = lin(d, d, 0.02 / math.sqrt(2 * L))
        self.w1, self.w3 = lin(d, dff, 0.02), lin(d, dff, 0.02)
        self.w2 = lin(dff, d, 0.02 / math.sqrt(2 * L))

    def forward(self, x, pos):
        B, n, d = x.shape
        u = self.n1(x)
        q, k, v = (t.view(B, n, self.H, self.dh).transpose(1, 2) for t in (u @ self.wq, u @ self.wk, u @ self.wv))
        q, k = rope(q, pos, self.dh), rope(k, pos, self.dh)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(self.dh)
        mask = pos[:, None, None, :] > pos[:, None, :, None]  # key after query
        p = torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1)
        h = x + ((p @ v).transpose(1, 2).reshape(B, n, d)) @ self.wo
        m = self.n2(h)
        return h + (F.silu(m @ self.w1) * (m @ self.w3)) @ self.w2


class Mod(torch.nn.Module):
    """MODEL.md's `mod`: top-k of r = x w_r per sequence, the block on the
    chosen rows in position order, x_i += g(r_i) (Block(X~) - X~)_i."""

    def __init__(self, d, H, dff, L, S, cap, gate, causal, aux_weight):
        super().__init__()
        self.block = Block(d, H, dff, L)
        self.wr = torch.nn.Parameter(torch.randn(d) * 0.02)
        self.k = max(1, math.floor(cap * S))
        self.gate, self.causal, self.aux_weight = gate, causal, aux_weight

    def forward(self, x, pos):
        r = (x @ self.wr.to(x.dtype)).float()  # B, S
        idx = torch.topk(r, self.k, dim=-1, sorted=False).indices.sort(dim=-1).values
        rows = idx[..., None].expand(-1, -1, x.shape[-1])
        xs = torch.gather(x, 1, rows)
        delta = self.block(xs, idx) - xs
        rs = torch.gather(r, 1, idx)
        g = torch.sigmoid(rs) if self.gate == "sigmoid" else rs
        y = x.scatter_add(1, rows, (g[..., None].to(delta.dtype) * delta).to(x.dtype))
        aux = r.new_zeros(())
        if self.causal == "aux":
            z = torch.zeros_like(r).scatter_(1, idx, 1.0)
            aux = self.aux_weight * F.binary_cross_entropy_with_logits(r, z)
        return y, aux


class Model(torch.nn.Module):
    def __init__(self, V, d, H, dff, S, kinds, modcfg):
        super().__init__()
        L = len(kinds)
        self.emb = torch.nn.Parameter(torch.randn(V, d) * 0.02)
        self.layers = torch.nn.ModuleList(
            Block(d, H, dff, L) if k == "dense" else Mod(d, H, dff, L, S, *modcfg) for k in kinds)
        self.norm = RMSNorm(d)

    def forward(self, tokens, targets):
        B, S = tokens.shape
        pos = torch.arange(S).expand(B, S)
        x = self.emb[tokens]
        aux = x.new_zeros(())
        for ly in self.layers:
            if isinstance(ly, Mod):
                x, a = ly(x, pos)
                aux = aux + a
            else:
                x = ly(x, pos)
        logits = self.norm(x) @ self.emb.t()
        return F.cross_entropy(logits.float().view(B * S, -1), targets.reshape(-1)) + aux


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config")
    ap.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    a = ap.parse_args()
    if a.steps < 1 or a.warmup < 0 or a.threads < 1:
        raise SystemExit("bench_peer: --steps and --threads take at least 1, --warmup at least 0")
    ini = configparser.ConfigParser(inline_comment_prefixes=("#", ";"))
    if not ini.read(a.config):
        raise SystemExit(f"bench_peer: cannot read {a.config}")
    g = lambda sec, key, dflt: ini.get(sec, key, fallback=dflt)
    if g("data", "source", "synthetic") != "synthetic":
        raise SystemExit(f"bench_peer: {a.config}: [data] source must be synthetic for the peer")
    S, B = int(g("data", "seq_len", "128")), int(g("data", "batch", "16"))
    V = int(g("data", "vocab", "256"))
    d, H = int(g("model", "d_model", "128")), int(g("model", "n_heads", "4"))
    dff = int(g("model", "d_ff", "352"))
    kinds = parse_layers(g("model", "layers", "dense x 4"))
    modcfg = (float(g("mod", "capacity", "0.125")), g("mod", "gate", "sigmoid"),
              g("mod", "causal", "aux"), float(g("mod", "aux_weight", "0.01")))
    if "mod" in kinds and (modcfg[1] not in ("sigmoid", "raw") or modcfg[2] not in ("aux", "none")):
        raise SystemExit("bench_peer: [mod] gate sigmoid|raw and causal aux|none only")

    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    model = Model(V, d, H, dff, S, kinds, modcfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    data = torch.randint(0, V, (a.warmup + a.steps, B, S + 1))

    def step(i):
        t = data[i]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = model(t[:, :-1], t[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return float(loss)

    for i in range(a.warmup):
        step(i)
    t0 = time.perf_counter()
    for i in range(a.steps):
        loss = step(a.warmup + i)
    dt = (time.perf_counter() - t0) / a.steps
    if not math.isfinite(loss):
        raise SystemExit(f"bench_peer: loss {loss}")
    print(json.dumps({"config": a.config, "peer": "pytorch", "torch": torch.__version__,
                      "precision": a.precision, "threads": a.threads, "steps": a.steps,
                      "step_s": dt, "tokens_per_s": B * S / dt, "loss": loss}))


if __name__ == "__main__":
    sys.exit(main())
