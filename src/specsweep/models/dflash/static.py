"""The block-speculative step over static caches, so that one CUDA graph can replay it.

engine.py runs HF modules with a growing cache; each step there launches hundreds of small kernels from
Python, and on a GPU the host, not the GPU, sets the pace. Here the same step has fixed shapes and no
host round trip inside it: draft, verify, accept and both cache writes are one graph.

- The target is re-expressed in plain torch over the HF model's own weights (QKV and gate/up fused into
  one matmul each), with a static K/V cache per layer.
- The drafter's context K/V live in a static cache too.
- A step writes both caches at the block's positions. A row's entries past its committed length are
  stale, the causal mask hides them, and the next step overwrites them, so no cache is ever cropped.
- Each row of a batch commits its own accepted prefix plus the target's token.

Greedy only: sampling runs through engine.py. Output equals the target's greedy decoding (tests check
it against transformers' `generate`).
"""
from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from specsweep.models.dflash import skinny
from specsweep.models.dflash.engine import Output, Rows, Step
from specsweep.models.dflash.model import DFlashDrafter


def torch_mm(x, w):
    return x @ w.T


def rms(x, weight, eps):
    """RMSNorm as one fused kernel where torch has one (a step is hundreds of small kernels otherwise)."""
    return F.rms_norm(x, (x.shape[-1],), weight, eps)


def rotate(x, cos, sin):
    """Rotate-half RoPE; x [B, T, heads, hd], cos/sin [B, T, hd]."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos[:, :, None] + rotated * sin[:, :, None]


def grouped(q, kv_heads):
    """[B, T, H, hd] -> [B, KV, rep * T, hd]: each KV head's query heads side by side, so SDPA needs no
    repeated K/V (query head h reads KV head h // rep, as in HF)."""
    b, t, h, hd = q.shape
    return q.view(b, t, kv_heads, h // kv_heads, hd).permute(0, 2, 3, 1, 4).reshape(b, kv_heads, -1, hd)


def ungrouped(o, t):
    b, kv, rt, hd = o.shape
    return o.view(b, kv, rt // t, t, hd).permute(0, 3, 1, 2, 4).reshape(b, t, -1)


def layer_weights(layer, context_kv: bool = False) -> dict:
    """One Qwen3 decoder layer's weights (HF's or the drafter's: the same names), detached, with QKV and
    gate/up fused; a drafter layer also gets fused K/V for projecting the target's context."""
    a, mlp = layer.self_attn, layer.mlp
    if a.q_proj.bias is not None:
        raise ValueError("the static step supports Qwen3 attention without biases")
    w = {"qkv": torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]),
         "gate_up": torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]),
         "o": a.o_proj.weight, "down": mlp.down_proj.weight, "q_norm": a.q_norm.weight, "k_norm": a.k_norm.weight,
         "ln1": layer.input_layernorm.weight, "ln2": layer.post_attention_layernorm.weight}
    if context_kv:
        w["kv"] = torch.cat([a.k_proj.weight, a.v_proj.weight])
    return {k: v.detach() for k, v in w.items()}


