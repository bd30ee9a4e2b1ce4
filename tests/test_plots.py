"""The plots: one colour and label per K across every plot of a study, the registry, the one filter."""
import pandas as pd

from specsweep.read.plots import BASELINE_COLOUR, k_styles


def test_each_k_has_one_colour_and_the_baseline_is_black():
    table = pd.DataFrame({"method": ["none", "dflash", "dflash", "ngram"],
                          "num_speculative_tokens": [0, 3, 7, 3]})
    styles = k_styles(table)
    assert styles["baseline"] == ("baseline", BASELINE_COLOUR)
    assert styles["dflash K=3"][1] == styles["ngram K=3"][1] != styles["dflash K=7"][1]
    assert [styles[key][0] for key in ("dflash K=3", "ngram K=3", "dflash K=7")] == [
        "dflash K=3", "ngram K=3", "dflash K=7"]
    one_method = k_styles(table[table.method != "ngram"])
    assert one_method["dflash K=7"][0] == "K=7"


def test_a_set_acceptance_cell_is_its_own_curve_never_its_ks_real_one(tmp_path):
    """K=15 with AL set 6.54 beside the real K=15 (the GPU study): its own colour and label, and speedup_vs_k
    draws no line from a real cell to a set one."""
    import matplotlib.pyplot as plt

    from specsweep.read.plots import _by_k

    table = pd.DataFrame({"method": ["none", "dflash", "dflash", "dflash"], "num_speculative_tokens": [0, 7, 15, 15],
                          "set_acceptance": [None, None, None, 6.54], "valid": True, "dataset": "synthetic",
                          "thinking": False, "concurrency": 1, "speedup_e2e_geomean": [None, 0.8, 0.79, 4.5]})
    styles = k_styles(table)
    assert styles["dflash K=15 · AL set 6.54"][0] == "K=15 · AL set 6.54"     # labels.setting's spelling
    assert styles["dflash K=15 · AL set 6.54"][1] != styles["dflash K=15"][1]
    assert k_styles(table.assign(set_acceptance=[None, None, None, [0.9, 0.5]]))[
        "dflash K=15 · AL set 2.4 (rates)"][0] == "K=15 · AL set 2.4 (rates)"
    fig, ax = plt.subplots()
    _by_k(ax, table, styles, "speedup_e2e_geomean", lambda g: ([0] * len(g), [0] * len(g)))
    lines = [list(line.get_ydata()) for line in ax.get_lines() if len(line.get_ydata()) > 1]
    assert lines == [[0.8, 0.79]]          # the real curve only: the set cell stands alone
    plt.close(fig)


def test_a_baseline_of_both_ignore_eos_settings_is_two_black_curves(tmp_path):
    """A set-acceptance study's baseline has a row per ignore_eos (summary.rows): the throughput plot draws each
    as its own curve, both black, the exact one labelled so, never one line zigzagging between the two."""
    import matplotlib.pyplot as plt

    from specsweep.read.plots import _curves, throughput

    table = pd.DataFrame({"server_cell": "base", "method": "none", "num_speculative_tokens": 0,
                          "ignore_eos": [False, True, False, True], "concurrency": [1, 1, 8, 8], "valid": True,
                          "dataset": "synthetic", "thinking": False, "output_tok_s": [10.0, 12.0, 60.0, 70.0]})
    styles = k_styles(table)
    assert styles["baseline · exact length"] == ("baseline · exact length", BASELINE_COLOUR)
    assert [list(g.output_tok_s) for g in _curves(table)] == [[10.0, 60.0], [12.0, 70.0]]
    throughput(table, styles, tmp_path / "t.png")
    assert (tmp_path / "t.png").stat().st_size > 0
    assert [list(g.output_tok_s) for g in _curves(table.drop(columns="ignore_eos").iloc[[0, 2]])] == [[10.0, 60.0]]
    plt.close("all")


def test_each_output_length_is_its_own_throughput_curve_named_by_its_length(tmp_path):
    """A study with a max_tokens axis: one curve per output length (never one line zigzagging between them), each
    legend naming its length."""
    import matplotlib.pyplot as plt

    from specsweep.read.plots import _curve_label, _curves, throughput

    table = pd.DataFrame({"server_cell": "base", "method": "none", "num_speculative_tokens": 0,
                          "max_tokens": [16, 64, 16, 64], "concurrency": [1, 1, 8, 8], "valid": True,
                          "dataset": "synthetic", "thinking": False, "output_tok_s": [10.0, 12.0, 60.0, 70.0]})
    curves = list(_curves(table))
    assert [list(g.output_tok_s) for g in curves] == [[10.0, 60.0], [12.0, 70.0]]
    assert [_curve_label(table, g, "baseline") for g in curves] == ["baseline out=16", "baseline out=64"]
    assert _curve_label(table.iloc[[0, 2]], curves[0], "baseline") == "baseline"     # one length: no suffix
    throughput(table, k_styles(table), tmp_path / "t.png")
    assert (tmp_path / "t.png").stat().st_size > 0
    plt.close("all")


