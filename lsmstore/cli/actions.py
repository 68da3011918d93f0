"""``lsmstore actions runs list|describe`` and ``actions validate`` (lakectl's form):
the recorded runs of a repository's actions and their hooks' output, and a check of
an action file before it is committed (docs/actions.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from lsmstore.actions.files import MAX_FILE_BYTES, parse_action
from lsmstore.api import StoreAPI
from lsmstore.cli.output import timestamp
from lsmstore.cli.runtime import URI, out, run
from lsmstore.errors import InvalidInputError
from lsmstore.server import models
from lsmstore.types import ActionRun
from lsmstore.uri import LsmURI


@click.group("actions")
def actions_group() -> None:
    """lakeFS actions (hooks): their runs, and checking action files."""


@actions_group.group("runs")
def runs_group() -> None:
    """Runs of a repository's actions."""


def _repository(uri: LsmURI) -> str:
    uri.require(no_path=True)
    if uri.ref:
        raise click.BadParameter(f"{uri} names a ref: give lsm://REPOSITORY")
    return uri.repository


@runs_group.command("list")
@click.argument("uri", type=URI)
@click.option("--branch", help="only runs of this branch")
@click.option("--commit", help="only runs of this commit ID")
@click.option("--after", help="show runs after this run ID")
@click.option("--amount", type=click.IntRange(1, 1000), default=100, show_default=True)
def runs_list(
    uri: LsmURI, branch: str | None, commit: str | None, after: str | None, amount: int
) -> None:
    """The action runs of repository URI, newest first."""
    name = _repository(uri)

    async def body(store: StoreAPI) -> list[ActionRun]:
        repo = await store.get_repository(name)
        found: list[ActionRun] = await repo.action_runs(
            branch=branch, commit=commit, after=after, amount=amount
        )
        return found

    found = run(body)
    out().table(
        [models.run(r) | {"start": timestamp(r.start_time)} for r in found],
        ["run_id", "event_type", "branch", "start", "commit_id", "status"],
        headers=["run id", "event", "branch", "start time", "commit id", "status"],
        styles={"run_id": "yellow"},
        data=[models.run(r) for r in found],
    )


@runs_group.command("describe")
@click.argument("uri", type=URI)
@click.argument("run_id")
@click.option("--after", help="show hooks after this hook run ID")
@click.option("--amount", type=click.IntRange(1, 1000), default=100, show_default=True)
def runs_describe(uri: LsmURI, run_id: str, after: str | None, amount: int) -> None:
    """Run RUN_ID of repository URI: its hooks and what each sent and received."""
    name = _repository(uri)

    async def body(store: StoreAPI) -> dict[str, Any]:
        repo = await store.get_repository(name)
        r = await repo.action_run(run_id)
        hooks = await repo.run_hooks(run_id, after=after, amount=amount)
        outputs = [await repo.hook_output(run_id, h.hook_run_id) for h in hooks]
        return {
            "run": models.run(r),
            "hooks": [
                models.hook_run(h) | {"output": o.decode("utf-8", "replace")}
                for h, o in zip(hooks, outputs, strict=True)
            ],
        }

    doc = run(body)
    if out().json:
        out().emit_json(doc)
        return
    r = doc["run"]
    lines = [
        f"Run ID: {r['run_id']}", f"Event: {r['event_type']}", f"Branch: {r['branch']}",
        f"Start time: {r['start_time']}", f"End time: {r.get('end_time', '')}",
        f"Commit ID: {r['commit_id']}", f"Status: {r['status']}", "",
    ]  # fmt: skip
    for h in doc["hooks"]:
        lines += [
            f"Hook run ID: {h['hook_run_id']}  action: {h['action']}  hook: {h['hook_id']}  "
            f"status: {h['status']}",
            h["output"],
        ]
    out().write_bytes("\n".join(lines).encode() + b"\n")


@actions_group.command("validate")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
def validate_action(path: Path) -> None:
    """Check the action file PATH (as the server would read it from a repository)."""
    try:
        with path.open("rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise InvalidInputError(f"{path}: cannot be read: {e.strerror or e}") from None
    action = parse_action(data, str(path))  # InvalidActionError names the problem
    out().done(
        f"{path}: valid action {action.name!r} ({len(action.hooks)} hooks)",
        data={"path": str(path), "name": action.name, "valid": True,
              "events": sorted(action.on), "hooks": [h.id for h in action.hooks]},
    )  # fmt: skip


def register(cli: click.Group) -> None:
    cli.add_command(actions_group)
