"""Flake-aware culprit finding: which commit of a window broke a test (docs/culprit.md).

Pure and without I/O: `model` holds the types, `posterior` the exact Bayesian update over the
candidate commits, `choose` the probes worth running next, `search` the session that puts them
together. Whoever runs the probes (``ci culprit``, the benchmark) feeds their results back.
"""
