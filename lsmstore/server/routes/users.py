"""lakeFS's ``setup_lakefs`` and its user and credential routes, over access keys
(:mod:`lsmstore.server.users`; docs/security.md, "Users" and "Setup").

Every route needs an ``admin`` key that is not limited to repositories, except
``setup_lakefs``: with ``server_setup_lakefs = on``, ``GET`` and ``POST
/api/v1/setup_lakefs`` answer without credentials (lakeFS's clients send none): the
state, and while no access key exists the POST creates the first admin as ``--init``
does (409 afterwards).  With the setting off (the default) they need credentials like
any route: the state is ``initialized`` and POST answers 409.
"""

from __future__ import annotations

from typing import Any

from lsmstore.server import pagination, validate
from lsmstore.server.auth import ROLES, Principal, forbidden
from lsmstore.server.context import Context
from lsmstore.server.errors import ApiError, bad_request
from lsmstore.server.http import Request, Response, empty, json_response
from lsmstore.server.routes.common import principal
from lsmstore.server.routes.schemas import BOOL, INT, STR, listing, obj, ref
from lsmstore.server.routing import Permission, Route
from lsmstore.server.users import User, Users, credentials_doc, user_doc

USERS = "/api/v1/auth/users"
CREDENTIALS = USERS + "/{userId}/credentials"

#: Why lakeFS's other auth routes answer 501 (matched by path prefix).
_NOT_IN_MODEL = (
    "lsmstore has no groups, policies or external principals: what a request may do "
    "comes from its access key's role (admin, writer, reader) and the repositories it "
    "is limited to; manage users and credentials with /api/v1/auth/users (docs/security.md)"
)


def unimplemented_reason(path: str) -> str | None:
    """Why a lakeFS route under ``/api/v1/auth/`` is not served, or None."""
    return _NOT_IN_MODEL if path.startswith("/api/v1/auth/") else None


def _manager(request: Request) -> Principal:
    """The caller, if it may manage users: an admin key not limited to repositories."""
    who = principal(request)
    if who.repositories:
        raise forbidden(who, "manage users (its key is limited to repositories)", None)
    return who


