"""link_many's column check (``LinkStager._columns``) against the per-link checks.

The column check takes a call whose every link is common (an ASCII path, an address
under ``<namespace>/data/`` of plain characters, a plain checksum, nothing else set)
and makes its records without a loop per link; any other call goes to the per-link
checks (``_one_by_one``), which find the exact error.  Whatever it accepts must be what
the per-link checks make, field for field and type for type, and it should accept
every call of common links."""

from __future__ import annotations

import re
import string
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

import lsmstore
from lsmstore.config import Config
from lsmstore.errors import LsmError
from lsmstore.objects.addresses import MAX_ADDRESS_BYTES, PLAIN_KEY, PLAIN_KEY_BYTES, Namespace
from lsmstore.objects.entry import encode_value
from lsmstore.objects.linking import _ETAG_BYTES, LinkStager, _lengths, _plain_etag, link_entry
from lsmstore.objects.rules import MAX_FIELD_BYTES, MAX_PATH_BYTES, MAX_SIZE
from lsmstore.operations.objects import link_stager, now_of
from lsmstore.staging.memstore import staged_bytes
from lsmstore.staging.pending import PendingCall, maker_of
from lsmstore.types import ObjectLink

BASE = "file:///ns/repo"
DATA = f"{BASE}/data/"
STAGER = LinkStager(Namespace(BASE, BASE, ()), Config(), (1_700_000_000, 5))


class Text(str):
    """A str subclass: the full checks take it, the column check must not store it."""


class Size(int):
    pass


def _rows(records: list[Any]) -> list[Any]:
    """Records compared by value and by the exact type of every field (a str subclass
    equals its str), pending ones with the entry their encoder makes."""
    out = []
    for r in records:
        fields = (r[0], *r[2:], maker_of(r[1]).encode(r[2], r[3], r[4])) if len(r) == 5 else r
        out.append((tuple(fields), tuple(map(type, fields))))
    return out


def _common(item: Any) -> bool:
    """What the column check is for, worked out link by link with the per-link rules."""
    if type(item) is tuple and len(item) == 4:
        link = ObjectLink(*item)
    elif type(item) is ObjectLink:
        link = item
    else:
        return False
    path = link.path
    return (
        type(path) is str
        and path.isascii()
        and 0 < len(path) <= STAGER._max_path
        and STAGER._plain(link) is not None
    )


def _outcome(stage: Any, seq: list[Any]) -> Any:
    try:
        return "staged", _rows(stage(list(seq)))
    except LsmError as e:
        return type(e), str(e)


def _check(seq: list[Any]) -> Any:
    """The column check's outcome on ``seq`` equals the per-link checks'; returns it."""
    columns = STAGER._columns(list(seq))
    kinds = {type(item) for item in seq}
    assert (columns is not None) == (len(kinds) == 1 and all(map(_common, seq))), seq
    by_links = _outcome(STAGER._one_by_one, seq)
    assert _outcome(_staged_all, seq) == by_links
    if columns is not None:
        records = columns.records()
        assert ("staged", _rows(records)) == by_links
        assert columns.charge == sum(map(staged_bytes, records))
    return columns


def _staged_all(seq: list[Any]) -> list[Any]:
    """stage_all's records (a PendingCall's rows as records)."""
    staged = STAGER.stage_all(seq)
    return staged.records() if isinstance(staged, PendingCall) else staged


def _good(i: int) -> tuple[str, str, int, str]:
    return (f"p/{i:03d}", f"{DATA}a{i}/b.c_{i}", 1 << i, f"e{i}")


def test_char_tables_are_the_patterns_characters() -> None:
    """The byte tables the column check translates with hold exactly the characters
    of a plain key and of a plain checksum."""
    assert set(PLAIN_KEY_BYTES) == {
        c for c in range(256) if re.fullmatch(r"[A-Za-z0-9._=+/-]", chr(c))
    }
    assert set(_ETAG_BYTES) == {c for c in range(256) if _plain_etag(chr(c))}
    assert "/" in PLAIN_KEY_BYTES.decode() and "\n" not in PLAIN_KEY_BYTES.decode()


