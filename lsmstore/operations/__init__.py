"""The operations layer: the one place that changes a repository's state.

Every front end -- the embedded client (:mod:`lsmstore.client`), the server's routes
(:mod:`lsmstore.server`) and through it the remote client -- calls these operations,
so each rule is written once:

=====================  =================================================================
module                 what it owns
=====================  =================================================================
``batch``              :class:`~lsmstore.operations.batch.WriteBatch`: many kv / link /
                       put / delete / copy entries staged as one write
``objects``            upload, link, copy, delete with ``if_absent``; the data-object
                       life cycle and the garbage candidates a write leaves
``repositories``       repository create / delete: the namespace claimed, the first
                       commit and the default branch (crash cases in its docstring)
``branches``           branch create / delete / reset, and the one record of dropped
                       staging files
``workspaces``         stash / pop
``versioning``         commit / merge / revert
``exclusion``          the per-branch reader/writer lock these operations take
=====================  =================================================================

Rules that every front end must obey and that are not built yet -- branch protection,
pre-commit / pre-merge hooks, cherry-pick -- belong in these modules, at the entry of
the operation they guard (``branches``, ``versioning``), never in a route or a client.
A front end only translates: it parses its request, calls one operation and renders the
answer or the typed error (:mod:`lsmstore.error_types`).
"""
