"""A test-only stand-in for the `sglang` package (see launch_server.py); it is not SGLang."""
