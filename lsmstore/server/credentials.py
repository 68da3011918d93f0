"""Creating, listing and deleting access keys from the command line."""

from __future__ import annotations

import sys

from lsmstore.server.auth import Authenticator, Role


async def init_admin(auth: Authenticator) -> bool:
    """Create the first admin key when no key exists and print it, once. False when
    keys existed already (nothing printed)."""
    if await auth.has_keys():
        return False
    principal, secret = await auth.create_key("admin")
    _print_key(principal.access_key_id, secret, principal.role)
    return True


async def create(auth: Authenticator, role: Role, repositories: tuple[str, ...],
                 access_key_id: str | None, secret: str | None) -> None:  # fmt: skip
    principal, secret = await auth.create_key(
        role, repositories, access_key_id=access_key_id, secret=secret
    )
    _print_key(principal.access_key_id, secret, principal.role)


def _print_key(key_id: str, secret: str, role: str) -> None:
    out = sys.stdout
    out.write(f"access_key_id: {key_id}\nsecret_access_key: {secret}\nrole: {role}\n")
    out.write("The secret is shown only now: store it safely.\n")
    out.flush()
