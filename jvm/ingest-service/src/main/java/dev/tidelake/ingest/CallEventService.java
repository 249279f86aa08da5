package dev.tidelake.ingest;

import com.google.protobuf.Any;
import com.google.protobuf.Descriptors.Descriptor;
import com.google.protobuf.Descriptors.FieldDescriptor;
import com.google.protobuf.Descriptors.FileDescriptor;
import com.google.protobuf.Descriptors.ServiceDescriptor;
import com.google.protobuf.DynamicMessage;
import com.google.protobuf.InvalidProtocolBufferException;
import com.google.rpc.BadRequest;
import com.google.rpc.Code;
import io.grpc.Context;
import io.grpc.Deadline;
import io.grpc.Grpc;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import io.grpc.ServerCall;
import io.grpc.ServerCallHandler;
import io.grpc.ServerServiceDefinition;
import io.grpc.Status;
import io.grpc.protobuf.ProtoFileDescriptorSupplier;
import io.grpc.protobuf.ProtoUtils;
import io.grpc.protobuf.StatusProto;
import io.grpc.stub.ServerCalls;
import io.grpc.stub.StreamObserver;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicIntegerArray;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * CallEventService (protos/service.proto): trackCall, trackCalls and getCallInfo. An event is
 * answered OK only after Kafka acknowledged it, so an acknowledged event is never lost; Kafka down
 * or slower than the ack timeout is UNAVAILABLE, never a hang. The methods are bound from the
 * descriptor set (no generated Java), like the engine's decoder.
 */
final class CallEventService {
  private static final Logger LOG = Logger.getLogger(IngestMain.LOGGER);

  private final IngestConfig config;
  private final FlowContract contract;
  private final TopicProducer kafka;
  private final CallLookup lookup;
  private final ScheduledExecutorService timers;
  private final ExecutorService reads;
  /** Where a batch that waited for room in the windows is sent from. */
  private final ExecutorService resume =
      java.util.concurrent.Executors.newSingleThreadExecutor(
          task -> {
            Thread thread = new Thread(task, "batch-resume");
            thread.setDaemon(true);
            return thread;
          });
  private final StreamSlots slots;
  private final EventWindow allStreams;
  private final AckDeadlines unaryDeadlines;
  private final ServiceDescriptor service;
  private final Descriptor callSid;
  private final Descriptor batchResult;
  private final Descriptor trackResult;
  private final Descriptor batch;

  CallEventService(
      IngestConfig config,
      FileDescriptor file,
      FlowContract contract,
      TopicProducer kafka,
      CallLookup lookup,
      ScheduledExecutorService timers,
      ExecutorService reads) {
    this.config = config;
    this.contract = contract;
    this.kafka = kafka;
    this.lookup = lookup;
    this.timers = timers;
    this.reads = reads;
    this.service = file.findServiceByName("CallEventService");
    this.callSid = service.findMethodByName("getCallInfo").getInputType();
    this.batch = service.findMethodByName("trackCalls").getInputType();
    this.batchResult = service.findMethodByName("trackCalls").getOutputType();
    this.trackResult = batchResult.findFieldByName("refused").getMessageType();
    this.slots = new StreamSlots(config.streamsPerClient(), config.streamsTotal());
    this.allStreams = new EventWindow(config.maxInFlightTotal(), resume);
    this.unaryDeadlines = new AckDeadlines(config.ackTimeoutMs(), timers);
  }

  String name() {
    return service.getFullName();
  }

