"""Model-based test: random puts, deletes, commits, branches and merges through the
client (embedded default) against an in-memory model of the lakeFS semantics.

The model keeps, per commit, its tree and parents, and per branch its base commit and
staged overlay.  Every step is checked against it: commits (parents, "nothing to
commit"), merges (the merge base the service chose must be one of the nearest common
ancestors; the merged tree, conflicts, no-op merges), and reads of branches, of old
commits and of uncommitted diffs.
"""

from __future__ import annotations

import tempfile
from typing import Any

import uvloop
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

import lsmstore
from lsmstore.errors import (
    InvalidInputError,
    MergeConflictError,
    NothingToCommitError,
    RefExistsError,
)

KEYS = ["a", "b", "c"]
VALUES = ["1", "2", "3"]
BRANCHES = ["main", "dev", "feat"]
STRATEGIES = [None, "source-wins", "dest-wins"]
Tree = dict[str, str]


def apply(tree: Tree, staged: dict[str, str | None]) -> Tree:
    out = dict(tree)
    for k, v in staged.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = v
    return out


class VersioningModel(RuleBasedStateMachine):
    commits_made = Bundle("commits")

    def __init__(self) -> None:
        super().__init__()
        self.loop = uvloop.new_event_loop()
        self.dir = tempfile.TemporaryDirectory(prefix="lsm-model-")
        self.store = lsmstore.connect(
            f"local://{self.dir.name}/refs?synchronous=NORMAL",
            home=self.dir.name,
            batch_interval_ms=1,
            commit_range_min_bytes=20,
            commit_range_max_bytes=200,
            commit_range_raggedness=3,
        )
        self.repo: lsmstore.Repository | None = None
        self.trees: dict[str, Tree] = {}
        self.parents: dict[str, tuple[str, ...]] = {}
        self.base: dict[str, str] = {}
        self.staged: dict[str, dict[str, str | None]] = {}

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def teardown(self) -> None:
        self.run(self.store.aclose())
        self.loop.close()
        self.dir.cleanup()

    @initialize(target=commits_made)
    def create(self) -> str:
        self.repo = self.run(
            self.store.create_repository("model", storage_namespace=f"file://{self.dir.name}/ns")
        )
        head = self.run(self.repo.branch("main").head())
        self.trees[head.base] = {}
        self.parents[head.base] = ()
        for name in BRANCHES:
            if name != "main":
                self.run(self.repo.create_branch(name, source="main"))
            self.base[name] = head.base
            self.staged[name] = {}
        return head.base

    # --- helpers -------------------------------------------------------------------

    @property
    def r(self) -> lsmstore.Repository:
        assert self.repo is not None
        return self.repo

    def ancestors(self, cid: str) -> set[str]:
        seen = {cid}
        todo = [cid]
        while todo:
            for p in self.parents[todo.pop()]:
                if p not in seen:
                    seen.add(p)
                    todo.append(p)
        return seen

    def nearest_common(self, a: str, b: str) -> set[str]:
        common = self.ancestors(a) & self.ancestors(b)
        return {c for c in common if not any(c in self.ancestors(o) - {o} for o in common)}

    def merged(
        self, base: Tree, dest: Tree, src: Tree, strategy: str | None
    ) -> tuple[Tree, list[str]]:
        out: Tree = {}
        conflicts = []
        for k in sorted(set(base) | set(dest) | set(src)):
            b, d, s = base.get(k), dest.get(k), src.get(k)
            if d == s or s == b:
                v = d
            elif d == b:
                v = s
            elif strategy == "source-wins":
                v = s
            elif strategy == "dest-wins":
                v = d
            else:
                conflicts.append(k)
                continue
            if v is not None:
                out[k] = v
        return out, conflicts

    # --- rules ---------------------------------------------------------------------

    @rule(
        branch=st.sampled_from(BRANCHES), key=st.sampled_from(KEYS), value=st.sampled_from(VALUES)
    )
    def put(self, branch: str, key: str, value: str) -> None:
        self.run(self.r.branch(branch).put(key, value.encode()))
        self.staged[branch][key] = value

    @rule(branch=st.sampled_from(BRANCHES), key=st.sampled_from(KEYS))
    def delete(self, branch: str, key: str) -> None:
        self.run(self.r.branch(branch).delete(key))
        self.staged[branch][key] = None

    @rule(target=commits_made, branch=st.sampled_from(BRANCHES))
    def commit(self, branch: str) -> str:
        base = self.base[branch]
        tree = apply(self.trees[base], self.staged[branch])
        if tree == self.trees[base]:
            try:
                self.run(self.r.branch(branch).commit("noop"))
            except NothingToCommitError:
                pass
            else:
                raise AssertionError("a commit without changes was made")
            self.staged[branch] = {}
            return base
        c = self.run(self.r.branch(branch).commit(f"commit on {branch}"))
        event("commit")
        assert c.parents == (base,)
        self.trees[c.id] = tree
        self.parents[c.id] = (base,)
        self.base[branch] = c.id
        self.staged[branch] = {}
        return c.id

    @rule(
        one=st.sampled_from(BRANCHES),
        other=st.sampled_from(BRANCHES),
        key=st.sampled_from(KEYS),
        delete_one=st.booleans(),
    )
    def diverge(self, one: str, other: str, key: str, delete_one: bool) -> None:
        """Change ``key`` differently on two branches and commit both (the raw material
        of conflicts)."""
        if one == other:
            return
        if delete_one:
            self.delete(one, key)
        else:
            self.put(one, key, "x")
        self.put(other, key, "y")
        self.commit(one)
        self.commit(other)

    @rule(name=st.sampled_from(BRANCHES), source=st.sampled_from(BRANCHES))
    def recreate_branch(self, name: str, source: str) -> None:
        """Delete ``name`` (not the default branch: refused) and create it again from
        ``source`` (creating over an existing name is refused)."""
        try:
            self.run(self.r.create_branch(name, source=source))
        except RefExistsError:
            pass
        else:
            raise AssertionError("created a branch over an existing one")
        if name == "main":
            try:
                self.run(self.r.delete_branch(name))
            except InvalidInputError:
                return
            raise AssertionError("deleted the default branch")
        self.run(self.r.delete_branch(name))
        self.run(self.r.create_branch(name, source=self.base[source]))  # by commit ID
        self.base[name] = self.base[source]
        self.staged[name] = {}
        event("branch recreated")

    @rule(source=st.sampled_from(BRANCHES), into=st.sampled_from(BRANCHES),
          strategy=st.sampled_from(STRATEGIES))  # fmt: skip
    def merge(self, source: str, into: str, strategy: str | None) -> None:
        s, d = self.base[source], self.base[into]
        if s in self.ancestors(d):
            result = self.run(self.r.merge(source, into=into, strategy=strategy))
            assert not result.merged and result.commit_id == d
            event("merge: already merged")
            return
        candidates = self.nearest_common(d, s)
        outcomes = {}
        for c in candidates or {None}:
            base_tree = self.trees[c] if c is not None else {}
            outcomes[c] = self.merged(base_tree, self.trees[d], self.trees[s], strategy)
        try:
            result = self.run(self.r.merge(source, into=into, strategy=strategy))
        except MergeConflictError as e:
            assert any(conf for _, conf in outcomes.values()), "unexpected conflict"
            if len(outcomes) == 1:
                [(_, conf)] = outcomes.values()
                assert e.keys == [k.encode() for k in conf]
            event("merge: conflict")
            return
        assert result.merged and result.commit is not None
        assert result.merge_base in outcomes, (result.merge_base, candidates)
        tree, conflicts = outcomes[result.merge_base]
        assert not conflicts
        assert result.commit.parents == (d, s)
        self.trees[result.commit_id] = tree
        self.parents[result.commit_id] = (d, s)
        self.base[into] = result.commit_id
        event(f"merge: merged (strategy {strategy}, {len(candidates)} nearest bases)")
        if result.conflicts_resolved:
            event(f"merge: conflicts resolved by {strategy}")

    @rule(commit=commits_made)
    def read_old_commit(self, commit: str) -> None:
        ref = self.r.ref(commit)
        got = self.run(_read_all(ref))
        assert got == self.trees[commit]

    @precondition(lambda self: self.repo is not None)
    @invariant()
    def branches_read_as_modelled(self) -> None:
        for branch in self.base:
            expected = apply(self.trees[self.base[branch]], self.staged[branch])
            assert self.run(_read_all(self.r.branch(branch))) == expected, branch

    @rule(branch=st.sampled_from(BRANCHES))
    def diff_uncommitted(self, branch: str) -> None:
        tree = self.trees[self.base[branch]]
        after = apply(tree, self.staged[branch])
        expected = {}
        for k in set(tree) | set(after):
            if k not in tree:
                expected[k] = "added"
            elif k not in after:
                expected[k] = "removed"
            elif tree[k] != after[k]:
                expected[k] = "changed"
        got = self.run(self.r.branch(branch).diff_uncommitted())
        assert {c.key.decode(): c.kind for c in got} == expected


async def _read_all(ref: Any) -> Tree:
    return {e.path: (await ref.get(e.path)).decode() async for e in ref.list()}


VersioningModel.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_versioning_model = VersioningModel.TestCase
