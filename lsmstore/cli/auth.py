"""``lsmstore auth users ...`` (lakectl's form): a server's users and their access keys
(docs/security.md, "Users and setup").  Users live on a server: against the embedded
store these commands fail with NotAvailableError (keys of an embedded RefStore are
made with ``lsmstore serve credentials``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import TypeVar

import click

from lsmstore.api import StoreAPI
from lsmstore.cli.runtime import out, run
from lsmstore.errors import NotAvailableError
from lsmstore.remote.client import RemoteStore
from lsmstore.remote.users import RemoteUsers

T = TypeVar("T")


def _on_server(body: Callable[[RemoteUsers], Awaitable[T]]) -> T:
    async def main(store: StoreAPI) -> T:
        if not isinstance(store, RemoteStore):
            raise NotAvailableError(
                "users are a server's: give --server (or LSMSTORE_SERVER_URL); keys of an "
                "embedded store are made with 'lsmstore serve credentials'"
            )
        return await body(RemoteUsers(store))

    return run(main)


@click.group("auth")
def auth_group() -> None:
    """A server's users and their access keys (an admin key is needed)."""


@auth_group.group("users")
def users_group() -> None:
    """Users: each holds a role and the repositories its keys are limited to."""


@users_group.command("list")
def users_list() -> None:
    """Every user (a key made without a user is a user of its own)."""
    users = _on_server(lambda u: u.list_users())
    rows = [dataclasses.asdict(u) for u in users]
    for row in rows:
        row["repositories"] = ",".join(row["repositories"]) or "*"
    out().table(rows, ["id", "role", "repositories", "created_at"],
                data=[dataclasses.asdict(u) for u in users])  # fmt: skip


@users_group.command("create")
@click.option("--id", "user_id", required=True, help="the user's id")
@click.option("--role", type=click.Choice(["admin", "writer", "reader"]), default="reader",
              show_default=True, help="what the user's keys may do")  # fmt: skip
@click.option("--repository", "repositories", multiple=True,
              help="limit the user's keys to this repository (repeatable)")  # fmt: skip
def users_create(user_id: str, role: str, repositories: tuple[str, ...]) -> None:
    """Create a user (no keys yet: 'auth users credentials create')."""
    user = _on_server(lambda u: u.create(user_id, role=role, repositories=repositories))
    out().done(f"User {user.id} ({user.role}) created", data=dataclasses.asdict(user))


@users_group.command("delete")
@click.option("--id", "user_id", required=True, help="the user's id")
def users_delete(user_id: str) -> None:
    """Delete a user and every key of it."""
    _on_server(lambda u: u.delete(user_id))
    out().done(f"User {user_id} deleted", data={"id": user_id})


@users_group.group("credentials")
def credentials_group() -> None:
    """A user's access keys."""


@credentials_group.command("create")
@click.option("--id", "user_id", required=True, help="the user's id")
def credentials_create(user_id: str) -> None:
    """A new key of the user; its secret is shown only now."""
    key = _on_server(lambda u: u.create_key(user_id))
    out().record({"access_key_id": key.access_key_id,
                  "secret_access_key": key.secret_access_key or ""},
                 data=dataclasses.asdict(key))  # fmt: skip


@credentials_group.command("list")
@click.option("--id", "user_id", required=True, help="the user's id")
def credentials_list(user_id: str) -> None:
    """The user's keys."""
    keys = _on_server(lambda u: u.list_keys(user_id))
    out().table([{"access_key_id": k.access_key_id, "created_at": k.created_at} for k in keys],
                ["access_key_id", "created_at"])  # fmt: skip


@credentials_group.command("delete")
@click.option("--id", "user_id", required=True, help="the user's id")
@click.option("--access-key-id", "key_id", required=True, help="the key to delete")
def credentials_delete(user_id: str, key_id: str) -> None:
    """Delete one key of the user."""
    _on_server(lambda u: u.delete_key(user_id, key_id))
    out().done(f"Access key {key_id} of {user_id} deleted", data={"access_key_id": key_id})


def register(cli: click.Group) -> None:
    cli.add_command(auth_group)
