"""Objects on graveler: lakeFS's object model (docs/client.md, "Objects API").

An object is a path whose graveler value is lakeFS's ``catalog.Entry`` (physical
address, size, ETag, mtime, content type, user metadata); its data lives in the
repository's storage namespace.  ``Branch`` gains ``upload``, ``link``, ``link_many``,
``delete_object(s)``, ``copy_object``; ``Ref`` and ``Branch`` gain ``stat_object``,
``open``, ``list_objects``.
"""

from lsmstore.objects.addresses import ALLOWED_EXTERNAL_PREFIXES_KEY
from lsmstore.objects.entry import DEFAULT_CONTENT_TYPE, AddressType, ObjectEntry
from lsmstore.objects.model import LinkItem, LinkTuple
from lsmstore.objects.reader import ObjectReader
from lsmstore.types import ObjectLink, ObjectStats

__all__ = [
    "ALLOWED_EXTERNAL_PREFIXES_KEY",
    "DEFAULT_CONTENT_TYPE",
    "AddressType",
    "LinkItem",
    "LinkTuple",
    "ObjectEntry",
    "ObjectLink",
    "ObjectReader",
    "ObjectStats",
]
