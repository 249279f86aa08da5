package dev.tidelake.ingest;

import com.google.protobuf.Descriptors.Descriptor;
import com.google.protobuf.Descriptors.FileDescriptor;
import io.grpc.Server;
import io.grpc.ServerInterceptors;
import io.grpc.health.v1.HealthCheckResponse.ServingStatus;
import io.grpc.netty.shaded.io.grpc.netty.GrpcSslContexts;
import io.grpc.netty.shaded.io.grpc.netty.NettyServerBuilder;
import io.grpc.netty.shaded.io.netty.handler.ssl.ClientAuth;
import io.grpc.netty.shaded.io.netty.handler.ssl.SslContextBuilder;
import io.grpc.protobuf.services.HealthStatusManager;
import io.grpc.protobuf.services.ProtoReflectionService;
import io.grpc.protobuf.services.ProtoReflectionServiceV1;
import java.io.File;
import java.io.IOException;
import java.net.BindException;
import java.net.InetSocketAddress;
import java.nio.file.Path;
import java.util.Base64;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.logging.Logger;

/**
 * {@code java dev.tidelake.ingest.IngestMain <config.json>}: the ingest service, started by
 * {@code tidelake serve} (platform/calls/ingest_launcher.py), which checked the address and the
 * security settings first. Stdout carries two lines for the launcher: {@code listening <port>}
 * once serving, {@code unacknowledged <n>} after a graceful stop (SIGTERM, or stdin closed because
 * the launcher is gone). A start-up failure is one line on stderr and exit code 2.
 */
public final class IngestMain {
  static final String LOGGER = "tidelake.ingest";
  private static final Logger LOG = Logger.getLogger(LOGGER);

  private IngestMain() {}

  public static void main(String[] args) throws Exception {
    IngestLog.install();
    try {
      serve(IngestConfig.read(Path.of(args[0])));
    } catch (Exception e) {
      LOG.log(java.util.logging.Level.SEVERE, "the ingest service could not start", e);
      System.err.println("the ingest service could not start: " + e);
      Runtime.getRuntime().halt(2);
    }
  }

  private static void serve(IngestConfig config) throws Exception {
    List<FileDescriptor> files =
        DescriptorSets.files(
            Base64.getDecoder().decode(config.contract().get("descriptor_set").getAsString()));
    Descriptor message =
        DescriptorSets.message(files, config.contract().get("message").getAsString());
    FileDescriptor file =
        files.stream()
            .filter(f -> f.findServiceByName("CallEventService") != null)
            .findFirst()
            .orElseThrow(
                () -> new IllegalArgumentException("the descriptor set lacks CallEventService"));
    FlowContract contract = new FlowContract(config.contract(), message);
    TopicProducer kafka = new TopicProducer(config);
    ScheduledThreadPoolExecutor timers = new ScheduledThreadPoolExecutor(1);
    timers.setRemoveOnCancelPolicy(true);
    ExecutorService reads = Executors.newFixedThreadPool(2);
    CallLookup lookup =
        new CallLookup(config.tableUri(), config.offsetColumn(), contract, config.hadoop());
    CallEventService calls =
        new CallEventService(config, file, contract, kafka, lookup, timers, reads);
    HealthStatusManager health = new HealthStatusManager();
    NettyServerBuilder builder =
        NettyServerBuilder.forAddress(new InetSocketAddress(config.host(), config.port()))
            .addService(
                config.token() == null
                    ? calls.definition()
                    : ServerInterceptors.intercept(
                        calls.definition(), new BearerToken(config.token(), calls.name())))
            .addService(health.getHealthService())
            .addService(ProtoReflectionServiceV1.newInstance())
            .addService(ProtoReflectionService.newInstance());
    if (config.tlsCert() != null) {
      SslContextBuilder tls =
          GrpcSslContexts.forServer(new File(config.tlsCert()), new File(config.tlsKey()));
      if (config.clientCa() != null) {
        tls.trustManager(new File(config.clientCa())).clientAuth(ClientAuth.REQUIRE);
      }
      builder.sslContext(tls.build());
    }
    Server server;
    try {
      server = builder.build().start();
    } catch (IOException e) {
      System.err.println(startFailure(config, e));
      kafka.close(0);
      Runtime.getRuntime().halt(2);
      return;
    }
    follow(kafka, health, calls.name(), timers, config.healthIntervalMs());
    Runtime.getRuntime()
        .addShutdownHook(
            new Thread(() -> stop(server, health, kafka, timers, reads, config), "ingest-stop"));
    daemon("launcher-watch", IngestMain::exitWhenStdinCloses);
    LOG.info(
        "ingest service listening on "
            + config.host()
            + ":"
            + server.getPort()
            + " ("
            + (config.tlsCert() != null ? "TLS" : "plaintext")
            + (config.token() != null ? ", bearer token" : "")
            + ") -> topic "
            + config.topic());
    System.out.println("listening " + server.getPort());
    System.out.flush();
    server.awaitTermination();
  }

  /** Health is SERVING while Kafka answers, NOT_SERVING while it does not. */
  private static void follow(
      TopicProducer kafka,
      HealthStatusManager health,
      String service,
      ScheduledThreadPoolExecutor timers,
      long intervalMs) {
    Runnable update =
        () -> {
          ServingStatus status =
              kafka.unavailableReason() == null ? ServingStatus.SERVING : ServingStatus.NOT_SERVING;
          health.setStatus(HealthStatusManager.SERVICE_NAME_ALL_SERVICES, status);
          health.setStatus(service, status);
        };
    update.run();
    long every = Math.min(intervalMs, 1000);
    timers.scheduleWithFixedDelay(update, every, every, TimeUnit.MILLISECONDS);
  }

  /** Health NOT_SERVING, new calls refused, calls in flight get the grace, then Kafka is
   * flushed; prints how many events Kafka never acknowledged. */
  private static void stop(
      Server server,
      HealthStatusManager health,
      TopicProducer kafka,
      ScheduledThreadPoolExecutor timers,
      ExecutorService reads,
      IngestConfig config) {
    health.enterTerminalState();
    server.shutdown();
    try {
      server.awaitTermination(config.shutdownGraceMs(), TimeUnit.MILLISECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
    server.shutdownNow();
    long left = kafka.close(config.shutdownGraceMs());
    timers.shutdownNow();
    reads.shutdownNow();
    System.out.println("unacknowledged " + left);
    System.out.flush();
  }

  static Thread daemon(String name, Runnable body) {
    Thread thread = new Thread(body, name);
    thread.setDaemon(true);
    thread.start();
    return thread;
  }

  private static void exitWhenStdinCloses() {
    try {
      while (System.in.read() != -1) {
        // the launcher writes nothing; EOF means it is gone
      }
    } catch (IOException e) {
      // same: no launcher
    }
    System.exit(0);
  }

  private static String startFailure(IngestConfig config, IOException e) {
    Throwable cause = e.getCause() != null ? e.getCause() : e;
    if (cause instanceof BindException) {
      return "cannot listen on " + config.host() + ":" + config.port() + ": the address is taken";
    }
    return "cannot listen on " + config.host() + ":" + config.port() + ": " + cause.getMessage();
  }
}
