"""Async OpenAI-compatible client: streamed chat completions under a concurrency limit.

Every failure (HTTP status, HTML or non-JSON body, broken stream, timeout) becomes a record with a
reason; nothing here raises out of a run.
"""
from __future__ import annotations

import asyncio
import json
import time
from dataclasses import asdict, dataclass, field

import httpx

from specsweep.core.nested import at
from specsweep.core.progress import progress_bar


@dataclass
class RequestRecord:
    index: int                  # prompt index in the dataset
    turn: int                   # 0-based turn of a multi-turn prompt
    ok: bool = False
    error: str | None = None
    status: int | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    ttft_s: float | None = None
    e2e_s: float | None = None
    itl_s: list[float] = field(default_factory=list)      # gaps between content chunks: one per chunk, not per token
    chunk_t_s: list[float] = field(default_factory=list)  # each chunk with content or new tokens: since the start
    chunk_tokens: list[int] | None = field(default_factory=list)  # the tokens each brought; None: no per-chunk usage
    finish_reason: str | None = None
    text: str = ""
    start_s: float = 0.0        # seconds since the cell's start
    spec: dict | None = None    # the request's own spec-decode stats, where the server reports them (spec_field)
    token_ids: list[int] | None = None   # the output's token ids, where asked for (return_token_ids: phases.py)
    prompt_token_ids: list[int] | None = None   # the prompt's, as the server templated it (return_token_ids)
    server_timing: dict | None = None  # the server's own timing of the request, where it sends it (timing_field);
    #                                    the backend's session turns it into metrics.server_tpot's neutral shape

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class ChatSettings:
    model: str
    max_tokens: int
    temperature: float
    seed: int
    thinking: bool
    timeout_s: float
    extra_body: dict | None = None       # a server's own request fields, merged into every payload
    spec_field: tuple[str, ...] = ()     # the key path at which a stream chunk carries the request's spec stats
    ignore_eos: bool = False             # decode exactly max_tokens
    api_key: str | None = field(default=None, repr=False)   # sent as a Bearer token; never recorded
    timing_field: tuple[str, ...] = ()   # the key path at which a stream chunk carries the server's request timing
    per_chunk_usage: bool = True         # continuous_usage_stats: each chunk's token count (off only to measure its cost)
    return_token_ids: bool = False       # vLLM's return_token_ids: each chunk's token ids and the prompt's (where
    #                                      </think> falls; where a greedy text leaves its baseline's: divergence.py)
    waves: bool = False                  # sweep.waves: `concurrency` prompts at once, the next wave once all finished


def settings_for(bench: dict, model: str, timeout_s: float, **server_fields) -> ChatSettings:
    """A bench cell's request settings, as every server backend sends them."""
    return ChatSettings(model=model, max_tokens=bench["max_tokens"], temperature=bench["temperature"],
                        seed=bench["seed"], thinking=bench["thinking"], timeout_s=timeout_s,
                        ignore_eos=bench.get("ignore_eos", False), waves=bool(bench.get("waves")), **server_fields)


def request_seed(seed: int, index: int, turn: int) -> int:
    """The seed one request is sent: the bench seed, offset by the request's prompt index and turn, so that no two
    requests of a cell share one. vLLM's V2 runner draws a request's random numbers, a set acceptance's accept
    draws among them, from its seed and the token's position alone (u = rand(seed, pos)): requests sent one seed
    read one random field, and a set-acceptance cell then realises one request's draws, not one per request
    (docs/methods.md#a-set-acceptance-asked-and-realised). Deterministic, so a rerun sends the same seeds."""
    return (seed + index + 100_003 * turn) % 2 ** 31


def _payload(messages: list[dict], s: ChatSettings, index: int = 0, turn: int = 0) -> dict:
    return {"model": s.model, "messages": messages, "max_tokens": s.max_tokens, "temperature": s.temperature,
            "seed": request_seed(s.seed, index, turn), "stream": True,
            "stream_options": {"include_usage": True,                                   # usage on every chunk
                               **({"continuous_usage_stats": True} if s.per_chunk_usage else {})},
            "chat_template_kwargs": {"enable_thinking": s.thinking},
            **({"ignore_eos": True} if s.ignore_eos else {}),
            **({"return_token_ids": True} if s.return_token_ids else {}), **(s.extra_body or {})}


def _reason_for_body(status: int, body: bytes, content_type: str) -> str:
    snippet = body[:120].decode("utf-8", "replace").replace("\n", " ")
    if "html" in content_type or snippet.lstrip().lower().startswith(("<!doctype", "<html")):
        return f"HTTP {status} with an HTML body: {snippet!r}"
    try:
        detail = json.loads(body)
        msg = detail.get("message") or detail.get("error", {}).get("message") or detail
    except (ValueError, AttributeError):
        msg = snippet
    return f"HTTP {status}: {str(msg)[:200]}"


def count_chunk(rec: RequestRecord, t_s: float, content: bool, usage: dict | None, counted: int) -> int:
    """Record a chunk that carried content or raised the cumulative `completion_tokens` (the server's
    continuous usage stats): its time and the tokens it brought; returns the tokens counted so far. A content
    chunk without a cumulative count means the server gives no per-chunk counts: chunk_tokens becomes None
    for the request (and only content chunks are timed), never a guess."""
    total = (usage or {}).get("completion_tokens") if rec.chunk_tokens is not None else None
    if not (content or (total is not None and total > counted)):
        return counted
    rec.chunk_t_s.append(round(t_s, 6))
    if rec.chunk_tokens is None:
        return counted
    if total is None or total < counted:
        rec.chunk_tokens = None
        return counted
    rec.chunk_tokens.append(total - counted)
    return total