@given(st.lists(st.text(alphabet="ab", max_size=4), min_size=1, max_size=8))
def test_lengths_of_joined_items(items: list[str]) -> None:
    """The least and greatest length of joined items, from their joints when all are
    as long as the first, are every item's, for str and for bytes."""
    expected = (min(map(len, items)), max(map(len, items)))
    assert _lengths("\n".join(items), "\n", items) == expected
    keys = [item.encode() for item in items]
    assert _lengths(b"\xff".join(keys), b"\xff", keys) == expected


def test_column_check_measures_every_item() -> None:
    """A call whose items are all as long as the first but one, too long or empty."""
    width = MAX_ADDRESS_BYTES - len(DATA)
    fits = [(f"p{i}", f"{DATA}{i}" + "k" * (width - 1), 1, f"e{i}") for i in range(4)]
    assert _check(fits) is not None
    for i in range(4):
        for field, odd in ((0, "p" * (MAX_PATH_BYTES + 1)), (0, ""), (3, ""), (3, "e" * 1025)):
            seq: list[Any] = [*fits]
            seq[i] = tuple(odd if f == field else v for f, v in enumerate(fits[i]))
            assert _check(seq) is None
        seq = [*fits]
        seq[i] = ("p", fits[i][1] + "k", 1, "e")
        assert _check(seq) is None


# every link below is common: the column check takes them
COMMON_EDGES: list[Any] = [
    ("p", f"{DATA}x/_lsm", 0, "e"),  # an _lsm segment needs a "/" after it
    ("p", f"{DATA}x/_lsmx/y", 1, "e"),
    ("p", f"{DATA}_lsmx", 1, "e"),
    ("p", f"{DATA}x./y..z", 1, "e"),  # a dot inside or at the end of a segment
    ("p", f"{DATA}-=+_", 1, "e"),
    ("p", f"{DATA}x", MAX_SIZE, "e"),
    ("p", DATA + "k" * (MAX_ADDRESS_BYTES - len(DATA)), 1, "e"),
    ("p" * MAX_PATH_BYTES, f"{DATA}x", 1, "e"),
    ("p", f"{DATA}x", 1, "e" * MAX_FIELD_BYTES),
    ("p", f"{DATA}x", 1, "aZ09_.:+/=-"),
    ("p\n\x00 /", f"{DATA}x", 1, "e"),  # any ASCII path
    ("p", f"{DATA}data/x", 1, "e"),
    ObjectLink("p", f"{DATA}x", 1, "e"),
]