def test_the_speedup_plot_draws_the_streamed_tpot_only_where_it_passed_its_check_and_says_why_not(tmp_path):
    import matplotlib.pyplot as plt

    from specsweep.read.plots import _streamed_tpot, speedup_vs_k

    why = "this cell repeat 1 of 2: 4 of 4 streams arrived in a burst (first to last chunk within 10% of e2e), ..."
    table = pd.DataFrame({"method": ["none", "dflash", "dflash"], "num_speculative_tokens": [0, 3, 7],
                          "set_acceptance": None, "valid": True, "dataset": "synthetic", "thinking": False,
                          "concurrency": 1, "speedup_e2e_geomean": [None, 1.5, 1.6],
                          "speedup_e2e_ci_low": [None, 1.3, 1.4], "speedup_e2e_ci_high": [None, 1.7, 1.8],
                          "speedup_streamed_tpot_geomean": [None, None, 2.0],
                          "speedup_streamed_tpot_ci_low": [None, None, 1.8],
                          "speedup_streamed_tpot_ci_high": [None, None, 2.2],
                          "speedup_streamed_tpot_na": [None, why, None]})
    styles = k_styles(table)
    fig, ax = plt.subplots()
    assert _streamed_tpot(ax, table, styles) == [f"K=3 c=1: {why}"]
    hollow = [line for line in ax.get_lines() if line.get_markerfacecolor() == "none"]
    assert [list(line.get_xdata()) for line in hollow] == [[7.15]] and list(hollow[0].get_ydata()) == [2.0]
    plt.close(fig)
    speedup_vs_k(table, styles, tmp_path / "s.png")
    assert (tmp_path / "s.png").stat().st_size > 0


def test_each_plot_is_one_registered_function_whose_name_is_its_file():
    """A new plot is one function with @plot(name): no second list to keep in step (plot_study draws PLOTS)."""
    from specsweep.read import plots

    assert [p.name for p in plots.PLOTS] == ["speedup_vs_k", "acceptance_vs_k", "acceptance_length_histogram",
                                             "throughput_vs_concurrency", "pareto", "speedup_vs_acceptance",
                                             "category_by_k", "speedup_vs_output_length", "speedup_vs_prompt_length",
                                             "acceptance_by_phase"]
    assert len({p.draw for p in plots.PLOTS}) == len(plots.PLOTS)
    table = pd.DataFrame({"method": ["none", "dflash"], "valid": [True, False]})
    assert list(plots.shown(table).method) == [] and list(plots.shown(table, speculative=False).method) == ["none"]


def test_the_ceiling_plot_draws_the_curve_and_the_drafter_only_where_a_study_has_set_acceptance(tmp_path):
    """speedup_vs_acceptance: the set-acceptance cells as the system's curve, the real cell as a star on it; a
    study without set acceptance gets no file (plot_study leaves it out)."""
    import matplotlib.pyplot as plt

    from specsweep.read import ceiling
    from specsweep.read.plots import speedup_vs_acceptance

    rows = [{"method": "none", "pair": "baseline", "num_speculative_tokens": 0, "set_acceptance": None},
            *({"method": "dflash", "pair": "p", "num_speculative_tokens": 7, "set_acceptance": s,
               "mean_acceptance_length": al, "speedup_e2e_geomean": sp, "speedup_e2e_ci_low": sp * 0.9,
               "speedup_e2e_ci_high": sp * 1.1} for s, al, sp in ((None, 3.1, 1.2), (2.0, 2.0, 0.8),
                                                                  (4.0, 4.0, 1.5), (6.0, 6.0, 2.1)))]
    rows = [dict(r, valid=True, backend="vllm", dataset="d", thinking=False, concurrency=4) for r in rows]
    table = pd.DataFrame(ceiling.annotate(rows))
    path = tmp_path / "c.png"
    drawn = []
    real_savefig = plt.Figure.savefig

    def keep(fig, *a, **k):
        drawn.extend(line for ax in fig.axes for line in ax.get_lines())
        return real_savefig(fig, *a, **k)

    plt.Figure.savefig = keep
    try:
        assert speedup_vs_acceptance(table, k_styles(table), path) is True and path.stat().st_size > 0
    finally:
        plt.Figure.savefig = real_savefig
    curve = next(line for line in drawn if list(line.get_xdata()) == [2.0, 4.0, 6.0])
    assert list(curve.get_ydata()) == [0.8, 1.5, 2.1]
    assert any(list(line.get_xdata()) == [3.1] and line.get_marker() == "*" for line in drawn)
    plain = table[table.set_acceptance.isna()].assign(ceiling_points=None)
    assert speedup_vs_acceptance(plain, k_styles(plain), tmp_path / "none.png") is False
    assert not (tmp_path / "none.png").exists()
