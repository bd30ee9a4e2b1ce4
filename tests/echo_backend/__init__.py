"""A stand-in fourth backend (tests/test_new_backend.py): a "server" that answers each prompt with the prompt
itself, in-process and at once. It is what docs/development.md says a new backend is: this package, one
registry line (backends.BACKENDS, set by the test), and one conf/server/ entry (written by the test). It claims
no CAPABILITIES and no SCHEMA fragment."""
SPEC_FLAGS = {"--echo-model": "use pair.target"}
ID_TAG = "-echo"
ID_BY_BLOCK = False
VERSION_FIELDS = ("echo_version",)
VERSION = "1.0"


def describe(env: dict) -> str:
    return f"echo {env['server_env'].get('echo')}"