async def chat_once(http: httpx.AsyncClient, url: str, messages: list[dict], s: ChatSettings,
                    rec: RequestRecord, t0: float) -> RequestRecord:
    start = time.perf_counter()
    rec.start_s = start - t0
    last = None
    counted = 0          # completion tokens of the chunks recorded so far
    parts: list[str] = []
    try:
        async with asyncio.timeout(s.timeout_s):
            async with http.stream("POST", f"{url}/v1/chat/completions", json=_payload(messages, s, rec.index, rec.turn)) as resp:
                rec.status = resp.status_code
                ctype = resp.headers.get("content-type", "")
                if resp.status_code != 200:
                    rec.error = _reason_for_body(resp.status_code, await resp.aread(), ctype)
                    return rec
                if "text/event-stream" not in ctype:
                    rec.error = f"expected an event stream, got {ctype or 'no content type'}: " + \
                                _reason_for_body(resp.status_code, await resp.aread(), ctype)
                    return rec
                done = False
                async for line in resp.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        done = True
                        break
                    try:
                        chunk = json.loads(data)
                    except ValueError:
                        rec.error = f"non-JSON stream chunk: {data[:120]!r}"
                        return rec
                    if "error" in chunk:
                        rec.error = f"server error in stream: {str(chunk['error'])[:200]}"
                        return rec
                    now = time.perf_counter()
                    content = False
                    if s.return_token_ids and chunk.get("prompt_token_ids") is not None:
                        rec.prompt_token_ids = list(chunk["prompt_token_ids"])
                    for choice in chunk.get("choices") or []:
                        delta = (choice.get("delta") or {})
                        piece = (delta.get("content") or "") + (delta.get("reasoning_content") or "") \
                            + (delta.get("reasoning") or "")
                        if piece:
                            if last is None:
                                rec.ttft_s = now - start
                            else:
                                rec.itl_s.append(now - last)
                            last, content = now, True
                            parts.append(piece)
                        if choice.get("finish_reason"):
                            rec.finish_reason = choice["finish_reason"]
                        if s.return_token_ids and choice.get("token_ids") is not None:
                            rec.token_ids = (rec.token_ids or []) + list(choice["token_ids"])
                    usage = chunk.get("usage")
                    if usage:
                        rec.prompt_tokens = usage.get("prompt_tokens")
                        rec.completion_tokens = usage.get("completion_tokens")
                    counted = count_chunk(rec, now - start, content, usage, counted)
                    spec = at(chunk, s.spec_field) if s.spec_field else None
                    if spec is not None:
                        rec.spec = spec
                    timing = at(chunk, s.timing_field) if s.timing_field else None
                    if timing is not None:
                        rec.server_timing = timing
                if not done:
                    rec.error = "stream ended before [DONE] (truncated)"
                    return rec
    except TimeoutError:
        rec.error = f"timed out after {s.timeout_s:.0f} s (server.request_timeout_s)"
        return rec
    except httpx.HTTPError as e:
        rec.error = f"{type(e).__name__}: {str(e)[:200] or 'connection failed'}"
        return rec
    finally:
        rec.text = "".join(parts)
        rec.e2e_s = time.perf_counter() - start
    if rec.completion_tokens is None:
        rec.error = "no usage in the stream: cannot count tokens"
        return rec
    rec.ok = True
    return rec


async def run_conversation(http, url, turns: list[str], index: int, s: ChatSettings, t0: float,
                           sem: asyncio.Semaphore) -> list[RequestRecord]:
    """One prompt; a multi-turn prompt sends each next turn after the model's own previous answer."""
    records, messages = [], []
    for turn, text in enumerate(turns):
        messages.append({"role": "user", "content": text})
        async with sem:
            rec = await chat_once(http, url, messages, s, RequestRecord(index=index, turn=turn), t0)
        records.append(rec)
        if not rec.ok:
            break
        messages.append({"role": "assistant", "content": rec.text})
    return records


async def run_requests(url: str, prompts: list[list[str]], s: ChatSettings, concurrency: int,
                       progress: bool = True, desc: str = "requests") -> tuple[list[RequestRecord], float]:
    """Send every prompt (a list of turns) with at most `concurrency` requests in flight: a new one as soon as one
    finishes, or (s.waves) in waves of `concurrency` prompts sent together, each once the wave before has finished,
    so that every wave's requests arrive, prefill and decode as one batch (sweep.waves, docs/methods.md)."""
    sem = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    bar = progress_bar(total=len(prompts), desc=desc, unit="prompt", disable=not progress)
    headers = {"Authorization": f"Bearer {s.api_key}"} if s.api_key else {}
    async with httpx.AsyncClient(timeout=httpx.Timeout(s.timeout_s, connect=10.0), limits=limits,
                                 headers=headers) as http:
        t0 = time.perf_counter()

        async def one(i, turns):
            out = await run_conversation(http, url, turns, i, s, t0, sem)
            bar.update(1)
            return out

        if s.waves:
            results = []
            for start in range(0, len(prompts), concurrency):
                results += await asyncio.gather(*(one(i, prompts[i]) for i in range(start, min(start + concurrency,
                                                                                              len(prompts)))))
        else:
            results = await asyncio.gather(*(one(i, t) for i, t in enumerate(prompts)))
        wall = time.perf_counter() - t0
    bar.close()
    return [r for conv in results for r in conv], wall


async def scrape(url: str, timeout_s: float = 10.0) -> str:
    async with httpx.AsyncClient(timeout=timeout_s) as http:
        resp = await http.get(f"{url}/metrics")
        resp.raise_for_status()
        return resp.text
