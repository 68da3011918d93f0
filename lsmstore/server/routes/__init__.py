"""Route modules, one per resource; each ``routes(ctx)`` returns its :class:`Route` s."""
