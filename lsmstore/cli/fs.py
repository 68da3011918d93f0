"""Placeholder."""

from __future__ import annotations

import click


def register(cli: click.Group) -> None:
    pass
