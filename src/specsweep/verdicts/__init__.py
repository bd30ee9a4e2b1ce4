"""The paired statistics behind a verdict (`stats`) and the two stopping rules over repeats: looks after every
repeat (`sequential`) and planned looks with alpha spending (`spending`). Pure: arrays in, verdicts out."""
