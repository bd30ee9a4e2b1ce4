"""What a study is before it runs: Hydra composition (`config`), the cells and their ids (`cells`), the repeats
(`repeats`), the prompts (`datasets`) and replayed acceptance (`replay_rates`)."""
