"""What torch gets for a compressed call of the ``ccompress`` backend: a Work whose
``wait()`` re-raises the call's error and whose future completes with the outputs or fails
for C++ and Python readers alike (:class:`Outcome`)."""
from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist


class Outcome:
    """A collective's result for torch: :attr:`future` completes with the value given to
    :meth:`set_result`, or fails with the error given to :meth:`set_exception`, as C++
    readers see it too; :meth:`wait` re-raises the error itself (its own type).

    ``torch.futures.Future.set_exception`` stores the exception as the future's *value* and
    raises it only where Python reads it. DDP's reducer reads the future of a process
    group's Work in C++ and took that exception object for the reduced gradient (a
    segmentation fault in ``parseCppCommHookResult``). A future made by ``then`` from a
    callback that raises is failed for C++ and Python alike, so the error reaches
    ``loss.backward()`` as a RuntimeError carrying its message. (A DDP comm hook's future
    goes through DDP's Python hook wrapper, which re-raises a stored exception: the DDP
    hook keeps ``set_exception`` and its typed errors.)"""

    def __init__(self) -> None:
        self._source = torch.futures.Future()
        self._future: Any = None  # made at the first get_future(): most calls are only waited

    @property
    def future(self) -> torch.futures.Future:
        """Completes with the value, or fails with the error (made at the first read)."""
        if self._future is None:
            self._future = self._source.then(Outcome._unwrap)
        return self._future

    def set_result(self, value: Any) -> None:
        self._source.set_result((value, None))

    def set_exception(self, error: BaseException) -> None:
        self._source.set_result((None, error))

    def wait(self) -> Any:
        value, error = self._source.wait()
        if error is not None:
            raise error
        return value

    def settle(self) -> None:
        """Waits until the outcome is set, without raising its error."""
        if not self._source.done():
            self._source.wait()

    @staticmethod
    def _unwrap(fut: torch.futures.Future) -> Any:
        value, error = fut.value()
        if error is not None:
            raise error
        return value


class Work(dist._Work):
    """A compressed collective in flight: ``wait()`` re-raises its error, ``get_future()``
    is completed with the output tensors, or failed with the error (:class:`Outcome`)."""

    def __init__(self, outcome: Outcome) -> None:
        super().__init__()
        self._outcome = outcome

    def wait(self, timeout: Any = None) -> bool:
        self._outcome.wait()
        return True

    def get_future(self) -> torch.futures.Future:
        return self._outcome.future
