import json

import pytest

from specsweep.core.errors import ConfigError
from specsweep.grid.config import compose_jobs, format_override_value, overrides_from_snakemake


def test_default_composes_the_tiny_pair_on_vllm_cpu():
    [cfg] = compose_jobs([])
    assert cfg["pair"]["name"] == "tiny" and cfg["pair"]["method"] == "dflash"
    assert cfg["pair"]["target"] == "results/models/tiny/target"   # follows results_dir
    assert cfg["server"]["device"] == "cpu" and cfg["kernel"]["name"] == "cpu"
    assert cfg["sweep"]["num_speculative_tokens"] == [3, 7]
    assert cfg["tracking"]["enabled"] is True


def test_overrides_and_group_choices():
    [cfg] = compose_jobs(["pair=qwen3-8b-dflash-b16", "server=vllm_gpu", "kernel=flash_attn_graphs",
                          "sweep.num_speculative_tokens=[7,15]", "results_dir=/tmp/r"])
    assert cfg["pair"]["drafter"] == "z-lab/Qwen3-8B-DFlash-b16" and cfg["pair"]["mask_token_id"] == 151669
    assert cfg["kernel"]["attention_backend"] == "FLASH_ATTN" and cfg["server"]["dtype"] == "bfloat16"
    assert cfg["sweep"]["num_speculative_tokens"] == [7, 15]


def test_sweep_pairs_and_datasets_expand_to_one_job_each():
    jobs = compose_jobs(["sweep.pairs=[tiny,tiny-ngram]", "sweep.datasets=[synthetic,gsm8k]"])
    assert sorted((j["pair"]["name"], j["dataset"]["name"]) for j in jobs) == [
        ("tiny", "gsm8k"), ("tiny", "synthetic"), ("tiny-ngram", "gsm8k"), ("tiny-ngram", "synthetic")]


@pytest.mark.parametrize("overrides, message", [
    (["sweep.nope=1"], "config: sweep.nope is not a config key: check its spelling against conf/"),
    (["pair=nope"], "choose one of: llama3.1-8b-dflash-ultrachat, qwen3-4b-dflash-b16"),
    (["dataset=nope"], "choose one of: alpaca, gsm8k"),
    (["pair.block_size=0"], "config: pair.block_size: 0 is less than the minimum of 1"),
    (["sweep.concurrency=abc"], "config: sweep.concurrency: 'abc' is not valid"),
    (["server.max_model_len=many"], "config: server.max_model_len: 'many' is not of type 'integer'"),
    (["dataset=jsonl"], "config: dataset.path is required"),
    (['server.extra_args=["{\\"a\\": 1,}"]'], "is not valid JSON"),
])
def test_bad_config_is_one_line_naming_the_problem(overrides, message):
    with pytest.raises(ConfigError) as e:
        compose_jobs(overrides)
    text = str(e.value)
    assert message in text and "\n" not in text


def test_snakemake_config_becomes_hydra_overrides():
    # `snakemake --config dataset=gsm8k 'sweep={num_speculative_tokens: [2,4]}' study=a
    #     overrides="server.max_model_len=1024 pair.block_size=16"`, values as Snakemake's YAML loader gives them
    config = {"dataset": "gsm8k", "sweep": {"num_speculative_tokens": ["2", "4"], "thinking": "false"},
              "study": "a b", "overrides": "server.max_model_len=1024 pair.block_size=16"}
    assert overrides_from_snakemake(config) == [
        "dataset=gsm8k", "sweep.num_speculative_tokens=[2,4]", "sweep.thinking=false", 'study="a b"',
        "server.max_model_len=1024", "pair.block_size=16"]
    [cfg] = compose_jobs(overrides_from_snakemake({**config, "study": "a"}))
    assert cfg["sweep"]["num_speculative_tokens"] == [2, 4] and cfg["sweep"]["thinking"] == [False]   # axes are lists
    assert cfg["server"]["max_model_len"] == 1024 and cfg["dataset"]["name"] == "gsm8k"
    assert format_override_value(None) == "null" and format_override_value({"x": 1}) == "{x:1}"


