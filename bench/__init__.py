"""The maintained benchmarks of specsweep itself (bench/README.md); `bench.harness` is what they share."""
