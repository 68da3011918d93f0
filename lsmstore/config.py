"""Configuration: where the store lives, cache sizes, batching and write bounds.

Every setting has a default, may be set in a TOML file, by an ``LSMSTORE_<NAME>``
environment variable, or by an argument of :func:`lsmstore.connect`.  Precedence:
arguments > environment > file > defaults.  The file is the one passed as
``connect(config=path)``, else ``$LSMSTORE_CONFIG`` when set.  Unknown keys (in the
file, in ``LSMSTORE_*`` variables or as arguments) raise :class:`InvalidInputError`,
so a misspelt setting is never silently ignored.  docs/client.md lists every key.

Byte sizes accept an integer or a string with a unit: ``"64MiB"``, ``"512 KiB"``,
``"1GB"`` (decimal) -- ``"16MiB"`` reads as 16 * 2**20.
"""

from __future__ import annotations

import dataclasses
import getpass
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from lsmstore import validate
from lsmstore.actions.allow import AllowList
from lsmstore.errors import InvalidInputError
from lsmstore.objects.addresses import import_source_list
from lsmstore.refstore.base import MAX_FILE_IDS
from lsmstore.storage.local import SYNC_MODES

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30

#: Variables read from the environment that are not settings.
ENV_PREFIX = "LSMSTORE_"
_NOT_SETTINGS = {"LSMSTORE_CONFIG", "LSMSTORE_VENV", "LSMSTORE_DEBUG"}
#: lakectl's configuration (docs/cli.md, "lakectl compatibility"): its file and the
#: ``LAKECTL_<KEY>`` variables (the dotted key upper-cased, ``.`` as ``_``).
LAKECTL_ENV_PREFIX = "LAKECTL_"
LAKECTL_CONFIG_FILE = ".lakectl.yaml"
#: lakectl's keys this store understands, and the setting each one sets.
LAKECTL_KEYS = {
    "credentials.access_key_id": "access_key_id",
    "credentials.secret_access_key": "secret_access_key",
    "server.endpoint_url": "server_url",
}

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "kib": KiB,
    "m": 1000**2,
    "mb": 1000**2,
    "mib": MiB,
    "g": 1000**3,
    "gb": 1000**3,
    "gib": GiB,
}
_SIZE = re.compile(r"^\s*(\d+)\s*([a-zA-Z]*)\s*$")