def test_an_override_whose_closing_quote_snakemake_stripped_is_one_line():
    """`--config overrides="... +server.env.X='1'"`: Snakemake strips the quote that ends the value."""
    from snakemake.cli import parse_config

    config = parse_config(["overrides=pair.block_size=16 +server.env.X='1'"])
    with pytest.raises(ConfigError, match=r"No closing quotation; Snakemake strips a quote .* end it with a space") as e:
        overrides_from_snakemake(config)
    assert "\n" not in str(e.value)
    assert overrides_from_snakemake(parse_config(["overrides=pair.block_size=16 +server.env.X='1' "])) == [
        "pair.block_size=16", "+server.env.X=1"]


@pytest.mark.parametrize("overrides, message", [
    (["server=local", "kernel=flash_attn_graphs"],
     "config: kernel.attention_backend=FLASH_ATTN is a server's attention backend, which the local engine "
     "(server.backend=local) does not take: use kernel=local_sdpa"),
    (["server=local", "kernel=local_sdpa", "kernel.attention_backend=TORCH_SDPA"],
     "kernel.attention_backend=TORCH_SDPA is a server's"),
    (["kernel=local_sdpa"], "config: kernel.attn_implementation=sdpa is the local engine's attention implementation, "
                            "which a server backend does not take: use kernel=cpu on CPU or kernel=flash_attn_graphs"),
    (["server=vllm_gpu", "kernel=flash_attn_graphs", "kernel.attn_implementation=eager"],
     "kernel.attn_implementation=eager is the local engine's"),
    (["server.backend=sglang", "kernel=local_graphs"], "kernel.attn_implementation=sdpa is the local engine's"),
])
def test_each_backend_refuses_the_other_backends_kernel_key(overrides, message):
    with pytest.raises(ConfigError) as e:
        compose_jobs(overrides)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_a_malformed_defaults_list_is_one_line(tmp_path, monkeypatch):
    """YAML reads `override /tracking: off` as a boolean, which Hydra refuses with a ValueError of its own."""
    import shutil

    import specsweep.grid.config as config

    conf = tmp_path / "conf"
    shutil.copytree(config.CONF_DIR, conf)
    (conf / "experiment" / "broken.yaml").write_text("# @package _global_\ndefaults:\n  - override /tracking: off\n")
    monkeypatch.setattr(config, "CONF_DIR", conf)
    with pytest.raises(ConfigError) as e:
        compose_jobs(["experiment=broken"])
    assert "defaults list is malformed" in str(e.value) and "quote YAML's off" in str(e.value)
    assert "\n" not in str(e.value)


def test_the_gpu_presets_compose_on_every_gpu_server():
    for preset in ("gpu_tiny", "gpu_8b_shaped"):
        for server in ("vllm_gpu", "vllm_gpu_bundle"):
            [job] = compose_jobs([f"experiment={preset}", f"server={server}"])
            assert job["tracking"]["enabled"] is False and job["server"]["device"] == "cuda"
    [job] = compose_jobs(["experiment=gpu_tiny", "server=vllm_gpu_bundle"])
    assert job["server"]["python"] == "python3" and job["server"]["env"]["PYTHONPATH"] == "/tmp/site"
    assert job["server"]["dtype"] == "float32" and job["kernel"]["attention_backend"] == "TRITON_ATTN"


def test_kernels_that_match_their_backend_pass():
    for overrides in (["server=local", "kernel=local_sdpa"], ["server=local_cuda", "kernel=local_compiled"],
                      ["server=vllm_gpu", "kernel=flash_attn_graphs"], ["server.backend=sglang"],
                      ["server=local", "kernel=cpu"]):      # cpu sets neither key
        compose_jobs(overrides)


def test_an_sglang_server_needs_the_launch_settings_of_a_vllm_one():
    """All but vLLM's `executable`: SGLang always runs as `server.python -m sglang.launch_server`."""
    with pytest.raises(ConfigError, match="config: server: 'python' is a required property"):
        compose_jobs(["server=local", "server.backend=sglang"])
    with pytest.raises(ConfigError, match="config: server: 'executable' is a required property"):
        compose_jobs(["server=sglang", "server.python=python3", "server.backend=vllm", "kernel=cpu"])


