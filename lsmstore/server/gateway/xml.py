"""S3's XML documents: the answers the gateway renders and the one request body it
parses (DeleteObjects).  Request XML is bounded before parsing and may carry no
document type (no entity expansion)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterable
from email.utils import formatdate
from time import gmtime, strftime
from urllib.parse import quote_plus
from xml.sax.saxutils import escape

from lsmstore.server.gateway.errors import S3Error

NS = "http://s3.amazonaws.com/doc/2006-03-01/"
XML_TYPE = "application/xml"
HEADER = '<?xml version="1.0" encoding="UTF-8"?>\n'


def iso(t: float) -> str:
    return strftime("%Y-%m-%dT%H:%M:%S.000Z", gmtime(t))


def http_date(t: float) -> str:
    return formatdate(t, usegmt=True)


def el(name: str, text: str | int | bool) -> str:
    if isinstance(text, bool):
        text = "true" if text else "false"
    return f"<{name}>{escape(str(text))}</{name}>"


def doc(root: str, parts: Iterable[str]) -> bytes:
    return (HEADER + f'<{root} xmlns="{NS}">' + "".join(parts) + f"</{root}>").encode()


def error(e: S3Error, resource: str, request_id: str) -> bytes:
    body = el("Code", e.code) + el("Message", e.message) + el("Resource", resource)
    body += el("RequestId", request_id)
    return (HEADER + "<Error>" + body + "</Error>").encode()


def key_text(key: str, url: bool) -> str:
    """A key as ``encoding-type=url`` asks: form-encoded as S3 does (a space is ``+``,
    ``/`` stays), which SDKs decode with ``unquote_plus``."""
    return quote_plus(key, safe="/") if url else key


def parse(body: bytes) -> ET.Element:
    """The root of a request's XML document; MalformedXML for a malformed one or one with
    a document type (no entity is ever expanded)."""
    if b"<!DOCTYPE" in body or b"<!ENTITY" in body:
        raise S3Error("MalformedXML", "document types are not accepted")
    try:
        return ET.fromstring(body)
    except ET.ParseError as e:
        raise S3Error("MalformedXML", f"malformed XML: {e}") from None


def parse_delete(body: bytes) -> tuple[list[str], bool]:
    """``(keys, quiet)`` of a ``<Delete>`` document; MalformedXML otherwise."""
    root = parse(body)
    keys: list[str] = []
    quiet = False
    for child in root:
        tag = child.tag.rpartition("}")[2]
        if tag == "Quiet":
            quiet = (child.text or "").strip().lower() == "true"
        elif tag == "Object":
            for sub in child:
                if sub.tag.rpartition("}")[2] == "Key" and sub.text:
                    keys.append(sub.text)
    if root.tag.rpartition("}")[2] != "Delete" or not keys:
        raise S3Error("MalformedXML", "expected <Delete> with at least one <Object><Key>")
    return keys, quiet
