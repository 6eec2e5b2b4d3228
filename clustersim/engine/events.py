"""The events the engines and the cluster make and wait on, on a :class:`Clock` or SimPy.

Cheaper than SimPy's own Python events when built in compiled code: an :class:`Alarm` (a
timeout with no value), a :class:`Signal` (an event that can only succeed) and an
:class:`Outcome` (one that can also fail). SimPy's processes wait on them as on its own
events, and a plain ``simpy.Environment`` runs them too (a stepped run in a test).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from simpy.events import PENDING as _PENDING

from clustersim.engine.clock import Clock, Env, Waitable
from clustersim.engine.event_queue import NORMAL, URGENT, Alarm, Event

PENDING: Final = _PENDING
"""SimPy's value of an event not yet triggered."""

__all__ = ["NORMAL", "PENDING", "URGENT", "Alarm", "Env", "Outcome", "Signal", "Waitable",
           "alarm", "call_soon", "fire", "now_of", "on_event"]


def _schedule(env: Env, event: Waitable, priority: int, delay: float) -> None:
    """``env.schedule(event, priority, delay)``, a :class:`Clock`'s called natively."""
    if isinstance(env, Clock):
        env.schedule(event, priority, delay)
    else:
        env.schedule(event, priority, delay)


class Signal(Event):
    """A ``simpy.Event`` that can only succeed: waited on, then triggered by ``succeed()``
    (scheduled now, as SimPy's) or processed at once by :func:`fire`."""

    def __init__(self, env: Env) -> None:
        super().__init__([])
        self.env = env
        self._value = PENDING

    @property
    def triggered(self) -> bool:
        return self._value is not PENDING

    def succeed(self, value: Any = None) -> Signal:
        if self._value is not PENDING:
            raise RuntimeError(f"{self} has already been triggered")
        self._value = value
        _schedule(self.env, self, NORMAL, 0.0)
        return self


class Outcome(Signal):
    """A :class:`Signal` that can also fail with an exception (a KV transfer's), read as a
    process reads what it yielded (``ok``, ``value``) and as SimPy reads a failed event
    (``_defused`` exists once a waiter has handled the failure)."""

    _defused: bool

    @property
    def ok(self) -> bool:
        return self._ok

    @property
    def value(self) -> Any:
        if self._value is PENDING:
            raise AttributeError(f"Value of {self} is not yet available")
        return self._value

    def fail(self, exception: BaseException) -> Outcome:
        if self._value is not PENDING:
            raise RuntimeError(f"{self} has already been triggered")
        if not isinstance(exception, BaseException):
            raise TypeError(f"{exception} is not an exception.")
        self._ok = False
        self._value = exception
        _schedule(self.env, self, NORMAL, 0.0)
        return self


def fire(signal: Signal) -> None:
    """Trigger ``signal`` and process it at once, from the last callback of the event being
    processed: a process waiting on it resumes straight from that event, as if it had waited
    on that one. (Scheduling it urgently at now would make it the very next event anyway, when
    no urgent event is pending at now: true while a normal event at now is processed, since
    those come first.)"""
    signal._ok = True
    signal._value = None
    callbacks = signal.callbacks
    signal.callbacks = None
    assert callbacks is not None, "a signal fires once"
    for callback in callbacks:
        callback(signal)


def alarm(env: Env, delay: float,
          callback: Callable[[Any], None] | None = None, priority: int = NORMAL) -> Alarm:
    """``env.timeout(delay)`` (the same place in the event order), calling ``callback`` with
    it when it is processed. ``priority=URGENT`` with no delay: where a process started now
    would first run (SimPy's ``Initialize``). On a :class:`Clock`, an alarm with a callback
    holds it as its ``call`` (cancelled by ``call = None``), and nothing else may wait on it;
    one without, a process can wait on."""
    event: Alarm
    if callback is None:
        event = Alarm([])
    elif isinstance(env, Clock):
        event = Alarm(None, callback)
    else:
        event = Alarm([callback])  # (SimPy's own loop reads only the callbacks)
    _schedule(env, event, priority, delay)
    return event


def now_of(env: Env) -> float:
    """``env.now``, read straight from a :class:`Clock`."""
    if isinstance(env, Clock):
        return env._now
    return float(env.now)


def call_soon(env: Env, callback: Callable[[Any], None]) -> None:
    """Call ``callback`` (with the event that calls it) exactly where a process started now
    would first run: from an urgent event at now, as SimPy's ``Initialize`` (the same place in
    the event order), without a process, a generator or the event a finished process leaves
    behind."""
    alarm(env, 0.0, callback, URGENT)


def on_event(event: Waitable, callback: Callable[[Any], None]) -> None:
    """Call ``callback(event)`` when ``event`` is processed, where a process that yields it
    now would resume (at once if it was processed already). A failed event counts as
    handled: the callback reads ``event.ok`` and ``event.value``, as a process catches it."""
    if event.callbacks is None:
        callback(event)
        return

    def resume(event: Any) -> None:
        if not event._ok:
            event._defused = True
        callback(event)

    event.callbacks.append(resume)
