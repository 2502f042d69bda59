"""tools/rerun/github_contract/ is what `tools.rerun.contract_extract` derives from the pinned npm
packages: the test downloads them from the npm registry (once, into .ci-cache/npm/, sha512
checked against the pinned ``integrity``), rebuilds the extract and compares it byte for byte."""

from __future__ import annotations

import json

from tools.rerun import contract_extract
from tools.rerun.fake_openapi import published


def test_the_committed_extract_is_what_the_pinned_packages_give() -> None:
    built = contract_extract.build()
    for name, text in built.items():
        committed = (contract_extract.OUT / name).read_text(encoding="utf-8")
        assert committed == text, f"{name} differs from the pinned packages: run python -m tools.rerun.contract_extract"
    assert sorted(p.name for p in contract_extract.OUT.glob("*.json")) == sorted(built)


def test_the_extract_holds_every_operation_the_fake_serves() -> None:
    spec = json.loads((contract_extract.OUT / "openapi.json").read_text(encoding="utf-8"))
    held = {(m, p) for p, item in spec["paths"].items() for m in item}
    assert held == set(contract_extract.OPERATIONS)
    contract = published()
    assert contract.require_all
    for method, template in contract_extract.OPERATIONS:
        assert contract.operation(method, template.replace("{", "x").replace("}", "")) is not None
