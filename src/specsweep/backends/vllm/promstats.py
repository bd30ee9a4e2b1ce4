"""vLLM's /metrics and log: its spec-decode counters, parsed with prometheus_client into the neutral
`metrics.SpecCounters`, whose deltas `metrics.acceptance` turns into figures."""
from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from specsweep.metrics import SpecCounters

DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"


def parse_counters(text: str, model_name: str | None = None) -> SpecCounters:
    """Sum the spec-decode counters over engines (and DP ranks) of one served model."""
    out = SpecCounters()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if model_name is not None and sample.labels.get("model_name", model_name) != model_name:
                continue
            if sample.name == DRAFTS:
                out.drafts += sample.value
            elif sample.name == DRAFT_TOKENS:
                out.draft_tokens += sample.value
            elif sample.name == ACCEPTED:
                out.accepted += sample.value
            elif sample.name == PER_POS:
                pos = int(sample.labels["position"])
                out.per_pos[pos] = out.per_pos.get(pos, 0.0) + sample.value
    return out


def log_totals(log_text: str) -> dict:
    """Sum the server's own `SpecDecoding metrics:` log lines (one per logging interval)."""
    import re

    pattern = re.compile(r"SpecDecoding metrics: .*?Accepted: (\d+) tokens, Drafted: (\d+) tokens")
    totals = {"accepted": 0, "drafted": 0, "lines": 0}
    for m in pattern.finditer(log_text):
        totals["accepted"] += int(m.group(1))
        totals["drafted"] += int(m.group(2))
        totals["lines"] += 1
    return totals
