import com.google.protobuf.Descriptors.Descriptor;
import com.google.protobuf.DynamicMessage;
import dev.tidelake.ingest.DescriptorSets;
import io.grpc.CallOptions;
import io.grpc.ClientCall;
import io.grpc.ManagedChannel;
import io.grpc.MethodDescriptor;
import io.grpc.netty.shaded.io.grpc.netty.NettyChannelBuilder;
import io.grpc.stub.ClientCalls;
import io.grpc.stub.StreamObserver;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * trackCall load from grpc-java: keeps N calls in flight for D seconds over 4 channels, requests
 * serialized before the clock starts; its own CPU is counted from the clock's start. Python's gRPC client cost ~160 µs of CPU a call, more than
 * the service: on two cores it, not the service, would be what is measured.
 *
 * <p>{@code java -cp <ingest classpath> UnaryLoad.java <port> <in flight> <seconds> <first>
 * <call.binpb> <warm-up seconds>}; prints "measuring" when the measured run
 * starts, then its figures as one JSON line.
 */
public final class UnaryLoad {
  private static final MethodDescriptor.Marshaller<byte[]> BYTES =
      new MethodDescriptor.Marshaller<>() {
        public InputStream stream(byte[] value) {
          return new ByteArrayInputStream(value);
        }

        public byte[] parse(InputStream in) {
          try {
            return in.readAllBytes();
          } catch (IOException e) {
            throw new RuntimeException(e);
          }
        }
      };
  private static final MethodDescriptor<byte[], byte[]> TRACK_CALL =
      MethodDescriptor.<byte[], byte[]>newBuilder()
          .setType(MethodDescriptor.MethodType.UNARY)
          .setFullMethodName("tidelake.v1.CallEventService/trackCall")
          .setRequestMarshaller(BYTES)
          .setResponseMarshaller(BYTES)
          .build();

  public static void main(String[] args) throws Exception {
    int port = Integer.parseInt(args[0]);
    int inFlight = Integer.parseInt(args[1]);
    double seconds = Double.parseDouble(args[2]);
    long first = Long.parseLong(args[3]);
    Descriptor event =
        DescriptorSets.message(
            DescriptorSets.files(Files.readAllBytes(Path.of(args[4]))), "tidelake.v1.CallEvent");
    double warmUp = Double.parseDouble(args[5]);
    long now = System.currentTimeMillis();
    int planned = (int) Math.min(2_000_000, Math.max(100_000, seconds * 40_000));
    byte[][] requests = new byte[planned][];
    String[] regions = {"us1", "us2", "de1"};
    for (int i = 0; i < planned; i++) {
      long n = first + i;
      requests[i] =
          DynamicMessage.newBuilder(event)
              .setField(event.findFieldByName("call_sid"), String.format("CA%032x", n))
              .setField(event.findFieldByName("account_sid"), String.format("AC%032x", n % 97))
              .setField(event.findFieldByName("duration"), (int) (n % 600))
              .setField(
                  event.findFieldByName("call_state"),
                  event.findFieldByName("call_state").getEnumType()
                      .findValueByName(n % 10 == 0 ? "failed" : "completed"))
              .setField(
                  event.findFieldByName("region"),
                  event.findFieldByName("region").getEnumType()
                      .findValueByName(regions[(int) (n % 3)]))
              .setField(event.findFieldByName("event_time"), now)
              .build()
              .toByteArray();
    }
    ManagedChannel[] channels = new ManagedChannel[4];
    for (int c = 0; c < channels.length; c++) {
      channels[c] = NettyChannelBuilder.forAddress("127.0.0.1", port).usePlaintext().build();
    }
    if (warmUp > 0) {
      run(channels, requests, inFlight, warmUp); // both JVMs compile their hot paths first
    }
    System.out.println("measuring");
    System.out.flush();
    System.out.println(run(channels, requests, inFlight, seconds));
    for (ManagedChannel c : channels) {
      c.shutdownNow();
    }
  }

  /** Calls for `seconds` with `inFlight` outstanding; the figures as one JSON object. */
  private static String run(
      ManagedChannel[] channels, byte[][] requests, int inFlight, double seconds)
      throws InterruptedException {
    int planned = requests.length;
    long[] latencies = new long[planned];
    AtomicInteger ok = new AtomicInteger();
    AtomicInteger failed = new AtomicInteger();
    Map<String, Integer> failures = new HashMap<>();
    Semaphore slots = new Semaphore(inFlight);
    var os = (com.sun.management.OperatingSystemMXBean)
        java.lang.management.ManagementFactory.getOperatingSystemMXBean();
    long cpuStarted = os.getProcessCpuTime();
    long started = System.nanoTime();
    long end = started + (long) (seconds * 1e9);
    int sent = 0;
    while (sent < planned && System.nanoTime() < end) {
      slots.acquire();
      int index = sent++;
      long t0 = System.nanoTime();
      ClientCall<byte[], byte[]> call =
          channels[index % channels.length].newCall(
              TRACK_CALL, CallOptions.DEFAULT.withDeadlineAfter(30, TimeUnit.SECONDS));
      ClientCalls.asyncUnaryCall(
          call,
          requests[index],
          new StreamObserver<byte[]>() {
            public void onNext(byte[] reply) {}

            public void onError(Throwable t) {
              failed.incrementAndGet();
              synchronized (failures) {
                failures.merge(io.grpc.Status.fromThrowable(t).getCode().name(), 1, Integer::sum);
              }
              slots.release();
            }

            public void onCompleted() {
              latencies[index] = System.nanoTime() - t0;
              ok.incrementAndGet();
              slots.release();
            }
          });
    }
    slots.acquire(inFlight);
    double elapsed = (System.nanoTime() - started) / 1e9;
    double cpu = (os.getProcessCpuTime() - cpuStarted) / 1e9;
    long[] done = Arrays.stream(latencies, 0, sent).filter(l -> l > 0).sorted().toArray();
    return String.format(
        "{\"requests\": %d, \"failures\": %d, \"failure_codes\": \"%s\", \"seconds\": %.2f,"
            + " \"requests_per_s\": %.1f, \"concurrency\": %d, \"p50_ms\": %.2f, \"p90_ms\": %.2f,"
            + " \"p99_ms\": %.2f, \"max_ms\": %.2f, \"client_cpu_s\": %.2f}",
        ok.get(), failed.get(), failures, elapsed, ok.get() / elapsed, inFlight,
        percentile(done, 50), percentile(done, 90), percentile(done, 99), percentile(done, 100),
        cpu);
  }

  private static double percentile(long[] sorted, double p) {
    if (sorted.length == 0) {
      return 0;
    }
    int i = (int) Math.min(sorted.length - 1, Math.ceil(p / 100 * sorted.length) - 1);
    return sorted[Math.max(0, i)] / 1e6;
  }
}
