"""The layer kinds, one function a kind, written from MODEL.md and docs/kinds/.

Every function takes one sequence's residual stream x [n][d] (float64), the
layer's parameters and attributes (a LayerParams), and the evaluation mode
("topk" or "causal"), and returns the new stream. Nothing here trains: these
are the forward passes of evaluation and decoding.
"""
import math

import torch

EPS = 1e-5  # MODEL.md's RMSNorm epsilon


def rmsnorm(x, g):
    """MODEL.md: y = x / sqrt(mean(x^2) + 1e-5) * g."""
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + EPS) * g


def silu(x):
    return x * torch.sigmoid(x)


def swiglu(m, w1, w3, w2):
    """MODEL.md's MLP after its norm: (silu(m W1) * (m W3)) W2."""
    return (silu(m @ w1) * (m @ w3)) @ w2


def rope(t, pos):
    """Half-split RoPE, base 10000, at the rows' ORIGINAL positions.

    t [H][n][dh], pos [n]: for i < dh/2, th_i = 10000^(-2i/dh), a = t[i],
    b = t[i + dh/2], angle p th_i: a cos - b sin, b cos + a sin.
    """
    dh = t.shape[-1]
    half = dh // 2
    i = torch.arange(half, dtype=torch.float64)
    th = torch.pow(torch.tensor(10000.0, dtype=torch.float64), -2.0 * i / dh)
    ang = pos.to(torch.float64)[:, None] * th[None, :]
    c, s = torch.cos(ang), torch.sin(ang)
    a, b = t[..., :half], t[..., half:]
    return torch.cat([a * c - b * s, b * c + a * s], dim=-1)


def attention(x, pos, P, n_heads, kv=None, keep=None):
    """MODEL.md's Attn on the rows x whose original positions are pos (ascending).

    kv: keys (after RoPE) and values [H][n][dh] to attend to instead of the
    layer's own (cla's readers: the group's first layer's); keep: a list the
    layer's own (k, v) are appended to (cla's first layer)."""
    n, d = x.shape
    dh = d // n_heads
    u = rmsnorm(x, P.t("attn_norm"))

    def heads(w):
        return (u @ w).view(n, n_heads, dh).transpose(0, 1)
    q = rope(heads(P.t("wq")), pos)
    if kv is None:
        kv = (rope(heads(P.t("wk")), pos), heads(P.t("wv")))
    if keep is not None:
        keep.append(kv)
    k, v = kv
    s = q @ k.transpose(1, 2) / math.sqrt(dh)
    allowed = pos[None, :] <= pos[:, None]  # row j sees row m iff p_m <= p_j
    s = s.masked_fill(~allowed, float("-inf"))
    o = torch.softmax(s, dim=-1) @ v
    return o.transpose(0, 1).reshape(n, d) @ P.t("wo")


def dense_mlp(h, P):
    return swiglu(rmsnorm(h, P.t("mlp_norm")), P.t("w1"), P.t("w3"), P.t("w2"))


def block(x, pos, P, cfg):
    """MODEL.md: Block(X) = h + MLP(h), h = X + Attn(X)."""
    h = x + attention(x, pos, P, cfg.n_heads)
    return h + dense_mlp(h, P)


def top_rows(score, k):
    """The k largest scores, ties to the lower position, in position order."""
    order = torch.sort(-score, stable=True).indices  # ascending -score: descending score, stable
    return torch.sort(order[:k]).values


def run_block_on(x, rows, P, cfg, gate, block_fn=None):
    """x_i += gate_i (Block(X~) - X~)_i on the selected rows; others copied."""
    if rows.numel() == 0:
        return x
    block_fn = block_fn or block
    xs = x[rows]
    D = block_fn(xs, rows, P, cfg) - xs
    y = x.clone()
    y[rows] = xs + gate[:, None] * D
    return y


# ---------------------------------------------------------------- dense

def dense(x, P, cfg, mode):
    return block(x, torch.arange(x.shape[0]), P, cfg)


# ---------------------------------------------------------------- cla

def dense_kv(x, P, cfg, mode, kv):
    """dense as a cla group's first layer: the block, and its (k, v) kept."""
    keep = []
    pos = torch.arange(x.shape[0])
    h = x + attention(x, pos, P, cfg.n_heads, keep=keep)
    return h + dense_mlp(h, P), keep[0]


def cla(x, P, cfg, mode, kv):
    """docs/kinds/cla.md: queries of its own, the group's first layer's k
    (after RoPE) and v, on every row; the group's k, v passed on."""
    if kv is None:
        raise ValueError(f"layer {P.l}: cla without a dense layer (or cla) right below it")
    h = x + attention(x, torch.arange(x.shape[0]), P, cfg.n_heads, kv=kv)
    return h + dense_mlp(h, P), kv


# ---------------------------------------------------------------- mod