# every link below is not common: the column check leaves the call to the per-link
# checks, which stage it or raise the exact error
ODD_EDGES: list[Any] = [
    # paths
    ("", f"{DATA}x", 1, "e"),
    ("\u00e9", f"{DATA}x", 1, "e"),
    ("\ud800", f"{DATA}x", 1, "e"),
    ("p" * (MAX_PATH_BYTES + 1), f"{DATA}x", 1, "e"),
    (Text("p"), f"{DATA}x", 1, "e"),
    (b"p", f"{DATA}x", 1, "e"),
    (None, f"{DATA}x", 1, "e"),
    # addresses
    ("p", Text(f"{DATA}x"), 1, "e"),
    ("p", f"{DATA}", 1, "e"),
    ("p", f"{DATA}x/", 1, "e"),
    ("p", f"{DATA}/x", 1, "e"),
    ("p", f"{DATA}x//y", 1, "e"),
    ("p", f"{DATA}.x", 1, "e"),
    ("p", f"{DATA}x/.y", 1, "e"),
    ("p", f"{DATA}x/../y", 1, "e"),
    ("p", f"{DATA}_lsm/x", 1, "e"),
    ("p", f"{DATA}x/_lsm/y", 1, "e"),
    ("p", f"{DATA}x\n{DATA}y", 1, "e"),
    ("p", f"{DATA}x\ndata/y", 1, "e"),
    ("p", f"{DATA}x\ny", 1, "e"),
    ("p", f"{DATA}x\n", 1, "e"),
    ("p", f"{DATA}\nx", 1, "e"),
    ("p", f"{DATA}x y", 1, "e"),
    ("p", f"{DATA}x\u00e9", 1, "e"),
    ("p", f"{DATA}x\ud800", 1, "e"),
    ("p", f"{DATA}x%2Fy", 1, "e"),
    ("p", f"{BASE}/data", 1, "e"),
    ("p", f"{BASE}/datax/y", 1, "e"),
    ("p", f"{BASE}/other/x", 1, "e"),
    ("p", f"{BASE}x/data/y", 1, "e"),
    ("p", f"{BASE}/", 1, "e"),
    ("p", "data/x", 1, "e"),
    ("p", "", 1, "e"),
    ("p", DATA + "k" * (MAX_ADDRESS_BYTES - len(DATA) + 1), 1, "e"),
    ("p", 5, 1, "e"),
    # sizes
    ("p", f"{DATA}x", -1, "e"),
    ("p", f"{DATA}x", MAX_SIZE + 1, "e"),
    ("p", f"{DATA}x", 1 << 200, "e"),
    ("p", f"{DATA}x", True, "e"),
    ("p", f"{DATA}x", False, "e"),
    ("p", f"{DATA}x", Size(1), "e"),
    ("p", f"{DATA}x", 1.0, "e"),
    ("p", f"{DATA}x", "1", "e"),
    ("p", f"{DATA}x", None, "e"),
    # checksums
    ("p", f"{DATA}x", 1, ""),
    ("p", f"{DATA}x", 1, "e" * (MAX_FIELD_BYTES + 1)),
    ("p", f"{DATA}x", 1, Text("e")),
    ("p", f"{DATA}x", 1, '"e"'),
    ("p", f"{DATA}x", 1, " e"),
    ("p", f"{DATA}x", 1, "a\nb"),
    ("p", f"{DATA}x", 1, "a,b"),
    ("p", f"{DATA}x", 1, "\u00e9"),
    ("p", f"{DATA}x", 1, "\ud800"),
    ("p", f"{DATA}x", 1, 5),
    # the links themselves
    ("p", f"{DATA}x", 1, "e", None),
    ("p", f"{DATA}x", 1, "e", "text/csv"),
    ("p", f"{DATA}x", 1),
    ("p", f"{DATA}x", 1, "e", "text/csv", None, None, None),
    (),
    ["p", f"{DATA}x", 1, "e"],
    ObjectLink("p", f"{DATA}x", 1, "e", mtime=5),
    ObjectLink("p", f"{DATA}x", 1, "e", content_type="text/csv"),
    ObjectLink("p", f"{DATA}x", 1, "e", metadata={"k": "v"}),
    ObjectLink("p", f"{DATA}x", True, "e"),
]


def test_column_check_takes_common_edges() -> None:
    good = [_good(i) for i in range(5)]
    for edge in COMMON_EDGES:
        assert _common(edge), edge
        as_links = [ObjectLink(*t) for t in good] if type(edge) is ObjectLink else good
        for seq in ([edge], [*as_links, edge], [edge, *as_links], [edge, edge]):
            assert _check(seq) is not None, edge


def test_column_check_leaves_odd_links_to_the_full_checks() -> None:
    good = [_good(i) for i in range(5)]
    links = [ObjectLink(*t) for t in good]
    for edge in ODD_EDGES:
        assert not _common(edge), edge
        for seq in ([edge], [*good, edge], [edge, *good], [*good[:2], edge, *good[2:]]):
            assert _check(seq) is None, edge
        if type(edge) is tuple and len(edge) == 4:
            assert _check([*links, ObjectLink(*edge)]) is None, edge


def test_column_check_wants_one_kind_of_link() -> None:
    good = [_good(i) for i in range(3)]
    assert _check([*good, ObjectLink(*good[0])]) is None
    assert _check([ObjectLink(*good[0]), *good]) is None


