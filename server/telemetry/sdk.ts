import { DiagConsoleLogger, DiagLogLevel, diag } from "@opentelemetry/api";
import { OTLPTraceExporter as JsonExporter } from "@opentelemetry/exporter-trace-otlp-http";
import { OTLPTraceExporter as ProtobufExporter } from "@opentelemetry/exporter-trace-otlp-proto";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { BatchSpanProcessor, NodeTracerProvider, type SpanExporter } from "@opentelemetry/sdk-trace-node";
import { ATTR_SERVICE_NAME } from "@opentelemetry/semantic-conventions";
import type { ServiceName } from "./service";

/**
 * The OpenTelemetry SDK, loaded only when traces are asked for (./index.ts initTelemetry).
 * The exporters read OTEL_EXPORTER_OTLP_ENDPOINT / _HEADERS / _TIMEOUT themselves.
 */

const PROTOCOLS = ["http/protobuf", "http/json"] as const;

/** Registers the tracer provider (AsyncLocalStorage context) and returns its flush-and-stop. */
export function startTracing(service: ServiceName, env: NodeJS.ProcessEnv): () => Promise<void> {
  const protocol = env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL || env.OTEL_EXPORTER_OTLP_PROTOCOL || "http/protobuf";
  if (!(PROTOCOLS as readonly string[]).includes(protocol))
    throw new Error(`OTEL_EXPORTER_OTLP_PROTOCOL: must be http/protobuf or http/json (got "${protocol}")`);
  // Export failures (collector down) are warnings, never a crash.
  diag.setLogger(new DiagConsoleLogger(), DiagLogLevel.WARN);
  const exporter: SpanExporter = protocol === "http/json" ? new JsonExporter() : new ProtobufExporter();
  const provider = new NodeTracerProvider({
    resource: resourceFromAttributes({ [ATTR_SERVICE_NAME]: env.OTEL_SERVICE_NAME || service }),
    spanProcessors: [new BatchSpanProcessor(exporter)],
  });
  provider.register();
  return () => provider.shutdown();
}
