"""Bringing an existing repository in: a starter registry and SGLang-style suite import."""
