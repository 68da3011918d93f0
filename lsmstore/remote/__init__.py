"""The client API over an lsmstore server (:func:`lsmstore.connect` with an
``http(s)://`` URL): :mod:`.client` (the classes), :mod:`.http` (the transport and
the error mapping), :mod:`.batcher` (write coalescing)."""