def parse_size(value: object, name: str = "size") -> int:
    """An int, or a string like ``"64MiB"``; InvalidInputError names ``name`` otherwise."""
    if isinstance(value, bool):
        raise InvalidInputError(f"{name}: expected a byte size, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        m = _SIZE.match(value) if len(value) <= 64 else None
        if m and m.group(2).lower() in _UNITS:
            return int(m.group(1)) * _UNITS[m.group(2).lower()]
    raise InvalidInputError(
        f"{name}: expected a byte size such as 65536 or '64MiB', got {validate.preview(value)}"
    )


def configured_home() -> Path | None:
    """``$LSMSTORE_HOME`` when set (and not empty), else None."""
    env = os.environ.get("LSMSTORE_HOME")
    return Path(env).expanduser() if env else None


def default_home() -> Path:
    """``$LSMSTORE_HOME`` or ``~/.lsmstore``."""
    env = os.environ.get("LSMSTORE_HOME")
    return Path(env).expanduser() if env else Path.home() / ".lsmstore"


def default_user() -> str:
    """The operating-system user (as git falls back to it), else ``lsmstore``."""
    try:
        return getpass.getuser() or "lsmstore"
    except (OSError, KeyError, ImportError):  # no passwd entry, no LOGNAME/USER
        return "lsmstore"


@dataclass(frozen=True, slots=True)
class Config:
    """Every tunable of a :class:`lsmstore.Store`. Build with :func:`load_config`."""

    #: Directory of the embedded default (RefStore and cache live under it).
    home: Path = field(default_factory=default_home)
    #: RefStore URL: ``local:///dir``, ``redis://host:port/db``, ``dynamodb://table?...``.
    #: Empty means ``local://<home>/refs``.
    refstore: str = ""
    #: Who signs the commits, merges and reverts this process makes when the caller
    #: names no committer (``LSMSTORE_USER``); default: the operating-system user.
    #: Against a server the server decides (its access key; docs/server.md).
    user: str = field(default_factory=default_user)
    #: An lsmstore server to talk to instead (``http(s)://host:port``): ``connect`` then
    #: returns a remote store (docs/client.md, "Remote").  ``connect("http://...")`` too.
    server_url: str = ""
    #: Credentials for the server (an access key created with ``lsmstore serve
    #: credentials create``).
    access_key_id: str = ""
    secret_access_key: str = field(default="", repr=False)
    #: Remote writes of one branch made within this window go as one batch request;
    #: bounds of a batch; batch requests of a branch in flight at once.
    remote_batch_window_ms: float = 1.0
    remote_batch_max_entries: int = 10_000
    remote_batch_max_bytes: int = 8 * MiB
    remote_max_inflight_batches: int = 4
    #: Branches whose coalescer a remote store keeps; past it, the idle ones (nothing
    #: pending or in flight) are dropped when another is made (docs/client.md).
    remote_batchers_max: int = 1024
    #: Connections kept to the server (keep-alive pool); seconds a request may take.
    remote_max_connections: int = 64
    remote_timeout_s: float = 60.0
    #: Local disk tier of the file cache; empty means ``<home>/cache``.
    cache_dir: str = ""
    cache_ram_bytes: int = 256 * MiB
    cache_disk_bytes: int = 4 * GiB
    #: N: a batch is flushed this many milliseconds after its first write...
    batch_interval_ms: float = 10.0
    #: ...stretched while many writes wait for acknowledgement (N x waiting / 64, at
    #: most this): fewer, larger L1 files when the writer is saturated.  Off by default
    #: (equal to N: never stretched): a closed-loop client's rate is capped at its
    #: tasks per window (docs/decisions.md).
    batch_interval_max_ms: float = 10.0
    #: ...or sooner once the memstore holds this many bytes or records.
    batch_max_bytes: int = 8 * MiB
    batch_max_records: int = 100_000
    #: Batches being encoded, uploaded or appended at once per branch writer; 0 sizes
    #: it by the flush time (enough to seal one batch per window while earlier ones
    #: upload: 4 on a local disk, more on a slow object store; at most 64).
    max_inflight_batches: int = 0
    #: Memory bound of one branch writer (memstore + in-flight batches); put awaits room.
    max_pending_bytes: int = 128 * MiB
    #: Key and value bounds, checked before anything is staged.
    max_key_bytes: int = 1024
    max_value_bytes: int = 16 * MiB
    #: The most a prepared SST (``Branch.stage_sst``, the server's ``/sst``) may decode
    #: to: its keys and values plus 32 bytes per record (past it: EntryTooLargeError).
    max_prepared_sst_bytes: int = 256 * MiB
    #: Backpressure on the branch's L1 list: past the soft limit each flush waits
    #: ``l1_slowdown_ms`` per file of excess; at the hard limit writers wait for
    #: compaction or commit, up to ``stall_timeout_s`` (then WriteStalledError).
    l1_soft_limit: int = 64
    l1_hard_limit: int = 512
    l1_slowdown_ms: float = 1.0
    stall_timeout_s: float = 60.0
    #: Attempts of an ``append_l1`` whose outcome is unknown (it is idempotent).
    append_attempts: int = 5
    #: False-positive rate of the bloom filter in each staging file's sidecar.
    bloom_error_rate: float = 0.01
    #: Sidecars (key range + bloom filter) kept decoded in RAM, per store.
    sidecar_cache_entries: int = 100_000
    #: Branch views (a branch's read state) kept per store, least recently used
    #: dropped first (docs/security.md, "Per-branch state").
    branch_views_cached: int = 1024
    #: A branch writer with nothing pending and no batch sealed for this long is
    #: closed; the next write opens a new one (docs/security.md, "Per-branch state").
    writer_idle_s: float = 60.0
    #: Compaction (docs/compaction.md).  A branch is compacted when its L1 list holds
    #: more than ``compaction_l1_files`` files or ``compaction_l1_bytes`` bytes, or its
    #: oldest L1 file is older than ``compaction_l1_age_s`` seconds.
    compaction_l1_files: int = 16
    compaction_l1_bytes: int = 64 * MiB
    compaction_l1_age_s: float = 300.0
    #: One job merges at most this oldest prefix of L1 (bounds its memory and time).
    compaction_job_files: int = 128
    compaction_job_bytes: int = 256 * MiB
    #: Target size of an L2 file (key + value bytes before compression).
    compaction_l2_file_bytes: int = 8 * MiB
    #: Staging files that left a ref are deleted this long afterwards (readers may
    #: still hold the old ref value).
    compaction_grace_s: float = 600.0
    #: Run compaction inside the client process: ``auto`` (on when the RefStore is the
    #: embedded ``local://`` one, off for Redis/DynamoDB, where a separate
    #: ``lsmstore-compactor`` serves many writers), ``on`` or ``off``.
    compaction_in_process: str = "auto"
    #: On the first write of a process, collect garbage once and move every object
    #: alive then (modules, classes, functions: the startup state of the application
    #: and the library) into CPython's permanent generation (``gc.freeze``), so later
    #: full collections walk only objects created since, and raise the young
    #: generation's threshold from CPython's default to 7,000 (docs/write-path.md).
    #: ``auto``/``on``: do it; ``off``: leave the collector alone.
    gc_freeze: str = "auto"
    #: How a put to a local object store (``file://`` and ``local://`` namespaces) is
    #: made durable (docs/storage.md, "Group durability"): ``filesystem`` shares one
    #: ``syncfs`` of the filesystem among the puts of a group (it also writes back
    #: whatever else is dirty on that filesystem); ``file`` fsyncs each file and its
    #: directory; ``auto``: ``filesystem`` where syncfs reports write-back errors (Linux
    #: 5.8 and later), else ``file``.
    local_sync: str = "auto"
    #: How often a compactor re-checks branches (the age trigger) and sweeps garbage.
    compaction_interval_s: float = 5.0
    compaction_sweep_interval_s: float = 60.0
    #: Branches compacted at once by one worker; lease on a branch while compacting.
    compaction_concurrency: int = 2
    compaction_lease_s: float = 60.0
    #: Commits (docs/versioning.md).  The committer worker commits a branch with staged
    #: changes once its last commit is ``commit_interval_s`` old, or sooner when L1 + L2
    #: hold ``commit_max_staged_files`` files or ``commit_max_staged_bytes`` bytes.
    commit_interval_s: float = 300.0
    commit_max_staged_files: int = 256
    commit_max_staged_bytes: int = 256 * MiB
    #: How often the worker re-checks branches; branches committed at once; the lease a
    #: worker holds on a branch while committing it.
    commit_poll_interval_s: float = 5.0
    commit_concurrency: int = 2
    commit_lease_s: float = 300.0
    #: An import (docs/client.md, "Imports") is run by one process holding a lease of
    #: ``import_lease_s`` in the RefStore, renewed (with its progress) every fifth of
    #: it; once the lease lapses, its status reads as failed (the process stopped).
    import_lease_s: float = 30.0
    #: A commit whose branch moved under it starts over, up to this many attempts in
    #: all, backing off from ``commit_backoff_ms`` (doubling, jittered) to at most
    #: ``commit_backoff_max_ms``.
    commit_max_attempts: int = 10
    commit_backoff_ms: float = 50.0
    commit_backoff_max_ms: float = 2000.0
    #: Where committed ranges are cut (content-defined, docs/format.md).  Every process
    #: committing to a repository should use the same values, so equal content keeps
    #: equal range IDs.
    commit_range_min_bytes: int = 1 * MiB
    commit_range_max_bytes: int = 10 * MiB
    commit_range_raggedness: int = 50_000
    #: Actions (hooks; docs/actions.md): ``on`` runs the ``_lakefs_actions/`` files of a
    #: repository on its events, ``off`` ignores them.  Webhooks may only call the hosts
    #: of ``actions_webhook_allow``: comma-separated host names and IP networks (empty:
    #: none; docs/security.md, "Webhooks").  Runs are kept ``actions_runs_retention_s``.
    actions_enabled: str = "on"
    actions_webhook_allow: str = ""
    actions_runs_retention_s: float = 30 * 24 * 3600.0
    #: The HTTP server (``lsmstore serve``; docs/server.md).  A ``[server]`` table in the
    #: TOML file sets these without the ``server_`` prefix.
    server_host: str = "127.0.0.1"
    server_port: int = 8000
    #: TLS: a PEM certificate (chain) and its key; both or neither.
    server_tls_cert: str = ""
    server_tls_key: str = ""
    #: The S3 gateway's domain for virtual-host style (``<repository>.<domain>``);
    #: empty: path style only (docs/gateway.md).
    server_s3_domain: str = ""
    #: SIGTERM: stop accepting, finish requests, flush, exit within this many seconds.
    server_drain_timeout_s: float = 30.0
    #: Bounds of a JSON/batch request body and of one uploaded object (413 past them).
    server_max_body_bytes: int = 64 * MiB
    server_max_object_bytes: int = 5 * GiB
    #: A client that sends no body bytes for this long gets 408; idle keep-alive
    #: connections close after ``server_keepalive_s``.
    server_body_timeout_s: float = 30.0
    server_keepalive_s: float = 5.0
    #: Longest object path accepted (bytes of UTF-8).
    server_max_path_bytes: int = 1024
    #: Failed authentications: past this many within ``server_auth_failure_window_s``
    #: per access key id, or per client address, answer 429 (0: no limit;
    #: docs/server.md, "Failed authentications").
    server_auth_failure_window_s: float = 300.0
    server_auth_max_failures_per_key: int = 100
    server_auth_max_failures_per_client: int = 30
    #: The secret that signs login tokens (at least 32 characters; keep it out of the
    #: RefStore and give every server of one RefStore the same).  Required unless the
    #: RefStore is the embedded ``local://`` one, where an empty value means a secret
    #: generated once into ``<home>/auth-secret`` (0600; docs/security.md).
    server_auth_secret_key: str = field(default="", repr=False)
    #: A server trusts a key it verified for this long before reading its record
    #: again: the bound within which a deleted or re-created key changes on every
    #: server (docs/security.md, "How fast key changes reach every server").
    server_auth_revalidate_s: float = 2.0
    #: Connections (docs/security.md, "Limits"): a request head (request line and
    #: headers) over ``server_max_header_bytes`` is 431, one not complete within
    #: ``server_header_timeout_s`` of its first byte 408; a connection that sends
    #: nothing closes after ``server_keepalive_s``; past ``server_max_connections``
    #: open connections a new one gets 503 and is closed.
    server_max_header_bytes: int = 64 * KiB
    server_header_timeout_s: float = 10.0
    server_max_connections: int = 4096
    #: A batch request: at most this many entries (413), and at most this many values
    #: decoded from its body in all (entries, their fields, metadata keys and values).
    server_batch_max_entries: int = 100_000
    server_batch_max_values: int = 1_000_000
    #: The server process's thread switch interval (``sys.setswitchinterval``): how
    #: long a thread may keep the GIL while the event loop waits for it (CPython's
    #: default is 5 ms; docs/server.md, "Health probes during maximal batches").
    server_switch_interval_ms: float = 1.0
    #: S3 endpoints an API caller's namespace may name (``?endpoint_url=``), separated
    #: by spaces or commas; none by default: the server then uses its own AWS
    #: configuration (docs/security.md, "Namespaces, ownership and deletion").
    server_namespace_endpoints: str = ""
    #: Where an import may read besides a repository's namespace and its allowed
    #: external prefixes (docs/server.md, "Settings"; docs/security.md, "Imports"):
    #: URI prefixes ending with ``/`` (``s3://bucket/prefix/``, read with the
    #: repository namespace's endpoint options; ``local://dir/``), separated by spaces or
    #: commas.  None by default.  A prefix that overlaps any repository's namespace is
    #: refused for imports; the API refuses to create a repository inside one.
    server_import_sources: str = ""
    #: Status records of imports that finished more than this long ago are deleted
    #: when a new import of their repository starts (a week by default).
    import_records_retention_s: float = 7 * 86_400.0
    #: ``on`` lets API callers create ``mem://`` repositories (lost on restart: tests).
    server_mem_namespaces: str = "off"
    #: ``on`` lets ``/api/v1/setup_lakefs`` answer without credentials while the
    #: RefStore holds no access key (lakeFS's first-run setup; docs/security.md).
    server_setup_lakefs: str = "off"
    #: How long a pre-signed URL of an object's data lives (``presign=true`` on an S3
    #: namespace; docs/server.md, "Pre-signed URLs"): at most 7 days, SigV4's bound.
    server_presign_expiry_s: int = 900
    #: ``on`` advertises ``pre_sign_support: true`` in ``/config``, so lakeFS's SDKs
    #: pre-sign every read and write by default, as against lakeFS on S3.  For servers
    #: whose repositories are all on S3 namespaces: lakeFS's Python SDK applies the one
    #: ``storage_config`` to every repository, and a local one refuses pre-signing.
    server_presign_advertise: str = "off"
    #: Branch affinity (docs/server.md, "Several daemons"): ``on`` makes the daemon a
    #: member of its RefStore's group, renewed every ``server_member_heartbeat_s`` with a
    #: lifetime of ``server_member_ttl_s``, reachable at ``server_advertise_url`` (empty:
    #: the URL it listens on).
    server_affinity: str = "off"
    server_advertise_url: str = ""
    server_member_heartbeat_s: float = 2.0
    server_member_ttl_s: float = 10.0
    #: Forwarding a write to its branch's owner (docs/server.md, "Forwarding"): bodies of
    #: at most ``server_forward_max_bytes`` (declared by Content-Length) are forwarded,
    #: larger ones applied where they arrive; an owner that does not answer within
    #: ``server_forward_timeout_s`` (connecting: ``server_forward_connect_timeout_s``)
    #: is passed over and the write applied locally.  ``0`` bytes: never forward.
    #: ``proxy``: the daemon sends the write to the owner and passes its answer back;
    #: ``redirect``: it answers 307 to the owner's URL (for clients that follow it with
    #: their credentials: lsmstore's remote client does).
    server_forward_mode: str = "proxy"
    server_forward_max_bytes: int = 8 * MiB
    server_forward_timeout_s: float = 30.0
    server_forward_connect_timeout_s: float = 1.0

    @property
    def refstore_url(self) -> str:
        return self.refstore or f"local://{self.home / 'refs'}"

    @property
    def compaction_in_process_enabled(self) -> bool:
        """Whether a client runs the compactor itself (``compaction_in_process``)."""
        if self.compaction_in_process == "auto":
            return self.refstore_url.lower().startswith("local:")
        return self.compaction_in_process == "on"

    @property
    def cache_path(self) -> Path:
        return Path(self.cache_dir).expanduser() if self.cache_dir else self.home / "cache"

    def __post_init__(self) -> None:
        if isinstance(self.home, str):  # Config(home="/data/lsm") means the path
            object.__setattr__(self, "home", Path(self.home))
        _validated(self)  # a Config is never invalid, however it was built

    def replace(self, **changes: Any) -> Config:
        """A copy with ``changes`` (coerced like any other source of settings)."""
        coerced: dict[str, Any] = {n: _coerce(n, v) for n, v in changes.items()}
        return dataclasses.replace(self, **coerced)


_FIELDS = {f.name: f for f in fields(Config)}
_SIZES = {
    "remote_batch_max_bytes",
    "cache_ram_bytes",
    "cache_disk_bytes",
    "batch_max_bytes",
    "max_pending_bytes",
    "max_key_bytes",
    "max_value_bytes",
    "max_prepared_sst_bytes",
    "compaction_l1_bytes",
    "compaction_job_bytes",
    "compaction_l2_file_bytes",
    "commit_max_staged_bytes",
    "commit_range_min_bytes",
    "commit_range_max_bytes",
    "server_max_body_bytes",
    "server_max_object_bytes",
    "server_max_header_bytes",
}
#: On/off/auto switches: TOML booleans and ``true``/``false``/``on``/``off``/``1``/``0``.
_SWITCHES = {
    "compaction_in_process",
    "gc_freeze",
    "server_mem_namespaces",
    "server_affinity",
    "server_setup_lakefs",
    "server_presign_advertise",
}
_SWITCH_VALUES = {
    "auto": "auto",
    "on": "on",
    "true": "on",
    "yes": "on",
    "1": "on",
    "off": "off",
    "false": "off",
    "no": "off",
    "0": "off",
}


def _coerce(name: str, value: object) -> object:
    """Turn a TOML/env/argument value into the field's type, or InvalidInputError."""
    if name not in _FIELDS:
        known = ", ".join(sorted(_FIELDS))
        raise InvalidInputError(f"unknown setting {name!r} (known: {known})")
    kind = _FIELDS[name].type
    if name in _SIZES:
        return parse_size(value, name)
    if name in _SWITCHES:
        text = ("on" if value else "off") if isinstance(value, bool) else value
        if isinstance(text, str) and text.strip().lower() in _SWITCH_VALUES:
            return _SWITCH_VALUES[text.strip().lower()]
        raise InvalidInputError(f"setting {name}: expected auto, on or off, got {value!r}")
    if value == "":
        raise InvalidInputError(
            f"setting {name} must not be empty (leave it unset for the default)"
        )
    try:
        if kind == "Path":
            if not isinstance(value, str | Path):
                raise TypeError
            return Path(validate.check_path(value, f"setting {name}")).expanduser()
        if kind == "str":
            if not isinstance(value, str):
                raise TypeError
            return value
        if kind == "int":
            if isinstance(value, bool) or not isinstance(value, int | str):
                raise TypeError
            return int(value)
        if kind == "float":
            if isinstance(value, bool) or not isinstance(value, int | float | str):
                raise TypeError
            return float(value)
    except (TypeError, ValueError, OverflowError) as e:
        shown = validate.preview(value)
        raise InvalidInputError(f"setting {name}: cannot use {shown} as {kind}") from e
    raise AssertionError(f"unhandled setting type {kind}")  # pragma: no cover


#: Bounds of every numeric setting: ``(lowest, highest, lowest excluded)``.  Values
#: outside (and NaN, infinities, bools) raise InvalidInputError naming the setting.
#: The upper bounds only refuse the absurd: a timer beyond a year, a byte size
#: beyond a pebibyte, a count beyond a billion.
_YEAR_S = 365 * 24 * 3600.0
_BYTES = 1 << 50
_COUNT = 10**9
_BOUNDS: dict[str, tuple[float, float, bool]] = {
    "cache_ram_bytes": (0, _BYTES, False),
    "cache_disk_bytes": (0, _BYTES, False),
    "batch_interval_ms": (0, 3_600_000, False),
    "batch_interval_max_ms": (0, 3_600_000, False),
    "batch_max_bytes": (1, _BYTES, False),
    "batch_max_records": (1, _COUNT, False),
    "max_inflight_batches": (0, 1024, False),
    "max_pending_bytes": (1, _BYTES, False),
    "max_key_bytes": (1, 64 * KiB, False),
    "max_value_bytes": (0, 1 << 31, False),
    "max_prepared_sst_bytes": (1, _BYTES, False),
    "l1_soft_limit": (1, MAX_FILE_IDS // 2, False),
    "l1_hard_limit": (1, MAX_FILE_IDS // 2, False),
    "l1_slowdown_ms": (0, 3_600_000, False),
    "stall_timeout_s": (0, _YEAR_S, True),
    "append_attempts": (1, 1000, False),
    "bloom_error_rate": (1e-9, 0.5, False),
    "sidecar_cache_entries": (0, _COUNT, False),
    "branch_views_cached": (0, _COUNT, False),
    "writer_idle_s": (0, _YEAR_S, True),
    "compaction_l1_files": (1, _COUNT, False),
    "compaction_l1_bytes": (1, _BYTES, False),
    "compaction_l1_age_s": (0, _YEAR_S, True),
    "compaction_job_files": (1, _COUNT, False),
    "compaction_job_bytes": (1, _BYTES, False),
    "compaction_l2_file_bytes": (1, _BYTES, False),
    "compaction_grace_s": (0, _YEAR_S, True),
    "compaction_interval_s": (0, _YEAR_S, True),
    "compaction_sweep_interval_s": (0, _YEAR_S, True),
    "compaction_concurrency": (1, 1024, False),
    "compaction_lease_s": (0, _YEAR_S, True),
    "commit_interval_s": (0, _YEAR_S, True),
    "commit_max_staged_files": (1, _COUNT, False),
    "commit_max_staged_bytes": (1, _BYTES, False),
    "commit_poll_interval_s": (0, _YEAR_S, True),
    "commit_concurrency": (1, 1024, False),
    "commit_lease_s": (0, _YEAR_S, True),
    "import_lease_s": (0, 86_400, True),
    "import_records_retention_s": (0, 100 * _YEAR_S, False),
    "commit_max_attempts": (1, 1000, False),
    "commit_backoff_ms": (0, _YEAR_S * 1000, False),
    "commit_backoff_max_ms": (0, _YEAR_S * 1000, False),
    "commit_range_min_bytes": (0, _BYTES, False),
    "commit_range_max_bytes": (1, _BYTES, False),
    "commit_range_raggedness": (1, _COUNT, False),
    "actions_runs_retention_s": (0, 100 * _YEAR_S, True),
    "server_port": (0, 65535, False),
    "server_presign_expiry_s": (1, 7 * 86_400, False),
    "server_drain_timeout_s": (0, _YEAR_S, True),
    "server_max_body_bytes": (1, _BYTES, False),
    "server_max_object_bytes": (1, _BYTES, False),
    "server_body_timeout_s": (0, _YEAR_S, True),
    "server_keepalive_s": (0, _YEAR_S, True),
    "server_max_path_bytes": (1, 64 * KiB, False),
    "server_auth_failure_window_s": (0, _YEAR_S, True),
    "server_auth_max_failures_per_key": (0, _COUNT, False),
    "server_auth_max_failures_per_client": (0, _COUNT, False),
    "server_auth_revalidate_s": (0, 60, True),
    "server_max_header_bytes": (1 * KiB, 64 * MiB, False),
    "server_header_timeout_s": (0, _YEAR_S, True),
    "server_max_connections": (1, 10_000_000, False),
    "server_batch_max_entries": (1, _COUNT, False),
    "server_batch_max_values": (1, _COUNT, False),
    "server_switch_interval_ms": (0, 1000, True),
    "server_member_heartbeat_s": (0, 3600, True),
    "server_member_ttl_s": (0, 3600, True),
    "server_forward_max_bytes": (0, _BYTES, False),
    "server_forward_timeout_s": (0, _YEAR_S, True),
    "server_forward_connect_timeout_s": (0, _YEAR_S, True),
    "remote_batch_window_ms": (0, 3_600_000, False),
    "remote_batch_max_entries": (1, _COUNT, False),
    "remote_batch_max_bytes": (1, _BYTES, False),
    "remote_max_inflight_batches": (1, 1024, False),
    "remote_batchers_max": (1, _COUNT, False),
    "remote_max_connections": (1, 100_000, False),
    "remote_timeout_s": (0, _YEAR_S, True),
}


def _check_field(cfg: Config, name: str) -> None:
    """The type and range of one field (a Config built directly is checked too)."""
    value = getattr(cfg, name)
    kind = _FIELDS[name].type
    what = f"setting {name}"
    if kind == "Path":
        if not isinstance(value, Path):
            raise InvalidInputError(f"{what} must be a path, not {type(value).__name__}")
        validate.check_path(value, what)
    elif kind == "str":
        validate.check_str(value, what, empty_ok=True, max_bytes=4096, control_ok=False)
    elif kind == "int":
        lo, hi, _ = _BOUNDS[name]
        validate.check_int(value, what, min_value=int(lo), max_value=int(hi))
    elif kind == "float":
        lo, hi, excl = _BOUNDS[name]
        validate.check_number(value, what, min_value=lo, max_value=hi, min_exclusive=excl)


def _validated(cfg: Config) -> Config:
    for name in _FIELDS:
        _check_field(cfg, name)

    def bad(msg: str) -> InvalidInputError:
        return InvalidInputError(f"invalid configuration: {msg}")

    if cfg.max_pending_bytes <= cfg.max_value_bytes + cfg.max_key_bytes:
        raise bad("max_pending_bytes must exceed max_value_bytes + max_key_bytes")
    if not cfg.l1_soft_limit <= cfg.l1_hard_limit:
        raise bad("l1_soft_limit must be <= l1_hard_limit")
    if cfg.compaction_in_process not in ("auto", "on", "off"):
        raise bad("compaction_in_process must be auto, on or off")
    if cfg.local_sync not in SYNC_MODES:
        raise bad(f"local_sync must be one of {', '.join(SYNC_MODES)}")
    if not cfg.server_member_heartbeat_s < cfg.server_member_ttl_s:
        raise bad("server_member_heartbeat_s must be below server_member_ttl_s")
    if cfg.actions_enabled not in ("on", "off"):
        raise bad("actions_enabled must be on or off")
    try:
        AllowList.parse(cfg.actions_webhook_allow)
    except InvalidInputError as e:
        raise bad(str(e)) from None
    if cfg.server_affinity not in ("on", "off"):
        raise bad("server_affinity must be on or off")
    if cfg.server_forward_mode not in ("proxy", "redirect"):
        raise bad("server_forward_mode must be proxy or redirect")
    try:
        import_source_list(cfg.server_import_sources)
    except InvalidInputError as e:
        raise bad(f"server_import_sources: {e}") from None
    if not cfg.commit_backoff_ms <= cfg.commit_backoff_max_ms:
        raise bad("commit_backoff_ms must be <= commit_backoff_max_ms")
    if not cfg.commit_range_min_bytes <= cfg.commit_range_max_bytes:
        raise bad("commit_range_min_bytes must be <= commit_range_max_bytes")
    if bool(cfg.server_tls_cert) != bool(cfg.server_tls_key):
        raise bad("server_tls_cert and server_tls_key go together")
    return cfg


def read_config_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The settings of a TOML file (top-level keys, or an ``[lsmstore]`` table), with
    the keys of a ``[server]`` table as ``server_<key>``."""
    p = validate.check_path(path, "config file").expanduser()
    try:
        with p.open("rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError as e:
        raise InvalidInputError(f"config file {p} does not exist") from e
    except OSError as e:
        raise InvalidInputError(f"config file {p} cannot be read: {e.strerror or e}") from e
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise InvalidInputError(f"config file {p}: {e}") from e
    if isinstance(data.get("lsmstore"), dict) and set(data) <= {"lsmstore", "server"}:
        table = dict(data["lsmstore"])
        if "server" in data:  # a top-level [server] table beside [lsmstore]
            table["server"] = data["server"]
        data = table
    server = data.get("server")
    if isinstance(server, dict):  # a [server] table: server_<name> settings
        data = {k: v for k, v in data.items() if k != "server"}
        data.update({f"server_{k}": v for k, v in server.items()})
    for key in data:
        if key not in _FIELDS:
            raise InvalidInputError(f"config file {p}: unknown setting {key!r}")
    return data


def env_settings(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Settings named by ``LSMSTORE_<NAME>`` variables (names are case-insensitive);
    an empty variable counts as unset."""
    env = os.environ if environ is None else environ
    out: dict[str, str] = {}
    for var, value in env.items():
        if not var.startswith(ENV_PREFIX) or var in _NOT_SETTINGS:
            continue
        name = var[len(ENV_PREFIX) :].lower()
        if name not in _FIELDS:
            raise InvalidInputError(f"environment variable {var}: unknown setting {name!r}")
        if value != "":  # an empty variable is an unset one (as for LSMSTORE_HOME)
            out[name] = value
    return out


def load_config(
    refstore: str | None = None,
    *,
    config: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
    **overrides: Any,
) -> Config:
    """Merge defaults < file < environment < arguments into a validated :class:`Config`.

    ``refstore`` is the RefStore URL (the positional argument of ``connect``);
    ``overrides`` are any other settings by name.
    """
    env = os.environ if environ is None else environ
    merged: dict[str, Any] = {}
    path = config if config is not None else env.get("LSMSTORE_CONFIG") or None
    if path is not None:  # config="" is a bad path; an empty $LSMSTORE_CONFIG is unset
        merged.update(read_config_file(path))
    merged.update(env_settings(env))
    if refstore is not None:
        overrides["refstore"] = refstore
    merged.update({k: v for k, v in overrides.items() if v is not None})
    values: dict[str, Any] = {name: _coerce(name, value) for name, value in merged.items()}
    values.setdefault("home", Path.home() / ".lsmstore")  # LSMSTORE_HOME came with env
    return Config(**values)


def lakectl_config_path(environ: Mapping[str, str] | None = None) -> Path:
    """Where lakectl keeps its configuration: ``$HOME/.lakectl.yaml``."""
    env = os.environ if environ is None else environ
    home = env.get("HOME")
    return (Path(home) if home else Path.home()) / LAKECTL_CONFIG_FILE


def _lakectl_endpoint(url: str) -> str:
    """lakectl's ``server.endpoint_url`` names the API root (``.../api/v1``); a
    setting names the server."""
    url = url.strip().rstrip("/")
    return url[: -len("/api/v1")] if url.endswith("/api/v1") else url


def lakectl_settings(
    path: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The settings a lakeFS user's lakectl configuration gives: the YAML file
    (``path``, else ``$HOME/.lakectl.yaml`` when it exists) under the ``LAKECTL_<KEY>``
    variables, for the keys of :data:`LAKECTL_KEYS` (lakectl's other keys do not
    concern this store and are ignored).  An unreadable or malformed file raises
    InvalidInputError; a missing default file gives nothing."""
    env = os.environ if environ is None else environ
    found: dict[str, str] = {}
    p = Path(path).expanduser() if path is not None else lakectl_config_path(env)
    if path is not None or p.is_file():
        found.update(_read_lakectl_file(p))
    for key, setting in LAKECTL_KEYS.items():
        value = env.get(LAKECTL_ENV_PREFIX + key.upper().replace(".", "_"), "")
        if value:
            found[setting] = value
    if "server_url" in found:
        found["server_url"] = _lakectl_endpoint(found["server_url"])
    return found


#: The largest lakectl configuration file read (it holds a few keys).
LAKECTL_FILE_MAX_BYTES = 1 << 20


def _read_lakectl_file(p: Path) -> dict[str, str]:
    import yaml

    try:
        with p.open("rb") as f:
            raw = f.read(LAKECTL_FILE_MAX_BYTES + 1)  # bounded before it is parsed
        if len(raw) > LAKECTL_FILE_MAX_BYTES:
            raise InvalidInputError(f"lakectl configuration {p} is larger than 1 MiB")
        data = yaml.safe_load(raw.decode("utf-8"))
    except FileNotFoundError as e:
        raise InvalidInputError(f"lakectl configuration {p} does not exist") from e
    except OSError as e:
        raise InvalidInputError(f"lakectl configuration {p} cannot be read: {e.strerror}") from e
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise InvalidInputError(f"lakectl configuration {p} is not valid YAML: {e}") from e
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InvalidInputError(f"lakectl configuration {p}: expected a mapping of keys")
    found: dict[str, str] = {}
    for key, setting in LAKECTL_KEYS.items():
        section, _, name = key.partition(".")
        table = data.get(section)
        value = table.get(name) if isinstance(table, dict) else None
        if value is None or value == "":
            continue
        if not isinstance(value, str):
            raise InvalidInputError(f"lakectl configuration {p}: {key} must be a string")
        found[setting] = value
    return found


def lakectl_base_uri(environ: Mapping[str, str] | None = None) -> str | None:
    """lakectl's ``LAKECTL_BASE_URI`` (``lakefs://repo/branch``), against which a
    command line's relative URIs (``/path``) are read; None when unset."""
    env = os.environ if environ is None else environ
    return env.get(LAKECTL_ENV_PREFIX + "BASE_URI") or None
