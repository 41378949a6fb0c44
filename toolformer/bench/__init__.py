"""Benchmarks and the device check: the filter and sampler against raw forward speed
(:mod:`~toolformer.bench.speed`, ``toolformer bench``), constrained decoding (:mod:`~toolformer.bench.decoding`),
the stages beside a competing process (:mod:`~toolformer.bench.contention`) and the GPU check
(:mod:`~toolformer.bench.gpucheck`, ``scripts/gpu_check.sh``). Speed is measured as ratios inside one run."""
