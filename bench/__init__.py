"""Benchmarks: each module runs alone with `python -m bench.<name>`, prints its figures and writes JSON."""
