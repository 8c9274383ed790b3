"""Traffic shaping: how hard Layang may push each destination site.

A *site* is the set of MX hosts a recipient domain resolves to (see ``layang.destinations.mx``).
Its rule says how many sessions may be open to it at once (``connections``, per source
address), how many messages one session carries before it is closed
(``messages_per_connection``), an optional overall ``rate`` in messages per second, and whether
TLS is ``opportunistic`` or ``required``.

Built-in rules cover the large mailbox providers, matched by MX host name suffix; a TOML file
(``LAYANG_SHAPING_FILE``) may change ``[default]`` and any ``[site."x"]``, or add sites: a rule
``x`` matches MX host names equal to ``x`` or ending in ``.x``.
"""

from __future__ import annotations

import hashlib
import math
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from layang.config import ConfigError

OPPORTUNISTIC = "opportunistic"
REQUIRED = "required"
TLS_MODES = (OPPORTUNISTIC, REQUIRED)
KEYS = ("connections", "messages_per_connection", "rate", "tls")
VARIABLE = "LAYANG_SHAPING_FILE"


@dataclass(frozen=True)
class SiteRule:
    """The shaping of one site: ``name`` is the site's name (the matching rule's, or its MX
    host names joined by ``+``); ``rate`` is in messages per second, None for no limit."""

    name: str
    connections: int = 10
    messages_per_connection: int = 100
    rate: float | None = None
    tls: str = OPPORTUNISTIC


@dataclass(frozen=True)
class _Provider:
    """A built-in rule: the site name, the MX suffixes it matches, and its figures."""

    name: str
    suffixes: tuple[str, ...]
    settings: Mapping[str, Any] = field(default_factory=dict)


# Figures from the providers' published guidance and KumoMTA's shaping files
# (assets/policy-extras/shaping.toml and assets/community/shaping.toml, read 2026-11-25).
BUILT_IN: tuple[_Provider, ...] = (
    # Google: KumoMTA's provider "google" (5 connections, 50 per connection); Google's sender
    # guidelines (support.google.com/mail/answer/81126) require TLS for bulk senders, and its
    # MX hosts always offer it.
    _Provider(
        "google.com",
        ("google.com", "googlemail.com"),
        {"connections": 5, "messages_per_connection": 50, "tls": REQUIRED},
    ),
    # Microsoft consumer mail (Outlook.com, Hotmail): KumoMTA's provider "outlook", after
    # sendersupport.olc.protection.outlook.com/pm/Policies: 5 connections, 50 per connection.
    _Provider(
        "outlook.com",
        ("olc.protection.outlook.com",),
        {"connections": 5, "messages_per_connection": 50},
    ),
    # Microsoft 365 tenants, a separate edge (and its DANE MX set, mx.microsoft): the same.
    _Provider(
        "protection.outlook.com",
        ("mail.protection.outlook.com", "mx.microsoft"),
        {"connections": 5, "messages_per_connection": 50},
    ),
    # Yahoo and AOL share yahoodns.net MX hosts; Yahoo's figure to KumoMTA
    # (senders.yahooinc.com/best-practices): 20 messages per connection.
    _Provider("yahoodns.net", ("yahoodns.net",), {"messages_per_connection": 20}),
    # Apple iCloud (support.apple.com/en-us/102322, KumoMTA "apple"): 10 connections, 5 each.
    _Provider("icloud.com", ("icloud.com",), {"connections": 10, "messages_per_connection": 5}),
    # Comcast, provided by Comcast to KumoMTA (spa.xfinity.com/postmaster): 25 connections,
    # 1000 per connection, TLS required.
    _Provider(
        "comcast.net",
        ("comcast.net",),
        {"connections": 25, "messages_per_connection": 1000, "tls": REQUIRED},
    ),
    # GMX and WEB.DE (one provider): KumoMTA community rule: 4 connections, 20 each, TLS
    # required.
    _Provider(
        "gmx.net",
        ("gmx.net", "web.de"),
        {"connections": 4, "messages_per_connection": 20, "tls": REQUIRED},
    ),
    # Orange (messagerie.orange.fr/postmaster.html, KumoMTA "orange.fr"): 3 connections.
    _Provider("orange.fr", ("orange.fr",), {"connections": 3}),
    # Mail.ru and Yandex publish no figures; their postmaster pages ask for few parallel
    # sessions, so these stay below the default.
    _Provider("mail.ru", ("mail.ru",), {"connections": 5}),
    _Provider("yandex.ru", ("yandex.ru", "yandex.net"), {"connections": 5}),
    # QQ: KumoMTA community rule: 4 connections, 8 per connection, TLS required.
    _Provider(
        "qq.com",
        ("qq.com",),
        {"connections": 4, "messages_per_connection": 8, "tls": REQUIRED},
    ),
)

