"""The plots' shared style: one colour and label per K across every plot of a study."""
import pandas as pd

from specsweep.report import BASELINE_COLOUR, k_styles


def test_each_k_has_one_colour_and_the_baseline_is_black():
    table = pd.DataFrame({"method": ["none", "dflash", "dflash", "ngram"],
                          "num_speculative_tokens": [0, 3, 7, 3]})
    styles = k_styles(table)
    assert styles["none", None] == ("baseline", BASELINE_COLOUR)
    assert styles["dflash", 3][1] == styles["ngram", 3][1] != styles["dflash", 7][1]
    assert [styles[m, k][0] for m, k in (("dflash", 3), ("ngram", 3), ("dflash", 7))] == [
        "dflash K=3", "ngram K=3", "dflash K=7"]
    one_method = k_styles(table[table.method != "ngram"])
    assert one_method["dflash", 7][0] == "K=7"
