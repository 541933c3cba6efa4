/**
 * Run as a process (`node --import tsx test/telemetry/probe.ts`): starts telemetry as the worker
 * does, then prints the OpenTelemetry packages this process loaded besides the API.
 */
import { initTelemetry, shutdownTelemetry } from "@/server/telemetry";

async function main() {
  await initTelemetry("flotilla-worker");
  const loaded = Object.keys(require.cache)
    .map((p) => /@opentelemetry\/([^/]+)/.exec(p)?.[1])
    .filter((name): name is string => name !== undefined && name !== "api");
  process.stdout.write(`${JSON.stringify([...new Set(loaded)])}\n`);
  await shutdownTelemetry();
}

void main();
