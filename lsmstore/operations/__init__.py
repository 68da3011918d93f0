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
``versioning``         commit / merge / revert / cherry-pick
``protection``         branch protection rules (ETag'd) and the one check that
                       commits, resets, deletion, stash / pop and every staging
                       append (the branch writer's ``before_append``) call
``tags``               tag create / delete
``exclusion``          the per-branch reader/writer lock these operations take
=====================  =================================================================

Actions (:mod:`lsmstore.actions`): ``branches``, ``tags`` and ``versioning`` run the
pre-event of each operation at its entry -- a failing hook aborts it before anything
is written -- and the post-event after it (docs/actions.md).  Rules every front end
must obey belong in these modules, never in a route or a client.
A front end only translates: it parses its request, calls one operation and renders the
answer or the typed error (:mod:`lsmstore.error_types`).
"""