SPECULATIVE = "use pair.method, sweep.num_speculative_tokens and pair.speculative_extra"


@pytest.mark.parametrize("backend, args, item, fix", [
    ("vllm", ["--speculative-config={}"], "--speculative-config={}", SPECULATIVE),
    ("vllm", ["--speculative-config", '{"method": "ngram"}'], "--speculative-config", SPECULATIVE),
    ("vllm", ["--speculative_config.num_speculative_tokens=3"],            # vLLM's _ and nested forms
     "--speculative_config.num_speculative_tokens=3", SPECULATIVE),
    ("vllm", ["--max-num-seqs", "8", "--speculative-disable-by-batch-size=4"],
     "--speculative-disable-by-batch-size=4", SPECULATIVE),
    ("vllm", ["--model=Qwen/Qwen3-8B"], "--model=Qwen/Qwen3-8B", "use pair.target"),
    ("vllm", ["--tokenizer", "x"], "--tokenizer", "use pair.tokenizer"),
    ("vllm", ["-tp", "2"], "-tp", "use server.tensor_parallel_size"),
    ("vllm", ["-tp=2"], "-tp=2", "use server.tensor_parallel_size"),
    ("vllm", ["--tensor-parallel", "2"], "--tensor-parallel", "use server.tensor_parallel_size"),  # abbreviated
    ("vllm", ["--data-parallel-size=2"], "--data-parallel-size=2", "use server.data_parallel_size"),
    ("vllm", ["-dp", "2"], "-dp", "use server.data_parallel_size"),
    ("vllm", ["--port", "8000"], "--port", "use server.port"),
    ("vllm", ["--served-model-name", "m"], "--served-model-name", "drop it: specsweep names the served model"),
    ("vllm", ["--no-enforce-eager"], "--no-enforce-eager", "use kernel.cuda_graphs"),
    ("vllm", ["--per-request-spec-decode-metrics=none"], "--per-request-spec-decode-metrics=none",
     "use server.per_request_spec_metrics"),
    ("sglang", ["--model-path", "x"], "--model-path", "use pair.target"),
    ("sglang", ["--tp-size=2"], "--tp-size=2", "use server.tensor_parallel_size"),
    ("sglang", ["--dp-size", "2"], "--dp-size", "use server.data_parallel_size"),
    ("sglang", ["--port=30000"], "--port=30000", "use server.port"),
    ("sglang", ["--speculative-algorithm", "EAGLE"], "--speculative-algorithm", SPECULATIVE),
    # the launch's own API key, and what could replace it or vLLM's guard (docs/backends.md#api-keys)
    ("vllm", ["--api-key", "k"], "--api-key", "each launch gets a fresh random API key"),
    ("vllm", ["--middleware=m.M"], "--middleware=m.M", "specsweep sets vLLM's middleware"),
    ("sglang", ["--api-key=k"], "--api-key=k", "each launch gets a fresh random API key"),
    ("sglang", ["--config", "c.yaml"], "--config", "a config file could set what the cell sets"),
])
def test_extra_args_may_not_set_what_the_spec_sets(backend, args, item, fix):
    with pytest.raises(ConfigError) as e:
        compose_jobs([f"server.backend={backend}", "server.extra_args=" + json.dumps(args)])
    text = str(e.value)
    assert text.startswith(f"config: server.extra_args item {item!r} overrides the cell's spec"), text
    assert fix in text and "\n" not in text


def test_extra_args_that_the_spec_does_not_set_pass():
    [cfg] = compose_jobs(["server.extra_args=" + json.dumps(["--max-num-seqs", "64", "--seed=1", "--", "-x"])])
    assert cfg["server"]["extra_args"] == ["--max-num-seqs", "64", "--seed=1", "--", "-x"]


