"""S3 multipart uploads: Create, UploadPart, UploadPartCopy, Complete, Abort, ListParts,
ListMultipartUploads.

State: one RefStore record per upload (kind ``s3-uploads``, name = upload id: the
repository, branch, path, content type, metadata and initiator) and one per part (kind
``s3-parts``, name ``<upload id>/<part number:05d>``: its ``data/`` key, size, ETag).
A part's bytes are written to a fresh ``data/`` object of the repository's namespace
before its record; Complete joins the parts, in order, into a fresh ``data/`` object
(``ObjectStore.compose``: on S3 a server-side copy, locally a kernel-side copy; no
byte passes through the server), links it at the path (``Branch.link``: the entry is
staged and acknowledged) and then deletes the parts' objects and records.

ETags (S3's rules, which clients verify): a part's is the MD5 of its bytes; the
completed object's is ``<md5 of the concatenated binary part MD5s>-<number of parts>``,
stored as the object's checksum, so HEAD, GET, listings and stat show that form.
Complete refuses a part whose ETag is not the uploaded part's (``InvalidPart``), part
numbers not strictly ascending (``InvalidPartOrder``) and a part other than the last
under :data:`MIN_PART_BYTES` (``EntityTooSmall``).  The object a completion replaces
is not recorded as a garbage candidate (as for every link): the GC job's scan for
unreferenced ``data/`` objects finds its data.

Crashes: between a part's data and its record, an unreferenced ``data/`` object (the GC
job's orphan scan collects it); during Complete before the entry, the composed data is
such an object and the parts and the upload's records stay (ListMultipartUploads shows
it; Abort removes it); after the entry but before the clean-up, the parts' objects and
records stay until Abort.  A part record always names a written part.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import AsyncIterator
from typing import Any

import orjson

from lsmstore.client import Branch, Repository
from lsmstore.errors import NotFoundError
from lsmstore.objects.api import namespace
from lsmstore.operations.objects import new_data_key
from lsmstore.server.auth import Principal
from lsmstore.server.gateway import xml
from lsmstore.server.gateway.errors import S3Error
from lsmstore.server.http import Request

UPLOADS = "s3-uploads"
PARTS = "s3-parts"
MAX_PARTS = 10_000
#: Every part but the last has at least this many bytes (S3's rule).
MIN_PART_BYTES = 5 * 1024 * 1024
MAX_COMPLETE_BODY = 2 * 1024 * 1024


def _part_name(upload_id: str, number: int) -> str:
    return f"{upload_id}/{number:05d}"


def part_number(request: Request) -> int:
    text = request.arg("partNumber") or ""
    if not text.isdigit() or not 1 <= int(text) <= MAX_PARTS:
        raise S3Error("InvalidArgument", f"partNumber must be 1..{MAX_PARTS}")
    return int(text)


class Multipart:
    """The multipart operations over a RefStore's records (module docstring)."""

    def __init__(self, records: Any) -> None:
        self.records = records

    async def create(self, who: Principal, branch: Branch, path: str,
                     content_type: str, metadata: dict[str, str], now: float) -> str:  # fmt: skip
        upload_id = secrets.token_hex(16)
        doc = {"repository": branch.repository.name, "branch": branch.name, "path": path,
               "content_type": content_type, "metadata": metadata, "initiated": now,
               "initiator": who.access_key_id}  # fmt: skip
        await self.records.put_record(UPLOADS, upload_id, orjson.dumps(doc), if_absent=True)
        return upload_id

    async def upload(self, repo: Repository, upload_id: str, ref: str, path: str) -> dict[str, Any]:
        """The upload's record; NoSuchUpload unless it is ``repo``'s upload of ``ref/path``."""
        if not upload_id.isalnum() or len(upload_id) > 64:
            raise S3Error("NoSuchUpload", "no such upload")
        try:
            doc: dict[str, Any] = orjson.loads(await self.records.get_record(UPLOADS, upload_id))
        except NotFoundError:
            raise S3Error("NoSuchUpload", f"no upload {upload_id}") from None
        if (doc["repository"], doc["branch"], doc["path"]) != (repo.name, ref, path):
            raise S3Error("NoSuchUpload", f"upload {upload_id} is not of this key")
        return doc

    async def put_part(self, repo: Repository, branch: Branch, upload_id: str, number: int,
                       chunks: AsyncIterator[bytes]) -> str:  # fmt: skip
        """Write a part (replacing the part of that number); its ETag."""
        md5 = hashlib.md5()
        size = 0

        async def counted() -> AsyncIterator[bytes]:
            nonlocal size
            async for chunk in chunks:
                md5.update(chunk)
                size += len(chunk)
                yield chunk

        key = new_data_key(branch)
        try:
            await repo.objects.put_stream(key, counted())
        except BaseException:
            await repo.objects.delete(key, missing_ok=True)
            raise
        etag = md5.hexdigest()
        name = _part_name(upload_id, number)
        old = await self._part(name)
        doc = {"key": key, "size": size, "etag": etag}
        await self.records.put_record(PARTS, name, orjson.dumps(doc))
        if old is not None:
            await repo.objects.delete(old["key"], missing_ok=True)
        return etag

    async def _part(self, name: str) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = orjson.loads(await self.records.get_record(PARTS, name))
            return found
        except NotFoundError:
            return None

    async def parts(self, upload_id: str) -> list[tuple[int, dict[str, Any]]]:
        out: list[tuple[int, dict[str, Any]]] = []
        head = upload_id + "/"
        after = head
        while True:
            page = await self.records.list_records(PARTS, after=after, limit=1000)
            for name, value in page:
                if not name.startswith(head):
                    return out
                out.append((int(name[len(head) :]), orjson.loads(value)))
            if len(page) < 1000:
                return out
            after = page[-1][0]

    async def complete(self, repo: Repository, branch: Branch, upload_id: str,
                       doc: dict[str, Any], body: bytes, if_absent: bool) -> str:  # fmt: skip
        wanted = _parse_complete(body)
        have = dict(await self.parts(upload_id))
        chosen: list[dict[str, Any]] = []
        for i, (number, etag) in enumerate(wanted):
            part = have.get(number)
            if part is None or part["etag"] != etag:
                raise S3Error("InvalidPart", f"part {number} was not uploaded with ETag {etag}")
            if i < len(wanted) - 1 and part["size"] < MIN_PART_BYTES:
                raise S3Error("EntityTooSmall", f"part {number} is smaller than 5 MiB")
            chosen.append(part)

        etag = multipart_etag([part["etag"] for part in chosen])
        key = new_data_key(branch)
        try:
            await repo.objects.compose(key, [part["key"] for part in chosen])
            await branch.link(
                doc["path"], namespace(repo).base + key, size=sum(p["size"] for p in chosen),
                checksum=etag, content_type=doc["content_type"], metadata=doc["metadata"],
                if_absent=if_absent,
            )  # fmt: skip
        except BaseException:
            await repo.objects.delete(key, missing_ok=True)
            raise
        await self.abort(repo, upload_id)
        return etag

    async def abort(self, repo: Repository, upload_id: str) -> None:
        """Delete the parts' data and records, then the upload's record."""
        for number, part in await self.parts(upload_id):
            await repo.objects.delete(part["key"], missing_ok=True)
            try:
                await self.records.delete_record(PARTS, _part_name(upload_id, number))
            except NotFoundError:
                pass
        try:
            await self.records.delete_record(UPLOADS, upload_id)
        except NotFoundError:
            pass

    async def uploads(self, repo: Repository) -> list[tuple[str, dict[str, Any]]]:
        out: list[tuple[str, dict[str, Any]]] = []
        after: str | None = None
        while True:
            page = await self.records.list_records(UPLOADS, after=after, limit=1000)
            for name, value in page:
                doc = orjson.loads(value)
                if doc["repository"] == repo.name:
                    out.append((name, doc))
            if len(page) < 1000:
                return out
            after = page[-1][0]


