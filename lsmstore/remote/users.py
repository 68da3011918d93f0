"""A server's users and their credentials, over lakeFS's ``/auth/users`` routes
(docs/security.md, "Users and setup"): what ``lsmstore auth users ...`` calls.  Every
call needs an ``admin`` key not limited to repositories (PermissionDeniedError
otherwise); errors are the server's, typed (RecordNotFoundError, RecordExistsError,
InvalidInputError...)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lsmstore.remote.http import seg

if TYPE_CHECKING:
    from lsmstore.remote.client import RemoteStore

BASE = "/auth/users"


@dataclass(frozen=True, slots=True)
class UserInfo:
    id: str
    role: str
    repositories: tuple[str, ...]
    created_at: int


@dataclass(frozen=True, slots=True)
class KeyInfo:
    access_key_id: str
    created_at: int
    #: Only when the key was just created: the one time it is shown.
    secret_access_key: str | None = None


def _user(d: Any) -> UserInfo:
    return UserInfo(str(d["id"]), str(d.get("role", "")), tuple(d.get("repositories") or ()),
                    int(d.get("creation_date", 0)))  # fmt: skip


def _key(d: Any) -> KeyInfo:
    secret = d.get("secret_access_key")
    return KeyInfo(str(d["access_key_id"]), int(d.get("creation_date", 0)),
                   None if secret is None else str(secret))  # fmt: skip


@dataclass(frozen=True)
class RemoteUsers:
    store: RemoteStore

    async def list_users(self) -> list[UserInfo]:
        return [_user(d) async for d in self.store._pages(BASE, {}, None)]

    async def create(
        self, user_id: str, *, role: str = "reader", repositories: tuple[str, ...] = ()
    ) -> UserInfo:
        body = {"id": user_id, "role": role, "repositories": list(repositories)}
        r = await self.store.http.request("POST", BASE, json_body=body, ok=(201,), kind="create")
        return _user(r.json())

    async def get(self, user_id: str) -> UserInfo:
        return _user((await self.store.http.request("GET", f"{BASE}/{seg(user_id)}")).json())

    async def delete(self, user_id: str) -> None:
        await self.store.http.request("DELETE", f"{BASE}/{seg(user_id)}", ok=(204,))

    async def create_key(self, user_id: str) -> KeyInfo:
        path = f"{BASE}/{seg(user_id)}/credentials"
        return _key((await self.store.http.request("POST", path, ok=(201,))).json())

    async def list_keys(self, user_id: str) -> list[KeyInfo]:
        path = f"{BASE}/{seg(user_id)}/credentials"
        return [_key(d) async for d in self.store._pages(path, {}, None)]

    async def delete_key(self, user_id: str, access_key_id: str) -> None:
        path = f"{BASE}/{seg(user_id)}/credentials/{seg(access_key_id)}"
        await self.store.http.request("DELETE", path, ok=(204,))