class StaticPair:
    """A target (HF Qwen3-style causal LM) and optional DFlash drafter on static caches for `batch` rows of
    up to `max_len` positions, stepping `block_size` tokens at a time."""

    def __init__(self, target, drafter: DFlashDrafter | None, batch: int, max_len: int, block_size: int,
                 cuda_graph: bool = False, compile: str | None = None, compile_scope: str = "layer",
                 linear: str = "torch"):
        cfg = target.config.get_text_config()          # a multimodal wrapper keeps the text model inside
        p = next(target.parameters())
        self.device, self.dtype = p.device, p.dtype
        self.batch, self.max_len, self.block_size = batch, max_len, block_size
        # linear: "torch" (cuBLAS on a GPU) or "skinny" (skinny.py's split-K Triton GEMM up to
        # skinny.MAX_ROWS rows, cuBLAS above)
        self.mm = {"torch": torch_mm, "skinny": skinny.mm}[linear]
        self.heads, self.kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.eps = cfg.rms_norm_eps
        m = target.model
        self.embed = m.embed_tokens.weight.detach()
        self.norm = m.norm.weight.detach()
        self.lm_head = target.get_output_embeddings().weight.detach()
        self.layers = [layer_weights(layer) for layer in m.layers]
        shape = (len(self.layers), batch, self.kv_heads, max_len, self.hd)
        self.k_cache = torch.zeros(shape, device=self.device, dtype=self.dtype)
        self.v_cache = torch.zeros(shape, device=self.device, dtype=self.dtype)
        theta = getattr(cfg, "rope_theta", None) or (getattr(cfg, "rope_parameters", None) or {}).get("rope_theta")
        self.cos, self.sin = self._rope_table(float(theta))
        self.drafter = drafter
        if drafter is not None:
            self._init_drafter(drafter)
        self.rows = torch.arange(batch, device=self.device)
        self.key_index = torch.arange(max_len, device=self.device)
        self.offsets = torch.arange(block_size, device=self.device)
        # the step's inputs and outputs: fixed buffers, as a CUDA graph needs
        self.last = torch.zeros(batch, dtype=torch.long, device=self.device)
        self.start = torch.zeros(batch, dtype=torch.long, device=self.device)
        self.result = torch.zeros(batch, 2 * block_size + 1, dtype=torch.long, device=self.device)
        # compile: a torch.compile mode ("default", "max-autotune-no-cudagraphs"), or None for eager kernels;
        # compile_scope "layer" compiles one target and one drafter layer (every layer reuses them: seconds
        # to compile, where "step", the whole step with every layer inlined, takes minutes)
        self._step_fn, self._target_layer, self._draft_layer = self._step, self.target_layer, self.draft_layer
        if compile and compile_scope == "step":
            self._step_fn = torch.compile(self._step, mode=compile, dynamic=False)
        elif compile:
            self._target_layer = torch.compile(self.target_layer, mode=compile, dynamic=False)
            self._draft_layer = torch.compile(self.draft_layer, mode=compile, dynamic=False)
        self.graph = None
        if cuda_graph:
            self._capture()

    def _rope_table(self, theta):
        inv = 1.0 / theta ** (torch.arange(0, self.hd, 2, device=self.device).float() / self.hd)
        freqs = torch.arange(self.max_len, device=self.device).float()[:, None] * inv
        emb = torch.cat([freqs, freqs], dim=-1)
        return emb.cos().to(self.dtype), emb.sin().to(self.dtype)

    def _init_drafter(self, d: DFlashDrafter):
        self.layer_ids = d.layer_ids
        self.mask_token_id = d.mask_token_id
        self.d_eps = d.config["rms_norm_eps"]
        self.fc = d.fc.weight.detach()
        self.hidden_norm = d.hidden_norm.weight.detach()
        self.d_norm = d.norm.weight.detach()
        self.d_layers = [layer_weights(layer, context_kv=True) for layer in d.layers]
        attn = d.layers[0].self_attn
        self.d_heads, self.d_kv_heads, self.d_hd = attn.heads, attn.kv_heads, attn.hd
        shape = (len(self.d_layers), self.batch, self.d_kv_heads, self.max_len, self.d_hd)
        self.ctx_k = torch.zeros(shape, device=self.device, dtype=self.dtype)
        self.ctx_v = torch.zeros(shape, device=self.device, dtype=self.dtype)

    # ---- the two forwards ---------------------------------------------------------------------------------
    def target_forward(self, ids, pos, layer=None):
        """Logits [B, T, V] and HF-style hidden states (index 0 = embeddings); writes K/V at `pos`. `layer`:
        the (compiled) step's layer by default; prefill passes the plain one (prompt widths vary)."""
        layer = layer or self._target_layer
        b, t = ids.shape
        x = F.embedding(ids, self.embed)
        cos, sin = self.cos[pos], self.sin[pos]
        rows = self.rows[:b, None].expand(b, t)
        qpos = pos[:, None, :].expand(b, self.heads // self.kv_heads, t).reshape(b, 1, -1, 1)
        mask = self.key_index <= qpos                                          # [B, 1, rep*T, S]: causal
        hidden = [x]
        for i, w in enumerate(self.layers):
            x = layer(x, w, self.k_cache[i], self.v_cache[i], cos, sin, rows, pos, mask)
            hidden.append(x)
        return self.mm(rms(x, self.norm, self.eps), self.lm_head), hidden

    def target_layer(self, x, w, k_cache, v_cache, cos, sin, rows, pos, mask):
        """One decoder layer; writes its K/V at `pos`. Every layer has the same shapes: compiled once."""
        b, t, _ = x.shape
        nq, nkv = self.heads * self.hd, self.kv_heads * self.hd
        h = self.mm(rms(x, w["ln1"], self.eps), w["qkv"])
        q = rms(h[..., :nq].view(b, t, self.heads, self.hd), w["q_norm"], self.eps)
        k = rms(h[..., nq:nq + nkv].view(b, t, self.kv_heads, self.hd), w["k_norm"], self.eps)
        v = h[..., nq + nkv:].view(b, t, self.kv_heads, self.hd)
        q, k = rotate(torch.cat([q, k], dim=2), cos, sin).split([self.heads, self.kv_heads], dim=2)
        k_cache[rows, :, pos] = k
        v_cache[rows, :, pos] = v
        o = F.scaled_dot_product_attention(grouped(q, self.kv_heads), k_cache[:b], v_cache[:b], attn_mask=mask)
        x = x + self.mm(ungrouped(o, t), w["o"])
        g, u = self.mm(rms(x, w["ln2"], self.eps), w["gate_up"]).chunk(2, dim=-1)
        return x + self.mm(F.silu(g) * u, w["down"])

    def write_context(self, hidden, pos):
        """The drafter's context K/V for these positions, from the target's hidden states there."""
        b, t = pos.shape
        ctx = rms(self.mm(torch.cat([hidden[i + 1] for i in self.layer_ids], dim=-1), self.fc), self.hidden_norm,
                  self.d_eps)
        cos, sin = self.cos[pos], self.sin[pos]
        rows = self.rows[:b, None].expand(b, t)
        kv_heads, hd = self.d_kv_heads, self.d_hd
        for i, w in enumerate(self.d_layers):
            k, v = self.mm(ctx, w["kv"]).chunk(2, dim=-1)
            k = rotate(rms(k.view(b, t, kv_heads, hd), w["k_norm"], self.d_eps), cos, sin)
            self.ctx_k[i][rows, :, pos] = k
            self.ctx_v[i][rows, :, pos] = v.view(b, t, kv_heads, hd)

    def draft(self, block, pos, start):
        """b-1 greedy drafts for blocks [last, MASK...] at `pos`; context visible below each row's start."""
        b, t = block.shape
        x = F.embedding(block, self.embed)
        cos, sin = self.cos[pos], self.sin[pos]
        sees_ctx = (self.key_index < start[:, None])[:, None, None, :]                  # [B, 1, 1, S]
        mask = torch.cat([sees_ctx, torch.ones(b, 1, 1, t, dtype=torch.bool, device=self.device)], dim=-1)
        for i, w in enumerate(self.d_layers):
            x = self._draft_layer(x, w, self.ctx_k[i, :b], self.ctx_v[i, :b], cos, sin, mask)
        return self.mm(rms(x[:, 1:], self.d_norm, self.d_eps), self.lm_head).argmax(-1)

    def draft_layer(self, x, w, ctx_k, ctx_v, cos, sin, mask):
        """One drafter layer: queries from the block, keys and values from [context ; block], not causal."""
        b, t, _ = x.shape
        heads, kv_heads, hd = self.d_heads, self.d_kv_heads, self.d_hd
        nq, nkv = heads * hd, kv_heads * hd
        h = self.mm(rms(x, w["ln1"], self.d_eps), w["qkv"])
        q = rotate(rms(h[..., :nq].view(b, t, heads, hd), w["q_norm"], self.d_eps), cos, sin)
        k = rotate(rms(h[..., nq:nq + nkv].view(b, t, kv_heads, hd), w["k_norm"], self.d_eps), cos, sin)
        v = h[..., nq + nkv:].view(b, t, kv_heads, hd)
        keys = torch.cat([ctx_k, k.transpose(1, 2)], dim=2)
        values = torch.cat([ctx_v, v.transpose(1, 2)], dim=2)
        o = F.scaled_dot_product_attention(grouped(q, kv_heads), keys, values, attn_mask=mask)
        x = x + self.mm(ungrouped(o, t), w["o"])
        g, u = self.mm(rms(x, w["ln2"], self.d_eps), w["gate_up"]).chunk(2, dim=-1)
        return x + self.mm(F.silu(g) * u, w["down"])

    # ---- one step, graph-safe -----------------------------------------------------------------------------
    def _step(self):
        t = self.block_size
        pos = self.start[:, None] + self.offsets
        block = self.last[:, None].expand(-1, t).clone()     # without a drafter: a verify-only step (benchmarks)
        if t > 1 and self.drafter is not None:
            block[:, 1:] = self.mask_token_id
            block[:, 1:] = self.draft(block, pos, self.start)
        logits, hidden = self.target_forward(block, pos)
        choice = logits.argmax(-1)
        if self.drafter is not None:
            self.write_context(hidden, pos)
        if t > 1:
            n = (block[:, 1:] == choice[:, :-1]).long().cumprod(dim=1).sum(dim=1)
        else:
            n = torch.zeros_like(self.last)
        self.result.copy_(torch.cat([block, choice, n[:, None]], dim=1))
        self.last.copy_(choice.gather(1, n[:, None]).squeeze(1))
        # a finished row keeps stepping with the others; keep its positions inside the cache
        self.start.copy_(torch.clamp(self.start + n + 1, max=self.max_len - t))

    @torch.no_grad()
    def _capture(self):
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):                      # warm-up on a zero state; prefill overwrites it
                self._step_fn()
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self._step_fn()

    @torch.no_grad()
    def step(self):
        if self.graph is not None:
            self.graph.replay()
        else:
            self._step_fn()

    # ---- prefill and the decode loop ----------------------------------------------------------------------
    @torch.no_grad()
    def prefill(self, prompts: list[list[int]]) -> None:
        """Right-padded prompts in one forward; padding writes stale entries the mask hides."""
        b = len(prompts)
        width = max(map(len, prompts))
        ids = torch.tensor([p + [0] * (width - len(p)) for p in prompts], device=self.device)
        pos = torch.arange(width, device=self.device).expand(b, width)
        logits, hidden = self.target_forward(ids, pos, self.target_layer)
        lengths = torch.tensor([len(p) for p in prompts], device=self.device)
        if self.drafter is not None:
            self.write_context(hidden, pos)
        self.last[:b] = logits[torch.arange(b, device=self.device), lengths - 1].argmax(-1)
        self.start[:b] = lengths

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], max_new_tokens: int, stop_ids=frozenset()) -> Output:
        if len(prompts) != self.batch:
            raise ValueError(f"this StaticPair decodes batches of {self.batch}, got {len(prompts)}")
        if max(map(len, prompts)) + max_new_tokens + self.block_size > self.max_len:
            raise ValueError(f"prompt + max_new_tokens + block exceeds max_len {self.max_len}")
        t0 = time.perf_counter()
        self.prefill(prompts)
        rows = Rows(self.batch, max_new_tokens, stop_ids, t0)
        rows.out.first_token_s = rows.commit({r: [tok] for r, tok in enumerate(self.last.tolist())})
        t = self.block_size
        while rows.live():
            self.step()
            res = self.result.tolist()                 # the step's only host sync
            live = rows.live()
            accepted = [row[-1] for row in res]
            now = rows.commit({r: res[r][1:accepted[r] + 1] + [res[r][t + accepted[r]]] for r in live})
            rows.out.steps.append(Step(drafted=[row[1:t] for row in res], target=[row[t:2 * t] for row in res],
                                       accepted=accepted, committed=[a + 1 for a in accepted], live=live, t_s=now))
        return rows.out
