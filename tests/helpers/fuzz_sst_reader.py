"""Coverage-guided fuzzing of the SST reader with atheris (libFuzzer).

Run as a script: ``python tests/helpers/fuzz_sst_reader.py [libFuzzer flags] CORPUS_DIR``.
Every input is read in full (open, scan, a few gets and seeks), and each entry decoded
as a metarange entry.  The first byte picks
the reader: even, the production reader; odd, the same reader with block checksums not
verified, so mutations reach the block, index and property decoders instead of stopping
at a checksum.  Anything but success or CorruptFileError (UnsupportedFormatError is one)
is a crash.  The process's address space is limited, so an allocation of a size the
input claims fails the run too.
"""

from __future__ import annotations

import resource
import sys
from itertools import islice

import atheris

# Only the reader's own modules are instrumented (lsmstore's package import pulls in much
# more); they are first imported here, inside the hook.
_TARGETS = [
    "lsmstore.graveler.sst_reader",
    "lsmstore.graveler.value",
    "lsmstore.graveler.record",
    "lsmstore.graveler.metarange",
]
with atheris.instrument_imports(include=_TARGETS):
    from lsmstore.errors import CorruptFileError
    from lsmstore.graveler.metarange import decode_range_entry
    from lsmstore.graveler.sst_reader import SSTReader


class UncheckedReader(SSTReader):
    """The reader with block checksums accepted unverified (fuzzing only)."""

    __slots__ = ()

    def _verify_checksum(self, offset: int, end: int, what: str) -> None:
        pass


def read_everything(data: bytes) -> None:
    if not data:
        return
    cls = UncheckedReader if data[0] & 1 else SSTReader
    try:
        reader = cls(data[1:], "fuzz.sst", block_cache_size=2)
        for record in reader:
            try:  # every entry as a metarange entry too (RangeData protobuf decoding)
                decode_range_entry(record, "fuzz.sst")
            except CorruptFileError:
                pass
        for key in (b"", reader.first_key, reader.last_key, b"m", b"\xff" * 4):
            reader.get(key)
            list(islice(reader.seek(key), 3))
    except CorruptFileError:
        pass


def main() -> None:
    with open("/proc/self/status") as status:
        vm = next(int(line.split()[1]) for line in status if line.startswith("VmSize"))
    limit = vm * 1024 + (1 << 30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    atheris.Setup(sys.argv, read_everything)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
