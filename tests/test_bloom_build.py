"""The bulk bloom-filter build is pybloom-live's own filter, bit for bit."""

from __future__ import annotations

import io
import random

import pytest
from pybloom_live import BloomFilter

from lsmstore.staging import files


def _added_one_by_one(keys: list[bytes], error_rate: float) -> BloomFilter:
    bloom = BloomFilter(files.bloom_capacity(len(keys)), error_rate)
    for k in keys:
        bloom.add(files.bloom_item(k), skip_check=True)
    return bloom


def _serialised(bloom: BloomFilter) -> bytes:
    buf = io.BytesIO()
    bloom.tofile(buf)
    return buf.getvalue()


@pytest.mark.parametrize("error_rate", [0.01, 0.001, 0.2, 1e-7])
@pytest.mark.parametrize("n", [0, 1, 300, 5000, 40_000])
def test_bulk_build_equals_pybloom_live(n: int, error_rate: float) -> None:
    # 40,000 keys need 4-byte hash values (sha256, sha384 or sha512 digests); fewer keys
    # 2-byte values (xxh128, sha1, ...); 1e-7 needs more than one salt.
    rng = random.Random(n)
    keys = sorted({rng.randbytes(rng.randint(1, 48)) for _ in range(n)})
    built = files.build_bloom(iter(keys), len(keys), error_rate)
    assert _serialised(built) == _serialised(_added_one_by_one(keys, error_rate))
    assert len(built) == len(keys)
    for key in keys[:200]:
        assert files.bloom_item(key) in built
    for key in [rng.randbytes(8) for _ in range(200)] + keys[:50]:
        assert files.BloomProbe(key).test(built) == (files.bloom_item(key) in built)


def test_non_ascii_keys_hash_as_pybloom_live_does() -> None:
    keys = sorted({bytes([i, 0xC3, 0xA9, 255 - i]) for i in range(256)} | {b"plain"})
    built = files.build_bloom(keys, len(keys), 0.01)
    assert _serialised(built) == _serialised(_added_one_by_one(keys, 0.01))
    decoded = BloomFilter.fromfile(io.BytesIO(_serialised(built)))
    assert all(files.bloom_item(k) in decoded for k in keys)
