"""The spread of the README's figures over CPU kernels and thread counts (see toolformer/bench/spread.py).

    python scripts/spread.py demo     # the small world's demo under each kernel x 1 and 2 threads
    python scripts/spread.py bench    # scripts/bench.py --quick likewise
"""

from toolformer.bench.spread import main

if __name__ == "__main__":
    raise SystemExit(main())
