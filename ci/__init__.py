"""The CI half: registry, import check, selection, running, results, history, adoption.

PYTEST_DONT_REWRITE: a recording's start-up hook imports this package in every Python process of
the recording, before pytest's assertion rewriting starts (`ci.observe.startup`); pytest
marks an installed plugin's package for rewriting and warns about one imported already (an
error under ``filterwarnings = error``). This module has no assertion to rewrite.
"""