def multipart_etag(part_etags: list[str]) -> str:
    """S3's ETag of a completed multipart upload: the MD5 of the parts' binary MD5s,
    concatenated in part order, then ``-`` and the number of parts."""
    digest = hashlib.md5(b"".join(bytes.fromhex(e) for e in part_etags)).hexdigest()
    return f"{digest}-{len(part_etags)}"


def _parse_complete(body: bytes) -> list[tuple[int, str]]:
    root = xml.parse(body)
    out: list[tuple[int, str]] = []
    for part in root:
        if part.tag.rpartition("}")[2] != "Part":
            continue
        fields = {c.tag.rpartition("}")[2]: (c.text or "").strip() for c in part}
        number = fields.get("PartNumber", "")
        if not number.isdigit():
            raise S3Error("MalformedXML", "a Part without a PartNumber")
        out.append((int(number), fields.get("ETag", "").strip('"')))
    if not out:
        raise S3Error("MalformedXML", "no parts")
    numbers = [n for n, _ in out]
    if numbers != sorted(set(numbers)):
        raise S3Error("InvalidPartOrder", "parts must be listed in ascending order")
    return out


def initiate_result(bucket: str, key: str, upload_id: str) -> bytes:
    return xml.doc("InitiateMultipartUploadResult", [
        xml.el("Bucket", bucket), xml.el("Key", key), xml.el("UploadId", upload_id)])  # fmt: skip


def complete_result(bucket: str, key: str, etag: str) -> bytes:
    return xml.doc("CompleteMultipartUploadResult", [
        xml.el("Location", f"/{bucket}/{key}"), xml.el("Bucket", bucket), xml.el("Key", key),
        xml.el("ETag", f'"{etag}"')])  # fmt: skip


def parts_result(bucket: str, key: str, upload_id: str,
                 parts: list[tuple[int, dict[str, Any]]]) -> bytes:  # fmt: skip
    items = [
        "<Part>" + xml.el("PartNumber", n) + xml.el("ETag", f'"{p["etag"]}"')
        + xml.el("Size", p["size"]) + "</Part>"
        for n, p in parts
    ]  # fmt: skip
    return xml.doc("ListPartsResult", [
        xml.el("Bucket", bucket), xml.el("Key", key), xml.el("UploadId", upload_id),
        xml.el("MaxParts", MAX_PARTS), xml.el("IsTruncated", False), *items])  # fmt: skip


def uploads_result(bucket: str, uploads: list[tuple[str, dict[str, Any]]]) -> bytes:
    items = [
        "<Upload>" + xml.el("Key", f'{d["branch"]}/{d["path"]}') + xml.el("UploadId", uid)
        + xml.el("Initiated", xml.iso(d["initiated"])) + "</Upload>"
        for uid, d in uploads
    ]  # fmt: skip
    return xml.doc("ListMultipartUploadsResult", [
        xml.el("Bucket", bucket), xml.el("MaxUploads", 1000), xml.el("IsTruncated", False),
        *items])  # fmt: skip
