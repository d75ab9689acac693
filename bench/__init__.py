"""Benchmarks: each prints a table and writes JSON to bench/results/. Run them alone."""
