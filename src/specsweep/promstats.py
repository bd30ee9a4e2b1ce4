"""vLLM's /metrics: parse with prometheus_client, take counter deltas, derive acceptance figures."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from prometheus_client.parser import text_string_to_metric_families

DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"


@dataclass
class SpecCounters:
    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    per_pos: dict[int, float] = field(default_factory=dict)

    def __sub__(self, before: "SpecCounters") -> "SpecCounters":
        positions = set(self.per_pos) | set(before.per_pos)
        return SpecCounters(self.drafts - before.drafts, self.draft_tokens - before.draft_tokens,
                            self.accepted - before.accepted,
                            {p: self.per_pos.get(p, 0.0) - before.per_pos.get(p, 0.0) for p in sorted(positions)})


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


def acceptance(delta: SpecCounters) -> dict:
    """Token-weighted figures over every step in the delta (vLLM's convention, not a mean of prompt means)."""
    d = delta.drafts
    return {
        "num_drafts": d,
        "num_draft_tokens": delta.draft_tokens,
        "num_accepted_tokens": delta.accepted,
        "mean_acceptance_length": (1.0 + delta.accepted / d) if d else None,
        "acceptance_rate": (delta.accepted / delta.draft_tokens) if delta.draft_tokens else None,
        "per_position_acceptance": [delta.per_pos[p] / d for p in sorted(delta.per_pos)] if d else [],
    }


def counters_dict(c: SpecCounters) -> dict:
    return asdict(c)


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
