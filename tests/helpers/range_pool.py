"""A range encoder whose worker processes are up before a test uses it."""

from __future__ import annotations

import time
from collections.abc import Generator

from lsmstore.graveler.range_encoder import RangeEncoder


def running_pool(processes: int = 2) -> Generator[RangeEncoder, None, None]:
    """Yield a :class:`RangeEncoder` with ``processes`` workers started (every range in
    the pool: ``pool_min_bytes`` 0); closed afterwards.  For a module-scoped fixture."""
    enc = RangeEncoder(processes, pool_min_bytes=0)
    enc.start()
    try:
        for _ in range(1200):  # the workers start in the background (60 s at most)
            if enc.started == processes:
                break
            time.sleep(0.05)
        assert enc.started == processes
        yield enc
    finally:
        enc.close()
