"""The ``lsmstore`` command line: lakectl's everyday commands over lsm:// URIs.

One module per command group (``repo``, ``branch``, ``commits``, ``tag``, ``fs``,
``importer``, ``workspace``, ``service``, ``completion``); :mod:`lsmstore.cli.app`
holds the root command, the global options and the exit codes.  docs/cli.md is the
user's guide.
"""

from lsmstore.cli.app import cli, main

__all__ = ["cli", "main"]