  ServerServiceDefinition definition() {
    io.grpc.ServiceDescriptor.Builder grpcService =
        io.grpc.ServiceDescriptor.newBuilder(service.getFullName())
            .setSchemaDescriptor((ProtoFileDescriptorSupplier) service::getFile);
    MethodDescriptor<byte[], DynamicMessage> trackCall =
        method("trackCall", MethodDescriptor.MethodType.UNARY, BYTES);
    MethodDescriptor<DynamicMessage, DynamicMessage> trackCalls =
        method(
            "trackCalls",
            MethodDescriptor.MethodType.BIDI_STREAMING,
            ProtoUtils.marshaller(DynamicMessage.getDefaultInstance(batch)));
    MethodDescriptor<DynamicMessage, DynamicMessage> getCallInfo =
        method(
            "getCallInfo",
            MethodDescriptor.MethodType.UNARY,
            ProtoUtils.marshaller(DynamicMessage.getDefaultInstance(callSid)));
    grpcService.addMethod(trackCall).addMethod(trackCalls).addMethod(getCallInfo);
    return ServerServiceDefinition.builder(grpcService.build())
        .addMethod(trackCall, ServerCalls.asyncUnaryCall(this::trackCall))
        .addMethod(trackCalls, this::trackCalls)
        .addMethod(getCallInfo, ServerCalls.asyncUnaryCall(this::getCallInfo))
        .build();
  }

  private <Q> MethodDescriptor<Q, DynamicMessage> method(
      String name, MethodDescriptor.MethodType type, MethodDescriptor.Marshaller<Q> requests) {
    var proto = service.findMethodByName(name);
    return MethodDescriptor.<Q, DynamicMessage>newBuilder()
        .setType(type)
        .setFullMethodName(MethodDescriptor.generateFullMethodName(service.getFullName(), name))
        .setRequestMarshaller(requests)
        .setResponseMarshaller(
            ProtoUtils.marshaller(DynamicMessage.getDefaultInstance(proto.getOutputType())))
        .build();
  }

  // -- trackCall ---------------------------------------------------------------------------

  private void trackCall(byte[] request, StreamObserver<DynamicMessage> answer) {
    long nowMs = System.currentTimeMillis();
    DynamicMessage event;
    try {
      event = DynamicMessage.parseFrom(contract.message(), request);
    } catch (InvalidProtocolBufferException e) {
      answer.onError(
          Status.INVALID_ARGUMENT
              .withDescription("the request is not a " + contract.message().getName() + " message")
              .asRuntimeException());
      return;
    }
    List<FlowContract.Violation> problems = contract.violations(event, nowMs);
    if (!problems.isEmpty()) {
      answer.onError(invalidArgument(problems));
      return;
    }
    String key = (String) event.getField(contract.keyField());
    long waitMs = config.ackTimeoutMs();
    Deadline deadline = Context.current().getDeadline();
    boolean ownDeadline = false;
    if (deadline != null) {
      long remaining = deadline.timeRemaining(TimeUnit.MILLISECONDS) - 50;
      // a deadline within a second of the ack timeout (a client's 30 s for our 30 s) shares the
      // sweep; a sooner one gets its own timer, to answer UNAVAILABLE before it passes
      if (remaining < waitMs - 1000) {
        waitMs = Math.max(0, remaining);
        ownDeadline = true;
      }
    }
    AtomicBoolean answered = new AtomicBoolean();
    DynamicMessage reply =
        DynamicMessage.newBuilder(callSid).setField(callSid.findFieldByNumber(1), key).build();
    String late = notInTime(waitMs);
    Runnable expire = () -> answer.onError(unavailable(late));
    ScheduledFuture<?> expiry = null;
    if (ownDeadline) {  // the client's deadline is sooner than the shared ack timeout
      expiry =
          timers.schedule(
              () -> {
                if (answered.compareAndSet(false, true)) {
                  expire.run();
                }
              },
              waitMs,
              TimeUnit.MILLISECONDS);
    } else {
      unaryDeadlines.watch(answered, expire);
    }
    ScheduledFuture<?> timer = expiry;
    try {
      kafka.send(
          key.getBytes(StandardCharsets.UTF_8),
          request,
          nowMs,
          (metadata, error) -> {
            if (!answered.compareAndSet(false, true)) {
              return;
            }
            if (timer != null) {
              timer.cancel(false);
            }
            if (error == null) {
              answer.onNext(reply);
              answer.onCompleted();
            } else {
              answer.onError(unavailable(TopicProducer.notAcknowledged(error)));
            }
          });
    } catch (TopicProducer.Unavailable e) {
      if (timer != null) {
        timer.cancel(false);
      }
      if (answered.compareAndSet(false, true)) {
        answer.onError(unavailable(e.getMessage()));
      }
    }
  }