def test_misaligned_tuples_are_refused() -> None:
    """Tuples whose items would line up as whole links (an empty one and one of
    eight) are refused, not staged as two links."""
    a, b = _good(1), _good(2)
    assert _check([(), (*a, *b)]) is None
    assert _check([a[:3], (a[3], *b)]) is None


_ODD_PATHS = st.sampled_from(["", "\u00e9", "\ud800", "p" * 1025, Text("p"), b"p", None])
_ODD_ADDRESSES = st.sampled_from([
    DATA, f"{DATA}/x", f"{DATA}x/", f"{DATA}.x", f"{DATA}_lsm/x", f"{DATA}x\n{DATA}y",
    f"{BASE}/data", f"{BASE}x/data/y", "data/x", Text(f"{DATA}x"), f"{DATA}\u00e9", 5,
])  # fmt: skip
_ODD_SIZES = st.sampled_from([-1, MAX_SIZE + 1, True, False, Size(1), 1.0, None])
_ODD_CHECKSUMS = st.sampled_from(["", "e" * 1025, Text("e"), '"e"', "a\nb", "\u00e9", 5])
_KEY_TEXT = st.text(alphabet="ab._-/\n \u00e9", max_size=6)
_ADDRESSES = st.one_of(
    st.from_regex(PLAIN_KEY, fullmatch=True).map(lambda k: DATA + k),
    st.builds(
        str.__add__,
        st.sampled_from([DATA, f"{DATA}x/", f"{BASE}/", f"{BASE}/data", f"{DATA}_lsm", ""]),
        _KEY_TEXT,
    ),
    _ODD_ADDRESSES,
)
_PATHS = st.one_of(st.text(alphabet=string.printable, min_size=1, max_size=8), _ODD_PATHS)
_SIZES = st.one_of(st.integers(min_value=0, max_value=MAX_SIZE), st.integers(), _ODD_SIZES)
_CHECKSUMS = st.one_of(
    st.from_regex(r"[0-9A-Za-z_.:+/=-]{1,40}", fullmatch=True),
    st.text(alphabet='ab:/"\n \u00e9', max_size=4),
    _ODD_CHECKSUMS,
)
_LINKS = st.tuples(_PATHS, _ADDRESSES, _SIZES, _CHECKSUMS)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(min_value=0, max_value=50), max_size=6),
    st.lists(_LINKS, min_size=1, max_size=3),
    st.booleans(),
)
def test_column_check_equals_link_by_link(good: list[int], links: list[Any], objects: bool) -> None:
    """Random calls of common links with a few random (often odd) ones among them."""
    seq: list[Any] = [_good(i) for i in good]
    for at, link in enumerate(links):
        seq.insert(at * 2 % (len(seq) + 1), link)
    if objects:
        seq = [ObjectLink(*t) for t in seq]
    _check(seq)


# A local namespace: users see (and give back) ``local://<name>/data/...``, the store
# names the same data ``file:///<dir>/data/...``; ``Namespace.for_link`` takes both.
LOCAL_DIR = "file:///srv/home/data/bench"
SHOWN = "local://bench/data/"
STORED = f"{LOCAL_DIR}/data/"
LOCAL = LinkStager(Namespace(LOCAL_DIR, "local://bench", ()), Config(), (1_700_000_000, 5))


def _full(link: ObjectLink) -> Any:
    """The record the full checks make of a link without metadata (``link_entry``)."""
    entry = link_entry(LOCAL._ns, link, LOCAL._now)
    return (encode_value(entry), entry.address)


def _local_rows(records: list[Any]) -> list[Any]:
    return [(r[0], maker_of(r[1]).encode(r[2], r[3], r[4]), r[2]) for r in records]


