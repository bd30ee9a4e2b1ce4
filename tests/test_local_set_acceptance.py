"""From config to the engine: a local cell's sweep.set_acceptance and sweep.verification reach
dflash.engine.generate as vLLM's synthetic and block methods."""
import pytest

from specsweep.grid.cells import expand
from specsweep.grid.config import compose_jobs


def grid_of(results, *overrides):
    return expand(compose_jobs([f"results_dir={results}", "server=local", "kernel=local_sdpa",
                                "sweep.num_speculative_tokens=[3]", "sweep.concurrency=[2]", *overrides]))


@pytest.mark.trained_pair
def test_a_block_cell_verifies_by_block_verification(tiny_results, monkeypatch):
    from specsweep.backends.local.session import LocalPair
    from specsweep.models.dflash import engine

    grid = grid_of(tiny_results, "sweep.verification=[block]", "sweep.temperature=0.8", "sweep.max_tokens=16")
    [(sid, cell)] = [(s, c) for s, c in grid.servers.items() if not c.is_baseline]
    calls = []
    real = engine.block_verify
    monkeypatch.setattr(engine, "block_verify", lambda *a: calls.append(1) or real(*a))
    pair = LocalPair(cell.spec)
    pair.decode([pair.chat_ids([{"role": "user", "content": "Ada has 3 apples."}], False)],
                next(iter(grid.benches[sid].values())).spec, seed=0)
    assert calls


@pytest.mark.trained_pair
def test_a_local_set_acceptance_cell_decodes_at_the_set_length(tiny_results):
    from specsweep.backends.local.session import LocalPair

    grid = grid_of(tiny_results, "sweep.set_acceptance=[3.0]", "sweep.max_tokens=33")
    [(sid, cell)] = [(s, c) for s, c in grid.servers.items() if c.sets_acceptance]
    bench = next(iter(grid.benches[sid].values())).spec          # any of its bench cells (thinking, repeat)
    assert bench["ignore_eos"]
    pair = LocalPair(cell.spec)
    out = pair.decode([pair.chat_ids([{"role": "user", "content": "Ada has 3 apples. Ada gets 4 more."}], False)] * 2,
                      bench, seed=0)
    assert [len(s) for s in out.sequences] == [33, 33]
    assert all(s.accepted[r] == 2 for s in out.steps for r in s.live)    # L = 3.0 at K = 3: rates [1, 1, 0]
