"""The ``/rerun-test`` pull-request bot: ``python -m tools.rerun {handle,serve}``.

Modules, one job each: `commands` (comment grammar, help text), `resolve` (targets -> registry
entries and tiers), `replies` (every comment the bot posts), `github` (REST client with retries),
`handler` (one event -> reactions, dispatches, reply), `server` (webhook HTTP server and workers),
`fake_github` (a stateful GitHub stand-in over real HTTP, for tests and the benchmark).
"""