def test_local_namespace_links_take_the_fast_paths_in_either_form() -> None:
    """A call of common links under a local namespace, in the form users see or in the
    store's, is checked a column at a time and each link by the per-link fast path, and
    what they make is what the full checks make."""
    for data in (SHOWN, STORED):
        seq = [(f"p{i}", f"{data}a{i}/b.c_{i}", i, f"e{i}") for i in range(5)]
        for i, item in enumerate(seq):
            assert LOCAL._plain(ObjectLink(*item)) == f"data/a{i}/b.c_{i}"
        columns = LOCAL._columns(list(seq))
        assert columns is not None, data
        expected = [(t[0].encode(), *_full(ObjectLink(*t))) for t in seq]
        assert _local_rows(columns.records()) == expected
        assert _local_rows(LOCAL._one_by_one(list(seq))) == expected
        assert columns.charge == sum(map(staged_bytes, columns.records()))
    # both forms in one call: the column check leaves it to the per-link checks
    mixed = [("p0", f"{SHOWN}a", 1, "e"), ("p1", f"{STORED}b", 1, "e")]
    assert LOCAL._columns(list(mixed)) is None
    assert isinstance(LOCAL.stage_all(list(mixed)), list)
    assert _local_rows(LOCAL._one_by_one(list(mixed))) == [
        (t[0].encode(), *_full(ObjectLink(*t))) for t in mixed
    ]


_LOCAL_ADDRESSES = st.builds(
    str.__add__,
    st.sampled_from([
        SHOWN, STORED, "local://bench/", "local://bench/data", "local://benchx/data/",
        f"{LOCAL_DIR}/", f"{LOCAL_DIR}x/data/", "file:///srv/home/data/", "local://", "",
        f"{SHOWN}x/_lsm/", f"{SHOWN}_lsm/", "local://bench/_lsm/data/",
    ]),
    st.text(alphabet="ab._-/\n %\u00e9", max_size=6),
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["p", "q/r"]), _LOCAL_ADDRESSES,
                          st.sampled_from([0, 1, -1, True]), st.sampled_from(["e", '"e"'])),
                min_size=1, max_size=4))  # fmt: skip
def test_local_namespace_column_check_equals_the_full_checks(links: list[Any]) -> None:
    """Random calls under a local namespace, in either form: the column check takes a
    call exactly when every link is common and in the first one's form, and whatever
    stages it (columns, per-link fast path, full checks) makes the same records or
    raises the same error."""
    columns = LOCAL._columns(list(links))
    forms = {next((p for p in ("local://bench/", f"{LOCAL_DIR}/") if t[1].startswith(p)), None)
             for t in links}  # fmt: skip
    common = all(LOCAL._plain(ObjectLink(*t)) is not None for t in links)
    assert (columns is not None) == (common and len(forms) == 1), links
    try:
        expected: Any = [(t[0].encode(), *_full(ObjectLink(*t))) for t in links]
    except LsmError as e:
        expected = type(e)
    try:
        got: Any = _local_rows(LOCAL._one_by_one(list(links)))
    except LsmError as e:
        got = type(e)
    assert got == expected
    if columns is not None:
        assert _local_rows(columns.records()) == expected


async def test_a_local_repositorys_shown_addresses_take_the_fast_paths(tmp_path: Path) -> None:
    """The physical address an upload to a ``local://`` repository shows is what a
    client links back (the server's batch endpoint, ``link_many``): such links are
    common, checked a column at a time, and land as the full checks would stage them."""
    async with lsmstore.connect(home=str(tmp_path)) as store:
        repo = await store.create_repository("shown", storage_namespace="local://shown")
        main = repo.branch()
        st0 = await main.upload("src", b"0123456789abcdef")
        assert st0.physical_address.startswith("local://shown/data/")
        stager = link_stager(main, now_of(main))
        links = [(f"l/{i}", st0.physical_address, st0.size, st0.checksum) for i in range(3)]
        assert stager._plain(ObjectLink(*links[0])) == st0.physical_address[len("local://shown/") :]
        assert isinstance(stager.stage_all(links), PendingCall)
        await main.link_many(links)
        await main.link("one", st0.physical_address, size=st0.size, checksum=st0.checksum)
        for path in ("l/0", "l/2", "one"):
            got = await main.stat_object(path)
            assert (got.physical_address, got.size, got.checksum) == (
                st0.physical_address, st0.size, st0.checksum)  # fmt: skip
            assert await (await main.open(path)).read() == b"0123456789abcdef"