_PERIODS = {"s": 1, "sec": 1, "second": 1, "m": 60, "min": 60, "minute": 60}
_PERIODS |= {"h": 3600, "hour": 3600, "d": 86400, "day": 86400}


MAX_SITE_NAME = 900


def _bounded(name: str) -> str:
    """A site name short enough to be a key (a site of very many MX hosts ends in a digest of
    the whole)."""
    if len(name) <= MAX_SITE_NAME:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:16]
    return f"{name[: MAX_SITE_NAME - 20]}+…{digest}"


class ShapingError(ConfigError):
    """The shaping file cannot be used; ``problem`` says where and why (the message adds
    the variable's name)."""

    def __init__(self, problem: str) -> None:
        super().__init__(f"{VARIABLE}: {problem}")
        self.problem = problem


def parse_rate(value: object, where: str) -> float:
    """``100/min``, ``10/s``, ``5000/h`` (or a plain number per second) as messages per
    second; raises ``ShapingError`` naming ``where`` otherwise."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        rate = float(value)
    elif isinstance(value, str):
        count, _, period = value.strip().partition("/")
        seconds = _PERIODS.get(period.strip().lower() or "s")
        try:
            rate = float(count) / seconds if seconds else math.nan
        except ValueError:
            rate = math.nan
    else:
        rate = math.nan
    if not math.isfinite(rate) or rate <= 0:
        raise ShapingError(f"{where} must look like 100/min, 10/s or 5000/h, not {value!r}")
    return rate


def _settings(table: object, where: str) -> dict[str, Any]:
    if not isinstance(table, dict):
        raise ShapingError(f"{where} must be a table of {', '.join(KEYS)}")
    settings: dict[str, Any] = {}
    for key, value in table.items():
        at = f"{where}.{key}"
        if key in ("connections", "messages_per_connection"):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ShapingError(f"{at} must be a positive whole number, not {value!r}")
            settings[key] = value
        elif key == "rate":
            settings[key] = parse_rate(value, at)
        elif key == "tls":
            if value not in TLS_MODES:
                raise ShapingError(f"{at} must be one of {', '.join(TLS_MODES)}, not {value!r}")
            settings[key] = value
        else:
            raise ShapingError(f"{at} is not a shaping setting (use {', '.join(KEYS)})")
    return settings


def _site_name(name: str, where: str) -> str:
    cleaned = name.strip().rstrip(".").lower()
    if not cleaned or any(c.isspace() or c in "+/@" for c in cleaned):
        raise ShapingError(f"{where} must name an MX host suffix such as google.com")
    return cleaned


class Shaping:
    """The rules in force: the default and one per site, matched by MX host name suffix."""

    def __init__(
        self,
        default: Mapping[str, Any] | None = None,
        sites: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        self.default = SiteRule(name="", **(default or {}))
        self._sites: dict[str, tuple[tuple[str, ...], dict[str, Any]]] = {
            p.name: (p.suffixes, dict(p.settings)) for p in BUILT_IN
        }
        for name, settings in (sites or {}).items():
            suffixes, known = self._sites.get(name, ((name,), {}))
            self._sites[name] = (suffixes, {**known, **settings})
        self._suffixes = sorted(
            ((suffix, name) for name, (suffixes, _) in self._sites.items() for suffix in suffixes),
            key=lambda item: -len(item[0]),
        )

    @classmethod
    def load(cls, path: str | None) -> Shaping:
        """The built-in rules with the file at ``path`` (TOML) applied; None: built-ins only.

        Raises ``ShapingError`` (a ``ConfigError``), one line naming the file and the key, when
        the file cannot be read or holds something that is not a shaping setting.
        """
        if not path:
            return cls()
        try:
            with open(path, "rb") as fh:
                document = tomllib.load(fh)
        except OSError as error:
            raise ShapingError(f"cannot read {path}: {error.strerror}") from None
        except tomllib.TOMLDecodeError as error:
            raise ShapingError(f"{path} is not valid TOML: {error}") from None
        default: dict[str, Any] = {}
        sites: dict[str, dict[str, Any]] = {}
        for key, value in document.items():
            if key == "default":
                default = _settings(value, f"{path}: default")
            elif key == "site":
                if not isinstance(value, dict):
                    raise ShapingError(f'{path}: site must hold tables such as [site."x"]')
                for name, table in value.items():
                    where = f'{path}: site."{name}"'
                    sites[_site_name(name, where)] = _settings(table, where)
            else:
                raise ShapingError(f"{path}: [{key}] is not a shaping table (use default, site)")
        return cls(default, sites)

    def site_names(self) -> list[str]:
        """The names of every rule's site."""
        return sorted(self._sites)

    def rule_named(self, name: str) -> SiteRule | None:
        """The rule of the site ``name``, if a rule has that name."""
        if name not in self._sites:
            return None
        return replace(self.default, name=name, **self._sites[name][1])

    def match(self, host: str) -> str | None:
        """The name of the rule whose suffix ``host`` equals or ends in (``.suffix``); the
        longest suffix wins."""
        host = host.rstrip(".").lower()
        for suffix, name in self._suffixes:
            if host == suffix or host.endswith("." + suffix):
                return name
        return None

    def rule_for(self, mx_names: Sequence[str]) -> SiteRule:
        """The rule of the site made of ``mx_names`` (in preference order). A domain joins a
        rule's site only when every one of its MX hosts is a host of that rule: a site's
        shared limits and state are the provider's, and a host outside it (one anyone may
        run) must not speak for it. Any other set of hosts is a site of its own, named by the
        host names, sorted, joined by ``+``, under the figures of the first rule one of its
        hosts matches (so its sessions to that provider's hosts stay within them), else the
        default's."""
        matched = [self.match(host) for host in mx_names]
        if matched and matched[0] is not None and all(m == matched[0] for m in matched):
            rule = self.rule_named(matched[0])
            assert rule is not None
            return rule
        names = sorted({host.rstrip(".").lower() for host in mx_names})
        first = next((m for m in matched if m is not None), None)
        figures = self.default if first is None else self.rule_named(first)
        assert figures is not None
        return replace(figures, name=_bounded("+".join(names)))


_SLOW_DOWN = re.compile(
    r"rate|too many|volume|slow down|server busy|temporarily deferred|throttl|\[TSS?\d+\]",
    re.IGNORECASE,
)


def is_slow_down(reply: str) -> bool:
    """Whether an SMTP reply asks the sender to slow down: any 421 (the server closes the
    session), or a 4xx with enhanced code 4.7.x speaking of rate, volume or connections
    (Gmail ``421 4.7.28``, Microsoft ``451 4.7.500``, Yahoo ``421 4.7.0 [TS0x]``). Greylisting
    (``451 4.7.1 … try again later``) is not: it is about one message, not the pace."""
    text = reply.strip()
    return text.startswith("421") or speaks_of_pace(text)


def speaks_of_pace(reply: str) -> bool:
    """Whether a 4xx reply's words speak of the pace: an enhanced code 4.7.x naming a rate, a
    volume or too many connections. A 421 that ends a session needs this to tell a site's
    slow-down from a server closing one session (``421 4.4.2 Idle too long``)."""
    text = reply.strip()
    return bool(re.match(r"4\d\d[ -]4\.7\.\d+", text)) and bool(_SLOW_DOWN.search(text))
