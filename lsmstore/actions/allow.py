"""The hosts webhooks may call: the server's ``actions_webhook_allow`` setting.

Action files are written by anyone who can write to a repository, so a webhook's URL
is the writer's choice, and the server would make the request from inside its network
(to its RefStore, a cloud metadata address, an internal service).  The server
therefore calls only hosts its operator listed (docs/security.md, "Webhooks"): host
names, compared exactly and case-insensitively, and IP networks (``10.0.0.0/8``,
``127.0.0.1``) that an IP-literal URL must fall in.  A host name is never matched by
the network its address is in; the default, empty, allows nothing.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit

from lsmstore.errors import InvalidInputError

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, slots=True)
class AllowList:
    """The hosts webhooks may call (module docstring)."""

    names: frozenset[str] = frozenset()
    networks: tuple[Network, ...] = ()

    @classmethod
    def parse(cls, spec: str) -> AllowList:
        """``spec``: comma-separated host names and IP networks; InvalidInputError for
        an entry that is neither."""
        names: set[str] = set()
        networks: list[Network] = []
        for raw in spec.split(","):
            item = raw.strip().lower()
            if not item:
                continue
            try:
                networks.append(ipaddress.ip_network(item, strict=False))
                continue
            except ValueError:
                pass
            if "/" in item or ":" in item or any(c.isspace() for c in item):
                raise InvalidInputError(
                    f"setting actions_webhook_allow: {item!r} is neither a host name nor "
                    "an IP network"
                )
            names.add(item.rstrip("."))
        return cls(frozenset(names), tuple(networks))

    def refusal(self, url: str) -> str | None:
        """Why ``url`` may not be called, or None when it may."""
        try:
            parsed = urlsplit(url)
            host = (parsed.hostname or "").rstrip(".")
        except ValueError:
            return f"invalid URL {url[:200]!r}"
        if parsed.scheme not in ("http", "https") or not host:
            return f"invalid webhook URL {url[:200]!r}: http(s) with a host"
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            if host in self.names:
                return None
        else:
            if any(address in n for n in self.networks):
                return None
        return (
            f"host {host!r} is not allowed for webhooks "
            "(the server's actions_webhook_allow setting lists the allowed ones)"
        )
