"""The prefill -> decode KV handoff, one object per connector (spec §7-§8).

A connector owns a request from the moment the cluster sends it down the disaggregated path
until its decode half is done: it routes the prompt to a prefill instance, gets the client
request to a decode instance, moves the KV over the topology's links and frees the producer's
blocks. The cluster keeps the routing of everything else and calls four methods::

    start(client)                       the request enters the disaggregated path
    load(decode_index, client, tokens)  the decode engine starts reading a prompt's KV
    producer_done(prefill_index, copy)  the prefill copy finished or was rejected
    consumer_done(client)               the decode half finished or was rejected

The two connectors differ in who is contacted when::

    nixl    client -> proxy -> prefill (max_tokens=1, keeps its blocks)
                   -> proxy -> decode (allocates without a seat, pulls, recomputes 1 token)
    sglang  client -> router -> prefill and decode at once; decode allocates early, the
                   prefill waits in its bootstrap queue until then, and pushes when done

The client's request object travels to the decode instance, which produces its tokens; the
prefill instance works on a copy, so every per-request timestamp is what the client saw.

Failures (``cluster.faults``) reach a handoff in three ways, each handled here::

    prefill instance dies  prompts it was computing (or, sglang, still had in its bootstrap
                           queue) lose their clients' attempts; prompts it had finished can no
                           longer be read: their pulls fail
    decode instance dies   its clients are lost; their producers' blocks are freed (or, sglang,
                           their queued prefills dropped) and their transfers stopped
    a KV load fails        its source died, a failed link left no path, or the transfer drew
                           a failure: nixl follows kv_load_failure_policy (recompute: prefill
                           the prompt on the decode instance; fail: the attempt is lost, as
                           vLLM's FINISHED_ERROR reaches the client); sglang fails it

The producer's blocks are freed as soon as its reader is gone (vLLM's prefill side would
hold them until ``VLLM_NIXL_ABORT_REQUEST_TIMEOUT``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from clustersim.cluster.flows import FlowNetwork, TransferFailed
from clustersim.cluster.handoff import StageMove, stage_moves
from clustersim.cluster.router import Router
from clustersim.engine.events import Outcome, Signal, Waitable, alarm, call_soon, now_of, on_event
from clustersim.engine.instance import Instance
from clustersim.engine.request import Request, RequestStatus

if TYPE_CHECKING:
    from clustersim.cluster.dispatch import Dispatch
    from clustersim.cluster.ports import ClusterPort


@dataclass(slots=True, init=False)
class Handoff:
    """A request on the disaggregated path: its prefill copy and where each half runs.
    (``__init__`` written out: it compiles with the core.)"""

    client: Request
    producer: Request
    prefill_index: int
    decode_index: int | None = None
    prefill_done: Signal | None = None
    """sglang only: fires when the prefill copy finished (the push may start)."""
    producer_sent: bool = False
    """The prefill copy was submitted to its instance (sglang holds it back until the decode
    side has allocated)."""
    transfer: Outcome | None = None
    """The KV transfer under way (``FlowNetwork.transfer``'s event)."""
    kv_read: bool = False
    """The decode side has what it needs: the KV arrived, nothing had to be read, or the
    load failed and was dealt with."""
    source_lost: str | None = None
    """The prefill instance holding the finished prompt's KV failed (the failure's label):
    reading it fails."""

    def __init__(self, client: Request, producer: Request, prefill_index: int) -> None:
        self.client = client
        self.producer = producer
        self.prefill_index = prefill_index
        self.decode_index = None
        self.prefill_done = None
        self.producer_sent = False
        self.transfer = None
        self.kv_read = False
        self.source_lost = None


def producer_copy(client: Request, arrival_s: float) -> Request:
    """What the proxy sends the prefill instance: the prompt, asking for one token."""
    return Request(
        client.request_id,
        arrival_s,
        client.num_prompt_tokens,
        1,  # the proxy asks the prefill instance for one token (max_tokens=1)
        priority=client.priority,
        block_hashes=client.block_hashes,
        kv_producer=True,
    )


class KVConnector:
    """What every connector shares: the bookkeeping of handoffs, the transfer over the links,
    and the producer's fate. Subclasses decide who is contacted when."""

    name: ClassVar[str] = ""

    def __init__(self, cluster: ClusterPort) -> None:
        self.cluster = cluster
        self.dispatch: Dispatch = cluster.dispatch
        self.instances: dict[str, list[Instance]] = cluster.instances
        """(The prefill and decode pools' instances: plain engines, read as compiled ones.)"""
        self.flows: FlowNetwork | None = cluster.flows
        self.routers: dict[str, Router] = cluster.routers
        self.env = cluster.env
        self.spec = cluster.kv_transfer
        self._handoffs: dict[Request, Handoff] = {}  # producer copy or client -> handoff
        self._paired: set[tuple[int, int]] = set()
        self._kv_bytes: dict[int, tuple[int, int, int]] = {}
        """Per decode instance, over its TP group: KV bytes per token of the full-attention
        layers, of the sliding-window ones, and the window (``ModelSpec.kv_cached_bytes``)."""
        self._stages: dict[tuple[int, int], tuple[list[StageMove], int]] = {}
        """Per (prefill, decode) pair with pipeline stages on either side: its stage moves
        (``cluster.handoff``) and the window."""

    @property
    def num_in_flight(self) -> int:
        """Requests on the disaggregated path now (0 once every one is done)."""
        return len({id(h) for h in self._handoffs.values()})

    # ----------------------------------------------------------- the path
    def start(self, client: Request) -> None:
        """The request enters the disaggregated path: its prompt goes to a prefill instance."""
        cluster = self.cluster
        index = self.dispatch.choose("prefill", client)
        if index is None:
            cluster.lose(client, cluster.faults.down_cause("prefill"))  # type: ignore[union-attr]
            return
        instance = self.instances["prefill"][index]
        producer = producer_copy(client, now_of(self.env))
        handoff = Handoff(client=client, producer=producer, prefill_index=index)
        self._handoffs[producer] = handoff
        self._handoffs[client] = handoff
        client.prefill_instance = instance.name
        self._started(handoff, instance)

    def _started(self, handoff: Handoff, prefill: Instance) -> None:
        raise NotImplementedError

    def _to_decode(self, handoff: Handoff) -> None:
        """The client request goes to a decode instance, which will read the prompt's KV."""
        cluster = self.cluster
        client = handoff.client
        index = self.dispatch.place("decode", client)
        if index is None:
            self.client_lost(client)
            cluster.lose(client, cluster.faults.down_cause("decode"))  # type: ignore[union-attr]
            return
        handoff.decode_index = index
        instance = self.instances["decode"][index]
        client.decode_instance = instance.name
        client.do_remote_prefill = True
        instance.submit(client)

    # ------------------------------------------------------------ transfer
    def load(self, decode_index: int, client: Request, num_tokens: int) -> Signal:
        """The decode instance starts reading a prompt's KV from its prefill instance; the
        event fires when the KV is resident."""
        done = Signal(self.env)
        handoff = self._handoffs.get(client)
        if handoff is None or handoff.kv_read:
            # async scheduling planned this read before a failure dropped the request (or
            # sent it to prefill locally): nothing is read, the event never fires
            return done
        # the read is a chain of callbacks, each where a SimPy process would resume
        call_soon(self.env, lambda _event: self._read(decode_index, handoff, num_tokens, done))
        return done

    def _live(self, handoff: Handoff) -> bool:
        """The handoff is still this client's current one (no failure dropped it)."""
        return self._handoffs.get(handoff.client) is handoff

    def _read(self, decode_index: int, handoff: Handoff, num_tokens: int,
              done: Signal) -> None:
        if not self._live(handoff):
            return  # lost to a failure before the read began
        prefill = self.instances["prefill"][handoff.prefill_index]
        if num_tokens == 0:  # nothing to read (local prefix hit): the producer may free now
            self._nothing_to_read(handoff, prefill)
            handoff.kv_read = True
            done.succeed()
            return
        self._when_readable(handoff, prefill, lambda: self._start_transfer(
            decode_index, handoff, num_tokens, done, prefill))

    def _start_transfer(self, decode_index: int, handoff: Handoff, num_tokens: int,
                        done: Signal, prefill: Instance) -> None:
        if not self._live(handoff):
            return  # the decode side has dropped the request
        cluster = self.cluster
        faults = cluster.faults
        if handoff.source_lost is not None:
            self._load_failed(handoff, handoff.source_lost)
            return
        drawn = faults.transfer_fails() if faults is not None else None
        decode = self.instances["decode"][decode_index]
        pair = (handoff.prefill_index, decode_index)
        extra = 0.0
        if pair not in self._paired:
            self._paired.add(pair)
            extra = self.spec.handshake_s
        flows = self.flows
        assert flows is not None  # (a disaggregated cluster has a topology)
        if prefill.pipeline is not None or decode.pipeline is not None:
            num_bytes, moves = self._stage_moves(pair, prefill, decode, num_tokens)
            transfer = handoff.transfer = flows.transfer_stages(
                handoff.client.request_id, list(prefill.gpus), list(decode.gpus), moves, extra)
        else:
            per_token = self._kv_bytes.get(decode_index)
            if per_token is None:
                tp = len(decode.gpus)
                served = cluster.served(decode.name)
                full, window = served.kv_bytes_by_attention(tp)
                per_token = self._kv_bytes[decode_index] = (full * tp, window * tp,
                                                            served.sliding_window or 0)
            full_bytes, window_bytes, window_tokens = per_token
            num_bytes = full_bytes * num_tokens + window_bytes * min(num_tokens, window_tokens)
            transfer = handoff.transfer = flows.transfer(
                handoff.client.request_id, list(prefill.gpus), list(decode.gpus), num_bytes,
                extra)
        on_event(transfer, lambda event: self._transferred(handoff, done, prefill, drawn,
                                                           num_bytes, event))

    def _stage_moves(self, pair: tuple[int, int], prefill: Instance, decode: Instance,
                     num_tokens: int) -> tuple[int, list[tuple[list[str], list[str], int]]]:
        """A handoff between pipelined engines (``cluster.handoff``): its bytes, and each
        stage move's GPUs and bytes for ``num_tokens`` tokens."""
        per_token = self._stages.get(pair)
        if per_token is None:
            served = self.cluster.served(decode.name)
            per_token = self._stages[pair] = (
                stage_moves(served, prefill.gpus, _depth(prefill), decode.gpus, _depth(decode)),
                served.sliding_window or 0)
        stages, window_tokens = per_token
        moves: list[tuple[list[str], list[str], int]] = []
        num_bytes = 0
        for stage in stages:
            src, dst, full_bytes, window_bytes = stage
            size = full_bytes * num_tokens + window_bytes * min(num_tokens, window_tokens)
            moves.append((src, dst, size))
            num_bytes += size
        return num_bytes, moves

    def _transferred(self, handoff: Handoff, done: Signal, prefill: Instance, drawn: str | None,
                     num_bytes: int, transfer: Outcome) -> None:
        handoff.transfer = None
        if not transfer.ok:
            error = transfer.value
            if not isinstance(error, TransferFailed):
                raise error  # type: ignore[misc]  # a failed event's value is its exception
            if self._live(handoff):
                self._load_failed(handoff, error.cause)
            return
        if not self._live(handoff):
            return  # its reader failed at the very moment the bytes arrived
        if drawn is not None:  # the bytes moved, the read reports an error at its end
            self._load_failed(handoff, drawn)
            return
        client = handoff.client
        prefill.release_kv(handoff.producer)
        handoff.kv_read = True
        client.handoff_bytes = num_bytes
        client.handoff_start_s = handoff.producer.finish_s
        client.handoff_end_s = now_of(self.env)
        done.succeed()

    def _when_readable(self, handoff: Handoff, prefill: Instance, then: Callable[[], None]) -> None:
        """Call ``then`` once the producer's KV can be read (never: the request was
        dropped)."""
        then()

    def _nothing_to_read(self, handoff: Handoff, prefill: Instance) -> None:
        prefill.release_kv(handoff.producer)

    # ---------------------------------------------------------- completion
    def producer_done(self, index: int, producer: Request) -> None:
        """The prefill copy finished (its blocks wait to be read) or was rejected."""
        handoff = self._handoffs[producer]
        del self._handoffs[producer]
        client = handoff.client
        self.routers["prefill"].returned(index, client)
        client.num_preemptions += producer.num_preemptions
        client.num_cached_tokens = producer.num_cached_tokens
        if producer.status is RequestStatus.REJECTED:
            self._producer_rejected(handoff, f"prefill: {producer.reject_reason}")
            return
        prefill = self.instances["prefill"][index]
        if producer.request_id not in prefill.scheduler.kv_held and prefill.scheduler.offers_blocks(
            producer
        ):
            # async scheduling preempted it while its only token was in flight: the token
            # arrived but the blocks are gone, so the prompt is prefilled again
            self._rerun_prefill(index, handoff)
            return
        self._producer_finished(handoff)

    def _producer_rejected(self, handoff: Handoff, reason: str) -> None:
        """The prefill instance refused the prompt: the client gets its reason."""
        client = handoff.client
        self._handoffs.pop(client, None)
        client.status = RequestStatus.REJECTED
        client.reject_reason = reason
        client.finish_s = now_of(self.env)
        self.dispatch.on_done(client)

    def _producer_finished(self, handoff: Handoff) -> None:
        raise NotImplementedError

    # -------------------------------------------------------------- faults
    recomputes_failed_loads = False
    """Whether a failed KV load is recomputed on the decode side (else the attempt fails)."""

    def _load_failed(self, handoff: Handoff, cause: str) -> None:
        """Reading the prompt's KV failed (``cause``: the failure to blame). Once: a node or
        a link failing can break the read and kill its source at the same moment."""
        if handoff.kv_read:
            return
        cluster = self.cluster
        client = handoff.client
        tally = cluster.faults.tally(cause, client)  # type: ignore[union-attr]
        tally.num_kv_load_failures += 1
        prefill = self.instances["prefill"][handoff.prefill_index]
        prefill.release_kv(handoff.producer)  # its reader gives up (a no-op if it died)
        handoff.kv_read = True
        decode = self.instances["decode"][handoff.decode_index]  # type: ignore[index]
        if self.recomputes_failed_loads:
            tally.num_recomputed += 1
            decode.recompute_remote_load(client)
            return
        self._handoffs.pop(client, None)
        decode.remove(client)
        cluster.lose(client, cause)

    def prefill_failed(self, index: int, cause: str) -> None:
        """Prefill instance ``index`` died: what it was computing is lost with its clients'
        attempts; what it had computed and not yet handed over cannot be read."""
        cluster = self.cluster
        hit = list({id(h): h for h in self._handoffs.values()
                    if h.prefill_index == index and not h.kv_read}.values())
        for handoff in hit:
            client = handoff.client
            if handoff.producer.status is RequestStatus.FINISHED:
                handoff.source_lost = cause
                if handoff.transfer is not None:  # the read under way breaks off
                    self.flows.cancel(handoff.transfer)  # type: ignore[union-attr]
                    handoff.transfer = None
                    self._load_failed(handoff, cause)
                continue  # a read not begun yet fails when it begins
            self.routers["prefill"].returned(index, client)
            self._handoffs.pop(handoff.producer, None)
            self._handoffs.pop(client, None)
            if handoff.decode_index is not None:  # sglang: the decode side had allocated
                self.instances["decode"][handoff.decode_index].remove(client)
            cluster.lose(client, cause)

    def client_lost(self, client: Request) -> None:
        """A failure lost ``client`` on the decode side (or before it got there): stop its
        transfer and let its producer go."""
        handoff = self._handoffs.pop(client, None)
        if handoff is None:
            return
        if handoff.transfer is not None:
            self.flows.cancel(handoff.transfer)  # type: ignore[union-attr]
            handoff.transfer = None
        producer = handoff.producer
        prefill = self.instances["prefill"][handoff.prefill_index]
        if producer.status is RequestStatus.FINISHED:
            if not handoff.kv_read:
                prefill.release_kv(producer)
            return
        # sglang: the prefill is queued or running there, or still in the bootstrap queue;
        # or it was never needed (nothing to push) and the prefill router has it back
        if self._handoffs.pop(producer, None) is None:
            return
        if handoff.producer_sent:
            prefill.remove(producer)
        self.routers["prefill"].returned(handoff.prefill_index, client)

    def _rerun_prefill(self, index: int, handoff: Handoff) -> None:
        producer = producer_copy(handoff.client, now_of(self.env))
        handoff.producer = producer
        self._handoffs[producer] = handoff
        self.routers["prefill"].sent(index, handoff.client)
        self.instances["prefill"][index].submit(producer)

    def consumer_done(self, client: Request) -> None:
        """The decode half finished or was rejected (a request routed elsewhere: nothing)."""
        handoff = self._handoffs.get(client)
        if handoff is None:
            return
        del self._handoffs[client]
        if client.status is RequestStatus.REJECTED:
            # rejected on the decode side: the prefill copy's blocks will never be read
            self._consumer_rejected(handoff)

    def _consumer_rejected(self, handoff: Handoff) -> None:
        if handoff.producer.status is RequestStatus.FINISHED:
            prefill = self.instances["prefill"][handoff.prefill_index]
            prefill.release_kv(handoff.producer)


class NixlConnector(KVConnector):
    """vLLM's NIXL flow: the proxy sends the prompt to a prefill instance with max_tokens=1;
    when it answers, the proxy sends the request to a decode instance, which allocates the
    prompt's blocks without a seat (WAITING_FOR_REMOTE_KVS), pulls them and recomputes one
    token. The prefill instance keeps its blocks until they are read."""

    name: ClassVar[str] = "nixl"

    def __init__(self, cluster: ClusterPort) -> None:
        super().__init__(cluster)
        self.recomputes_failed_loads = self.spec.kv_load_failure_policy == "recompute"

    def _started(self, handoff: Handoff, prefill: Instance) -> None:
        handoff.producer_sent = True
        prefill.submit(handoff.producer)

    def _producer_finished(self, handoff: Handoff) -> None:
        call_soon(self.env, lambda _event: self._proxy_to_decode(handoff))

    def _proxy_to_decode(self, handoff: Handoff) -> None:
        """The proxy has the prefill's answer: after its latency, on to a decode instance."""
        if self.spec.proxy_latency_s > 0:
            self._proxied_after(self.spec.proxy_latency_s, handoff)
            return
        self._proxied(handoff)

    def _proxied_after(self, latency_s: float, handoff: Handoff) -> None:
        # (the closure in a method of its own: a function holding one builds its variables'
        # cell object on every call, on paths without the closure too)
        alarm(self.env, latency_s, lambda _event: self._proxied(handoff))

    def _proxied(self, handoff: Handoff) -> None:
        if self._live(handoff):
            self._to_decode(handoff)


class SGLangConnector(KVConnector):
    """SGLang's flow: the router contacts both sides at once. The prefill side holds the
    request in its bootstrap queue until the decode side has allocated the KV (early
    allocation), so a prefill never holds blocks for a decode that has no room for them; the
    prefill pushes the KV when it is done."""

    name: ClassVar[str] = "sglang"
    # a failed push fails the request (SGLang has no recompute path for it)

    def _started(self, handoff: Handoff, prefill: Instance) -> None:
        producer = handoff.producer
        reason = prefill.refusal(producer)
        if reason is not None:
            prefill.reject(producer, reason)
            return
        handoff.prefill_done = Signal(self.env)
        self._to_decode(handoff)

    def _when_readable(self, handoff: Handoff, prefill: Instance, then: Callable[[], None]) -> None:
        if not handoff.producer_sent:
            handoff.producer_sent = True
            prefill.submit(handoff.producer)  # decode has allocated: prefill may start

        def prefilled(_event: Waitable) -> None:
            if handoff.producer.status is not RequestStatus.REJECTED:
                then()

        on_event(handoff.prefill_done, prefilled)  # type: ignore[arg-type]

    def _nothing_to_read(self, handoff: Handoff, prefill: Instance) -> None:
        if handoff.producer_sent:
            prefill.release_kv(handoff.producer)
        else:  # the prefill never started; take it back from the prefill router
            self.routers["prefill"].returned(handoff.prefill_index, handoff.client)
            self._handoffs.pop(handoff.producer, None)

    def _producer_rejected(self, handoff: Handoff, reason: str) -> None:
        if handoff.decode_index is None:
            super()._producer_rejected(handoff, reason)
            return
        # the decode side already holds blocks for it; take it back there
        handoff.prefill_done.succeed()  # type: ignore[union-attr]
        self.instances["decode"][handoff.decode_index].abort(handoff.client, reason)

    def _producer_finished(self, handoff: Handoff) -> None:
        handoff.prefill_done.succeed()  # type: ignore[union-attr]

    def _consumer_rejected(self, handoff: Handoff) -> None:
        if not handoff.producer_sent:  # the prefill never started
            self.routers["prefill"].returned(handoff.prefill_index, handoff.client)
            self._handoffs.pop(handoff.producer, None)
            return
        super()._consumer_rejected(handoff)


def _depth(instance: Instance) -> int:
    """Pipeline stages of the engine (1 without)."""
    pipeline = instance.pipeline
    return 1 if pipeline is None else pipeline.depth


CONNECTORS: dict[str, type[KVConnector]] = {
    NixlConnector.name: NixlConnector,
    SGLangConnector.name: SGLangConnector,
}
"""``layout.kv_transfer.connector`` -> the connector class."""
