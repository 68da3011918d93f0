"""A blocking facade of the async client for scripts, notebooks and Spark executors.

::

    import lsmstore.sync

    with lsmstore.sync.connect() as store:            # same arguments as lsmstore.connect
        repo = store.get_repository("demo")
        main = repo.branch("main")
        main.put("a/b", b"value")                      # blocks until acknowledged
        print(main.get("a/b"))
        for entry in main.list(prefix="a/"):           # a plain iterator
            print(entry.path)
        main.commit("from a script")

Every object of the async API (``Store``, ``Repository``, ``Branch``, ``Ref``, object
readers ...) is wrapped in a :class:`SyncProxy` with the same methods and attributes:
a coroutine method blocks until done and returns its (wrapped) result, an async
iterator becomes a plain iterator, an async context manager a ``with`` block.

How: :func:`connect` starts a private event loop in a daemon thread (one per store)
and creates the store on it; each call is handed to that loop
(``run_coroutine_threadsafe``) and the calling thread waits.  Any number of threads may
call at once: their calls run concurrently on the loop, so ``put`` calls from many
threads are batched together like those of many tasks.  Errors are the async API's
typed exceptions, raised in the calling thread.  ``close()`` (or leaving ``with``)
closes the store and stops the loop; a store that is only garbage-collected stops its
loop too (every acknowledged write is durable by then: a write returns only once it is).

Do not call it from a coroutine running on another event loop in the same thread's
stack of calls into this facade (a call from the loop's own thread would deadlock:
that is detected and raises ``RuntimeError``).
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from types import TracebackType
from typing import Any, Self, TypeVar

import uvloop

import lsmstore

T = TypeVar("T")
_END = object()


class Portal:
    """A private event loop in a daemon thread, and a way to run coroutines on it."""

    def __init__(self, name: str = "lsmstore-sync") -> None:
        self.loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
        self._ready = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()
        self._ready.wait()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._ready.set)
        self.loop.run_forever()

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        if threading.current_thread() is self.thread:
            coro.close()
            raise RuntimeError("lsmstore.sync called from its own event loop (use the async API)")
        if self.loop.is_closed():
            coro.close()
            raise lsmstore.ClosedError("the store's event loop is stopped")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        if self.thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            if threading.current_thread() is not self.thread:
                self.thread.join(timeout=10)
        if not self.loop.is_running():
            self.loop.close()


async def _invoke(fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
    result = fn(*args, **kwargs)
    if inspect.isawaitable(result):
        result = await result
    return result


async def _next(it: AsyncIterator[Any]) -> Any:
    try:
        return await it.__anext__()
    except StopAsyncIteration:
        return _END


_API_TYPES: dict[type, bool] = {}


def _is_api_object(value: Any) -> bool:
    """Objects worth wrapping: lsmstore objects with coroutine methods or async
    iteration (an Entry or a Commit is returned as it is)."""
    cls = type(value)
    known = _API_TYPES.get(cls)
    if known is None:
        known = cls.__module__.startswith(("lsmstore", "compactor", "committer")) and (
            hasattr(cls, "__aiter__")
            or hasattr(cls, "__aenter__")
            or any(
                inspect.iscoroutinefunction(getattr(cls, n, None))
                or inspect.isasyncgenfunction(getattr(cls, n, None))
                for n in dir(cls)
                if not n.startswith("__")
            )
        )
        _API_TYPES[cls] = known
    return known


class SyncProxy:
    """The blocking twin of one async API object (see the module docstring)."""

    __slots__ = ("__weakref__", "_portal", "_target")

    def __init__(self, portal: Portal, target: Any) -> None:
        object.__setattr__(self, "_portal", portal)
        object.__setattr__(self, "_target", target)

    @property
    def async_object(self) -> Any:
        """The wrapped async object (for use on the facade's own loop only)."""
        return self._target

    def __repr__(self) -> str:
        return f"sync({self._target!r})"

    def _wrap(self, value: Any) -> Any:
        if hasattr(value, "__anext__") and not _is_api_object(value):
            return self._iterate(value)
        if isinstance(value, list) and value and _is_api_object(value[0]):
            return [SyncProxy(self._portal, v) for v in value]
        if _is_api_object(value):
            return SyncProxy(self._portal, value)
        return value

    def _iterate(self, it: AsyncIterator[Any]) -> Iterator[Any]:
        while True:
            item = self._portal.call(_next(it))
            if item is _END:
                return
            yield self._wrap(item)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if not callable(attr) or isinstance(attr, type):
            return self._wrap(attr)

        def call(*args: Any, **kwargs: Any) -> Any:
            args = tuple(a._target if isinstance(a, SyncProxy) else a for a in args)
            return self._wrap(self._portal.call(_invoke(attr, args, kwargs)))

        call.__name__ = name
        call.__doc__ = getattr(attr, "__doc__", None)
        return call

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._target, name, value)

    def __iter__(self) -> Iterator[Any]:
        aiter_ = getattr(self._target, "__aiter__", None)
        if aiter_ is None:
            raise TypeError(f"{self._target!r} is not iterable")
        return self._iterate(self._portal.call(_invoke(aiter_, (), {})))

    def __enter__(self) -> Any:
        enter = getattr(self._target, "__aenter__", None)
        if enter is None:
            raise TypeError(f"{self._target!r} is not a context manager")
        return self._wrap(self._portal.call(_invoke(enter, (), {})))

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._portal.call(_invoke(self._target.__aexit__, (exc_type, exc, tb), {}))


class SyncStore(SyncProxy):
    """The blocking twin of :class:`lsmstore.Store`, owning its private event loop."""

    __slots__ = ("_finalizer",)

    def __init__(self, portal: Portal, store: Any) -> None:
        super().__init__(portal, store)
        object.__setattr__(self, "_finalizer", weakref.finalize(self, portal.stop))

    def close(self) -> None:
        """Flush and close the store (``Store.aclose``), then stop the private loop."""
        if self._portal.loop.is_closed():
            return
        try:
            self._portal.call(self._target.aclose())
        finally:
            self._finalizer()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def connect(*args: Any, **kwargs: Any) -> SyncStore:
    """Open a store like :func:`lsmstore.connect` (same arguments), behind a private
    event loop; returns its blocking twin."""
    return open_store(lambda: lsmstore.connect(*args, **kwargs))


def open_store(factory: Callable[[], Any]) -> SyncStore:
    """The blocking twin of the store ``factory()`` builds; the factory runs on the
    private loop (for stores built other than by :func:`lsmstore.connect`)."""
    portal = Portal()

    async def make() -> Any:
        return factory()

    try:
        store = portal.call(make())
    except BaseException:
        portal.stop()
        raise
    return SyncStore(portal, store)
