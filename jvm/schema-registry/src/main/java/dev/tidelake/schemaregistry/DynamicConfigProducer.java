package dev.tidelake.schemaregistry;

import io.apicurio.common.apps.config.DynamicConfigPropertyList;
import java.util.List;
import javax.enterprise.context.ApplicationScoped;
import javax.enterprise.inject.Produces;

/**
 * The bean that Apicurio's config-index extension makes at build time, whose deployment jar Maven
 * Central does not serve: the list of properties that may be changed while the registry runs.
 * Empty here, so none can (a local registry for development and tests needs none).
 */
@ApplicationScoped
public class DynamicConfigProducer {
  @Produces
  @ApplicationScoped
  DynamicConfigPropertyList dynamicConfigProperties() {
    return new DynamicConfigPropertyList(List.of());
  }
}
