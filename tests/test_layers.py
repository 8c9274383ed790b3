"""The layers import one way, never back up:

    processes (cli, serving) → ways in (api, web, submission, inbound) → what the SMTP servers
    share (smtpd) → domain → delivery engines (delivery, webhooks) → the mail vocabulary (mail)
    → queue machinery (queueing) → infrastructure (config, db, models, sealing…)

with three rules the levels alone do not say: only the processes start deliveries (nothing else
imports ``layang.delivery``), the two engines do not import each other, and the template
language (``templates_store``) and the SDK (``layang_client``) import nothing of the service.
Only ``layang.config`` reads the environment.

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
    "layang.cli": 7,
    "layang.serving": 7,
    "layang.__main__": 7,
    "layang.api": 6,
    "layang.web": 6,
    "layang.submission": 6,
    "layang.inbound": 6,
    "layang.smtp_server": 5,
    "layang.domain": 4,
    "layang.delivery": 3,
    "layang.webhooks": 3,
    "layang.mail": 2,
    "layang.queueing": 1,
    "layang.config": 0,
    "layang.db": 0,
    "layang.models": 0,
    "layang.migrations": 0,
    "layang.pagination": 0,
    "layang.clock": 0,
    "layang.logs": 0,
    "layang.metrics": 0,
    "layang.sealing": 0,
    "layang.tls_trust": 0,
}
NAMES = {
    7: "processes",
    6: "ways in",
    5: "SMTP server parts",
    4: "domain",
    3: "delivery engines",
    2: "mail",
    1: "queueing",
    0: "infrastructure",
}
# (importer prefix, imported prefix): refused whatever the levels say.
FORBIDDEN = [
    *((way, "layang.delivery") for way in ("layang.api", "layang.web", "layang.submission")),
    ("layang.inbound", "layang.delivery"),
    ("layang.smtp_server", "layang.delivery"),
    ("layang.domain", "layang.delivery"),
    ("layang.delivery", "layang.webhooks"),
    ("layang.webhooks", "layang.delivery"),
]
# The SDK's public home re-exports it; the SDK is checked on its own below.
EXEMPT = {"layang", "layang.client"}


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


def sources(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


SERVICE = [path for path in sources("layang") if module_name(path) not in EXEMPT]


def within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


@pytest.mark.parametrize("path", SERVICE, ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_go_down_only(path: Path):
    module = module_name(path)
    own = layer_of(module)
    assert own is not None, f"{module} belongs to no layer: add it to LAYERS"
    upward = [
        f"line {line}: {target} ({NAMES[layer_of(target)]})"
        for line, target in imported_modules(path, module)
        if layer_of(target) is not None and layer_of(target) > own
    ]
    assert not upward, f"{module} ({NAMES[own]}) imports upward: " + "; ".join(upward)
    refused = [
        f"line {line}: {target}"
        for line, target in imported_modules(path, module)
        for importer, imported in FORBIDDEN
        if within(module, importer) and within(target, imported)
    ]
    assert not refused, f"{module} may not import: " + "; ".join(refused)


@pytest.mark.parametrize(
    ("package", "service"),
    [("templates_store", ("layang",)), ("layang_client", ("layang", "templates_store"))],
)
def test_standalone_packages_import_nothing_of_the_service(package: str, service: tuple[str, ...]):
    found = [
        f"{path.relative_to(ROOT)} line {line}: {target}"
        for path in sources(package)
        for line, target in imported_modules(path, module_name(path))
        if any(within(target, prefix) for prefix in service)
    ]
    assert not found


ENVIRONMENT = ("environ", "environb", "getenv", "getenvb", "putenv", "unsetenv")


def test_only_config_reads_the_environment():
    readers = []
    for path in SERVICE:
        if module_name(path) == "layang.config":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and node.attr in ENVIRONMENT:
                reads = isinstance(node.value, ast.Name) and node.value.id == "os"
            elif isinstance(node, ast.ImportFrom):
                reads = node.module == "os" and any(a.name in ENVIRONMENT for a in node.names)
            else:
                reads = False
            if reads:
                readers.append(f"{path.relative_to(ROOT)} line {node.lineno}")
    assert not readers
