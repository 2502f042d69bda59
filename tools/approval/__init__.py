"""The GPU approval gate of pull requests from forks: `tools.approval.gate` decides, ``python -m
tools.approval`` is the workflow step (pr-gpu.yml's ``approval`` job). Standard library and
requests only: that job installs nothing else."""
