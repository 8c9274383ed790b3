"""The layers import one way: ways in → domain → sending → infrastructure, never back up.

Read from the source (every ``import`` statement, including those inside functions), so a new
module or a lazy import cannot slip past.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Higher numbers may import lower ones (and their own level), never higher ones.
LAYERS = {
    "layang.api": 3,
    "layang.smtpd": 3,
    "layang.inbound": 3,
    "layang.web": 3,
    "layang.app": 3,
    "layang.cli": 3,
    "layang.cli_send": 3,
    "layang.serving": 3,
    "layang.preflight": 3,
    "layang.wsgi": 3,
    "layang.gunicorn_conf": 3,
    "layang.http_front": 3,
    "layang.__main__": 3,
    "layang.domain": 2,
    "layang.sending": 1,
    "layang.db": 0,
    "layang.models": 0,
    "layang.migrations": 0,
    "layang.pagination": 0,
    "layang.config": 0,
    "layang.clock": 0,
    "layang.logs": 0,
    "layang.metrics": 0,
    "templates_store": 0,
}
NAMES = {3: "ways in", 2: "domain", 1: "sending", 0: "infrastructure"}


def layer_of(module: str) -> int | None:
    for prefix in sorted(LAYERS, key=len, reverse=True):
        if module == prefix or module.startswith(prefix + "."):
            return LAYERS[prefix]
    return None


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(path: Path, module: str) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.append((node.lineno, base))
            # "from layang import accounts" names a module, not a package attribute.
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


SOURCES = sorted(
    path
    for package in ("layang", "templates_store")
    for path in (ROOT / package).rglob("*.py")
    if module_name(path) != "layang.client"
)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_go_down_only(path: Path):
    module = module_name(path)
    own = layer_of(module)
    if module == "layang":
        return
    assert own is not None, f"{module} belongs to no layer: add it to LAYERS"
    upward = [
        f"line {line}: {target} ({NAMES[layer_of(target)]})"
        for line, target in imported_modules(path, module)
        if layer_of(target) is not None and layer_of(target) > own
    ]
    assert not upward, f"{module} ({NAMES[own]}) imports upward: " + "; ".join(upward)


def test_the_sdk_imports_nothing_of_the_service():
    path = ROOT / "layang" / "client.py"
    targets = [target for _, target in imported_modules(path, "layang.client")]
    assert not [t for t in targets if t.startswith(("layang", "templates_store"))]
