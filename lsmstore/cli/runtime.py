"""What every command shares: the global options, opening the store, running a body.

A command is a coroutine over an open store: :func:`run` opens the store the global
options name (a server URL, a RefStore URL, or the embedded default), runs the body on
an event loop, and closes the store (flushing every write) before returning.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

import click
import uvloop
from click.shell_completion import CompletionItem

import lsmstore
from lsmstore.api import StoreAPI, store_location
from lsmstore.cli.output import Output
from lsmstore.config import lakectl_settings, load_config
from lsmstore.errors import InvalidURLError, RepositoryNotFoundError
from lsmstore.uri import LsmURI, parse_uri

T = TypeVar("T")


@dataclass
class Settings:
    """The global options of one ``lsmstore`` run."""

    refstore: str | None = None
    server: str | None = None
    config: str | None = None
    output: str = "table"
    debug: bool = False
    color: bool | None = None
    progress: bool | None = None
    #: lakectl's YAML configuration (``-c FILE.yaml``); default ``~/.lakectl.yaml``.
    lakectl_config: str | None = None
    #: A ``lakefs://`` URI was given: lakectl's configuration wins over ours.
    lakefs_scheme: bool = False
    #: lakectl's ``--base-uri``: a URI argument without a scheme is read against it.
    base_uri: str | None = None
    _out: Output | None = None

    @property
    def out(self) -> Output:
        if self._out is None:
            self._out = Output(self.output, color=self.color, progress=self.progress)
        return self._out


def settings() -> Settings:
    ctx = click.get_current_context()
    obj = ctx.find_root().obj
    if not isinstance(obj, Settings):  # a command invoked outside the root group (tests)
        obj = ctx.find_root().obj = Settings()
    return obj


def out() -> Output:
    return settings().out


def lakectl_overrides(s: Settings) -> dict[str, str]:
    """The settings lakectl's configuration adds (docs/cli.md, "lakectl
    compatibility"): with a ``lakefs://`` URI they win over ours; otherwise lakectl's
    server (with its credentials) is used only when ours names no store, and its
    credentials fill in ours when missing."""
    theirs = lakectl_settings(s.lakectl_config)
    if not theirs or s.lakefs_scheme:
        return theirs
    ours = load_config(config=s.config)
    if not (s.server or s.refstore or ours.server_url or ours.refstore):
        return theirs
    theirs.pop("server_url", None)
    return {k: v for k, v in theirs.items() if not getattr(ours, k)}


def open_store(s: Settings) -> StoreAPI:
    """The store the options name: ``--server`` (or the configured ``server``), else
    ``--refstore`` (or the configured ``refstore``), else lakectl's server, else the
    embedded default."""
    extra: dict[str, str] = lakectl_overrides(s)
    if s.server or s.refstore:
        extra.pop("server_url", None)
    if s.server:
        return lsmstore.connect(s.server, config=s.config, **extra)
    return lsmstore.connect(s.refstore, config=s.config, **extra)


def run(body: Callable[[StoreAPI], Awaitable[T]]) -> T:
    """Run ``body(store)`` on a fresh event loop with the store the options name; a
    missing repository is reported with the store it was looked for in."""
    s = settings()

    async def main() -> T:
        async with open_store(s) as store:
            try:
                return await body(store)
            except RepositoryNotFoundError as e:
                where = store_location(store)
                if where in str(e):
                    raise
                raise RepositoryNotFoundError(f"{e} (looked in {where})") from e

    return uvloop.run(main())


def run_plain(body: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a coroutine that needs no store (e.g. reading a local directory)."""
    return uvloop.run(body())


class URIType(click.ParamType[LsmURI, Any]):
    """An ``lsm://repo/ref/path`` (or ``lakefs://``) argument, parsed and checked."""

    name = "lsm-uri"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> LsmURI:
        if isinstance(value, LsmURI):
            return value
        obj = ctx.find_root().obj if ctx else None
        if isinstance(value, str) and isinstance(obj, Settings):
            if "://" not in value and obj.base_uri:
                value = join_base_uri(obj.base_uri, value)
            if value.lower().startswith("lakefs://"):
                obj.lakefs_scheme = True
        try:
            return parse_uri(value)
        except InvalidURLError as e:
            self.fail(str(e), param, ctx)

    def shell_complete(
        self, ctx: click.Context, param: click.Parameter, incomplete: str
    ) -> list[CompletionItem]:
        """Complete repository names after ``lsm://`` and ref names after
        ``lsm://repo/`` (from the store the command line names; nothing on error)."""
        scheme, sep, rest = incomplete.partition("://")
        if not sep:
            starts = "lsm://".startswith(incomplete)
            return [CompletionItem("lsm://", type="plain")] if starts else []
        root = ctx.find_root().params
        s = Settings(
            refstore=root.get("refstore"), server=root.get("server"), config=root.get("config")
        )

        async def names() -> list[str]:
            async with open_store(s) as store:
                if "/" not in rest:
                    repos = await store.list_repositories(limit=1000)
                    return [f"{scheme}://{r.name}/" for r in repos if r.name.startswith(rest)]
                repo_name, _, ref = rest.partition("/")
                if "/" in ref:
                    return []
                repo = await store.get_repository(repo_name)
                branches = await repo.list_branches(prefix=ref, limit=1000)
                return [f"{scheme}://{repo_name}/{b}/" for b in branches]

        try:
            return [CompletionItem(n, type="plain") for n in uvloop.run(names())]
        except Exception:
            return []


URI = URIType()


def join_base_uri(base: str, relative: str) -> str:
    """lakectl's ``--base-uri``: ``lakefs://repo/main`` + ``/data/x`` ->
    ``lakefs://repo/main/data/x`` (one ``/`` between them)."""
    if base.endswith("://"):
        return base + relative.lstrip("/")
    return base.rstrip("/") + "/" + relative.lstrip("/")


def confirm(question: str, yes: bool) -> None:
    """Go on if ``--yes`` was given or the user agrees on a terminal; otherwise stop."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise click.UsageError(f"{question} -- refusing without --yes (no terminal to ask on)")
    click.confirm(question, abort=True, err=True)


def parse_metadata(pairs: tuple[str, ...]) -> dict[str, str]:
    meta: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {pair!r}", param_hint="--meta")
        meta[key] = value
    return meta


async def list_names(
    lister: Callable[..., Awaitable[list[str]]], prefix: str, after: str | None, amount: int | None
) -> list[str]:
    """Every name ``lister(prefix=, after=, limit=)`` gives (branches, tags), page after
    page, up to ``amount``."""
    names: list[str] = []
    cursor = after
    while amount is None or len(names) < amount:
        page = await lister(prefix=prefix, after=cursor, limit=1000)
        names.extend(page)
        if len(page) < 1000:
            break
        cursor = page[-1]
    return names[:amount] if amount else names
