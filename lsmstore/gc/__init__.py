"""Garbage collection of committed objects, staging files and object data: the one
place that decides what may be deleted.

* :mod:`lsmstore.gc.staging` -- staging files that left a ref: the garbage and intent
  records compactions and commits write, and the sweep that deletes them a grace period
  later (run by the compactor worker and the in-process compactor);
* :mod:`lsmstore.gc.data` -- records of uncommitted object data that an upload, link,
  copy or delete replaced (candidates only; nothing is deleted by the writer);
* the committed GC below, which reads those candidate records too.

lakeFS-style: retention rules per branch (:mod:`lsmstore.gc.retention`), a mark phase
(:mod:`lsmstore.gc.mark`) and a sweep that deletes only what two marks a grace period
apart found unreachable (:mod:`lsmstore.gc.sweep`, which states the rule).  Pure
asyncio; ``lsmstore spark gc`` runs it with range reads spread over Spark executors.

:func:`collect_all` runs every repository of a RefStore, and remembers each
repository's storage namespace and owner id (small records of kind ``gc-namespaces``)
so that the staging files of a repository deleted later are collected too -- while its
namespace's ownership marker still names it (:mod:`lsmstore.namespace`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from lsmstore import namespace
from lsmstore.errors import RecordNotFoundError, RepositoryNotFoundError
from lsmstore.gc.mark import (
    Mark,
    ReadRanges,
    list_keys,
    mark_orphaned_staging,
    mark_repository,
)
from lsmstore.gc.retention import Retention
from lsmstore.gc.sweep import Report, collect
from lsmstore.layout import STAGING
from lsmstore.refstore.base import RefStore, Repository
from lsmstore.storage.base import ObjectStore
from lsmstore.storage.url import open_object_store

NAMESPACES = "gc-namespaces"

__all__ = [
    "Mark",
    "ReadRanges",
    "Report",
    "Retention",
    "RunResult",
    "collect",
    "collect_all",
    "collect_repository",
    "mark_repository",
]


async def collect_repository(
    refstore: RefStore,
    repo: str,
    objects: ObjectStore,
    retention: Retention,
    *,
    grace_s: float,
    dry_run: bool = False,
    clock: Callable[[], float] = time.time,
    read_ranges: ReadRanges | None = None,
) -> Report:
    """Mark ``repo`` and sweep its namespace (``objects``); NotOwnerError (nothing
    deleted) unless the namespace's ownership marker names the repository."""
    info = await refstore.get_repository(repo)
    await namespace.verify_owner(objects, info)
    mark = await mark_repository(
        refstore, info, objects, retention, clock=clock, read_ranges=read_ranges
    )
    return await collect(objects, mark, grace_s=grace_s, dry_run=dry_run, clock=clock)


@dataclass
class RunResult:
    reports: list[Report] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


async def collect_all(
    refstore: RefStore,
    retention: Callable[[str], Retention],
    *,
    grace_s: float,
    dry_run: bool = False,
    clock: Callable[[], float] = time.time,
    open_objects: Callable[[str], ObjectStore] = open_object_store,
    read_ranges: Callable[[str], ReadRanges] | None = None,
) -> RunResult:
    """Every repository, then the staging of namespaces whose repository is gone."""
    result = RunResult()
    live_namespaces: dict[str, str] = {}
    after: str | None = None
    while page := await refstore.list_repositories(after=after, limit=1000):
        for info in page:
            where = namespace.location_of(info)
            live_namespaces[where] = info.name
            remember = {"namespace": where, "owner": namespace.owner_id(info)}
            await refstore.put_record(NAMESPACES, info.name, json.dumps(remember).encode())
            objects = open_objects(where)
            try:
                report = await collect_repository(
                    refstore,
                    info.name,
                    objects,
                    retention(info.name),
                    grace_s=grace_s,
                    dry_run=dry_run,
                    clock=clock,
                    read_ranges=read_ranges(where) if read_ranges else None,
                )
                result.reports.append(report)
            except RepositoryNotFoundError:
                continue  # deleted meanwhile: its namespace is handled next run
            except Exception as e:  # one repository's trouble must not stop the others
                result.errors.append(f"{info.name}: {type(e).__name__}: {e}")
            finally:
                await objects.aclose()
        after = page[-1].name
    # Namespaces remembered for repositories that are gone (or moved elsewhere).
    after = None
    while records := await refstore.list_records(NAMESPACES, after=after, limit=1000):
        for name, value in records:
            ns, owner = _remembered(value)
            if live_namespaces.get(ns) is not None:
                continue
            objects = open_objects(ns)
            try:
                # Only while the namespace still names the deleted repository (released
                # or not): once another repository owns it, its files are not ours.
                await namespace.verify_owner(objects, Repository(name, ns, "main", uid=owner))
                mark = await mark_orphaned_staging(name, ns, objects, clock=clock)
                report = await collect(objects, mark, grace_s=grace_s, dry_run=dry_run, clock=clock)
                result.reports.append(report)
                if not dry_run and not await list_keys(objects, (STAGING,)):
                    try:
                        await refstore.delete_record(NAMESPACES, name)
                    except RecordNotFoundError:
                        pass
            except Exception as e:
                result.errors.append(f"{name} ({ns}): {type(e).__name__}: {e}")
            finally:
                await objects.aclose()
        after = records[-1][0]
    return result


def _remembered(value: bytes) -> tuple[str, str]:
    """A ``gc-namespaces`` record: (namespace, owner id).  A record written before owner
    ids existed names none (``"-"``, which no marker names: nothing is deleted)."""
    text = value.decode()
    if not text.startswith("{"):
        return text, "-"
    doc = json.loads(text)
    return str(doc["namespace"]), str(doc["owner"])
