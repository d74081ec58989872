"""Asynchronous collectives: one worker thread per communicator runs them in issue order."""
from __future__ import annotations

import concurrent.futures as cf
from typing import Any, Callable, Optional


class Work:
    """Handle of an asynchronous collective (``async_op=True``).

    Parameters
    ----------
    future : concurrent.futures.Future
        The collective's future on its communicator's worker thread (the communicator makes
        Work objects; user code does not).
    on_done : callable, optional
        Device calls: orders the caller's stream after the result, once.
    """

    def __init__(self, future: cf.Future, on_done: Optional[Callable[[], Any]] = None):
        self._future = future
        self._on_done = on_done  # device calls: order the caller's stream after the result

    def wait(self, timeout: Optional[float] = None) -> Any:
        """Blocks until the collective is done and returns its result. On a device communicator
        the caller's stream waits for the result from here on.

        Parameters
        ----------
        timeout : float, optional
            Seconds to wait (default: until done).

        Returns
        -------
        array
            The collective's result.

        Raises
        ------
        concurrent.futures.TimeoutError
            ``timeout`` passed first.
        CCompressError
            The collective's own error, re-raised.
        """
        try:
            return self._future.result(timeout)
        finally:
            if self._on_done is not None and self._future.done():
                on_done, self._on_done = self._on_done, None
                on_done()

    def is_completed(self) -> bool:
        """Whether the collective has finished.

        Returns
        -------
        bool
            True once it has (``wait()`` then returns at once).
        """
        return self._future.done()

    def add_done_callback(self, fn: Callable[["Work"], Any]) -> None:
        """Calls ``fn(self)`` once the collective has finished (at once if it has), on the
        thread that finished it; ``fn`` reads the outcome with ``wait()``.

        Parameters
        ----------
        fn : callable
            Called with this Work.
        """
        self._future.add_done_callback(lambda _: fn(self))

    result = wait


class IssueQueue:
    """Runs collective bodies in the order they were issued: at once, or (async_op) on one
    worker thread; a synchronous call first waits for the asynchronous ones before it."""

    def __init__(self, name: str):
        self._name = name
        self._pool: Optional[cf.ThreadPoolExecutor] = None
        self._last: Optional[cf.Future] = None

    def launch(self, run: Callable[[], Any], async_op: bool,
               on_done: Optional[Callable[[], Any]] = None) -> Any:
        """``on_done``: what Work.wait() does once the body has finished (async only)."""
        if async_op:
            if self._pool is None:
                self._pool = cf.ThreadPoolExecutor(1, thread_name_prefix=self._name)
            self._last = self._pool.submit(run)
            return Work(self._last, on_done)
        if self._last is not None:  # keep issue order with earlier async calls
            cf.wait([self._last])
            self._last = None
        return run()

    def close(self) -> None:
        """Waits for pending bodies and releases the worker thread."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