  private static String notInTime(long waitMs) {
    return "Kafka did not acknowledge the event within "
        + seconds(waitMs)
        + " s. "
        + TopicProducer.RETRY_IS_SAFE;
  }

  /** Seconds as Python's {@code :g} writes them (3 s, 0.5 s), so the wording stays the same. */
  private static String seconds(long ms) {
    return ms % 1000 == 0 ? Long.toString(ms / 1000) : Double.toString(ms / 1000.0);
  }

  // -- trackCalls --------------------------------------------------------------------------

  private ServerCall.Listener<DynamicMessage> trackCalls(
      ServerCall<DynamicMessage, DynamicMessage> call, Metadata headers) {
    String client = clientAddress(call.getAttributes().get(Grpc.TRANSPORT_ATTR_REMOTE_ADDR));
    String refusal = slots.take(client);
    if (refusal != null) {
      call.close(Status.RESOURCE_EXHAUSTED.withDescription(refusal), new Metadata());
      return new ServerCall.Listener<>() {};
    }
    BatchStream stream = new BatchStream(call, client);
    call.sendHeaders(new Metadata());
    call.request(1);
    return stream;
  }

  /** One trackCalls stream: a batch is read only when the stream, and all streams together,
   * have room for its events; each batch is answered once every event of it is settled. */
  private final class BatchStream extends ServerCall.Listener<DynamicMessage> {
    private final ServerCall<DynamicMessage, DynamicMessage> call;
    private final String client;
    private final EventWindow window = new EventWindow(config.maxInFlight(), resume);
    private int openBatches;
    private boolean halfClosed;
    private boolean closed;

    BatchStream(ServerCall<DynamicMessage, DynamicMessage> call, String client) {
      this.call = call;
      this.client = client;
    }

    @Override
    public void onMessage(DynamicMessage message) {
      try {
        receive(message);
      } catch (RuntimeException e) {
        LOG.log(Level.SEVERE, "trackCalls from " + client + " failed", e);
        end(
            Status.INTERNAL.withDescription(
                "the ingest service failed on this stream; it logged why. The results you"
                    + " received stand: send the batches without a result again (retrying is"
                    + " safe)"));
      }
    }

    private void receive(DynamicMessage message) {
      long nowMs = System.currentTimeMillis();
      long number = (Long) message.getField(batch.findFieldByName("batch"));
      FieldDescriptor eventsField = batch.findFieldByName("events");
      int size = message.getRepeatedFieldCount(eventsField);
      List<DynamicMessage> refused = new ArrayList<>();
      List<Integer> positions = new ArrayList<>(size);
      List<DynamicMessage> events = new ArrayList<>(size);
      for (int i = 0; i < size; i++) {
        DynamicMessage event = (DynamicMessage) message.getRepeatedField(eventsField, i);
        events.add(event);
        List<FlowContract.Violation> problems = contract.violations(event, nowMs);
        if (problems.isEmpty()) {
          positions.add(i);
        } else {
          refused.add(refusal(i, event, Code.INVALID_ARGUMENT, joined(problems)));
        }
      }
      BatchTracker tracker = new BatchTracker(this, number, events, positions, refused);
      synchronized (this) {
        openBatches++;
      }
      send(tracker, nowMs);
    }

    /** Sends the batch once both windows have room; parks it (and stops reading) until then.
     * A batch still parked when its stream ends is dropped: nobody would hear its result. */
    private void send(BatchTracker tracker, long nowMs) {
      int count = tracker.positions.size();
      synchronized (this) {
        if (closed) {
          openBatches--;
          return;
        }
      }
      if (!window.take(count, () -> send(tracker, nowMs))) {
        return;
      }
      if (!allStreams.take(count, () -> {
        window.giveBack(count);
        send(tracker, nowMs);
      })) {
        return;
      }
      synchronized (this) {
        if (!closed) {
          call.request(1);
        }
      }
      tracker.start(nowMs);
    }

