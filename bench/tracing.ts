import { startReceiver } from "../test/telemetry/receiver";

/**
 * Tracing on for a bench row (issue 44 step 6): `BENCH_TRACING=1` adds, beside a row measured with
 * tracing off (the default: no OTEL_EXPORTER_OTLP_ENDPOINT, so the SDK is never loaded), the same
 * row with the processes under test exporting every span (http/protobuf, the default protocol)
 * to a local OTLP receiver (test/telemetry/receiver.ts), as a deployment with a collector runs.
 */
export const tracingRows = () => process.env.BENCH_TRACING === "1";

export interface TraceSink {
  /** The environment that turns tracing on in a web or worker process. */
  env: Record<string, string>;
  /** Spans received so far (proof the row ran with tracing on). */
  spans(): number;
  close(): Promise<void>;
}

export async function traceSink(): Promise<TraceSink> {
  const receiver = await startReceiver();
  return {
    env: { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint },
    spans: () => receiver.spans().length,
    close: () => receiver.close(),
  };
}
