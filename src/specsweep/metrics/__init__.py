"""Pure metric functions over request records and counter deltas; no I/O.

Each timing figure is defined here once, and every reader (metrics.json, the summary, stats, tune, compare,
the pages, the plots and MLflow) takes it from here under one name (docs/reference.md lists them):
- `streamed_tpot` (`request_tpot`): a request's streamed time per output token after its first chunk;
- per-token ITL (`per_token_itl`): a chunk's gap spread over its tokens;
- `e2e_ms_per_output_token`: a repeat's summed end-to-end time over its summed output tokens (TTFT included);
- `e2e_s`: a request's end-to-end latency, which the paired verdict uses.
The streamed ones are undefined for bursty streams (`is_bursty`) and a whole cell's are void beyond
MAX_BURSTY_SHARE of them (`streamed_figures_invalid`).
Measured by the server, from a record's `server_timing` (docs/timing.md):
- `server_tpot` (`request_server_tpot`): the server's first-to-last-token time over the tokens after the first;
- `server_itl`: per-token gaps between the server's own step times, where it gives them (the local engine);
- `burst_attribution`: whether a bursty stream was produced in a burst by the server or delayed after it;
- `tpot_agreement`: the client's streamed TPOT against the server's on the same non-bursty requests.
Of the answers and the streams (quality_figures):
- `repetition`: the share of an answer covered by an n-gram it repeats; a cell with too many degenerate answers
  gets no verdict (`answers_degenerate`, stats.paired_speedup);
- `decode_tok_s` (`request_decode_tok_s`): a request's decode rate, its spread over a cell and its starved streams;
- `steady_output_tok_s`: output tokens over the time every stream is decoding, beside the whole run's.

One module a family: `distributions`, `client_timing`, `server_timing`, `answers` (answers, streams, steady
state), `throughput` (request figures), `spec_decode` (acceptance) and `set_acceptance`. Every public name is
re-exported here, so callers write `metrics.x`."""
from specsweep.metrics.answers import (
                            DEGENERATE_REPETITION,
                            DEGENERATE_SHARE,
                            REPEAT_MIN_CHARS,
                            REPEAT_NGRAM,
                            STARVED_SHARE,
                            STEADY_MIN_CHUNKS,
                            answer_figures,
                            degenerate_reason,
                            quality_figures,
                            repetition,
                            request_acceptance_length,
                            request_decode_tok_s,
                            steady_figures,
                            stream_figures,
)
from specsweep.metrics.client_timing import (
                            BURST_SHARE,
                            MAX_BURSTY_SHARE,
                            is_bursty,
                            output_length,
                            per_token_itl,
                            request_tpot,
                            streamed_figures,
                            streamed_invalid,
                            streamed_tpot,
                            token_chunks,
)
from specsweep.metrics.distributions import dist, quantiles
from specsweep.metrics.server_timing import (
                            SPAN_SLACK_S,
                            TPOT_AGREEMENT,
                            burst_attribution,
                            request_server_tpot,
                            server_bursty,
                            server_figures,
                            server_invalid,
                            server_itl,
                            timing_figures,
                            tpot_agreement,
)
from specsweep.metrics.set_acceptance import (
                            SET_ACCEPTANCE_Z,
                            distinct_step_sequences,
                            set_acceptance_check,
                            set_acceptance_rates,
                            set_step_moments,
                            steps_by_drafts,
)
from specsweep.metrics.spec_decode import (
                            SpecCounters,
                            acceptance,
                            acceptance_from_lengths,
                            counters_dict,
                            greedy_agreement,
                            length_mismatch,
                            length_shares,
                            median_mad,
                            never_drafted,
                            per_request_acceptance,
                            repeat_agreement,
                            request_spec,
                            spec_mismatch,
                            speedup_output_tok_s,
                            agreement_na,
)
from specsweep.metrics.throughput import e2e_ms_per_output_token, request_figures