    void finished(BatchTracker tracker) {
      int count = tracker.positions.size();
      window.giveBack(count);
      allStreams.giveBack(count);
      synchronized (this) {
        openBatches--;
        if (!closed) {
          call.sendMessage(tracker.result());
          if (halfClosed && openBatches == 0) {
            closeOk();
          }
        }
      }
    }

    @Override
    public synchronized void onHalfClose() {
      halfClosed = true;
      if (openBatches == 0) {
        closeOk();
      }
    }

    private void closeOk() {
      end(Status.OK);
    }

    private synchronized void end(Status status) {
      if (!closed) {
        closed = true;
        call.close(status, new Metadata());
        slots.giveBack(client);
      }
    }

    @Override
    public synchronized void onCancel() {
      if (!closed) {
        closed = true;
        slots.giveBack(client);
      }
    }
  }

  /** One batch's answers from Kafka; finished after the last one, or at the ack timeout with the
   * rest refused UNAVAILABLE (Kafka may still store them: retrying is safe). */
  private final class BatchTracker {
    private final BatchStream stream;
    private final long number;
    private final List<DynamicMessage> events;
    final List<Integer> positions;
    private final List<DynamicMessage> refused;
    private final String[] failures;
    /** Per record sent: 0 waiting for Kafka, 1 acknowledged, 2 refused (failures says why). */
    private final AtomicIntegerArray states;
    private final AtomicInteger waiting;
    private final AtomicBoolean done = new AtomicBoolean();
    private volatile ScheduledFuture<?> expiry;
    private volatile String unanswered;

    BatchTracker(
        BatchStream stream,
        long number,
        List<DynamicMessage> events,
        List<Integer> positions,
        List<DynamicMessage> refused) {
      this.stream = stream;
      this.number = number;
      this.events = events;
      this.positions = positions;
      this.refused = refused;
      this.failures = new String[positions.size()];
      this.states = new AtomicIntegerArray(positions.size());
      this.waiting = new AtomicInteger(positions.size());
    }

    void start(long nowMs) {
      if (positions.isEmpty()) {
        finish(null);
        return;
      }
      for (int p = 0; p < positions.size(); p++) {
        DynamicMessage event = events.get(positions.get(p));
        int position = p;
        String key = (String) event.getField(contract.keyField());
        try {
          kafka.send(
              key.getBytes(StandardCharsets.UTF_8),
              event.toByteArray(),
              nowMs,
              (metadata, error) ->
                  answered(position, error == null ? null : TopicProducer.notAcknowledged(error)));
        } catch (TopicProducer.Unavailable e) {
          for (int rest = p; rest < positions.size(); rest++) {
            answered(rest, e.getMessage());
          }
          return;
        }
      }
      long timeout = config.ackTimeoutMs();
      expiry = timers.schedule(() -> finish(notInTime(timeout)), timeout, TimeUnit.MILLISECONDS);
      if (done.get()) {
        expiry.cancel(false);
      }
    }

    private void answered(int position, String failure) {
      failures[position] = failure;
      states.set(position, failure == null ? 1 : 2);
      if (waiting.decrementAndGet() == 0) {
        finish(null);
      }
    }

    private void finish(String unanswered) {
      if (!done.compareAndSet(false, true)) {
        return;
      }
      ScheduledFuture<?> timer = expiry;
      if (timer != null) {
        timer.cancel(false);
      }
      this.unanswered = unanswered;
      stream.finished(this);
    }

    DynamicMessage result() {
      List<DynamicMessage> all = new ArrayList<>(refused);
      int accepted = 0;
      for (int p = 0; p < positions.size(); p++) {
        int state = states.get(p);
        if (state == 1) {
          accepted++;
          continue;
        }
        String reason = state == 2 ? failures[p] : unanswered;
        int index = positions.get(p);
        all.add(refusal(index, events.get(index), Code.UNAVAILABLE, reason));
      }
      all.sort(
          (a, b) ->
              Integer.compare(
                  (Integer) a.getField(trackResult.findFieldByName("index")),
                  (Integer) b.getField(trackResult.findFieldByName("index"))));
      DynamicMessage.Builder out =
          DynamicMessage.newBuilder(batchResult)
              .setField(batchResult.findFieldByName("batch"), number)
              .setField(batchResult.findFieldByName("accepted"), accepted);
      FieldDescriptor refusedField = batchResult.findFieldByName("refused");
      for (DynamicMessage r : all) {
        out.addRepeatedField(refusedField, r);
      }
      return out.build();
    }
  }

