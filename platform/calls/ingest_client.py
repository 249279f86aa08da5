"""Sending events through the gRPC ingest service, for the demo producer (`--via-service`).

One trackCalls stream carries every event, in batches of up to 500 (a partial batch goes out
whenever the producer loop polls, about ten times a second); a reader thread counts the
results. Events the service refuses as invalid are counted (the producer knows how many it meant
to be invalid); any other failure stops the run with the service's message.
"""

import queue
import threading
import time
from typing import Any

import grpc
from google.rpc import code_pb2

from tidelake.protos import service_pb2, service_pb2_grpc
from tidelake.protos.call_pb2 import CallEvent
from tidelake.streaming.errors import TidelakeError

_END = object()


class IngestDeliveryError(TidelakeError, RuntimeError):
    """Events did not reach the ingest service, or it could not hand them to Kafka."""


class IngestServiceDelivery:
    """The demo producer's delivery through the ingest service's trackCalls stream."""

    def __init__(
        self,
        address: str,
        batch_size: int = 500,
        queue_size: int = 40,
        connect_timeout_s: float = 30.0,
    ):
        self.address = address
        self.accepted = 0
        self.rejected = 0
        self.failures: list[str] = []
        """Events the service could not hand to Kafka, with its reason."""
        self.stream_error: str | None = None
        self._sent = 0
        self._batch_size = batch_size
        self._batch = service_pb2.CallEventBatch()
        self._batches = 0
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=queue_size)
        self._channel = grpc.insecure_channel(address)
        try:
            grpc.channel_ready_future(self._channel).result(timeout=connect_timeout_s)
        except grpc.FutureTimeoutError:
            self._channel.close()
            raise IngestDeliveryError(
                f"no ingest service answers at {address} after {connect_timeout_s:g} s "
                "(start one with `tidelake serve`)"
            ) from None
        stub = service_pb2_grpc.CallEventServiceStub(self._channel)
        self._results = stub.trackCalls(iter(self._queue.get, _END))
        self._reader = threading.Thread(target=self._read, name="track-calls", daemon=True)
        self._reader.start()

    def send(self, key: bytes | None, value: bytes, timestamp_ms: int) -> None:
        """Kafka key and timestamp are the service's to set; value is a serialized CallEvent."""
        self._batch.events.append(CallEvent.FromString(value))
        self._sent += 1
        if len(self._batch.events) >= self._batch_size:
            self._send_batch()

    def poll(self, timeout_s: float) -> None:
        self._send_batch()
        if timeout_s > 0:
            time.sleep(timeout_s)

    def _send_batch(self) -> None:
        if not self._batch.events:
            return
        self._batch.batch = self._batches
        self._put(self._batch)
        self._batches += 1
        self._batch = service_pb2.CallEventBatch()

    def raise_if_failing(self, produced: int | None = None) -> None:
        if self.stream_error is not None:
            raise IngestDeliveryError(
                f"the stream to the ingest service at {self.address} failed: {self.stream_error}"
            )
        if self.failures:
            of = f" of {produced}" if produced is not None else ""
            raise IngestDeliveryError(
                f"{len(self.failures)}{of} events were not accepted by the ingest service at "
                f"{self.address} (first: {self.failures[0]})"
            )

    def finish(self) -> int:
        """End the stream and wait for every result; returns events without an answer."""
        self._send_batch()
        self._put(_END)
        self._reader.join(timeout=120)
        self._channel.close()
        if self.stream_error is not None:
            return 0  # raise_if_failing reports it
        return self._sent - self.accepted - self.rejected - len(self.failures)

    def abort(self) -> None:
        self._results.cancel()
        self._channel.close()

    def _put(self, item: Any) -> None:
        while True:
            try:
                self._queue.put(item, timeout=1.0)
                return
            except queue.Full:  # the service is slow, or the stream has ended
                self.raise_if_failing()
                if not self._reader.is_alive():
                    raise IngestDeliveryError(f"the stream to {self.address} ended early") from None

    def _read(self) -> None:
        try:
            for result in self._results:
                self.accepted += result.accepted
                for refusal in result.refused:
                    if refusal.code == code_pb2.INVALID_ARGUMENT:
                        self.rejected += 1
                    else:
                        self.failures.append(f"{refusal.call_sid}: {refusal.message}")
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.CANCELLED:
                self.stream_error = f"{exc.code().name}: {exc.details()}"