def mod_predictor_logit(x, P):
    """MODEL.md's predictor d -> 64 -> 1 with SiLU and biases."""
    hid = silu(x @ P.t("pred_w1") + P.t("pred_b1"))
    return hid @ P.t("pred_w2").reshape(-1) + P.t("pred_b2").reshape(())


def mod_select(x, P, cfg, mode):
    """The MoD routing of a sequence: (router scores r, selected rows T)."""
    if P.s("router", "learned") != "learned":
        raise NotImplementedError(f"layer {P.l}: router = {P.s('router')} (the twin covers learned)")
    r = x @ P.t("router").reshape(-1)
    S = x.shape[0]
    if mode == "topk":
        k = max(1, math.floor(P.f("capacity") * cfg.seq_len))
        return r, top_rows(r, min(k, S))
    causal = P.s("causal", "aux")
    s = mod_predictor_logit(x, P) if causal == "predictor" else r
    thr = P.f("causal_threshold", 0.0)
    if causal == "threshold":  # docs/kinds/mod-schedule.md: r_i > tau + theta
        thr = P.t("threshold").reshape(()).item() + thr
    return r, torch.nonzero(s > thr).reshape(-1)


def mod_gate(r, P):
    return torch.sigmoid(r) if P.s("gate", "sigmoid") == "sigmoid" else r


def mod(x, P, cfg, mode):
    r, T = mod_select(x, P, cfg, mode)
    return run_block_on(x, T, P, cfg, mod_gate(r[T], P))


# ---------------------------------------------------------------- experts

def expert_mlp(h, P, cfg, mode, rows_for_capacity, noop):
    """docs/kinds/moe-routing.md steps 1-5 on the rows h (one sequence).

    rows_for_capacity: the S of the capacity formula (the window's S for moe
    and integrated, MoD's nominal k for staged). noop: integrated's extra column.
    """
    # staged names its [moe] router `moe.router` (its `router` is [mod]'s)
    router = P.s("moe.router", P.s("router", "learned"))
    if router != "learned":
        raise NotImplementedError(f"layer {P.l}: experts' router = {router} (the twin covers learned)")
    m = rmsnorm(h, P.t("mlp_norm"))
    w1, w3, w2 = P.t("experts_w1"), P.t("experts_w3"), P.t("experts_w2")
    E = w1.shape[0]                        # E' = granularity * experts
    k = int(P.f("top_k", 1)) * int(P.f("granularity", 1))
    logits = m @ P.t("gate")               # [n][N'], N' = E' (+1)
    N = logits.shape[1]
    if N != E + (1 if noop else 0):
        raise ValueError(f"layer {P.l}: gate has {N} columns for {E} experts")
    p = torch.sigmoid(logits) if P.s("score", "softmax") == "sigmoid" else torch.softmax(logits, -1)
    choice = p.clone()
    if P.has("expert_bias"):
        choice[:, :E] = choice[:, :E] + P.t("expert_bias")
    if noop:
        choice[:, E] = choice[:, E] + P.f("noop_bias", 0.0)
    chosen = torch.sort(-choice, dim=-1, stable=True).indices[:, :k]   # [n][k], ties: lower column
    w = torch.gather(p, 1, chosen)
    if P.b("renormalize", False):
        w = w / w.sum(-1, keepdim=True)
    cf = P.f("capacity_factor", 1.0)
    ecf = P.f("eval_capacity_factor", -1.0)
    if ecf >= 0:
        cf = ecf
    cap = math.ceil(cf * k * rows_for_capacity / E) if cf > 0 else None
    used = [0] * E
    y = h.clone()
    for i in range(h.shape[0]):            # position order: earlier positions win
        for j in range(k):                 # first choice before second
            e = int(chosen[i, j])
            if e >= E:                     # the no-op: no update, never dropped
                continue
            if cap is not None and used[e] >= cap:
                continue
            used[e] += 1
            y[i] = y[i] + w[i, j] * swiglu(m[i:i + 1], w1[e], w3[e], w2[e])[0]
    if P.has("shared_w1"):
        y = y + swiglu(m, P.t("shared_w1"), P.t("shared_w3"), P.t("shared_w2"))
    return y


def moe(x, P, cfg, mode, noop=False):
    h = x + attention(x, torch.arange(x.shape[0]), P, cfg.n_heads)
    return expert_mlp(h, P, cfg, mode, cfg.seq_len, noop)


def integrated(x, P, cfg, mode):
    return moe(x, P, cfg, mode, noop=True)


def staged(x, P, cfg, mode):
    r, T = mod_select(x, P, cfg, mode)
    knom = max(1, math.floor(P.f("capacity") * cfg.seq_len))

    def staged_block(xs, rows, P, cfg):
        h = xs + attention(xs, rows, P, cfg.n_heads)
        return expert_mlp(h, P, cfg, mode, knom, False)
    return run_block_on(x, T, P, cfg, mod_gate(r[T], P), staged_block)


