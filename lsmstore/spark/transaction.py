"""Transactions across Spark jobs: a branch of their own, validated, then merged.

::

    from lsmstore.spark import transaction

    def check(tx):  # reads the transaction's branch; raising fails the transaction
        n = spark.read.format("lsmstore").option("format", "parquet").load(
            tx.uri("tables/orders/")).count()
        if n == 0:
            raise ValueError("no orders")

    with transaction("lsm://shop/main", validate=check, on_failure="keep") as tx:
        orders.write.format("lsmstore").option("format", "parquet").mode("overwrite")
            .save(tx.uri("tables/orders/"))
        totals.write.format("lsmstore").option("format", "parquet").mode("overwrite")
            .save(tx.uri("tables/totals/"))

On entering, a branch ``tx-<random>`` is created from the target branch's head commit
(its staged writes are not copied).  The jobs of the block write to it (each table write
is itself one group append).  When the block returns, ``validate(tx)`` runs; then the
branch's staged writes are committed and the branch is merged into the target (one
merge commit: readers of the target see all the jobs or none), and the branch is
deleted.  On an exception in the block, in ``validate``, or a failed merge (e.g. a
conflict with a concurrent change of the same tables), nothing reaches the target, the
exception propagates, and the branch is deleted (``on_failure="delete"``, the default)
or left for inspection (``"keep"``; ``tx.branch`` names it).

Crashes: a crash inside the block or before the merge leaves the ``tx-`` branch
behind and the target unchanged; a crash between the merge and the deletion leaves
the branch with its changes already merged (delete it with ``lsmstore branch delete``).
The transaction is the fsspec filesystem's (:class:`lsmstore.filesystem.LsmTransaction`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from lsmstore.errors import InvalidInputError
from lsmstore.filesystem import LsmFileSystem, LsmTransaction
from lsmstore.spark.location import parse_location

ON_FAILURE = ("delete", "keep")


@contextmanager
def transaction(
    url: str,
    *,
    refstore: str | None = None,
    validate: Callable[[LsmTransaction], None] | None = None,
    on_failure: str = "delete",
    message: str | None = None,
    **settings: Any,
) -> Iterator[LsmTransaction]:
    """A transaction on the branch ``url`` (``lsm://repo/branch``; module docstring).
    ``refstore`` and ``settings`` open the store as :func:`lsmstore.connect` does."""
    loc = parse_location(url)
    if loc.prefix:
        raise InvalidInputError(f"{loc}: a transaction names a branch, not a prefix")
    if on_failure not in ON_FAILURE:
        raise InvalidInputError(f"on_failure must be one of {ON_FAILURE}, not {on_failure!r}")
    fs = LsmFileSystem(refstore, skip_instance_cache=True, **settings)
    try:
        with fs.transaction(
            loc.repo,
            loc.ref,
            message=message or f"Spark transaction on {loc.ref}",
            validate=validate,
            keep_on_failure=on_failure == "keep",
        ) as tx:
            yield tx
    finally:
        fs.close()
