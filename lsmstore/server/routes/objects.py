"""Objects: upload (raw or multipart), read (whole or ranged), head, stat, list, delete
one or many, copy -- over the object layer of ``Branch``/``Ref`` (lsmstore.objects).

Uploads stream: the body goes to the object store chunk by chunk (bounded by
``server_max_object_bytes``: 413 past it) and the entry is staged once the data is
durable; the answer (201) comes only once the entry is appended.  ``If-None-Match: *``
makes the upload conditional (412 when the path holds an object); on a read,
``If-Match: "<etag>"`` answers 412 unless the object still has that ETag (a reader that
must not read another object's data than the one it opened).  Data written
elsewhere is registered with lakeFS's ``linkPhysicalAddress`` (``If-None-Match: *``
likewise: checked and staged as one step); ``getPhysicalAddress`` hands out a fresh
``data/`` address to write it to.  User metadata comes
from ``x-lakefs-meta-<key>`` headers, keys lower-cased as lakeFS does.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from email.utils import formatdate
from typing import Any, Literal

from lsmstore.client import Ref, Repository
from lsmstore.errors import CorruptFileError, NotAvailableError, PreconditionFailedError
from lsmstore.objects import DEFAULT_CONTENT_TYPE
from lsmstore.objects.source import HASH_IN_THREAD
from lsmstore.operations import presign
from lsmstore.refstore.names import check_ref_name
from lsmstore.server import pagination, validate
from lsmstore.server.context import Context
from lsmstore.server.errors import ApiError, bad_request
from lsmstore.server.http import Request, Response, empty, json_response
from lsmstore.server.multipart import ContentPart, boundary_of
from lsmstore.server.routes.schemas import BOOL, STR, ref
from lsmstore.server.routing import Param, Route
from lsmstore.types import ObjectStats

REPO = "/api/v1/repositories/{repository}"
BRANCH_OBJECTS = REPO + "/branches/{branch}/objects"
REF_OBJECTS = REPO + "/refs/{ref}/objects"
BRANCH_BACKING = REPO + "/branches/{branch}/staging/backing"
META_PREFIX = "x-lakefs-meta-"
MAX_DELETE_PATHS = 1000
#: Upload bodies declared at most this long are read whole, then written in one step
#: (one worker-thread hop on a local store instead of open, write and publish).
WHOLE_BODY_BYTES = HASH_IN_THREAD

PATH = Param("path", {"type": "string", "minLength": 1}, required=True,
             description="relative to the ref")  # fmt: skip
PRESIGN = Param("presign", BOOL)
USER_METADATA = Param("user_metadata", BOOL)
_OCTETS = {"type": "string", "format": "binary"}


def stats_json(s: ObjectStats, user_metadata: bool = True) -> dict[str, Any]:
    if s.path_type == "common_prefix":
        return {"path": s.path, "path_type": "common_prefix", "physical_address": "",
                "checksum": "", "mtime": 0}  # fmt: skip
    out: dict[str, Any] = {
        "path": s.path,
        "path_type": "object",
        "physical_address": s.physical_address,
        "checksum": s.checksum,
        "mtime": s.mtime,
        "size_bytes": s.size,
        "content_type": s.content_type or DEFAULT_CONTENT_TYPE,
    }
    if user_metadata:
        out["metadata"] = dict(s.metadata)
    return out


def _metadata(request: Request) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in request.headers.items():
        if k.startswith(META_PREFIX) and len(k) > len(META_PREFIX):
            out[k[len(META_PREFIX) :].lower()] = v
    return out


def _range(header: str, size: int) -> tuple[int, int] | None:
    """``[start, end)`` of a single ``bytes=`` range (lakeFS ``httputil.ParseRange``);
    None when the header is not a range we serve (then the whole object is sent);
    416 when it starts past the end."""
    unit, _, spec = header.partition("=")
    if unit.strip().lower() != "bytes" or "," in spec:
        return None
    first, dash, last = spec.strip().partition("-")
    if not dash:
        return None
    try:
        if first == "":  # the last N bytes
            n = int(last)
            if n <= 0 or size == 0:
                return None
            return max(0, size - n), size
        start = int(first)
        end = size - 1 if last == "" else int(last)
    except ValueError:
        return None
    if start < 0 or (last != "" and end < start):
        return None
    if start >= size:
        raise ApiError(
            416,
            f"range {header!r} starts past the end ({size} bytes)",
            {"Content-Range": f"bytes */{size}"},
        )
    return start, min(end, size - 1) + 1


def _small(request: Request) -> bool:
    """A body declared (Content-Length) at most :data:`WHOLE_BODY_BYTES` long."""
    declared = request.headers.get("content-length")
    return declared is not None and declared.isdigit() and int(declared) <= WHOLE_BODY_BYTES


def _object_headers(s: ObjectStats) -> dict[str, str]:
    return {
        "ETag": f'"{s.checksum}"',
        "Last-Modified": formatdate(s.mtime, usegmt=True),
        "Accept-Ranges": "bytes",
    }


def _no_presign(repo: Repository, e: NotAvailableError) -> ApiError:
    scheme = repo.storage_namespace.partition("://")[0]
    return bad_request(
        f"pre-signed URLs are not supported for repository {repo.name!r} "
        f"(storage namespace {scheme}://; they need an S3 namespace): {e}"
    )


def routes(ctx: Context) -> list[Route]:
    config = ctx.config

    async def _signed(
        repo: Repository, s: ObjectStats, method: Literal["GET", "PUT"]
    ) -> tuple[str, int]:
        """A pre-signed URL of the object's data and its expiry (epoch seconds), or 400."""
        expires = config.server_presign_expiry_s
        try:
            url = await presign.data_url(repo, s, method, expires)
        except NotAvailableError as e:
            raise _no_presign(repo, e) from None
        return url, int(repo.store.clock()) + expires

    async def _ref(request: Request) -> Ref:
        repo = await ctx.repository(request.params["repository"])
        return repo.ref(request.params["ref"])

    def _path(request: Request, name: str = "path") -> str:
        path = request.required_arg(name)
        if len(path.encode("utf-8", "surrogatepass")) > config.server_max_path_bytes:
            raise bad_request(f"{name} longer than {config.server_max_path_bytes} bytes")
        return path

    async def upload(request: Request) -> Response:
        repo = await ctx.repository(request.params["repository"])
        branch_name = check_ref_name(request.params["branch"])
        path = _path(request)
        if_absent = request.headers.get("if-none-match", "").strip() == "*"
        metadata = _metadata(request)
        ctype = request.headers.get("content-type", "")
        body = request.stream(config.server_max_object_bytes)
        data: AsyncIterator[bytes] | ContentPart | bytes = body
        content_type = ctype or DEFAULT_CONTENT_TYPE
        branch = repo.branch(branch_name)
        if ctype.lower().startswith("multipart/form-data"):
            await ctx.check_branch(branch)  # 404 for a missing branch before the body
            part = ContentPart(body, boundary_of(ctype))
            await part.start()
            data = part
            content_type = part.content_type or DEFAULT_CONTENT_TYPE
        elif _small(request):
            # Whole: the object store writes it in one step.  A missing branch answers
            # 404 from the upload's own read of the path, before any data is written.
            data = b"".join([chunk async for chunk in body])
        else:
            await ctx.check_branch(branch)  # 404 for a missing branch before the body
        started = time.perf_counter()
        ctx.metrics.writes_in_flight.inc()
        try:  # ObjectExistsError: 412 (lsmstore.error_types)
            stats = await branch.upload(
                path, data, content_type=content_type, metadata=metadata, if_absent=if_absent
            )
        finally:
            ctx.metrics.writes_in_flight.dec()
        ctx.metrics.flush_seconds.labels("uploadObject").observe(time.perf_counter() - started)
        return json_response(stats_json(stats), 201)

    async def get_object(request: Request) -> Response:
        ref_ = await _ref(request)
        path = _path(request)
        if request.bool_arg("presign"):
            repo = await ctx.repository(request.params["repository"])
            s = await ref_.stat_object(path)
            if s.physical_address:  # an inline value has no data to sign: served below
                url, _ = await _signed(repo, s, "GET")
                return Response(302, b"", None, {"Location": url})
        reader = await ref_.open(path)
        s = reader.stats
        headers = _object_headers(s)
        headers["Content-Type"] = s.content_type or DEFAULT_CONTENT_TYPE
        if request.headers.get("if-none-match", "").strip('" ') == s.checksum and s.checksum:
            await reader.aclose()
            return Response(304, b"", None, headers)
        match = request.headers.get("if-match")
        if match is not None and match.strip('" ') != s.checksum:
            await reader.aclose()
            raise PreconditionFailedError(
                f"object {path!r} is not {match.strip()} any more (its ETag is {s.checksum!r})"
            )
        span = None
        header = request.headers.get("range")
        if header:
            span = _range(header, s.size)
        status = 200
        start, end = 0, s.size
        if span is not None:
            start, end = span
            status = 206
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{s.size}"
        headers["Content-Length"] = str(end - start)
        if request.method == "HEAD":
            await reader.aclose()
            return Response(status, b"", None, headers)

        # The data's first chunk is read before the status line: a data object that is
        # gone or short there answers an error, not a 200 cut off (a large object
        # found short further on still ends the connection: the head is sent).
        stream = reader.iter_chunks(start, end - start)
        head: list[bytes] = []
        try:
            got = 0
            async for chunk in stream:
                head.append(chunk)
                got += len(chunk)
                if got >= end - start or len(head) > 1:
                    break
            if got >= end - start:
                async for _ in stream:  # nothing more: the reader's own length check
                    pass
        except CorruptFileError as e:
            await reader.aclose()
            raise ApiError(
                500, f"data of {path!r} is shorter than its entry records", kind=type(e).__name__
            ) from e
        except BaseException:
            await reader.aclose()
            raise

        async def chunks() -> AsyncIterator[bytes]:
            try:
                for chunk in head:
                    yield chunk
                async for chunk in stream:
                    yield chunk
            finally:
                await reader.aclose()

        return Response(status, chunks(), None, headers)

    async def head_object(request: Request) -> Response:
        ref_ = await _ref(request)
        s = await ref_.stat_object(_path(request))
        headers = _object_headers(s)
        headers["Content-Type"] = s.content_type or DEFAULT_CONTENT_TYPE
        headers["Content-Length"] = str(s.size)
        header = request.headers.get("range")
        if header:
            span = _range(header, s.size)
            if span is not None:
                headers["Content-Range"] = f"bytes {span[0]}-{span[1] - 1}/{s.size}"
                headers["Content-Length"] = str(span[1] - span[0])
                return Response(206, b"", None, headers)
        return Response(200, b"", None, headers)

    async def stat_object(request: Request) -> Response:
        ref_ = await _ref(request)
        s = await ref_.stat_object(_path(request))
        doc = stats_json(s, request.bool_arg("user_metadata", True))
        if request.bool_arg("presign") and s.physical_address:
            repo = await ctx.repository(request.params["repository"])
            doc["physical_address"], doc["physical_address_expiry"] = await _signed(repo, s, "GET")
        return json_response(doc)

    async def list_objects(request: Request) -> Response:
        ref_ = await _ref(request)
        limit = pagination.amount(request)
        prefix = request.arg("prefix", "") or ""
        delimiter = request.arg("delimiter", "") or ""
        after = request.arg("after", "") or None
        user_metadata = request.bool_arg("user_metadata", True)
        found: list[ObjectStats] = []
        async for s in ref_.list_objects(prefix, delimiter, after, limit + 2):
            if after is not None and s.path == after:
                continue  # a common prefix equal to ``after`` is skipped whole
            found.append(s)
            if len(found) > limit:
                break
        body = pagination.page(
            found, limit, lambda s: s.path, lambda s: stats_json(s, user_metadata)
        )
        return json_response(body)

    async def delete_object(request: Request) -> Response:
        repo = await ctx.repository(request.params["repository"])
        name = check_ref_name(request.params["branch"])
        path = _path(request)
        await repo.branch(name).delete_object(path)
        return empty(204)

    async def delete_objects(request: Request) -> Response:
        repo = await ctx.repository(request.params["repository"])
        name = check_ref_name(request.params["branch"])
        doc = await request.json_object()
        paths = validate.string_list(doc, "paths")
        if len(paths) > MAX_DELETE_PATHS:
            raise bad_request(f"at most {MAX_DELETE_PATHS} paths per request")
        branch = repo.branch(name)
        await branch.head()  # its body is read: an exact 404, even for no paths
        await branch.delete_objects(paths)
        return json_response({"errors": []})

    async def copy_object(request: Request) -> Response:
        repo = await ctx.repository(request.params["repository"])
        name = check_ref_name(request.params["branch"])
        dest = _path(request, "dest_path")
        doc = await request.json_object()
        src_path = validate.string(doc, "src_path")
        src_ref = validate.string(doc, "src_ref", required=False) or None
        validate.boolean(doc, "force")
        validate.boolean(doc, "shallow")
        s = await repo.branch(name).copy_object(src_path, dest, src_ref=src_ref)
        return json_response(stats_json(s), 201)

    async def get_physical_address(request: Request) -> Response:
        repo = await ctx.repository(request.params["repository"])
        branch = repo.branch(check_ref_name(request.params["branch"]))
        _path(request)
        await ctx.check_branch(branch)
        if not request.bool_arg("presign"):
            return json_response({"physical_address": branch.new_physical_address()})
        expires = config.server_presign_expiry_s
        try:
            address, url = await presign.upload_url(branch, expires)
        except NotAvailableError as e:
            raise _no_presign(repo, e) from None
        expiry = int(repo.store.clock()) + expires
        return json_response(
            {"physical_address": address, "presigned_url": url, "presigned_url_expiry": expiry}
        )

    async def link_physical_address(request: Request) -> Response:
        repo = await ctx.repository(request.params["repository"])
        branch = repo.branch(check_ref_name(request.params["branch"]))
        path = _path(request)
        if_absent = request.headers.get("if-none-match", "").strip() == "*"
        doc = await request.json_object()
        staging = doc.get("staging")
        if not isinstance(staging, dict):
            raise bad_request("field 'staging' must be an object")
        address = validate.string(staging, "physical_address")
        checksum = validate.string(doc, "checksum")
        size = validate.integer(doc, "size_bytes", required=True)
        content_type = validate.string(doc, "content_type", required=False) or None
        metadata = validate.string_map(doc, "user_metadata")
        mtime = validate.integer(doc, "mtime", required=False, default=-1)
        validate.boolean(doc, "force")
        await ctx.check_branch(branch)
        s = await branch.link(
            path, address, size=size, checksum=checksum, content_type=content_type,
            metadata=metadata, mtime=None if mtime < 0 else mtime, if_absent=if_absent,
            verify=request.bool_arg("verify"),
        )  # fmt: skip
        return json_response(stats_json(s))

    upload_body = (
        ("application/octet-stream", _OCTETS),
        ("multipart/form-data", {"type": "object", "properties": {"content": _OCTETS}}),
    )
    object_headers = ("ETag", "Last-Modified", "Content-Length", "Accept-Ranges")
    return [
        Route("POST", BRANCH_OBJECTS, upload, "uploadObject", "write", "objects",
              query=(PATH, Param("storageClass", STR), Param("force", BOOL)),
              body=upload_body, responses={201: ref("ObjectStats")},
              errors=(404, 409, 412), forward=True),
        Route("GET", BRANCH_BACKING, get_physical_address, "getPhysicalAddress", "write",
              "objects", query=(PATH, PRESIGN), responses={200: ref("StagingLocation")},
              errors=(400, 404)),
        Route("PUT", BRANCH_BACKING, link_physical_address, "linkPhysicalAddress", "write",
              "objects", query=(PATH, Param("verify", BOOL, description="check that the "
                                             "data exists with size_bytes bytes")),
              body=(("application/json", ref("StagingMetadata")),),
              responses={200: ref("ObjectStats")}, errors=(400, 404, 412), forward=True),
        Route("GET", REF_OBJECTS, get_object, "getObject", "read", "objects",
              query=(PATH, PRESIGN),
              responses={200: _OCTETS, 206: _OCTETS, 302: None, 304: None},
              produces="application/octet-stream", errors=(404, 416),
              response_headers=object_headers),
        Route("HEAD", REF_OBJECTS, head_object, "headObject", "read", "objects",
              query=(PATH,), responses={200: None, 206: None}, errors=(404, 416),
              response_headers=object_headers),
        Route("GET", REF_OBJECTS + "/stat", stat_object, "statObject", "read", "objects",
              query=(PATH, USER_METADATA, PRESIGN), responses={200: ref("ObjectStats")},
              errors=(404,)),
        Route("GET", REF_OBJECTS + "/ls", list_objects, "listObjects", "read", "objects",
              query=(*pagination.PARAMS, Param("delimiter", STR), USER_METADATA, PRESIGN),
              responses={200: ref("ObjectStatsList")}, errors=(404,)),
        Route("DELETE", BRANCH_OBJECTS, delete_object, "deleteObject", "write", "objects",
              query=(PATH, Param("force", BOOL)), responses={204: None}, errors=(404,),
              forward=True),
        Route("POST", BRANCH_OBJECTS + "/delete", delete_objects, "deleteObjects", "write",
              "objects", query=(Param("force", BOOL),),
              body=(("application/json", ref("PathList")),),
              responses={200: ref("ObjectErrorList")}, errors=(404,), forward=True),
        Route("POST", BRANCH_OBJECTS + "/copy", copy_object, "copyObject", "write", "objects",
              query=(Param("dest_path", {"type": "string", "minLength": 1}, required=True),),
              body=(("application/json", ref("ObjectCopyCreation")),),
              responses={201: ref("ObjectStats")}, errors=(404,), forward=True),
    ]  # fmt: skip
