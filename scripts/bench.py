"""Benchmark the filter and sampler against raw forward speed (see toolformer/bench/speed.py).

    python scripts/bench.py --quick            # tiny model, under a minute on 2 cores
    python scripts/bench.py --model small      # a few million parameters
    python scripts/bench.py --model 100m --dtype bfloat16   # on a GPU
"""

from toolformer.bench.speed import main

if __name__ == "__main__":
    raise SystemExit(main())
