"""Typed access to JSON request bodies: a wrong type or a missing field is a 400 that
names the field, before anything is changed."""

from __future__ import annotations

from typing import Any

from lsmstore.server.errors import bad_request


def string(doc: dict[str, Any], name: str, *, required: bool = True, default: str = "") -> str:
    value = doc.get(name)
    if value is None:
        if required:
            raise bad_request(f"missing field {name!r}")
        return default
    if not isinstance(value, str):
        raise bad_request(f"field {name!r} must be a string")
    return value


def boolean(doc: dict[str, Any], name: str, default: bool = False) -> bool:
    value = doc.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise bad_request(f"field {name!r} must be a boolean")
    return value


def integer(doc: dict[str, Any], name: str, *, required: bool = False, default: int = 0) -> int:
    value = doc.get(name)
    if value is None:
        if required:
            raise bad_request(f"missing field {name!r}")
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad_request(f"field {name!r} must be an integer")
    return value


def string_map(doc: dict[str, Any], name: str) -> dict[str, str]:
    value = doc.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise bad_request(f"field {name!r} must be an object of strings")
    return value


def string_list(doc: dict[str, Any], name: str) -> list[str]:
    value = doc.get(name)
    if value is None:
        raise bad_request(f"missing field {name!r}")
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise bad_request(f"field {name!r} must be a list of strings")
    return value
