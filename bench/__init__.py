"""Benchmarks. ``python -m bench`` runs them all; ``python -m bench <name> [--quick]`` runs one.

Each module ``bench/<name>.py`` exposes ``main(argv: list[str]) -> int`` and prints a table whose
ratios are taken against a baseline measured in the same run (see ``bench/table.py``).
"""
