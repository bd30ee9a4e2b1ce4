"""Where specsweep lives: the repository (conf/, workflow/) and its folder in the user's cache."""
from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def user_cache() -> Path:
    """specsweep's folder in the user's cache: compositions (config.composed_path) and the MLflow schema
    template."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "specsweep"
