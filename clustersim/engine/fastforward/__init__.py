"""The coalesced decode fast-forward: a run of pure-decode steps taken in one wait.

An engine whose next steps repeat one batch (every running request decoding one token) can
skip the per-step events: it plans the run, prices its steps, waits once for its last one and
applies all of them in bulk. A run must give exactly what ``Scheduler.schedule()`` followed by
``update_from_output()`` gives step by step: the same per-request timestamps, engine trace and
summary (``tests/test_coalesce.py``). Everything that restates those two calls for a run is in
this package; a change to a scheduler rule is re-proved against the conditions below, and
nowhere else.

When a run is exact
===================

A run is taken only when all of these hold; anywhere else the engine steps
(vllm_scheduler_spec.md section numbers).

Per engine, for all its life (:func:`~.decode_set.bulk_decodes_allowed`,
:func:`~.engine.may_coalesce`, :func:`~.lockstep.may_coalesce_lockstep`):

* the FCFS policy: the priority policy's victims can be any running request (and a request
  that preempts itself lets the next one try), so no batch is provably unchanged;
* no speculative decoding: a step gains ``1 + accepted`` tokens per request, drawn at random;
* no pipeline parallelism: up to P batches in flight, each scheduled before the output of the
  ones ahead of it is applied;
* the engine runs its own step loop on a :class:`~clustersim.engine.clock.Clock` (the run's
  stand-in event and the watch on its skipped step ends keep SimPy's order of exact ties),
  with a pricer that has ``decode_run`` (a run's step durations, the same bits as pricing
  each step's plan: ``CostModel.decode_run_s``);
* a lockstep data-parallel group (MoE) runs as one: every busy rank's step starts a run,
  every idle rank has nothing unfinished (it runs dummy batches), the run lasts as long as
  the shortest rank's, and the group's pricer has ``decode_run`` over every rank's batch
  (its ranks schedule synchronously).

Per run, decided on step 0's plan just scheduled (:func:`~.run.plan_decode_run`), the run
lasts for steps ``m = 1, 2, ...`` while:

* step 0 preempted nobody, scheduled every running request once, and every one of them
  samples (decodes, and prompts whose last chunk runs now): from step 1 on the whole running
  batch decodes one token each, as members of the scheduler's :class:`~.decode_set.DecodeSet`;
* step 0 starts no KV pull (not needed for exactness: such a pull usually lands within the
  step, so one step is cheaper than a run cut at once);
* nobody finishes before the run's last step: ``max_tokens`` and ``max_model_len`` are known
  (2, "Output semantics"); the run may end on the step where the first one finishes, and
  nobody finishes in step 0;
* every decode that crosses into a new block gets one (4.2): a request takes a block every
  ``block_size`` steps, at a fixed phase, and the run stops before the step whose blocks the
  free pool could not cover, so no allocation fails and nobody is preempted (3.3);
* no waiting request can be admitted (3.4). What stopped admission in step 0 stops it at every
  later step: seats do not change, the KV a waiting request needs only grows as decodes take
  free blocks, and the token budget left after the decodes is the same as step 0's when step
  0 scheduled one token per request (otherwise a run is only taken if admission stopped for a
  reason the budget does not enter: no room for another seat, a remote-KV reservation, or
  nothing left to admit). The one exception is a request with prefix hits when the
  full-prompt reservation is off (its chunk can need fewer blocks after a hit block is
  evicted): no run then;
* no block is newly cached: a request that still has prompt hashes to register (hashes past
  its prompt's full blocks) stops coalescing;
* with a CPU tier (``engine.offload``): step 0 issues no copy to or from it, nothing waits
  (the tier may let a waiting request in by a load, whatever stopped admission), and no
  request in the batch has a keyed block not yet stored.

With async scheduling (2: step N+1 is scheduled before step N's output is applied) the
step that starts and the plan scheduled while it runs are the run's steps 0 and 1, and the
conditions above are read on step 1's plan (:meth:`.engine.FastForward.start_async_run`):
what step 1 schedules, every later step does. Besides:

* step 1 starts no KV pull (the loop starts a step's pulls as the step starts, within the
  run), and step 0 none either (not needed for exactness, as for sync scheduling); with a
  CPU tier, neither step copies to or from it (step 0's copies are issued as it ends);
* the batch fits the decode cap of the step policy, so that the steps scheduled for real
  within the run (below) schedule the decode set in bulk;
* "nobody finishes" counts the tokens in flight: a request's tokens after its placeholders,
  one a step from step 2 on. A request whose last token is in flight is not scheduled again
  (3.2's skip): the decode set retires it at the schedule (it keeps its seat) and it
  finishes with that step's output, a step after it left the batch.

The run is applied in the async loop's order: the output of step ``m`` after the schedule of
step ``m + 1``. The plans of its last step and of the one after it are made by
``Scheduler.schedule()`` itself, as the loop made them at the start of the two steps before;
at the run's end (or when it is cut) the loop goes on from them as from any step's end
(:func:`~.run.advance_async_run`). The decode set itself follows the async rules
(:mod:`.decode_set`): a request joins with the output of the step before the one it sampled
in, and a set dissolved while its step is in flight leaves that step's token to be applied
to its members as to requests scheduled alone.

And while a run is in progress, nothing from outside changes the engine: a request submitted,
a KV pull or a load from the CPU tier done, a producer's blocks released, an abort, a removal,
a failed pull recomputed or the engine's failure ends the run at the step in progress
(:meth:`.engine.FastForward.settle`; for a lockstep group, every rank's): the steps that ended
are applied, the one in progress runs to its end as planned, and the change is seen by the
next ``schedule()``, as in the step-by-step loop (with async scheduling the schedule of the
step after the one in progress is made first: the loop made it when that step started). An
event at exactly a skipped step's end cuts the run there (:meth:`.timer.RunTimer.on_tie`), so
the two keep the step loop's order.

Modules
=======

* :mod:`.engine`: :class:`~.engine.FastForward`, the one object an engine
  (``engine.instance``) calls: ``start_run`` (a run from a plan, or None: step),
  ``settle`` (something from outside: cut the run now), ``end_run`` (its last step ended:
  apply the run), ``start_async_run``/``end_async_run`` (the same with async scheduling),
  ``join``/``abandon`` (a lockstep group's run; the engine failed);
* :mod:`.lockstep`: the same for a lockstep data-parallel group (``engine.data_parallel``);
* :mod:`.run`: the pure part: whether a plan starts a run, its steps, their effects;
* :mod:`.decode_set`: the scheduler's running decodes advanced together (its bulk path);
* :mod:`.timer`: when a run's steps end, and the one event that ends it.

This file imports nothing: the scheduler imports :mod:`.decode_set`, which the others import.
"""
