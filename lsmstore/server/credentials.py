"""Creating, listing and deleting access keys from the command line, and the first
admin key of ``lsmstore serve --init``.

**The first admin key.**  Several servers may start with ``--init`` on one empty
RefStore at once; exactly one creates and prints a key.  A server that finds no key
first claims the record ``settings/first-admin-key`` with a conditional write (naming
the key id it will create), then creates the key
(:meth:`lsmstore.server.users.Users.create_first_admin`, which ``setup_lakefs`` uses
too); a server that loses the claim, or
finds keys, prints nothing and logs that a key exists.  A crash between the claim and
the key leaves a claim naming a key that does not exist: later ``--init`` runs say so,
and ``lsmstore serve credentials create --role admin`` (which needs no server) makes
one.
"""

from __future__ import annotations

import logging
import sys

import orjson

from lsmstore.errors import NotFoundError
from lsmstore.server.auth import FIRST_ADMIN_NAME, KIND, SETTINGS_KIND, Authenticator, Role
from lsmstore.server.users import Users

log = logging.getLogger("lsmstore.server")


async def init_admin(auth: Authenticator) -> bool:
    """Create the first admin key when no key exists and print it, once among all
    processes sharing the RefStore.  False when keys existed already or another
    process claimed the first key (nothing printed; a log line says which)."""
    if await auth.has_keys():
        log.info(
            "access keys exist: --init creates none", extra={"fields": {"event": "keys_exist"}}
        )
        return False
    created = await Users(auth).create_first_admin()
    if created is None:
        await _report_claim(auth)
        return False
    principal, secret = created
    _print_key(principal.access_key_id, secret, principal.role)
    return True


async def _report_claim(auth: Authenticator) -> None:
    try:
        doc = orjson.loads(await auth.records.get_record(SETTINGS_KIND, FIRST_ADMIN_NAME))
    except NotFoundError:  # keys were created otherwise (the command line) meanwhile
        log.info("access keys exist: --init creates none",
                 extra={"fields": {"event": "keys_exist"}})  # fmt: skip
        return
    key_id = str(doc.get("access_key_id"))
    try:
        await auth.records.get_record(KIND, key_id)
    except NotFoundError:
        if not await auth.has_keys():
            log.warning(
                "the first admin key %s was claimed by another process but does not exist "
                "(yet, or that process stopped): if none appears, create one with "
                "'lsmstore serve credentials create --role admin'",
                key_id,
                extra={"fields": {"event": "first_key_missing", "access_key_id": key_id}},
            )
            return
    log.info(
        "an access key exists (another process created the first admin key %s): --init "
        "creates none",
        key_id,
        extra={"fields": {"event": "keys_exist", "access_key_id": key_id}},
    )


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
