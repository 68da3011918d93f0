"""The web UI of ``lsmstore serve`` (docs/ui.md): a single page in plain JavaScript
modules (``static/``, no build step), served on the server's own port at ``/`` and
``/ui/`` (:mod:`.assets`), which calls the REST API with the key the user logs in with
-- it can do exactly what that key can do through the API.  :mod:`.routes` adds the two
read routes it needs (the calling key's role, an object's first rows: :mod:`.preview`).
"""
