"""The webhook hook: a POST of the event (lakeFS's body and query parameters) to the
hook's URL, within its timeout, to a host the server's allow-list names.

**Body.**  lakeFS's ``EventInfo`` JSON: ``event_type``, ``event_time`` (RFC 3339,
UTC), ``action_name``, ``hook_id``, ``repository_id``, and where the event has them
``branch_id``, ``source_ref``, ``tag_id``, ``commit_id``, ``commit_message``,
``committer``, ``commit_metadata``, ``merge_source`` (empty ones left out, as lakeFS's
``omitempty``).  The hook's ``query_params`` go on the URL, its ``headers`` on the
request with ``Content-Type: application/json``.

**Outcome.**  A 2xx answer passes; any other status, a connection failure, a timeout
or a refused URL fails the hook.  Redirects are not followed (a 3xx fails).  The
output recorded with the run shows the request (header values hidden), the duration
and the status with at most :data:`MAX_RESPONSE_BYTES` of the answer.

Only hosts of the server's allow-list are called (:mod:`lsmstore.actions.allow`);
another URL fails the hook without a request.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping

import aiohttp

from lsmstore.actions.allow import AllowList
from lsmstore.actions.files import Webhook

#: Bytes of a webhook's answer kept in the run's output.
MAX_RESPONSE_BYTES = 16 * 1024


def event_body(event: Mapping[str, object], action_name: str, hook_id: str) -> bytes:
    """lakeFS's request body: the event's fields (empty ones left out) for one hook."""
    doc: dict[str, object] = {
        "event_type": event["event_type"],
        "event_time": event["event_time"],
        "action_name": action_name,
        "hook_id": hook_id,
        "repository_id": event["repository_id"],
    }
    for name in (
        "branch_id", "source_ref", "tag_id", "commit_id", "commit_message", "committer",
        "commit_metadata", "merge_source",
    ):  # fmt: skip
        value = event.get(name)
        if value:
            doc[name] = value
    return json.dumps(doc).encode()


async def call(
    hook: Webhook, body: bytes, allow: AllowList, clock: Callable[[], float]
) -> tuple[str | None, str]:
    """POST ``body`` to the hook: why it failed (None: it passed) and the output to
    record."""
    out = [f"Request:\nPOST {hook.url}\n", "Query Params:\n"]
    out += [f"{k}: {v}\n" for k, v in hook.query_params]
    out.append("Headers:\n")
    out += [f"{k}: <hidden>\n" for k, _ in hook.headers]
    out.append(f"Request Body:\n{body.decode()}\n\n")
    error = allow.refusal(hook.url)
    if error is None:
        error = await _post(hook, body, clock, out)
    if error is not None:
        out.append(f"Error: {error}\n")
    return error, "".join(out)


async def _post(
    hook: Webhook, body: bytes, clock: Callable[[], float], out: list[str]
) -> str | None:
    headers = dict(hook.headers)
    headers["Content-Type"] = "application/json"
    start = clock()
    try:
        timeout = aiohttp.ClientTimeout(total=hook.timeout_s)
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.post(
                hook.url, params=list(hook.query_params), data=body, headers=headers,
                allow_redirects=False,
            ) as resp,
        ):  # fmt: skip
            answer = await resp.content.read(MAX_RESPONSE_BYTES)
            out.append(f"\nRequest duration: {clock() - start:.3f}s\n")
            v = resp.version
            version = f"HTTP/{v.major}.{v.minor}" if v is not None else "HTTP"
            out.append(f"\nResponse:\n{version} {resp.status} {resp.reason or ''}\n")
            out += [f"{k}: {v}\n" for k, v in resp.headers.items()]
            out.append("\n" + answer.decode("utf-8", "replace") + "\n")
            if 200 <= resp.status < 300:
                return None
            return f"webhook request failed (status code: {resp.status})"
    except TimeoutError:
        out.append(f"\nRequest duration: {clock() - start:.3f}s\n")
        return f"webhook request timed out after {hook.timeout_s:g}s"
    except (aiohttp.ClientError, OSError, ValueError) as e:
        out.append(f"\nRequest duration: {clock() - start:.3f}s\n")
        return f"webhook request failed: {type(e).__name__}: {e}"
