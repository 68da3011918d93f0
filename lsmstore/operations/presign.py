"""Pre-signed URLs of object data (lakeFS's ``presign=true``): a client reads or writes
an object's bytes at the object store itself, with a URL the server signed, so the
data does not pass through the server.

Only data inside the repository's storage namespace is signed, and only when the
namespace's store can sign (S3): :class:`~lsmstore.errors.NotAvailableError`
otherwise (a local or memory namespace, data under an allowed external prefix, an
inline value, which has no data object).  A URL is made locally, with the credentials
of this process, and lives ``expires_s`` seconds; nothing is read or written to make
it.

Writing: :func:`upload_url` hands out a fresh ``data/`` address of the branch's
namespace and a URL to PUT its bytes to; the client then links the address
(``Branch.link``), whose checks accept only addresses inside the repository's own
namespace, never another repository's (:mod:`lsmstore.objects.addresses`).  A client
that uploads and never links leaves a ``data/`` object no entry names: the data GC's
orphan scan deletes it, as for any unlinked upload.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from lsmstore.errors import NotAvailableError
from lsmstore.objects.api import namespace
from lsmstore.types import ObjectStats

if TYPE_CHECKING:
    from lsmstore.client import Branch, Repository


async def data_url(
    repo: Repository, stats: ObjectStats, method: Literal["GET", "PUT"], expires_s: int
) -> str:
    """A pre-signed URL of the data of ``stats`` (an object of ``repo``)."""
    ns = namespace(repo)
    address = stats.physical_address
    if not address:
        raise NotAvailableError(f"{stats.path!r} is an inline value: it has no data to sign")
    if not address.startswith(ns.base):
        raise NotAvailableError(
            f"the data of {stats.path!r} is outside the storage namespace "
            f"{ns.base!r}: only data inside it is pre-signed"
        )
    return await repo.objects.presigned_url(address[len(ns.base) :], method, expires_s)


async def upload_url(branch: Branch, expires_s: int) -> tuple[str, str]:
    """``(physical address, URL to PUT its data to)``: a fresh ``data/`` address of the
    branch's namespace, to link once written."""
    address = branch.new_physical_address()
    ns = namespace(branch.repository)
    key = address[len(ns.base) :]
    return address, await branch.repository.objects.presigned_url(key, "PUT", expires_s)
