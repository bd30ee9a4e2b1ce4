"""The echo backend's answers to the planner's questions about the machine (plan/machine.py): in-process, like
the local engine, with no server, no memory share and no sleep mode, so it answers as that one does."""
from specsweep.backends.local.machine import (  # noqa: F401
    FIXES_KV, IN_PROCESS, SHARES_GPU, SLEEP_LEVELS, cpu_need_gib, cpu_start_one_core, gpu_need, sleep_level)
