"""lsmstore: a write service for a Git-for-data store (an LSM of SSTs over an object store)."""

from lsmstore.errors import *  # noqa: F403
