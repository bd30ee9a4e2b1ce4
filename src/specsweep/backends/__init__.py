"""The backends, one package each (vllm, sglang, local). Their facts (each package's `__init__`) and the door to
their parts are in `specsweep.core.registry`; a backend package owns everything it knows (docs/development.md)."""
