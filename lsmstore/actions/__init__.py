"""lakeFS actions (hooks): action files committed in a repository under
``_lakefs_actions/`` run webhooks on the repository's events (docs/actions.md).

=============  ==================================================================
module         what it owns
=============  ==================================================================
``files``      parsing and validating action files; loading them from a ref
``allow``      the hosts webhooks may call (``actions_webhook_allow``)
``webhook``    the webhook hook: lakeFS's request body, timeout, recorded output
``runs``       run records and hook outputs in the storage namespace; retention
``runner``     running an event's actions: ``pre`` aborts, ``post`` records
=============  ==================================================================

The operations layer (:mod:`lsmstore.operations`) calls the runner at the entry and
exit of each operation that has events, so every front end gets them.
"""
