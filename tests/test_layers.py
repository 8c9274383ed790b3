"""The layers import one way, never back up:

    processes (cli, serving) → ways in (api, web, submission, inbound) → what the SMTP servers
    share (smtp_server) → the data's lifecycle (lifecycle) → people and signing in (team) →
    domain → delivery engines (delivery, webhooks) → what Layang knows about destinations
    (destinations) → the mail vocabulary (mail) → queue machinery (queueing) → infrastructure
    (config, db, models, sealing…)

``layang.team`` (console users, memberships and roles, passwords, second factors, sessions, the
audit log) stands on the domain, whose errors it raises; nothing in the domain knows who signs
in. ``layang.lifecycle`` (retention, erasure, partitions, housekeeping) ages and clears what
the rooms below it store, the team's sessions and links and the audit log included, so it
stands above both.

``layang.destinations`` (MX, shaping, shared site state, transport security, TLS-RPT, the DNS
resolvers) sits below the domain and the engines, which both read and record through it, and
above the mail vocabulary, because TLS-RPT reports are mail: queued through the outbox
(``layang.mail.outbox``) and signed with an account's DKIM key, and a transport policy honours
a message's REQUIRETLS (``layang.mail.message``). The mail vocabulary knows nothing of where
mail goes.

Rules the levels alone do not say: only the processes start deliveries (nothing else imports
``layang.delivery``), the two engines do not import each other, the wire client (the SMTP client
of ``layang.delivery.smtp`` and every module it imports) knows no database, only
``layang.destinations.dns`` builds DNS resolvers, and the template language (``templates_store``)
and the SDK (``layang_client``) import nothing of the service. Only ``layang.config`` reads the
environment. docs/architecture.md draws the same layers.

Read from the source (every ``import`` statement, including those inside functions), so a new
module or a lazy import cannot slip past.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Higher numbers may import lower ones (and their own level), never higher ones.
LAYERS = {
    "layang.cli": 10,
    "layang.serving": 10,
    "layang.__main__": 10,
    "layang.api": 9,
    "layang.web": 9,
    "layang.submission": 9,
    "layang.inbound": 9,
    "layang.smtp_server": 8,
    "layang.lifecycle": 7,
    "layang.team": 6,
    "layang.domain": 5,
    "layang.delivery": 4,
    "layang.webhooks": 4,
    "layang.destinations": 3,
    "layang.mail": 2,
    "layang.queueing": 1,
    "layang.config": 0,
    "layang.db": 0,
    "layang.ids": 0,
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
    10: "processes",
    9: "ways in",
    8: "SMTP server parts",
    7: "data lifecycle",
    6: "team",
    5: "domain",
    4: "delivery engines",
    3: "destinations",
    2: "mail",
    1: "queueing",
    0: "infrastructure",
}


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


def imported_closure(module: str) -> set[str]:
    """``module`` and every module of the service it imports, however indirectly (modules, not
    packages: a package's name would hold every module in it to the rules)."""
    found, todo = set(), [module]
    while todo:
        name = todo.pop()
        path = ROOT.joinpath(*name.split(".")).with_suffix(".py")
        if name in found or not path.is_file():
            continue
        found.add(name)
        todo += [t for _, t in imported_modules(path, name) if t.split(".")[0] == "layang"]
    return found


# The wire client speaks SMTP and nothing else: what a session means for the queue or a site is
# recorded by its callers. Read through its imports, so that a module split off it is held too.
WIRE_CLIENT = sorted(imported_closure("layang.delivery.smtp"))
DATABASE = ("layang.db", "layang.models", "peewee")
# (importer prefix, imported prefix): refused whatever the levels say.
FORBIDDEN = [
    *((way, "layang.delivery") for way in ("layang.api", "layang.web", "layang.submission")),
    ("layang.inbound", "layang.delivery"),
    ("layang.smtp_server", "layang.delivery"),
    *((room, "layang.delivery") for room in ("layang.lifecycle", "layang.team", "layang.domain")),
    ("layang.delivery", "layang.webhooks"),
    ("layang.webhooks", "layang.delivery"),
    *((module, store) for module in WIRE_CLIENT for store in DATABASE),
]
# The SDK's public home re-exports it; the SDK is checked on its own below.
EXEMPT = {"layang", "layang.client"}


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


# Building a resolver, or looking up through dnspython's default one, anywhere else would skip
# LAYANG_DNS_RESOLVER (and the tests' own DNS server).
DNS_MODULES = ("dns.resolver", "dns.asyncresolver", "dns.query")
DNS_BUILDERS = {
    "Resolver",
    "make_resolver_at",
    "get_default_resolver",
    "reset_default_resolver",
    "resolve",
    "resolve_at",
    "resolve_address",
    "resolve_name",
    "query",
    "canonical_name",
    "zone_for_name",
}
RESOLVER_FACTORY = "layang.destinations.dns"


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def dns_resolvers_built(path: Path) -> list[str]:
    """Where ``path`` builds a DNS resolver or looks up without one it was given: a call of
    (or a class derived from) dnspython's resolvers, or of its module-level look-ups."""
    tree = ast.parse(path.read_text(), str(path))
    imported = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module in DNS_MODULES
        for alias in node.names
        if alias.name in DNS_BUILDERS or node.module == "dns.query"
    }

    def builds(target: ast.expr) -> bool:
        if isinstance(target, ast.Attribute):
            module = _dotted(target.value)
            return module in DNS_MODULES and (module == "dns.query" or target.attr in DNS_BUILDERS)
        return isinstance(target, ast.Name) and target.id in imported

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and builds(node.func):
            found.append(f"{path.relative_to(ROOT)} line {node.lineno}: {_dotted(node.func)}()")
        elif isinstance(node, ast.ClassDef):
            found += [
                f"{path.relative_to(ROOT)} line {node.lineno}: class {node.name}({_dotted(b)})"
                for b in node.bases
                if builds(b)
            ]
    return found


def test_only_the_resolver_factory_builds_dns_resolvers():
    elsewhere = [
        place
        for path in SERVICE
        if module_name(path) != RESOLVER_FACTORY
        for place in dns_resolvers_built(path)
    ]
    assert not elsewhere, "build resolvers with layang.destinations.dns: " + "; ".join(elsewhere)
    factory = ROOT / (RESOLVER_FACTORY.replace(".", "/") + ".py")
    assert dns_resolvers_built(factory)  # the check sees the resolvers the factory builds


def test_the_wire_client_is_read_with_what_it_imports():
    # The modules split off the client are held to its rule, not only its own file.
    assert {"layang.delivery.smtp", "layang.delivery.envelope", "layang.delivery.replies"} <= set(
        WIRE_CLIENT
    )


def test_the_wire_client_loads_no_database_module():
    # The rules above read the source; this one what importing the client loads.
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, layang.delivery.smtp; "
            "print(' '.join(m for m in sys.modules if m.split('.')[0] == 'peewee' "
            "or m in ('layang.db', 'layang.models') or m.startswith('layang.models.')))",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert loaded.stdout.split() == []
