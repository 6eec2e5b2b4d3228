"""The clock processes events in SimPy's order: ``(time, priority, order scheduled)``, whether
an event waits in the heap or, scheduled with no delay, in the queues beside it."""

from __future__ import annotations

import simpy
from hypothesis import given, settings
from hypothesis import strategies as st
from simpy.core import NORMAL, URGENT

from clustersim.engine.clock import Clock
from clustersim.engine.events import Signal, alarm

# (delay, priority, follow-ups it schedules when processed, as a plain SimPy event or an alarm)
specs = st.lists(
    st.tuples(st.sampled_from([0.0, 0.0, 0.0, 0.25, 1.0]), st.sampled_from([URGENT, NORMAL]),
              st.integers(0, 3), st.booleans()),
    min_size=1, max_size=40,
)


def _order(env, plan: list[tuple[float, int, int, bool]]) -> list[tuple[int, float]]:
    """Which event was processed when: event ``i`` is ``plan[i]``; the first three are
    scheduled at the start, each later one by the event processed before it that has
    follow-ups left."""
    order: list[tuple[int, float]] = []
    pending = iter(range(len(plan)))

    def schedule_next(count: int) -> None:
        for _ in range(count):
            index = next(pending, None)
            if index is None:
                return
            delay, priority, _, as_alarm = plan[index]
            if as_alarm:
                alarm(env, delay, lambda _e, i=index: fired(i), priority)
            else:
                event = simpy.Event(env) if isinstance(env, simpy.Environment) else Signal(env)
                event._ok, event._value = True, None
                event.callbacks.append(lambda _e, i=index: fired(i))
                env.schedule(event, priority, delay)

    def fired(index: int) -> None:
        order.append((index, env.now))
        schedule_next(plan[index][2])

    schedule_next(3)
    env.run()
    return order


@settings(max_examples=300, deadline=None)
@given(specs)
def test_events_with_and_without_delay_are_processed_in_simpys_order(plan):
    expected = _order(simpy.Environment(), plan)
    assert _order(Clock(), plan) == expected


def test_an_urgent_event_at_now_comes_before_the_normal_ones_already_queued():
    env = Clock()
    seen: list[str] = []
    alarm(env, 0.0, lambda _e: seen.append("normal"))
    alarm(env, 0.0, lambda _e: seen.append("urgent"), URGENT)
    alarm(env, 1.0, lambda _e: seen.append("later"))
    assert env.peek() == 0.0
    env.run()
    assert seen == ["urgent", "normal", "later"] and env.peek() == float("inf")


def test_an_alarm_with_a_callback_calls_it_once_and_taking_it_back_cancels_it():
    env = Clock()
    seen: list[tuple[str, float]] = []
    alarm(env, 1.0, lambda _e: seen.append(("kept", env.now)))
    cancelled = alarm(env, 0.5, lambda _e: seen.append(("cancelled", env.now)))
    cancelled.call = None  # (how an engine that fails mid-step drops the step's end)

    def waiter():
        yield alarm(env, 2.0)  # no callback: a process waits on it as on a timeout
        seen.append(("waited", env.now))

    env.process(waiter())
    env.run()
    assert seen == [("kept", 1.0), ("waited", 2.0)]
    assert env.now == 2.0
