"""A server's own flags (`server.extra_args`, passed to the server as they are): what one of them says. The one
reader of that list, for the cells, preflight, the residency plan and the vLLM launch."""
from __future__ import annotations


def flag_value(args: list, flag: str) -> str | None:
    """A flag's value in server.extra_args (`--flag V` or `--flag=V`; vLLM takes underscores too), "" for a flag
    given bare, None where it is absent."""
    args = [str(a) for a in args or []]
    for i, a in enumerate(args):
        name, eq, value = a.partition("=")
        if name.replace("_", "-") == flag:
            if eq:
                return value
            return args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("-") else ""
    return None


def random_weights(args: list) -> bool:
    """Served with weights the server makes itself (`--load-format dummy`, vLLM's and SGLang's flag)."""
    return flag_value(args, "--load-format") == "dummy"
