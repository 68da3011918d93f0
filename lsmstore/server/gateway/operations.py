"""The S3 operations, each a translation onto the library and the operations layer:
bucket = repository, key = ``<ref>/<path>`` (docs/gateway.md).

Reads go to any ref (a branch with its staged writes, a tag, a commit ID, a ref
expression); writes go only to branches -- a key whose ref is a tag or a commit answers
``MethodNotAllowed`` and nothing is written.  Uploads, deletes and listings are the
library's (``Branch.upload``, ``delete_object(s)``, ``Ref.list_objects``), so
``If-None-Match: *`` has the same atomicity and the same acknowledgement as on the
REST API.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
from collections.abc import AsyncIterator
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import unquote

from lsmstore.client import Repository
from lsmstore.errors import LsmError, ObjectNotFoundError, RefNotFoundError
from lsmstore.objects import DEFAULT_CONTENT_TYPE
from lsmstore.operations.objects import copy_data
from lsmstore.server.auth import Action, Principal
from lsmstore.server.context import Context
from lsmstore.server.gateway import chunked, multipart, payload, xml
from lsmstore.server.gateway.chunked import ChunkSigner
from lsmstore.server.gateway.errors import S3Error, not_implemented, s3_error_of
from lsmstore.server.gateway.multipart import Multipart
from lsmstore.server.http import Request, Response
from lsmstore.server.routes.objects import WHOLE_BODY_BYTES, _range
from lsmstore.types import ObjectStats

META = "x-amz-meta-"
MAX_KEYS = 1000
#: A DeleteObjects body: at most 1000 keys of at most 1 KiB each, as S3.
MAX_DELETE_BODY = 2 * 1024 * 1024
#: Sub-resources the gateway does not serve (answered NotImplemented).
_UNSUPPORTED = (
    "acl", "tagging", "versioning", "versions", "lifecycle", "policy", "cors", "encryption",
    "website", "logging", "notification", "replication", "accelerate", "requestPayment",
    "object-lock", "retention", "legal-hold", "torrent", "restore", "select", "analytics",
    "inventory", "metrics", "intelligent-tiering", "ownershipControls", "publicAccessBlock",
    "attributes",
)  # fmt: skip


def _xml(body: bytes, status: int = 200) -> Response:
    return Response(status, body, xml.XML_TYPE)


def object_headers(s: ObjectStats) -> dict[str, str]:
    headers = {
        "ETag": f'"{s.checksum}"',
        "Last-Modified": xml.http_date(s.mtime),
        "Content-Type": s.content_type or DEFAULT_CONTENT_TYPE,
        "Accept-Ranges": "bytes",
    }
    for k, v in s.metadata.items():
        headers[META + k] = v
    return headers


def _split_key(key: str) -> tuple[str, str]:
    ref, sep, path = key.partition("/")
    if not sep or not ref or not path:
        raise S3Error("NoSuchKey", f"key {key!r} is not <ref>/<path>")
    return ref, path


def _since(header: str | None) -> float | None:
    if not header:
        return None
    try:
        return parsedate_to_datetime(header).timestamp()
    except (TypeError, ValueError):
        return None


def _etag_matches(header: str, etag: str) -> bool:
    return any(t.strip().strip('"') in ("*", etag) for t in header.split(","))


class Operations:
    """Every S3 operation over the server's context (module docstring)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.multipart = Multipart(ctx.store.refstore)

    async def dispatch(self, request: Request, who: Principal, bucket: str, key: str,
                       signer: ChunkSigner | None = None) -> Response:  # fmt: skip
        """Answer one authenticated request; ``signer`` checks a body of signed
        ``aws-chunked`` chunks."""
        method = request.method
        query = request.query
        for name in _UNSUPPORTED:
            if name in query:
                raise not_implemented(f"the {name!r} sub-resource")
        if not bucket:
            if method == "GET":
                return await self.list_buckets(who)
            raise not_implemented(f"{method} on the service")
        if not key and method == "PUT":
            raise not_implemented("CreateBucket (create repositories with the REST API)")
        repo_needed: Action = "write" if method in ("PUT", "POST", "DELETE") else "read"
        if not who.allows(repo_needed, bucket):
            raise S3Error("AccessDenied", f"access key {who.access_key_id} ({who.role}) may not "
                          f"{repo_needed} in {bucket!r}")  # fmt: skip
        repo = await self.ctx.repository(bucket)
        if not key:
            if method in ("GET", "HEAD") and "location" in query:
                return _xml(xml.doc("LocationConstraint", []))
            if method == "HEAD":
                return Response(200, b"", None, {})
            if method == "GET" and "uploads" in query:
                uploads = await self.multipart.uploads(repo)
                return _xml(multipart.uploads_result(repo.name, uploads))
            if method == "GET":
                return await self.list_objects(request, repo)
            if method == "POST" and "delete" in query:
                return await self.delete_objects(request, repo)
            raise not_implemented(f"{method} on a bucket (buckets are repositories)")
        if "uploads" in query or "uploadId" in query:
            return await self.multipart_operation(request, who, repo, key, signer)
        if method in ("GET", "HEAD"):
            return await self.get_object(request, repo, key)
        if method == "PUT":
            if "x-amz-copy-source" in request.headers:
                return await self.copy_object(request, who, repo, key)
            return await self.put_object(request, repo, key, signer)
        if method == "DELETE":
            return await self.delete_object(repo, key)
        raise not_implemented(f"{method} on an object")

    # --- buckets ------------------------------------------------------------------------

    async def list_buckets(self, who: Principal) -> Response:
        parts: list[str] = []
        after: str | None = None
        while True:
            page = await self.ctx.store.list_repositories(after=after, limit=1000)
            for r in page:
                if who.sees(r.name):
                    parts.append("<Bucket>" + xml.el("Name", r.name)
                                 + xml.el("CreationDate", xml.iso(r.info.created_at))
                                 + "</Bucket>")  # fmt: skip
            if len(page) < 1000:
                break
            after = page[-1].name
        owner = "<Owner>" + xml.el("ID", who.access_key_id) + "</Owner>"
        return _xml(xml.doc("ListAllMyBucketsResult",
                            [owner, "<Buckets>", *parts, "</Buckets>"]))  # fmt: skip

    # --- listing ------------------------------------------------------------------------

    async def list_objects(self, request: Request, repo: Repository) -> Response:
        v2 = request.arg("list-type") == "2"
        prefix = request.arg("prefix", "") or ""
        delimiter = request.arg("delimiter", "") or ""
        if delimiter not in ("", "/"):
            raise not_implemented("a delimiter other than '/'")
        url = request.arg("encoding-type") == "url"
        max_keys = min(max(request.int_arg("max-keys", MAX_KEYS), 0), MAX_KEYS)
        token = request.arg("continuation-token") if v2 else None
        if token is not None:
            try:
                after: str | None = base64.urlsafe_b64decode(token.encode()).decode()
            except (binascii.Error, UnicodeDecodeError, ValueError):
                raise S3Error("InvalidArgument", "invalid continuation token") from None
        else:
            after = request.arg("start-after" if v2 else "marker") or None
        found, truncated = await self._keys(repo, prefix, delimiter, after, max_keys)
        parts = [xml.el("Name", repo.name), xml.el("Prefix", xml.key_text(prefix, url)),
                 xml.el("MaxKeys", max_keys), xml.el("IsTruncated", truncated)]  # fmt: skip
        if delimiter:
            parts.append(xml.el("Delimiter", delimiter))
        if url:
            parts.append(xml.el("EncodingType", "url"))
        contents = 0
        for key, s in found:
            if s is None:
                parts.append("<CommonPrefixes>" + xml.el("Prefix", xml.key_text(key, url))
                             + "</CommonPrefixes>")  # fmt: skip
                continue
            contents += 1
            parts.append("<Contents>" + xml.el("Key", xml.key_text(key, url))
                         + xml.el("LastModified", xml.iso(s.mtime))
                         + xml.el("ETag", f'"{s.checksum}"') + xml.el("Size", s.size)
                         + xml.el("StorageClass", "STANDARD") + "</Contents>")  # fmt: skip
        last = found[-1][0] if found else None
        if v2:
            parts.append(xml.el("KeyCount", len(found)))
            if token is not None:
                parts.append(xml.el("ContinuationToken", token))
            start_after = request.arg("start-after")
            if start_after:
                parts.append(xml.el("StartAfter", xml.key_text(start_after, url)))
            if truncated and last is not None:
                nxt = base64.urlsafe_b64encode(last.encode()).decode()
                parts.append(xml.el("NextContinuationToken", nxt))
        else:
            parts.append(xml.el("Marker", xml.key_text(request.arg("marker") or "", url)))
            if truncated and last is not None:
                parts.append(xml.el("NextMarker", xml.key_text(last, url)))
        return _xml(xml.doc("ListBucketResult", parts))

    async def _keys(
        self, repo: Repository, prefix: str, delimiter: str, after: str | None, limit: int
    ) -> tuple[list[tuple[str, ObjectStats | None]], bool]:
        """Up to ``limit`` ``(key, stats)`` after ``after`` (stats None: a common
        prefix) and whether more follow.  At the top level the refs are branches."""
        out: list[tuple[str, ObjectStats | None]] = []
        if limit == 0:
            return out, False
        if "/" in prefix:
            refs = [prefix.partition("/")[0]]
        else:
            refs = sorted(await self._branches(repo, prefix), key=lambda b: b + "/")
            if delimiter:
                for b in refs:
                    cp = b + "/"
                    if after is None or cp > after:
                        out.append((cp, None))
                        if len(out) > limit:
                            return out[:limit], True
                return out, False
        for ref in refs:
            head = ref + "/"
            if after is not None and after >= head and not after.startswith(head):
                continue  # this ref's keys are all at or before ``after``
            rest = prefix[len(head) :] if prefix.startswith(head) else ""
            ref_after = after[len(head) :] if after is not None and after.startswith(head) else None
            try:
                async for s in repo.ref(ref).list_objects(rest, delimiter, ref_after, limit + 2):
                    key = head + s.path
                    if after is not None and key <= after:
                        continue
                    out.append((key, None if s.path_type == "common_prefix" else s))
                    if len(out) > limit:
                        return out[:limit], True
            except RefNotFoundError:
                continue
        return out, False

    async def _branches(self, repo: Repository, prefix: str) -> list[str]:
        names: list[str] = []
        after: str | None = None
        while True:
            page = await repo.list_branches(prefix=prefix, after=after, limit=1000)
            names.extend(page)
            if len(page) < 1000:
                return names
            after = page[-1]

    # --- objects ------------------------------------------------------------------------

    async def get_object(self, request: Request, repo: Repository, key: str) -> Response:
        ref, path = _split_key(key)
        reader = await repo.ref(ref).open(path)
        try:
            s = reader.stats
            headers = object_headers(s)
            self._conditions(request, s, headers)
            status, start, end = 200, 0, s.size
            header = request.headers.get("range")
            if header:
                try:
                    span = _range(header, s.size)
                except Exception as e:
                    raise S3Error("InvalidRange", "The requested range is not satisfiable",
                                  {"Content-Range": f"bytes */{s.size}"}) from e  # fmt: skip
                if span is not None:
                    start, end = span
                    status = 206
                    headers["Content-Range"] = f"bytes {start}-{end - 1}/{s.size}"
            headers["Content-Length"] = str(end - start)
            if request.method == "HEAD" or end == start:
                await reader.aclose()
                return Response(status, b"", None, headers)
            it = reader.iter_chunks(start, end - start)
            first = await anext(it, b"")
        except BaseException:
            await reader.aclose()
            raise

        async def chunks() -> AsyncIterator[bytes]:
            try:
                if first:
                    yield first
                async for chunk in it:
                    yield chunk
            finally:
                await reader.aclose()

        return Response(status, chunks(), None, headers)

    def _conditions(self, request: Request, s: ObjectStats, headers: dict[str, str]) -> None:
        h = request.headers
        match = h.get("if-match")
        if match is not None and not _etag_matches(match, s.checksum):
            raise S3Error("PreconditionFailed", "At least one of the pre-conditions you "
                          "specified did not hold")  # fmt: skip
        unmodified = _since(h.get("if-unmodified-since"))
        if match is None and unmodified is not None and s.mtime > unmodified:
            raise S3Error("PreconditionFailed", "the object was modified since "
                          + h["if-unmodified-since"])  # fmt: skip
        none_match = h.get("if-none-match")
        if none_match is not None:
            if _etag_matches(none_match, s.checksum):
                raise NotModified(headers)
            return
        modified = _since(h.get("if-modified-since"))
        if modified is not None and s.mtime <= modified:
            raise NotModified(headers)

    async def _branch_of(self, repo: Repository, ref: str) -> Any:
        """The branch ``ref`` names; MethodNotAllowed for a tag or commit.  A branch is
        recognised from a ref value fetched through the store's ref cache (fetched after
        the call, and shared by the concurrent requests of the branch: the writes'
        common case costs no RefStore read of its own); anything else is resolved."""
        with contextlib.suppress(LsmError):  # (no view is made for a name that is none)
            if (await repo.store.refs.get(repo.name, ref)).is_branch:
                return repo.branch(ref)
        try:
            resolved = await repo.resolve_ref(ref)
        except RefNotFoundError:
            raise S3Error("NoSuchKey", f"no branch {ref!r} in {repo.name!r}") from None
        if resolved.branch != ref:
            raise S3Error("MethodNotAllowed", f"{ref!r} is not a branch: writes go to branches "
                          "(tags and commits are read-only)")  # fmt: skip
        return repo.branch(ref)

    async def put_object(
        self, request: Request, repo: Repository, key: str, signer: ChunkSigner | None
    ) -> Response:
        h = request.headers
        ref, sep, rest = key.partition("/")
        if sep and ref and not rest and h.get("content-length", "0") == "0":
            # A directory marker for a branch's root (tools create "<ref>/" before
            # writing under it): the root always exists, nothing is written.
            await self._branch_of(repo, ref)
            return Response(200, b"", None, {"ETag": f'"{hashlib.md5(b"").hexdigest()}"'})
        ref, path = _split_key(key)
        if "if-match" in h or h.get("if-none-match", "*").strip() != "*":
            raise not_implemented("If-Match and If-None-Match other than '*' on PutObject")
        if_absent = h.get("if-none-match", "").strip() == "*"
        metadata = _user_metadata(h)
        md5 = payload.expected_md5(h.get("content-md5"))
        sha = h.get("x-amz-content-sha256", "")
        branch = await self._branch_of(repo, ref)
        limit = self.ctx.config.server_max_object_bytes
        declared = h.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise S3Error("EntityTooLarge", f"objects are at most {limit} bytes")
        data: bytes | AsyncIterator[bytes]
        if chunked.is_streaming(sha):
            data = body_stream(request, limit, signer)
        elif declared is not None and declared.isdigit() and int(declared) <= WHOLE_BODY_BYTES:
            data = await request.body(limit)
            payload.verify(data, md5, sha)
        else:
            data = body_stream(request, limit, None)
        s = await branch.upload(
            path, data, content_type=h.get("content-type") or DEFAULT_CONTENT_TYPE,
            metadata=metadata, if_absent=if_absent,
        )  # fmt: skip
        return Response(200, b"", None, {"ETag": f'"{s.checksum}"'})

    async def copy_object(
        self, request: Request, who: Principal, repo: Repository, key: str
    ) -> Response:
        """CopyObject from any ref to a branch.  Within a repository the destination
        links the source's data (no data is copied); from another repository (the caller
        needs read there) the data is copied into this repository's namespace, since an
        entry never links into a namespace another repository owns.
        ``x-amz-metadata-directive: REPLACE`` takes the content type and user metadata
        of the request instead of the source's."""
        ref, path = _split_key(key)
        h = request.headers
        source_repo, src_ref, src_path = await self._source(who, repo, h)
        branch = await self._branch_of(repo, ref)
        directive = h.get("x-amz-metadata-directive", "COPY").upper()
        if directive not in ("COPY", "REPLACE"):
            raise S3Error("InvalidArgument", f"unknown x-amz-metadata-directive {directive!r}")
        if source_repo is not repo:
            replace = directive == "REPLACE"
            s = await copy_data(
                source_repo.ref(src_ref), src_path, branch, path,
                content_type=(h.get("content-type") or DEFAULT_CONTENT_TYPE) if replace else None,
                metadata=_user_metadata(h) if replace else None,
            )  # fmt: skip
            return _copy_result(s)
        directive = h.get("x-amz-metadata-directive", "COPY").upper()
        if directive == "COPY":
            s = await branch.copy_object(src_path, path, src_ref=src_ref)
        else:
            src = await repo.ref(src_ref).stat_object(src_path)
            if not src.physical_address:
                raise not_implemented("REPLACE of the metadata of an inline value")
            s = await branch.link(
                path, src.physical_address, size=src.size, checksum=src.checksum,
                content_type=h.get("content-type") or src.content_type or None,
                metadata=_user_metadata(h),
            )  # fmt: skip
        return _copy_result(s)

    async def _source(
        self, who: Principal, repo: Repository, h: dict[str, str]
    ) -> tuple[Repository, str, str]:
        """The repository, ref and path ``x-amz-copy-source`` names: ``repo`` itself or
        another repository the caller may read (AccessDenied otherwise)."""
        source = unquote(h["x-amz-copy-source"].partition("?")[0]).lstrip("/")
        src_bucket, _, src_key = source.partition("/")
        src_ref, src_path = _split_key(src_key)
        if src_bucket == repo.name:
            return repo, src_ref, src_path
        if not who.allows("read", src_bucket):
            raise S3Error("AccessDenied", f"access key {who.access_key_id} ({who.role}) may "
                          f"not read in {src_bucket!r}")  # fmt: skip
        return await self.ctx.repository(src_bucket), src_ref, src_path

    async def multipart_operation(
        self,
        request: Request,
        who: Principal,
        repo: Repository,
        key: str,
        signer: ChunkSigner | None,
    ) -> Response:
        """Create (POST ?uploads), UploadPart(Copy) (PUT), Complete (POST), Abort
        (DELETE), ListParts (GET) -- :mod:`lsmstore.server.gateway.multipart`."""
        ref, path = _split_key(key)
        method, h, mp = request.method, request.headers, self.multipart
        if method == "POST" and "uploads" in request.query:
            branch = await self._branch_of(repo, ref)
            metadata = _user_metadata(h)
            ctype = h.get("content-type") or DEFAULT_CONTENT_TYPE
            uid = await mp.create(who, branch, path, ctype, metadata, self.ctx.store.clock())
            return _xml(multipart.initiate_result(repo.name, key, uid))
        upload_id = request.arg("uploadId") or ""
        doc = await mp.upload(repo, upload_id, ref, path)
        if method == "PUT":
            number = multipart.part_number(request)
            branch = await self._branch_of(repo, ref)
            limit = self.ctx.config.server_max_object_bytes
            if "x-amz-copy-source" in h:
                chunks = await self._copy_source(who, repo, h)
                etag = await mp.put_part(repo, branch, upload_id, number, chunks)
                result = [xml.el("LastModified", xml.iso(self.ctx.store.clock())),
                          xml.el("ETag", f'"{etag}"')]  # fmt: skip
                return _xml(xml.doc("CopyPartResult", result))
            body = body_stream(request, limit, signer)
            etag = await mp.put_part(repo, branch, upload_id, number, body)
            return Response(200, b"", None, {"ETag": f'"{etag}"'})
        if method == "POST":
            branch = await self._branch_of(repo, ref)
            listing = await request.body(multipart.MAX_COMPLETE_BODY)
            if_absent = h.get("if-none-match", "").strip() == "*"
            etag = await mp.complete(repo, branch, upload_id, doc, listing, if_absent)
            return _xml(multipart.complete_result(repo.name, key, etag))
        if method == "DELETE":
            await mp.abort(repo, upload_id)
            return Response(204, b"", None, {})
        if method == "GET":
            parts = await mp.parts(upload_id)
            return _xml(multipart.parts_result(repo.name, key, upload_id, parts))
        raise not_implemented(f"{method} on a multipart upload")

    async def _copy_source(
        self, who: Principal, repo: Repository, h: dict[str, str]
    ) -> AsyncIterator[bytes]:
        """The bytes ``x-amz-copy-source`` (and ``x-amz-copy-source-range``) name, in
        this repository or another one the caller may read."""
        source_repo, src_ref, src_path = await self._source(who, repo, h)
        reader = await source_repo.ref(src_ref).open(src_path)
        start, end = 0, reader.stats.size
        spec = h.get("x-amz-copy-source-range")
        if spec:
            try:
                span = _range(spec, reader.stats.size)
            except Exception:
                span = None
            if span is None:
                await reader.aclose()
                raise S3Error("InvalidArgument", f"invalid x-amz-copy-source-range {spec!r}")
            start, end = span

        async def chunks() -> AsyncIterator[bytes]:
            try:
                async for chunk in reader.iter_chunks(start, end - start):
                    yield chunk
            finally:
                await reader.aclose()

        return chunks()

    async def delete_object(self, repo: Repository, key: str) -> Response:
        ref, path = _split_key(key)
        branch = await self._branch_of(repo, ref)
        try:
            await branch.delete_object(path)
        except ObjectNotFoundError:
            pass  # S3 answers 204 for an absent key too
        return Response(204, b"", None, {})

    async def delete_objects(self, request: Request, repo: Repository) -> Response:
        keys, quiet = xml.parse_delete(await request.body(MAX_DELETE_BODY))
        if len(keys) > MAX_KEYS:
            raise S3Error("MalformedXML", f"at most {MAX_KEYS} keys per request")
        by_ref: dict[str, list[tuple[str, str]]] = {}
        errors: list[str] = []
        done: list[str] = []
        for k in keys:
            ref, sep, path = k.partition("/")
            if not sep or not path:
                errors.append(_delete_error(k, "NoSuchKey", "key is not <ref>/<path>"))
                continue
            by_ref.setdefault(ref, []).append((k, path))
        for ref, items in by_ref.items():
            try:
                branch = await self._branch_of(repo, ref)
                await branch.delete_objects([p for _, p in items])
            except Exception as e:
                err = s3_error_of(e)
                errors.extend(_delete_error(k, err.code, err.message) for k, _ in items)
                continue
            done.extend(k for k, _ in items)
        parts = [] if quiet else ["<Deleted>" + xml.el("Key", k) + "</Deleted>" for k in done]
        return _xml(xml.doc("DeleteResult", parts + errors))