def routes(ctx: Context) -> list[Route]:
    users = Users(ctx.auth)
    is_open = ctx.config.server_setup_lakefs == "on"
    setup: Permission = None if is_open else "read"

    async def open_setup(request: Request) -> bool:
        """True when setup is open: ``server_setup_lakefs = on`` and no key exists.
        With the setting on the setup routes take no credentials (lakeFS's clients
        send none to them; all they tell is whether the server is set up); with it
        off they are routes like any other (the caller was authenticated)."""
        return is_open and not await users.initialized()

    async def get_setup(request: Request) -> Response:
        state = "not_initialized" if await open_setup(request) else "initialized"
        return json_response({"state": state, "comm_prefs_missing": False})

    async def post_setup(request: Request) -> Response:
        if not await open_setup(request):
            raise ApiError(409, "lsmstore is set up already: an access key exists",
                           kind="RecordExistsError")  # fmt: skip
        doc = await request.json_object()
        username = validate.string(doc, "username")
        key = doc.get("key")
        key_id = secret = None
        if key is not None:
            if not isinstance(key, dict):
                raise bad_request("field 'key' must be an object")
            key_id = validate.string(key, "access_key_id")
            secret = validate.string(key, "secret_access_key")
        created = await users.create_first_admin(username, key_id, secret)
        if created is None:
            raise ApiError(409, "lsmstore is set up already: an access key exists",
                           kind="RecordExistsError")  # fmt: skip
        return json_response(credentials_doc(created[0], created[1]))

    async def list_users(request: Request) -> Response:
        _manager(request)
        limit = pagination.amount(request)
        prefix = request.arg("prefix", "") or ""
        after = request.arg("after", "") or ""
        found = [u for u in await users.list_users() if u.id.startswith(prefix) and u.id > after]
        body = pagination.page(found[: limit + 1], limit, lambda u: u.id, user_doc)
        return json_response(body)

    async def create_user(request: Request) -> Response:
        _manager(request)
        doc = await request.json_object()
        user_id = validate.string(doc, "id")
        role = validate.string(doc, "role", required=False, default="reader")
        if role not in ROLES:
            raise bad_request(f"field 'role' must be one of {', '.join(ROLES)}")
        repos = tuple(validate.string_list(doc, "repositories")) if "repositories" in doc else ()
        user: User = await users.create_user(user_id, role, repos)
        return json_response(user_doc(user), 201)

    async def get_user(request: Request) -> Response:
        _manager(request)
        return json_response(user_doc(await users.get_user(request.params["userId"])))

    async def delete_user(request: Request) -> Response:
        who = _manager(request)
        user_id = request.params["userId"]
        if user_id == who.user_id:
            raise bad_request("a user cannot delete itself (it would lock itself out)")
        await users.delete_user(user_id)
        return empty(204)

    async def list_credentials(request: Request) -> Response:
        _manager(request)
        limit = pagination.amount(request)
        prefix = request.arg("prefix", "") or ""
        after = request.arg("after", "") or ""
        keys = [
            k
            for k in await users.list_credentials(request.params["userId"])
            if k.access_key_id.startswith(prefix) and k.access_key_id > after
        ]
        page = pagination.page(keys[: limit + 1], limit, lambda k: k.access_key_id,
                               credentials_doc)  # fmt: skip
        return json_response(page)

    async def create_credentials(request: Request) -> Response:
        _manager(request)
        key, secret = await users.create_credentials(request.params["userId"])
        return json_response(credentials_doc(key, secret), 201)

    async def get_credentials(request: Request) -> Response:
        _manager(request)
        key = await users.get_credentials(request.params["userId"], request.params["accessKeyId"])
        return json_response(credentials_doc(key))

    async def delete_credentials(request: Request) -> Response:
        who = _manager(request)
        key_id = request.params["accessKeyId"]
        if key_id == who.access_key_id:
            raise bad_request("a key cannot delete itself (it would lock its user out)")
        await users.delete_credentials(request.params["userId"], key_id)
        return empty(204)

    user_body = obj({"id": STR}, {"role": {"type": "string", "enum": list(ROLES)},
                                  "repositories": {"type": "array", "items": STR}})  # fmt: skip
    setup_body = obj({"username": STR}, {"key": obj({"access_key_id": STR,
                                                     "secret_access_key": STR})})  # fmt: skip
    state = obj({}, {"state": {"type": "string", "enum": ["initialized", "not_initialized"]},
                     "comm_prefs_missing": BOOL})  # fmt: skip
    with_secret = obj({"access_key_id": STR, "secret_access_key": STR, "creation_date": INT})
    creds = obj({"access_key_id": STR, "creation_date": INT})
    item = USERS + "/{userId}"
    cred = CREDENTIALS + "/{accessKeyId}"
    lst: dict[str, Any] = listing("User")
    cred_list: dict[str, Any] = {**lst, "properties": {**lst["properties"],
                                 "results": {"type": "array", "items": creds}}}  # fmt: skip
    return [
        Route("GET", "/api/v1/setup_lakefs", get_setup, "getSetupState", setup, "internal",
              responses={200: state}, errors=(401,)),
        Route("POST", "/api/v1/setup_lakefs", post_setup, "setup", setup, "internal",
              body=(("application/json", setup_body),), responses={200: with_secret},
              errors=(400, 401, 409)),
        Route("GET", USERS, list_users, "listUsers", "admin", "auth",
              query=pagination.PARAMS, responses={200: ref("UserList")}),
        Route("POST", USERS, create_user, "createUser", "admin", "auth",
              body=(("application/json", user_body),), responses={201: ref("User")},
              errors=(400, 409)),
        Route("GET", item, get_user, "getUser", "admin", "auth",
              responses={200: ref("User")}, errors=(400, 404)),
        Route("DELETE", item, delete_user, "deleteUser", "admin", "auth",
              responses={204: None}, errors=(400, 404)),
        Route("GET", CREDENTIALS, list_credentials, "listUserCredentials", "admin", "auth",
              query=pagination.PARAMS, responses={200: cred_list}, errors=(400, 404)),
        Route("POST", CREDENTIALS, create_credentials, "createCredentials", "admin", "auth",
              responses={201: with_secret}, errors=(400, 404, 409), body_required=False),
        Route("GET", cred, get_credentials, "getCredentials", "admin", "auth",
              responses={200: creds}, errors=(400, 404)),
        Route("DELETE", cred, delete_credentials, "deleteCredentials", "admin", "auth",
              responses={204: None}, errors=(400, 404)),
    ]  # fmt: skip
