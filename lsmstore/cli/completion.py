"""``lsmstore completion bash|zsh|fish``: print the shell's completion script.

::

    eval "$(lsmstore completion bash)"     # in ~/.bashrc
    lsmstore completion fish > ~/.config/fish/completions/lsmstore.fish
"""

from __future__ import annotations

import click
from click.shell_completion import get_completion_class

SHELLS = ("bash", "zsh", "fish")


@click.command("completion")
@click.argument("shell", type=click.Choice(SHELLS))
@click.pass_context
def completion(ctx: click.Context, shell: str) -> None:
    """Print the completion script of SHELL (commands, options, choices)."""
    cls = get_completion_class(shell)
    if cls is None:  # pragma: no cover - click ships all three
        raise click.UsageError(f"no completion for {shell}")
    root = ctx.find_root().command
    script = cls(root, {}, "lsmstore", "_LSMSTORE_COMPLETE").source()
    click.echo(script)


def register(cli: click.Group) -> None:
    cli.add_command(completion)