def body_stream(request: Request, limit: int, signer: ChunkSigner | None) -> AsyncIterator[bytes]:
    """The body's data: ``aws-chunked`` decoded, Content-MD5 and a hex
    x-amz-content-sha256 checked as it streams."""
    h = request.headers
    md5 = payload.expected_md5(h.get("content-md5"))
    sha = h.get("x-amz-content-sha256", "")
    stream = request.stream(limit)
    if chunked.is_streaming(sha):
        stream = chunked.decode(stream, sha, signer, h.get("x-amz-trailer", ""))
        sha = ""
    if payload.needs_check(md5, sha):
        stream = payload.checked(stream, md5, sha)
    return stream


def _user_metadata(h: dict[str, str]) -> dict[str, str]:
    return {k[len(META) :]: v for k, v in h.items() if k.startswith(META) and k != META}


def _copy_result(s: ObjectStats) -> Response:
    result = [xml.el("LastModified", xml.iso(s.mtime)), xml.el("ETag", f'"{s.checksum}"')]
    return _xml(xml.doc("CopyObjectResult", result))


def _delete_error(key: str, code: str, message: str) -> str:
    return ("<Error>" + xml.el("Key", key) + xml.el("Code", code) + xml.el("Message", message)
            + "</Error>")  # fmt: skip


class NotModified(Exception):
    """304: the caller's copy is current (not an error body)."""

    def __init__(self, headers: dict[str, str]) -> None:
        super().__init__("not modified")
        self.headers = headers