def test_a_composition_is_kept_and_read_back_only_while_its_inputs_are_the_same(tmp_path, monkeypatch):
    """compose_jobs keeps what it composed under the user's cache, named by everything composition reads: the same
    overrides and files read it back (equal to a fresh compose); a changed conf/ file is a new composition."""
    import shutil

    import specsweep.grid.config as config

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    conf = tmp_path / "conf"
    shutil.copytree(config.CONF_DIR, conf)
    monkeypatch.setattr(config, "CONF_DIR", conf)
    overrides = ["sweep.num_speculative_tokens=[2,5]", "sweep.k_by_concurrency={1:5}"]
    first = compose_jobs(overrides)
    kept = config.composed_path(overrides)
    assert kept.parent == tmp_path / "cache" / "specsweep" / "composed" and kept.exists()
    again = compose_jobs(overrides)                                  # read back from the JSON kept
    assert again == first == config._compose_jobs(overrides)
    assert again[0]["sweep"]["k_by_concurrency"] == {1: [5]}        # types kept: an int key stays an int
    assert json.loads(kept.read_text())[0]["sweep"]["repeats"] == first[0]["sweep"]["repeats"]

    sweep = conf / "sweep" / "answers.yaml"                         # the default design's own file
    sweep.write_text(sweep.read_text().replace("repeats:", "repeats: 7 #", 1))
    assert config.composed_path(overrides) != kept
    assert compose_jobs(overrides)[0]["sweep"]["repeats"] == 7 != first[0]["sweep"]["repeats"]

    other = config.composed_path(["sweep.repeats=2"])
    other.write_text("not JSON")                                     # a torn or foreign file is composed afresh
    assert compose_jobs(["sweep.repeats=2"])[0]["sweep"]["repeats"] == 2
    with pytest.raises(ConfigError):                                 # a refusal is never kept
        compose_jobs(["sweep.nope=1"])
    assert len(list(kept.parent.glob("*.json"))) == 3


def test_a_kept_composition_reads_back_with_its_key_types_and_one_json_lacks_is_not_kept(tmp_path):
    """JSON objects take only string keys: a dict with other keys (or whose one key is the marker of such a dict)
    is kept as its pairs; a value JSON would change (a tuple would read back a list) is not kept at all."""
    import specsweep.grid.config as config

    jobs = [{"a": {1: [5], 2.5: None, "x": {True: "t"}}, "b": {config._PAIRS: 1}, "c": [{"d": 1.0}], "e": ""}]
    path = tmp_path / "kept.json"
    config._keep_composed(path, jobs)
    back = json.loads(path.read_text(), object_hook=config._from_json)
    assert back == jobs and [type(k) for k in back[0]["a"]] == [int, float, str]
    assert [type(k) for k in back[0]["a"]["x"]] == [bool] and type(back[0]["c"][0]["d"]) is float

    config._keep_composed(tmp_path / "tuple.json", [{"a": (1, 2)}])
    config._keep_composed(tmp_path / "set.json", [{"a": {1, 2}}])
    assert not (tmp_path / "tuple.json").exists() and not (tmp_path / "set.json").exists()


def test_the_default_study_asks_its_questions_in_waves_until_answered():
    """The default design (conf/sweep/answers.yaml, issue 54): `auto` with its planned looks, every prompt in waves
    of the concurrency, the warm-up once, on the same servers as the fixed design before it (sweep=default: 10
    repeats, a closed loop, the warm-up every turn), whose bench cells keep their ids."""
    from specsweep.grid.cells import expand

    answers, fixed = (expand(compose_jobs(["results_dir=results", *extra])) for extra in ([], ["sweep=default"]))
    assert [c.spec for c in answers.servers.values()] == [c.spec for c in fixed.servers.values()]
    spec = next(iter(next(iter(answers.benches.values())).values())).spec
    assert (spec["waves"], spec["warmup_turns"], spec["concurrency"]) == ("all", "first", 4)
    assert len(next(iter(answers.benches.values()))) == 20          # auto's budget: 20 repeats planned
    assert {c.study for c in answers.servers.values()} == {"default"}
    spec = next(iter(next(iter(fixed.benches.values())).values())).spec
    assert (spec["waves"], spec["warmup_turns"]) == (None, "every")
    assert len(next(iter(fixed.benches.values()))) == 10
