package dev.tidelake.ingest;

import com.google.protobuf.Any;
import com.google.protobuf.Descriptors.Descriptor;
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
import java.util.List;
import java.util.Optional;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
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
  private final AckDeadlines unaryDeadlines;
  private final ServiceDescriptor service;
  private final Descriptor callSid;
  private final Descriptor batch;
  private final BatchStream.Shared streams;

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
    this.slots = new StreamSlots(config.streamsPerClient(), config.streamsTotal());
    this.unaryDeadlines = new AckDeadlines(config.ackTimeoutMs(), timers);
    this.streams =
        new BatchStream.Shared(
            contract,
            batch,
            new BatchAnswers(
                service.findMethodByName("trackCalls").getOutputType(), contract.keyField()),
            kafka,
            timers,
            config.ackTimeoutMs(),
            config.maxInFlight(),
            new EventWindow(config.maxInFlightTotal(), resume),
            slots,
            resume);
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
    String late = TopicProducer.notInTime(waitMs);
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

  // -- trackCalls --------------------------------------------------------------------------

  private ServerCall.Listener<DynamicMessage> trackCalls(
      ServerCall<DynamicMessage, DynamicMessage> call, Metadata headers) {
    String client = clientAddress(call.getAttributes().get(Grpc.TRANSPORT_ATTR_REMOTE_ADDR));
    String refusal = slots.take(client);
    if (refusal != null) {
      call.close(Status.RESOURCE_EXHAUSTED.withDescription(refusal), new Metadata());
      return new ServerCall.Listener<>() {};
    }
    BatchStream stream = new BatchStream(call, client, streams);
    call.sendHeaders(new Metadata());
    call.request(1);
    return stream;
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
            .setMessage(FlowContract.Violation.joined(problems))
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
