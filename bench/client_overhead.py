"""The client's own cost: specsweep's client against a bare httpx streaming loop, side by side.

Both hit the same local SSE server that answers at once (so the server is not what is measured), with
the same concurrency and request count. Reports the sustained request rate of each and their ratio,
and the client's overhead per request (its time per request minus the bare loop's).

    python -m bench run client_overhead -- [--requests 2000] [--concurrency 16] [--smoke]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import resource
import time

import httpx

from specsweep.run.client import ChatSettings, run_requests

CHUNKS = [{"choices": [{"delta": {"content": f"t{i} "}}]} for i in range(16)] + [
    {"choices": [{"delta": {}, "finish_reason": "length"}]},
    {"choices": [], "usage": {"prompt_tokens": 8, "completion_tokens": 16}}]
BODY = ("".join(f"data: {json.dumps(c)}\n\n" for c in CHUNKS) + "data: [DONE]\n\n").encode()


def serve(port_q):
    """An instant OpenAI-style SSE endpoint (aiohttp, in its own process so it has its own core)."""
    from aiohttp import web

    async def chat(request):
        await request.read()
        return web.Response(body=BODY, content_type="text/event-stream")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)

    async def main():
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port_q.put(site._server.sockets[0].getsockname()[1])
        await asyncio.Event().wait()

    asyncio.run(main())


async def bare(url: str, n: int, concurrency: int) -> float:
    sem = asyncio.Semaphore(concurrency)
    payload = {"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": True}
    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=concurrency)) as http:
        async def one():
            async with sem:
                async with http.stream("POST", f"{url}/v1/chat/completions", json=payload) as r:
                    async for _ in r.aiter_lines():
                        pass
        t0 = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(n)))
        return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--smoke", action="store_true", help="60 requests at concurrency 4: seconds")
    args = ap.parse_args()
    if args.smoke:
        args.requests, args.concurrency = 60, 4
    q = mp.Queue()
    proc = mp.Process(target=serve, args=(q,), daemon=True)
    proc.start()
    url = f"http://127.0.0.1:{q.get(timeout=30)}"
    try:
        settings = ChatSettings("m", 16, 0.0, 0, False, 30.0)
        prompts = [["x"]] * args.requests
        asyncio.run(bare(url, 50, args.concurrency))                       # warm both paths
        asyncio.run(run_requests(url, prompts[:50], settings, args.concurrency, progress=False))
        t_bare = asyncio.run(bare(url, args.requests, args.concurrency))
        cpu0 = time.process_time()
        records, t_ours = asyncio.run(run_requests(url, prompts, settings, args.concurrency, progress=False))
        cpu_ours = time.process_time() - cpu0
        assert all(r.ok and r.completion_tokens == 16 for r in records), "the bench server answered badly"
    finally:
        proc.terminate()
    n = args.requests
    result = {
        "requests": n, "concurrency": args.concurrency,
        "bare_httpx_req_s": n / t_bare, "specsweep_req_s": n / t_ours,
        "rate_ratio_specsweep_over_bare": t_bare / t_ours,
        "overhead_ms_per_request": (t_ours - t_bare) / n * 1e3,
        "client_cpu_ms_per_request": cpu_ours / n * 1e3,
        "client_max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
