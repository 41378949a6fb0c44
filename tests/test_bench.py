"""scripts/bench.py runs end to end and prints its JSON line (speed itself is
not asserted: it is measured, see README "Performance")."""

import json

from toolformer.bench import main


def test_bench_prints_the_ratios(capsys):
    assert main(["--model", "tiny", "-n", "40", "--naive-n", "2", "--sample-docs", "1", "--threads", "1"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for key in ("filter_over_limit", "filter_over_naive", "sample_cache_speedup", "params", "device", "dtype"):
        assert key in result, key
    assert result["N"] == 40 and result["share_rows"] and not result["share_prefixes"]
    assert result["filter_tokens"] > 0 and 0 <= result["filter_padding"] < 1
    assert result["filter_over_limit"] > 0 and result["filter_over_naive"] > 0 and result["sample_cache_speedup"] > 0


def test_bench_without_sharing_scores_more_tokens(capsys):
    args = ["--model", "tiny", "-n", "40", "--naive-n", "1", "--sample-docs", "1", "--threads", "1"]
    main(args)
    shared = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    main([*args, "--no-share"])
    plain = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    main([*args, "--share-prefixes"])
    heads = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert plain["filter_tokens"] > shared["filter_tokens"] > heads["filter_tokens"]
