"""Observing what each test file runs: the runtime dependency map's recorder (docs/depmaps.md)."""
