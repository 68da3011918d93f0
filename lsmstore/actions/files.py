"""Action files: lakeFS's ``_lakefs_actions/*.yaml``, parsed, validated and read from
the source ref of an operation.

An action file names the events it runs on and its hooks::

    name: require metadata            # ^\\w[\\w\\-. ]+$
    description: optional text
    on:
      pre-commit:
        branches: [main, "release-*"] # globs (path.Match); none or empty: every branch
      pre-merge:
    hooks:
      - id: check_owner               # ^[_a-zA-Z][\\-_a-zA-Z0-9]{1,255}$, unique
        type: webhook                 # the only hook type offered
        properties:
          url: http://hooks.example.com/check
          timeout: 30s                # Go duration; default 1m, at most 10m
          query_params: {key: value, many: [a, b]}
          headers: {X-Token: value}

:func:`parse_action` refuses anything else with :class:`InvalidActionError` (a
400-class error naming the file): an unknown event, ``branches`` on a tag event, a
missing or repeated hook ID, a hook type other than ``webhook`` (lakeFS's ``lua`` and
``airflow`` are refused), a hook ``if`` expression, a missing URL, a bad timeout,
a value using lakeFS's ``{{ ENV.* }}`` substitution (not offered: it would be sent
as written).

**Bounds.**  :func:`load_actions` reads the direct children of ``_lakefs_actions/``
at the source ref: at most :data:`MAX_FILES` files of at most :data:`MAX_FILE_BYTES`
each (the size is checked before the file is read); past either bound the whole load
fails with InvalidActionError, as does a file that does not parse, or two actions of
one name.

**Cache.**  The actions found at a commit (a source ref that is a full commit ID, not
a branch: post-events, merges, branches and tags made from a commit ID) are kept,
keyed by the repository's id and the commit ID -- a commit never changes, so they are
what a new listing would find -- for :data:`CACHE_S` seconds of the store's clock, at
most :data:`CACHE_ENTRIES` commits (least recently used dropped).  A branch's actions
(its staged writes included) are read on every event.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Any

import yaml

from lsmstore import namespace
from lsmstore.errors import InvalidActionError, RefNotFoundError

if TYPE_CHECKING:
    from lsmstore.client import Repository

#: Where action files live in a repository (lakeFS's location).
LOCATION = "_lakefs_actions/"
MAX_FILES = 100
MAX_FILE_BYTES = 64 * 1024
#: A webhook's timeout when the file gives none (lakeFS's default) and the largest one
#: a file may ask for.
DEFAULT_TIMEOUT_S = 60.0
MAX_TIMEOUT_S = 600.0

PRE_EVENTS = (
    "pre-commit", "pre-merge", "pre-create-branch", "pre-delete-branch",
    "pre-create-tag", "pre-delete-tag", "pre-revert", "pre-cherry-pick",
)  # fmt: skip
POST_EVENTS = tuple("post-" + e[4:] for e in PRE_EVENTS)
EVENTS = PRE_EVENTS + POST_EVENTS
HOOK_TYPES = ("webhook",)
#: Commits whose actions are kept, at most, and for how long (see "Cache" above).
CACHE_ENTRIES = 256
CACHE_S = 600.0
_FULL_ID = re.compile(r"[0-9a-f]{64}")
#: (repository id, commit ID) -> (the actions, when read).
_cached: OrderedDict[tuple[str, str], tuple[tuple[Action, ...], float]] = OrderedDict()

_NAME = re.compile(r"^\w[\w\-. ]+$")
_HOOK_ID = re.compile(r"^[_a-zA-Z][\-_a-zA-Z0-9]{1,255}$")
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_ENV = re.compile(r"\{\{\s*ENV\.")
_UNIT_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


@dataclass(frozen=True, slots=True)
class Webhook:
    """One hook of an action: a POST of the event to ``url``."""

    id: str
    url: str
    timeout_s: float = DEFAULT_TIMEOUT_S
    query_params: tuple[tuple[str, str], ...] = ()
    headers: tuple[tuple[str, str], ...] = ()
    description: str = ""


@dataclass(frozen=True, slots=True)
class Action:
    """One action file: ``on`` maps each event to its branch globs (empty: every
    branch)."""

    name: str
    on: Mapping[str, tuple[str, ...]]
    hooks: tuple[Webhook, ...]
    description: str = ""
    path: str = field(default="", compare=False)

    def matches(self, event_type: str, branch: str) -> bool:
        """Whether the action runs for ``event_type`` on ``branch`` (lakeFS's match:
        the event is listed and its globs are empty or one matches the branch)."""
        if event_type not in self.on:
            return False
        globs = self.on[event_type]
        return not globs or any(fnmatchcase(branch, g) for g in globs)


def parse_duration(text: object, where: str) -> float:
    """A Go duration (``"30s"``, ``"1m30s"``, ``"500ms"``) in seconds, in (0,
    MAX_TIMEOUT_S]; InvalidActionError otherwise."""
    if not isinstance(text, str) or not text:
        raise InvalidActionError(f"{where}: timeout must be a duration such as '30s'")
    pos, total = 0, 0.0
    while pos < len(text):
        m = _DURATION_PART.match(text, pos)
        if m is None:
            raise InvalidActionError(f"{where}: invalid timeout {text[:40]!r}")
        total += float(m.group(1)) * _UNIT_S[m.group(2)]
        pos = m.end()
    if not 0 < total <= MAX_TIMEOUT_S:
        raise InvalidActionError(
            f"{where}: timeout {text!r} must be above 0 and at most {MAX_TIMEOUT_S:g}s"
        )
    return total


def _string_map(value: object, where: str, *, lists: bool) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        raise InvalidActionError(f"{where} must be a mapping")
    out: list[tuple[str, str]] = []
    for k, v in value.items():
        if not isinstance(k, str) or not k:
            raise InvalidActionError(f"{where}: names must be non-empty strings")
        values = v if lists and isinstance(v, list) else [v]
        for item in values:
            if not isinstance(item, str):
                raise InvalidActionError(f"{where}: the value of {k!r} must be a string")
            _literal(item, f"{where}: {k}")
            out.append((k, item))
    return tuple(out)


def _literal(value: str, where: str) -> None:
    if _ENV.search(value):
        raise InvalidActionError(f"{where}: {{{{ ENV.* }}}} substitution is not supported")


def _hook(raw: object, index: int, where: str) -> Webhook:
    here = f"{where}: hooks[{index}]"
    if not isinstance(raw, Mapping):
        raise InvalidActionError(f"{here} must be a mapping")
    hook_id = raw.get("id")
    if not isinstance(hook_id, str) or not _HOOK_ID.match(hook_id):
        raise InvalidActionError(f"{here}: missing or invalid id")
    kind = raw.get("type")
    if kind not in HOOK_TYPES:
        raise InvalidActionError(
            f"{here} ({hook_id}): hook type {kind!r} is not supported "
            f"(supported: {', '.join(HOOK_TYPES)})"
        )
    if "if" in raw:
        raise InvalidActionError(f"{here} ({hook_id}): 'if' expressions are not supported")
    props = raw.get("properties")
    if not isinstance(props, Mapping):
        raise InvalidActionError(f"{here} ({hook_id}): properties with a url are required")
    url = props.get("url")
    if not isinstance(url, str) or not url.lower().startswith(("http://", "https://")):
        raise InvalidActionError(f"{here} ({hook_id}): url must be an http(s) URL")
    _literal(url, f"{here} ({hook_id}) url")
    timeout = props.get("timeout")
    description = raw.get("description") or ""
    return Webhook(
        id=hook_id,
        url=url,
        timeout_s=DEFAULT_TIMEOUT_S if timeout in (None, "") else parse_duration(timeout, here),
        query_params=_string_map(props.get("query_params"), f"{here} query_params", lists=True),
        headers=_string_map(props.get("headers"), f"{here} headers", lists=False),
        description=str(description),
    )


def _on(raw: object, where: str) -> dict[str, tuple[str, ...]]:
    if not isinstance(raw, Mapping) or not raw:
        raise InvalidActionError(f"{where}: 'on' is required")
    on: dict[str, tuple[str, ...]] = {}
    for event, spec in raw.items():
        if event not in EVENTS:
            raise InvalidActionError(f"{where}: event {event!r} is not supported")
        branches: object = None if spec is None else (
            spec.get("branches") if isinstance(spec, Mapping) else spec
        )  # fmt: skip
        if branches is None:
            on[event] = ()
            continue
        if isinstance(branches, str) or not isinstance(branches, Sequence):
            raise InvalidActionError(f"{where}: {event}: branches must be a list")
        if not all(isinstance(b, str) and b for b in branches):
            raise InvalidActionError(f"{where}: {event}: branches must be non-empty strings")
        if branches and event.endswith("-tag"):
            raise InvalidActionError(f"{where}: {event}: 'branches' is not supported on tag events")
        on[event] = tuple(branches)
    return on


def parse_action(data: bytes, path: str = "action file") -> Action:
    """The action of one file's bytes; InvalidActionError (naming ``path``) for
    anything but a valid webhook action (module docstring)."""
    if len(data) > MAX_FILE_BYTES:
        raise InvalidActionError(f"{path}: {len(data)} bytes, at most {MAX_FILE_BYTES}")
    try:
        doc: Any = yaml.safe_load(data.decode("utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError) as e:
        raise InvalidActionError(f"{path}: not a YAML document: {e}") from None
    if not isinstance(doc, Mapping):
        raise InvalidActionError(f"{path}: an action must be a mapping")
    name = doc.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise InvalidActionError(f"{path}: 'name' is required (letters, digits, _ - . space)")
    # YAML 1.1 reads a bare ``on`` key as the boolean True
    on = _on(doc.get("on", doc.get(True)), path)
    hooks_raw = doc.get("hooks") or []
    if not isinstance(hooks_raw, list):
        raise InvalidActionError(f"{path}: 'hooks' must be a list")
    hooks = tuple(_hook(h, i, path) for i, h in enumerate(hooks_raw))
    ids = [h.id for h in hooks]
    for hook_id in ids:
        if ids.count(hook_id) > 1:
            raise InvalidActionError(f"{path}: hook id {hook_id!r} given twice")
    return Action(name, on, hooks, str(doc.get("description") or ""), path)


async def load_actions(repo: Repository, source_ref: str) -> list[Action]:
    """Every action file at ``source_ref`` (a branch reads its staged state), in path
    order; InvalidActionError for an invalid one, too many, or a repeated name.  Those
    of a commit come from the cache while they are in it (module docstring)."""
    if not _FULL_ID.fullmatch(source_ref):
        return await _read_actions(repo, source_ref)
    found = await repo.resolve_ref(source_ref)
    if found.branch is not None or not found.commit_id:
        return await _read_actions(repo, source_ref)
    now = repo.store.clock()
    key = (namespace.owner_id(repo.info), found.commit_id)
    hit = _cached.get(key)
    if hit is not None and now - hit[1] < CACHE_S:
        _cached.move_to_end(key)
        return list(hit[0])
    actions = await _read_actions(repo, found.commit_id)
    _cached[key] = (tuple(actions), now)
    _cached.move_to_end(key)
    while len(_cached) > CACHE_ENTRIES:
        _cached.popitem(last=False)
    return actions


async def _read_actions(repo: Repository, source_ref: str) -> list[Action]:
    try:
        return await _listed_actions(repo, source_ref)
    except RefNotFoundError:
        # A branch without any commit (made below the operations layer: every
        # repository starts with one) has nothing to read, so no actions.
        found = await repo.refstore.get_ref(repo.name, source_ref)
        if found.is_branch and not found.base:
            return []
        raise


async def _listed_actions(repo: Repository, source_ref: str) -> list[Action]:
    ref = repo.ref(source_ref)
    actions: list[Action] = []
    async for stats in ref.list_objects(LOCATION, delimiter="/"):
        if stats.path_type != "object":
            continue
        if len(actions) == MAX_FILES:
            raise InvalidActionError(f"{LOCATION}: more than {MAX_FILES} action files")
        if stats.size > MAX_FILE_BYTES:
            raise InvalidActionError(
                f"{stats.path}: {stats.size} bytes, an action file holds at most {MAX_FILE_BYTES}"
            )
        async with await ref.open(stats.path) as reader:
            data = await reader.read(0, MAX_FILE_BYTES + 1)
        actions.append(parse_action(data, stats.path))
    names = [a.name for a in actions]
    for a in actions:
        if names.count(a.name) > 1:
            raise InvalidActionError(f"{a.path}: action name {a.name!r} is used by another file")
    return actions
