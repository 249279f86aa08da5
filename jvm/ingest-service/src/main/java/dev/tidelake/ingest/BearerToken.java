package dev.tidelake.ingest;

import io.grpc.Metadata;
import io.grpc.ServerCall;
import io.grpc.ServerCallHandler;
import io.grpc.ServerInterceptor;
import io.grpc.Status;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;

/**
 * Every call of the protected service must carry {@code authorization: Bearer <token>}, compared
 * in constant time; health checks and reflection stay open (load balancers and tools probe them).
 */
final class BearerToken implements ServerInterceptor {
  static final String REFUSAL =
      "this service needs a bearer token: send the metadata 'authorization: Bearer <token>' with"
          + " the token its operators gave you";
  private static final Metadata.Key<String> AUTHORIZATION =
      Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER);

  private final byte[] expected;
  private final String service;

  BearerToken(String token, String service) {
    this.expected = ("Bearer " + token).getBytes(StandardCharsets.UTF_8);
    this.service = service;
  }

  @Override
  public <Q, A> ServerCall.Listener<Q> interceptCall(
      ServerCall<Q, A> call, Metadata headers, ServerCallHandler<Q, A> next) {
    if (!service.equals(call.getMethodDescriptor().getServiceName())) {
      return next.startCall(call, headers);
    }
    String given = headers.get(AUTHORIZATION);
    if (given != null
        && MessageDigest.isEqual(given.getBytes(StandardCharsets.UTF_8), expected)) {
      return next.startCall(call, headers);
    }
    call.close(Status.UNAUTHENTICATED.withDescription(REFUSAL), new Metadata());
    return new ServerCall.Listener<>() {};
  }
}