  // -- getCallInfo -------------------------------------------------------------------------

  private void getCallInfo(DynamicMessage request, StreamObserver<DynamicMessage> answer) {
    String key = (String) request.getField(callSid.findFieldByNumber(1));
    DynamicMessage probe =
        DynamicMessage.newBuilder(contract.message()).setField(contract.keyField(), key).build();
    List<FlowContract.Violation> problems = contract.keyViolations(probe);
    if (!problems.isEmpty()) {
      answer.onError(invalidArgument(problems));
      return;
    }
    reads.execute(
        () -> {
          Optional<DynamicMessage> found;
          try {
            found = lookup.latest(key);
          } catch (IOException | RuntimeException e) {
            // the details (file paths, the storage's error) are the operators' business
            LOG.log(Level.SEVERE, "getCallInfo: cannot read the " + config.tableName() + " table", e);
            answer.onError(
                Status.INTERNAL
                    .withDescription(
                        "the service cannot read its "
                            + config.tableName()
                            + " table now; it logged why. Retry later; if it persists, tell the"
                            + " service's operators")
                    .asRuntimeException());
            return;
          }
          if (found.isEmpty()) {
            answer.onError(
                Status.NOT_FOUND
                    .withDescription(
                        "no stored event for call_sid "
                            + key
                            + " (events reach the lake seconds after they are acknowledged)")
                    .asRuntimeException());
            return;
          }
          answer.onNext(found.get());
          answer.onCompleted();
        });
  }

  // -- answers -----------------------------------------------------------------------------

  private DynamicMessage refusal(int index, DynamicMessage event, Code code, String message) {
    return DynamicMessage.newBuilder(trackResult)
        .setField(trackResult.findFieldByName("index"), index)
        .setField(trackResult.findFieldByName("call_sid"), event.getField(contract.keyField()))
        .setField(trackResult.findFieldByName("code"), code.getNumber())
        .setField(trackResult.findFieldByName("message"), message)
        .build();
  }

  private static String joined(List<FlowContract.Violation> problems) {
    StringBuilder out = new StringBuilder();
    for (FlowContract.Violation p : problems) {
      if (out.length() > 0) {
        out.append("; ");
      }
      out.append(p);
    }
    return out.toString();
  }

  private static RuntimeException invalidArgument(List<FlowContract.Violation> problems) {
    BadRequest.Builder details = BadRequest.newBuilder();
    for (FlowContract.Violation p : problems) {
      details.addFieldViolations(
          BadRequest.FieldViolation.newBuilder()
              .setField(p.field())
              .setDescription(p.description()));
    }
    return StatusProto.toStatusRuntimeException(
        com.google.rpc.Status.newBuilder()
            .setCode(Code.INVALID_ARGUMENT_VALUE)
            .setMessage(joined(problems))
            .addDetails(Any.pack(details.build()))
            .build());
  }

  private static RuntimeException unavailable(String message) {
    return Status.UNAVAILABLE.withDescription(message).asRuntimeException();
  }

  /** A client is its address, not its port. */
  private static String clientAddress(SocketAddress address) {
    if (address instanceof InetSocketAddress inet) {
      return inet.getAddress().getHostAddress();
    }
    return String.valueOf(address);
  }

  private static final MethodDescriptor.Marshaller<byte[]> BYTES =
      new MethodDescriptor.Marshaller<>() {
        @Override
        public InputStream stream(byte[] value) {
          return new ByteArrayInputStream(value);
        }

        @Override
        public byte[] parse(InputStream stream) {
          try {
            return stream.readAllBytes();
          } catch (IOException e) {
            throw Status.INTERNAL.withDescription("cannot read the request").withCause(e)
                .asRuntimeException();
          }
        }
      };
}