def ec(x, P, cfg, mode):
    """docs/kinds/ec.md: each expert takes its C best tokens (causal: l > 0)."""
    S = x.shape[0]
    h = x + attention(x, torch.arange(S), P, cfg.n_heads)
    m = rmsnorm(h, P.t("mlp_norm"))
    w1, w3, w2 = P.t("experts_w1"), P.t("experts_w3"), P.t("experts_w2")
    E = w1.shape[0]
    logits = m @ P.t("gate")
    p = torch.softmax(logits, -1)
    C = min(cfg.seq_len, max(1, math.floor(P.f("capacity_factor", 1.0) * cfg.seq_len / E)))
    y = h.clone()
    for e in range(E):
        if mode == "topk":
            T = top_rows(p[:, e], min(C, S))
        else:
            T = torch.nonzero(logits[:, e] > 0).reshape(-1)
        if T.numel():
            y[T] = y[T] + p[T, e][:, None] * swiglu(m[T], w1[e], w3[e], w2[e])
    return y


# ---------------------------------------------------------------- mod/ family

def tcmod(x, P, cfg, mode):
    """docs/kinds/tcmod.md: a token takes the block iff r_i > 0, in every mode."""
    r = x @ P.t("router").reshape(-1)
    T = torch.nonzero(r > 0).reshape(-1)
    return run_block_on(x, T, P, cfg, torch.sigmoid(r[T]))


def mor(x, P, cfg, mode):
    """docs/kinds/mor.md: one block up to R times, a router a step."""
    routers = P.t("routers")
    R = routers.shape[0]
    Sn = cfg.seq_len
    sched = P.s("schedule", "linear")
    cap = P.f("capacity", 0.5)
    active = torch.arange(x.shape[0])
    prev_k = Sn
    for r in range(1, R + 1):
        if sched == "linear":
            kr = max(1, math.floor(Sn * (R - r + 1) / R))
        else:
            kr = max(1, math.floor(Sn * cap ** (r - 1)))
        kr = min(kr, prev_k)
        prev_k = kr
        s = x[active] @ routers[r - 1]
        if mode == "topk":
            keep = top_rows(s, min(kr, active.numel()))
        else:
            keep = torch.nonzero(s > 0).reshape(-1)
        T = active[keep]
        x = run_block_on(x, T, P, cfg, torch.sigmoid(s[keep]))
        active = T
    return x


def drop_layer_p(P, cfg):
    p = P.f("p", 0.1)
    if P.s("schedule", "linear") == "linear":
        return p * (P.l + 1) / cfg.n_layers
    return p


def drop(x, P, cfg, mode):
    """docs/kinds/drop.md, evaluation: pruned = identity, else x + b D."""
    n = int(P.f("prune_every", 0))
    if P.b("prune", False) or (n > 0 and (P.l + 1) % n == 0):
        return x
    b = 1.0 if P.b("rescale", True) else 1.0 - drop_layer_p(P, cfg)
    rows = torch.arange(x.shape[0])
    return run_block_on(x, rows, P, cfg, torch.full((x.shape[0],), b, dtype=x.dtype))


# ---------------------------------------------------------------- skipdecode

def skipdecode_rows(L, l, S, hi, lo):
    """docs/kinds/skipdecode.md: T_l = #{t < S : n(t) >= L - l}, with
    n(t) = hi - round((hi - lo) t / (S - 1)) (halves down), lo from S - 1 on."""
    hi = hi if hi > 0 else L
    T = 0
    for t in range(S):
        if t >= S - 1:
            n = lo
        else:
            num, den = (hi - lo) * t, S - 1
            n = hi - (-((den - 2 * num) // (2 * den)))  # round half down: ceil(num/den - 1/2)
        T += n >= L - l
    return T


def skipdecode(x, P, cfg, mode):
    """The dense block on the first T_l rows (attention among them), the
    others copied: every mode and decoding alike."""
    T = skipdecode_rows(cfg.n_layers, P.l, cfg.seq_len, int(P.f("max_layers", 0)),
                        int(P.f("min_layers", 1)))
    m = min(T, x.shape[0])
    if m == 0:
        return x
    y = x.clone()
    y[:m] = block(x[:m], torch.arange(m), P, cfg)
    return y


# the kinds that share keys and values along a cla group: (x, P, cfg, mode,
# kv) -> (y, kv); every other kind ends a group (kv None after it)
KV_KINDS = {"dense": dense_kv, "cla": cla}

KINDS = {
    "dense": dense,
    "mod": mod,
    "moe": moe,
    "integrated": integrated,
    "staged": staged,
    "ec": ec,
    "tcmod": tcmod,
    "mor": mor,
    "drop": drop,
    "skipdecode": skipdecode,
    # the model runs "dense" and "cla" through KV_KINDS;
    # "exit" is handled by the model: it changes the logits, not the stream
}
