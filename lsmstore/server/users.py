"""lakeFS users and their credentials, mapped onto access keys (docs/security.md,
"Users").

lsmstore's unit of authority is the access key (:mod:`lsmstore.server.auth`): a role
(``admin``, ``writer``, ``reader``) and the repositories it is limited to.  lakeFS
clients (``lakectl auth users ...``, the SDK's ``AuthApi``) manage *users* that own
*credentials*.  The mapping:

* a **user** is a record of kind ``users`` (name = the user id; JSON ``{"id", "role",
  "repositories", "created_at"}``): the role and scope every key created for it gets.
  lakeFS's ``UserCreation`` has only an ``id``; lsmstore also reads ``role`` (default
  ``reader``) and ``repositories`` from the body.  Groups and policies, lakeFS's way
  of granting permissions, are not part of this model (their routes answer 501);
* a user's **credentials** are the keys whose record names it (``user``);
* a key that names no user (the first admin key of ``--init``, keys created with
  ``lsmstore serve credentials create``) is a user of its own, whose id is the key id:
  listed among the users, with itself as its only credentials.

Concurrency and crashes: every write is one RefStore record write.  Creating a user is
a conditional write (409 when the id is taken; a user id equal to the id of a key of
its own is refused too, checked before the write: key ids are random, so such a
collision needs a caller who picks both).  Creating credentials reads the user, then
creates a key (conditional write).  Deleting a user deletes its keys, then its record:
a crash in between leaves the user with fewer keys (or none), and deleting it again
finishes.  A user deleted while credentials are created for it concurrently may leave
a key naming a deleted user: it keeps its role and scope, is listed as that user's
(``GET /auth/users/{id}`` answers the user as one of its own) and is deleted like any
other.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson

from lsmstore.errors import InvalidInputError, RecordExistsError, RecordNotFoundError
from lsmstore.refstore.names import check_repository_name
from lsmstore.server.auth import (
    FIRST_ADMIN_NAME,
    ROLES,
    SETTINGS_KIND,
    Authenticator,
    Principal,
    Role,
    new_access_key_id,
)

KIND = "users"
#: A user id: what lakeFS's user names commonly are (``jane.doe``, an e-mail address).
USER_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}$")


@dataclass(frozen=True, slots=True)
class User:
    id: str
    role: Role
    repositories: tuple[str, ...]
    created_at: int
    #: True for a key that names no user (the user is the key itself).
    key_only: bool = False


def check_user_id(user_id: object) -> str:
    if not isinstance(user_id, str) or not USER_ID.fullmatch(user_id):
        raise InvalidInputError(f"invalid user id {user_id!r}: must match {USER_ID.pattern}")
    return user_id


def _decode(data: bytes) -> User:
    doc = orjson.loads(data)
    return User(
        doc["id"], doc["role"], tuple(doc.get("repositories") or ()), int(doc["created_at"])
    )


def _of_key(p: Principal) -> User:
    return User(p.access_key_id, p.role, p.repositories, p.created_at, key_only=True)


@dataclass
class Users:
    """Users and credentials over the authenticator's keys (module docstring)."""

    auth: Authenticator

    async def create_user(
        self, user_id: str, role: Role = "reader", repositories: tuple[str, ...] = ()
    ) -> User:
        """A new user without credentials; RecordExistsError when the id is taken."""
        check_user_id(user_id)
        if role not in ROLES:
            raise InvalidInputError(f"unknown role {role!r} (known: {', '.join(ROLES)})")
        for repo in repositories:
            check_repository_name(repo)
        if await self._key_user(user_id) is not None:
            raise RecordExistsError(f"user {user_id!r} exists (an access key of its own)")
        user = User(user_id, role, tuple(repositories), int(self.auth.wall_clock()))
        doc = {"id": user.id, "role": user.role, "repositories": list(user.repositories),
               "created_at": user.created_at}  # fmt: skip
        try:
            await self.auth.records.put_record(KIND, user_id, orjson.dumps(doc), if_absent=True)
        except RecordExistsError:
            raise RecordExistsError(f"user {user_id!r} exists") from None
        return user

    async def get_user(self, user_id: str) -> User:
        """The user (a record, or a key of its own); RecordNotFoundError."""
        check_user_id(user_id)
        try:
            return _decode(await self.auth.records.get_record(KIND, user_id))
        except RecordNotFoundError:
            pass
        found = await self._key_user(user_id)
        if found is None:
            raise RecordNotFoundError(f"no user {user_id!r}")
        return found

    async def list_users(self) -> list[User]:
        """Every user, in id order."""
        users: dict[str, User] = {}
        after: str | None = None
        while True:
            page = await self.auth.records.list_records(KIND, after=after, limit=1000)
            for name, value in page:
                users[name] = _decode(value)
            if len(page) < 1000:
                break
            after = page[-1][0]
        for key in await self.auth.list_keys():
            if key.user_id not in users:
                users[key.user_id] = _of_key(key)
        return [users[k] for k in sorted(users)]

    async def delete_user(self, user_id: str) -> None:
        """Delete the user's keys, then the user; RecordNotFoundError."""
        user = await self.get_user(user_id)
        for key in await self.list_credentials(user_id):
            try:
                await self.auth.delete_key(key.access_key_id)
            except RecordNotFoundError:
                pass  # deleted meanwhile
        if not user.key_only:
            try:
                await self.auth.records.delete_record(KIND, user_id)
            except RecordNotFoundError:
                raise RecordNotFoundError(f"no user {user_id!r}") from None

    async def create_credentials(
        self, user_id: str, access_key_id: str | None = None, secret: str | None = None
    ) -> tuple[Principal, str]:
        """A new key of the user (its role and scope) and its secret, shown only now.
        A user that is a key of its own gets no second key (409): it has no record
        to carry a role for more."""
        user = await self.get_user(user_id)
        if user.key_only:
            raise RecordExistsError(
                f"user {user_id!r} is an access key of its own and has no other credentials: "
                "create a user (POST /auth/users) to hold several"
            )
        return await self.auth.create_key(
            user.role, user.repositories, access_key_id=access_key_id, secret=secret,
            user=user.id,
        )  # fmt: skip

    async def list_credentials(self, user_id: str) -> list[Principal]:
        """The user's keys in key id order; RecordNotFoundError when there is no user."""
        check_user_id(user_id)
        keys = [k for k in await self.auth.list_keys() if k.user_id == user_id]
        if not keys:
            await self.get_user(user_id)
        return sorted(keys, key=lambda k: k.access_key_id)

    async def get_credentials(self, user_id: str, access_key_id: str) -> Principal:
        for key in await self.list_credentials(user_id):
            if key.access_key_id == access_key_id:
                return key
        raise RecordNotFoundError(f"user {user_id!r} has no access key {access_key_id!r}")

    async def delete_credentials(self, user_id: str, access_key_id: str) -> None:
        await self.get_credentials(user_id, access_key_id)
        await self.auth.delete_key(access_key_id)

    async def _key_user(self, user_id: str) -> User | None:
        """The key ``user_id`` as a user of its own, or None."""
        if not user_id.isascii() or not user_id.isalnum():
            return None
        principal = await self.auth.key(user_id)
        if principal is None or principal.user:
            return None
        return _of_key(principal)

    # --- the first admin -------------------------------------------------------------

    async def initialized(self) -> bool:
        """Whether any key exists (or the first admin key has been claimed)."""
        if await self.auth.has_keys():
            return True
        try:
            await self.auth.records.get_record(SETTINGS_KIND, FIRST_ADMIN_NAME)
        except RecordNotFoundError:
            return False
        return True

    async def create_first_admin(
        self, user_id: str | None = None, access_key_id: str | None = None,
        secret: str | None = None,
    ) -> tuple[Principal, str] | None:  # fmt: skip
        """The first admin key and its secret, when no key exists and this process wins
        the claim (``settings/first-admin-key``, a conditional write: of several
        processes at once exactly one creates it); None otherwise.  With ``user_id``
        the key belongs to a new admin user of that id (``setup_lakefs``).

        A crash after the claim leaves it naming a key that does not exist (later
        calls answer None; ``lsmstore serve credentials create --role admin`` makes
        one); a crash between the user record and its key leaves an admin user
        without credentials (an admin key may create them)."""
        if user_id is not None:
            check_user_id(user_id)
        if await self.auth.has_keys():
            return None
        key_id = access_key_id or new_access_key_id()
        claim = orjson.dumps({"access_key_id": key_id, "claimed_at": int(self.auth.wall_clock())})
        try:
            await self.auth.records.put_record(SETTINGS_KIND, FIRST_ADMIN_NAME, claim,
                                               if_absent=True)  # fmt: skip
        except RecordExistsError:
            return None
        if user_id is None:
            return await self.auth.create_key("admin", access_key_id=key_id, secret=secret)
        await self.create_user(user_id, "admin")
        return await self.create_credentials(user_id, access_key_id=key_id, secret=secret)


def user_doc(user: User) -> dict[str, Any]:
    """lakeFS's ``User``, with lsmstore's ``role`` and ``repositories``."""
    return {"id": user.id, "creation_date": user.created_at,
            "friendly_name": f"{user.id} ({user.role})", "role": user.role,
            "repositories": list(user.repositories)}  # fmt: skip


def credentials_doc(key: Principal, secret: str | None = None) -> dict[str, Any]:
    """lakeFS's ``Credentials`` (``CredentialsWithSecret`` with a secret)."""
    doc: dict[str, Any] = {"access_key_id": key.access_key_id, "creation_date": key.created_at}
    if secret is not None:
        doc["secret_access_key"] = secret
    return doc
