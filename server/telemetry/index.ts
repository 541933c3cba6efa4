import { type Attributes, type Context, context, type Span, SpanKind, SpanStatusCode, trace } from "@opentelemetry/api";

/**
 * Traces (OpenTelemetry, GenAI conventions). Spans go through @opentelemetry/api only, a no-op
 * until a provider is registered; initTelemetry loads the SDK (./sdk) when
 * OTEL_EXPORTER_OTLP_ENDPOINT (or its _TRACES_ form) is set, so unset costs nothing.
 */

import type { ServiceName } from "./service";

export type { ServiceName };

// Per process, not per module copy: the web's front door (scripts/web.ts) and Next's bundle
// each load this module, and whichever starts tracing, the other must see it and can flush it.
const SHUTDOWN = Symbol.for("flotilla.telemetry.shutdown");
const state = globalThis as { [SHUTDOWN]?: () => Promise<void> };

/** Whether this environment asks for traces. */
export function tracesWanted(env: NodeJS.ProcessEnv = process.env): boolean {
  return Boolean(env.OTEL_EXPORTER_OTLP_ENDPOINT || env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT);
}

/** Starts exporting when the environment asks for it (once per process); else does nothing. */
export async function initTelemetry(service: ServiceName, env: NodeJS.ProcessEnv = process.env): Promise<void> {
  if (state[SHUTDOWN] || !tracesWanted(env)) return;
  const { startTracing } = await import("./sdk");
  state[SHUTDOWN] ??= startTracing(service, env);
}

/** Flushes the spans still queued and stops exporting (process exit). */
export async function shutdownTelemetry(): Promise<void> {
  const stop = state[SHUTDOWN];
  state[SHUTDOWN] = undefined;
  await stop?.();
}

const tracer = () => trace.getTracer("flotilla");

/** Attributes every invoke_agent span under this context carries (a batch item's ids). */
const RUN_ATTRIBUTES = Symbol.for("flotilla.run.attributes");

/** Runs fn with `attrs` joined to the invoke_agent spans started inside it. */
export function withRunAttributes<T>(attrs: Attributes, fn: () => T): T {
  const active = context.active();
  const own = active.getValue(RUN_ATTRIBUTES) as Attributes | undefined;
  return context.with(active.setValue(RUN_ATTRIBUTES, { ...own, ...attrs }), fn);
}

/** A failed span: status error, `error.type` the error's name or code. */
export function failSpan(span: Span, err: unknown): void {
  const type = (err as { code?: unknown })?.code ?? (err instanceof Error ? err.name : "error");
  span.setAttribute("error.type", String(type));
  span.setStatus({ code: SpanStatusCode.ERROR, message: err instanceof Error ? err.message : String(err) });
}

/** Runs fn inside a span that ends when fn settles (status error and `error.type` when it throws). */
export async function withSpan<T>(
  name: string,
  attrs: Attributes,
  fn: (span: Span) => Promise<T>,
  kind: SpanKind = SpanKind.INTERNAL,
): Promise<T> {
  return tracer().startActiveSpan(name, { kind, attributes: attrs }, async (span) => {
    try {
      return await fn(span);
    } catch (err) {
      failSpan(span, err);
      throw err;
    } finally {
      span.end();
    }
  });
}

/** A span started now and ended by the caller; `inSpan` runs work as its children. */
export function startSpan(name: string, attrs: Attributes, kind: SpanKind = SpanKind.INTERNAL): Span {
  return tracer().startSpan(name, { kind, attributes: attrs });
}

export function inSpan<T>(span: Span, fn: () => T, parent: Context = context.active()): T {
  return context.with(trace.setSpan(parent, span), fn);
}

export interface AgentRun {
  agent: string;
  model: string;
  threadId?: string;
  runId?: string;
}

/** invoke_agent <agent>: a lead, task, swarm child or batch-item run, with the ids it belongs to. */
export function startAgentSpan(run: AgentRun): Span {
  const inherited = context.active().getValue(RUN_ATTRIBUTES) as Attributes | undefined;
  return startSpan(`invoke_agent ${run.agent}`, {
    "gen_ai.operation.name": "invoke_agent",
    "gen_ai.agent.name": run.agent,
    "gen_ai.request.model": run.model,
    ...(run.threadId ? { "gen_ai.conversation.id": run.threadId } : {}),
    ...(run.runId ? { "flotilla.run.id": run.runId } : {}),
    ...inherited,
  });
}

/** Ends an invoke_agent span with what the run came to. */
export function endAgentSpan(
  span: Span,
  outcome: { runId?: string; status: string; usage: { inputTokens: number; outputTokens: number }; error?: string },
): void {
  if (outcome.runId) span.setAttribute("flotilla.run.id", outcome.runId);
  span.setAttributes({
    "gen_ai.usage.input_tokens": outcome.usage.inputTokens,
    "gen_ai.usage.output_tokens": outcome.usage.outputTokens,
    "flotilla.run.status": outcome.status,
  });
  if (outcome.status === "failed") {
    span.setAttribute("error.type", "run_failed");
    span.setStatus({ code: SpanStatusCode.ERROR, message: outcome.error });
  }
  span.end();
}

/** Runs a sub-agent run (runSubagent, a compatible-API batch item) inside its invoke_agent span. */
export function traceAgentRun<R extends { runId?: string; status: string; usage: { inputTokens: number; outputTokens: number }; error?: string }>(
  run: AgentRun,
  fn: () => Promise<R>,
): Promise<R> {
  const span = startAgentSpan(run);
  return inSpan(span, fn).then(
    (result) => {
      endAgentSpan(span, result);
      return result;
    },
    (err) => {
      failSpan(span, err);
      span.end();
      throw err;
    },
  );
}

export { SpanKind };
