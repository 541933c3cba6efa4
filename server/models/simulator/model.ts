import { randomUUID } from "node:crypto";
import {
  APICallError,
  type LanguageModelV3,
  type LanguageModelV3CallOptions,
  type LanguageModelV3Content,
  type LanguageModelV3FinishReason,
  type LanguageModelV3Prompt,
  type LanguageModelV3StreamPart,
  type LanguageModelV3ToolResultOutput,
  type LanguageModelV3Usage,
} from "@ai-sdk/provider";
import { baseAnswer, batchSettledAnswer, childrenSettledAnswer, exactChars, summariseToolResults } from "./answers";
import { echoText, parseDirectives, parseToolDirectives, type SimulatedToolCall, waitBeforeStep } from "./directives";
import { asksForCapabilities, CAPABILITIES_ANSWER, parseToolCalls } from "./grammar";
import {
  allTexts,
  estimateTokens,
  hash,
  isRepairTurn,
  itemPromptText,
  latestNotice,
  latestUserText,
  outputToText,
  promptChars,
  promptFingerprint,
  sinceLatestUser,
} from "./prompt";
import { isJudgeFormat, type JsonFormat, jsonAnswer, judgeAnswer, withoutExamples } from "./structured";

/**
 * The built-in simulator as an AI SDK v3 language model that needs no network: it answers
 * deterministically from the prompt, streams word-sized deltas spread over its latency, reports
 * token usage of about chars/4, fails or rate-limits on request, and honours abort signals.
 *
 * It reads the latest message only (never the system prompt or history):
 * - a notice (a lead turn that is not the user's, e.g. a batch settled) is answered from its
 *   typed facts (answers.ts), with no directives and no tool calls;
 * - a user message: its directives (directives.ts) and its chat grammar (grammar.ts), whose
 *   calls are made only when the last message is the user's; directives inside consumed
 *   grammar belong to the delegated prompts, not to this call;
 * - after tool results: a person's summary of them (answers.ts);
 * - [[tool:NAME {json}]] calls run one per model step, in order; once every one has run the
 *   answer carries each tool's text output verbatim (its first 2,000 characters);
 * - [[echo]]: the answer is the rest of the message verbatim;
 * - a JSON response format: the answer is JSON (structured.ts): a judge's verdict, a
 *   [[json:...]] value, a value valid against the format's schema, or `{"answer": ...}`; a
 *   repair turn (the executor asking again) answers from the item's own prompt, without tools.
 */

export const SIMULATOR_MODEL_ID = "simulator";
export const SIMULATOR_PROVIDER = "flotilla";
/** At most this many streamed deltas per answer; long answers get longer deltas. */
const MAX_DELTAS = 400;
/** Characters of each tool's output a [[tool:...]] answer repeats verbatim. */
export const TOOL_DIRECTIVE_OUTPUT_CHARS = 2_000;
/** Tool-call ids of [[tool:...]] steps carry this prefix, so later steps can count them. */
const TOOL_DIRECTIVE_ID = "call_tool_";

export interface SimulatorOptions {
  /** Default time to answer, spread across the streamed deltas. */
  latencyMs: number;
}

// "Once" directives remember prompt texts for the life of the process, as the contract says.
const failedOnce = new Set<string>();
const rateLimitedOnce = new Set<string>();
const jsonOnce = new Set<string>();

/** How many [[tool:...]] steps of the latest user message already ran. */
function toolDirectiveStepsDone(prompt: LanguageModelV3Prompt): number {
  return sinceLatestUser(prompt).filter(
    (m) =>
      m.role === "assistant" &&
      m.content.some((p) => p.type === "tool-call" && p.toolCallId.startsWith(TOOL_DIRECTIVE_ID)),
  ).length;
}

/** The answer once every [[tool:...]] ran: each tool's output verbatim (first 2,000 characters). */
function toolDirectiveAnswer(prompt: LanguageModelV3Prompt): string {
  const outputs: string[] = [];
  for (const m of sinceLatestUser(prompt)) {
    if (m.role !== "tool") continue;
    for (const part of m.content) {
      if (part.type !== "tool-result" || !part.toolCallId.startsWith(TOOL_DIRECTIVE_ID)) continue;
      outputs.push(`${part.toolName}:\n${outputToText(part.output).slice(0, TOOL_DIRECTIVE_OUTPUT_CHARS)}`);
    }
  }
  const noun = outputs.length === 1 ? "tool call" : "tool calls";
  return `Ran ${outputs.length} ${noun}.\n\n${outputs.join("\n\n")}`;
}

/** The tool results that end the prompt (this step's), in call order. */
function trailingToolResults(prompt: LanguageModelV3Prompt) {
  const results: Array<{ toolName: string; output: LanguageModelV3ToolResultOutput }> = [];
  for (let i = prompt.length - 1; i >= 0; i--) {
    const message = prompt[i];
    if (message.role !== "tool") break;
    const parts: typeof results = [];
    for (const part of message.content) {
      if (part.type === "tool-result") parts.push({ toolName: part.toolName, output: part.output });
    }
    results.unshift(...parts);
  }
  return results;
}

// ---------------------------------------------------------------------------------------------
// Timing

function abortReason(signal: AbortSignal): unknown {
  return signal.reason ?? new DOMException("This operation was aborted", "AbortError");
}

/** Resolves after ms, or rejects with the abort reason as soon as the signal fires. */
function delay(ms: number, signal?: AbortSignal): Promise<void> {
  if (signal?.aborted) return Promise.reject(abortReason(signal));
  if (ms <= 0) return Promise.resolve();
  return new Promise((resolve, reject) => {
    const onAbort = () => {
      clearTimeout(timer);
      reject(abortReason(signal as AbortSignal));
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** Word-sized pieces ("word " with its trailing space), merged when there would be too many. */
export function splitDeltas(text: string, maxDeltas = MAX_DELTAS): string[] {
  const words = text.match(/\s*\S+\s*/g) ?? (text ? [text] : []);
  if (words.length <= maxDeltas) return words;
  const per = Math.ceil(words.length / maxDeltas);
  const out: string[] = [];
  for (let i = 0; i < words.length; i += per) out.push(words.slice(i, i + per).join(""));
  return out;
}

// ---------------------------------------------------------------------------------------------
// The model

interface Plan {
  latencyMs: number;
  /** True when the prompt asked for [[sleep:MS]]; failures then wait too. */
  explicitSleep: boolean;
  text: string;
  calls: Array<SimulatedToolCall & { toolCallId: string }>;
  usage: LanguageModelV3Usage;
  finishReason: LanguageModelV3FinishReason;
  /** Thrown (after an explicit [[sleep]]) instead of answering. */
  error?: unknown;
  /** [[wait-after-step:N:MS]]: waited before anything else of this step. */
  waitMs: number;
}

function rateLimitError(): APICallError {
  return new APICallError({
    message: "Rate limit exceeded (simulated 429). Retry after 1 second.",
    url: "simulator://chat/completions",
    requestBodyValues: {},
    statusCode: 429,
    responseHeaders: { "retry-after": "1" },
    responseBody: JSON.stringify({ error: { type: "rate_limit_exceeded", message: "Rate limit exceeded" } }),
    isRetryable: true,
  });
}

function failureError(once: boolean): APICallError {
  return new APICallError({
    message: once ? "Simulated model failure ([[fail-once]], first attempt)" : "Simulated model failure ([[fail]])",
    url: "simulator://chat/completions",
    requestBodyValues: {},
    statusCode: 500,
    responseBody: JSON.stringify({ error: { type: "server_error", message: "Simulated failure" } }),
    // Not retryable, so the AI SDK surfaces it at once and callers decide about retries.
    isRetryable: false,
  });
}

/** What to say (text and/or tool calls), the directives that shape it, and the error to throw instead. */
interface Reply {
  text: string;
  calls: SimulatedToolCall[];
  /** Tool-call ids of [[tool:...]] steps are numbered, so later steps can count them. */
  callIdPrefix: string;
  sleepMs?: number;
  error?: unknown;
  waitMs?: number;
}

/** The reply to the latest user message (or to the tool results of its earlier steps). */
function replyToUser(options: LanguageModelV3CallOptions, format: JsonFormat | undefined): Reply {
  const prompt = options.prompt;
  if (format && isRepairTurn(prompt)) {
    const itemText = itemPromptText(prompt);
    return { text: jsonAnswer(itemText, format, baseAnswer(itemText, hash(itemText)), jsonOnce), calls: [], callIdPrefix: "" };
  }
  const quoted = latestUserText(prompt);
  // A batch's examples (other items' answers) are data: no directive or grammar line in them acts.
  const userText = withoutExamples(quoted);
  const last = prompt[prompt.length - 1];
  const offered = new Set(
    options.toolChoice?.type === "none"
      ? []
      : (options.tools ?? []).filter((t) => t.type === "function").map((t) => t.name),
  );
  // Grammar lines belong to the calls they make, so their directives never apply to this call,
  // also in later steps (after tool results) of the same user message.
  const grammar = offered.size > 0 ? parseToolCalls(userText, offered) : { calls: [], rest: userText };
  // [[tool:...]] outside the grammar (a `task:` line keeps its own for the sub-agent) run one per
  // model call, in order, instead of the grammar's calls.
  const directed = parseToolDirectives(grammar.rest);
  const directedDone = directed.calls.length > 0 ? toolDirectiveStepsDone(prompt) : 0;
  const nextDirected =
    directedDone < directed.calls.length && (last?.role === "user" || last?.role === "tool")
      ? directed.calls[directedDone]
      : undefined;
  const directives = parseDirectives(directed.rest);

  let error: unknown;
  if (directives.fail) error = failureError(false);
  else if (directives.failOnce && !failedOnce.has(userText)) {
    failedOnce.add(userText);
    error = failureError(true);
  } else if (directives.rateLimit) error = rateLimitError();
  else if (directives.rateLimitOnce && !rateLimitedOnce.has(userText)) {
    rateLimitedOnce.add(userText);
    error = rateLimitError();
  }
  const reply = { sleepMs: directives.sleepMs, error, text: "", waitMs: stepWait(prompt, directed.rest) };

  if (nextDirected) return { ...reply, calls: [nextDirected], callIdPrefix: `${TOOL_DIRECTIVE_ID}${directedDone}_` };
  if (last?.role === "user" && directed.calls.length === 0 && grammar.calls.length > 0)
    return { ...reply, calls: grammar.calls, callIdPrefix: "call_sim_" };
  const none = { ...reply, calls: [], callIdPrefix: "" };
  const text = answerText(prompt, userText, quoted, directed, directives.chars);
  return { ...none, text: format ? jsonAnswer(quoted, format, text, jsonOnce) : text };
}

/** [[wait-after-step:N:MS]] of the user's message, for this model step (assistant turns since it, plus one). */
function stepWait(prompt: LanguageModelV3Prompt, text: string): number {
  if (!text.includes("wait-after-step")) return 0;
  return waitBeforeStep(text, sinceLatestUser(prompt).filter((m) => m.role === "assistant").length + 1);
}

/** The text answer once no tool call is left to make. */
function answerText(
  prompt: LanguageModelV3Prompt,
  userText: string,
  quoted: string,
  directed: { calls: SimulatedToolCall[]; rest: string },
  chars: number | undefined,
): string {
  const last = prompt[prompt.length - 1];
  // [[echo]] of the item's own text answers the prompt as sent, examples and all: what the model was given.
  const echo = directed.calls.length > 0 ? echoText(directed.rest) : echoText(userText) === undefined ? undefined : echoText(quoted);
  if (directed.calls.length > 0) {
    const answer = toolDirectiveAnswer(prompt);
    return echo === undefined ? answer : `${echo}\n\n${answer}`;
  }
  if (echo !== undefined) return echo;
  const seed = hash(promptFingerprint(prompt));
  const base =
    last?.role === "tool"
      ? (summariseToolResults(trailingToolResults(prompt)) ?? baseAnswer(userText, seed))
      : asksForCapabilities(userText)
        ? CAPABILITIES_ANSWER
        : baseAnswer(userText, seed);
  return chars === undefined ? base : exactChars(base, chars);
}

function plan(options: LanguageModelV3CallOptions, defaultLatencyMs: number): Plan {
  const format = options.responseFormat?.type === "json" ? options.responseFormat : undefined;
  // A notice is not the user's message: answered from its facts, no directives, no tool calls.
  // A judge reads only [[judge-fail]]: the item's prompt it quotes holds the item's directives.
  const notice = latestNotice(options.prompt);
  const reply: Reply = isJudgeFormat(format)
    ? { text: judgeAnswer(allTexts(options.prompt)), calls: [], callIdPrefix: "" }
    : notice
      ? { text: notice.kind === "batch_settled" ? batchSettledAnswer(notice) : childrenSettledAnswer(notice), calls: [], callIdPrefix: "" }
      : replyToUser(options, format);
  const callId = () => `${reply.callIdPrefix}${randomUUID().replace(/-/g, "").slice(0, 16)}`;
  const calls = reply.calls.map((c) => ({ ...c, toolCallId: callId() }));
  const { text } = reply;
  const inputTokens = estimateTokens(promptChars(options));
  const outputChars = text.length + calls.reduce((n, c) => n + c.toolName.length + JSON.stringify(c.input).length, 0);
  const outputTokens = estimateTokens(outputChars);
  return {
    latencyMs: reply.sleepMs ?? defaultLatencyMs,
    explicitSleep: reply.sleepMs !== undefined,
    text,
    calls,
    error: reply.error,
    waitMs: reply.waitMs ?? 0,
    finishReason: calls.length > 0 ? { unified: "tool-calls", raw: "tool_calls" } : { unified: "stop", raw: "stop" },
    usage: {
      inputTokens: { total: inputTokens, noCache: inputTokens, cacheRead: 0, cacheWrite: 0 },
      outputTokens: { total: outputTokens, text: estimateTokens(text.length), reasoning: 0 },
    },
  };
}

/** Parts between stream-start and finish, each streamed at its own moment. */
function contentParts(p: Plan): LanguageModelV3StreamPart[] {
  const parts: LanguageModelV3StreamPart[] = [];
  if (p.text) {
    const id = "txt-0";
    parts.push({ type: "text-start", id });
    for (const delta of splitDeltas(p.text)) parts.push({ type: "text-delta", id, delta });
    parts.push({ type: "text-end", id });
  }
  for (const call of p.calls) {
    const input = JSON.stringify(call.input);
    parts.push({ type: "tool-input-start", id: call.toolCallId, toolName: call.toolName });
    for (const delta of splitDeltas(input, 20)) parts.push({ type: "tool-input-delta", id: call.toolCallId, delta });
    parts.push({ type: "tool-input-end", id: call.toolCallId });
    parts.push({ type: "tool-call", toolCallId: call.toolCallId, toolName: call.toolName, input });
  }
  return parts;
}

function isTimed(part: LanguageModelV3StreamPart): boolean {
  return part.type === "text-delta" || part.type === "tool-input-delta";
}

export function createSimulatorModel(options: SimulatorOptions): LanguageModelV3 {
  const defaultLatencyMs = Math.max(0, options.latencyMs);
  return {
    specificationVersion: "v3",
    provider: SIMULATOR_PROVIDER,
    modelId: SIMULATOR_MODEL_ID,
    supportedUrls: {},

    async doGenerate(call) {
      const p = plan(call, defaultLatencyMs);
      await delay(p.waitMs, call.abortSignal);
      if (p.error) {
        if (p.explicitSleep) await delay(p.latencyMs, call.abortSignal);
        else if (call.abortSignal?.aborted) throw abortReason(call.abortSignal);
        throw p.error;
      }
      await delay(p.latencyMs, call.abortSignal);
      const content: LanguageModelV3Content[] = [];
      if (p.text) content.push({ type: "text", text: p.text });
      for (const c of p.calls)
        content.push({ type: "tool-call", toolCallId: c.toolCallId, toolName: c.toolName, input: JSON.stringify(c.input) });
      return {
        content,
        finishReason: p.finishReason,
        usage: p.usage,
        warnings: [],
        response: { id: `sim-${randomUUID()}`, modelId: SIMULATOR_MODEL_ID, timestamp: new Date() },
      };
    },

    async doStream(call) {
      const p = plan(call, defaultLatencyMs);
      const signal = call.abortSignal;
      await delay(p.waitMs, signal);
      if (p.error) {
        // Errors arrive like a provider's: at once, unless the prompt asked for a [[sleep]] first.
        if (p.explicitSleep) await delay(p.latencyMs, signal);
        else if (signal?.aborted) throw abortReason(signal);
        throw p.error;
      }
      if (signal?.aborted) throw abortReason(signal);

      const parts = contentParts(p);
      const timedCount = Math.max(1, parts.filter(isTimed).length);
      // A private controller also stops the timers when the consumer cancels the stream.
      const local = new AbortController();
      let errorStream: ((reason: unknown) => void) | undefined;
      const onAbort = () => {
        const reason = abortReason(signal as AbortSignal);
        local.abort(reason);
        // At once: parts already queued (a loaded machine may queue several) are dropped too.
        errorStream?.(reason);
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      const cleanup = () => signal?.removeEventListener("abort", onAbort);

      const stream = new ReadableStream<LanguageModelV3StreamPart>({
        async start(controller) {
          errorStream = (reason) => controller.error(reason);
          const started = Date.now();
          controller.enqueue({ type: "stream-start", warnings: [] });
          controller.enqueue({
            type: "response-metadata",
            id: `sim-${randomUUID()}`,
            modelId: SIMULATOR_MODEL_ID,
            timestamp: new Date(started),
          });
          let timed = 0;
          try {
            for (const part of parts) {
              if (isTimed(part)) {
                timed++;
                // Deltas land evenly across the latency, measured from the start to avoid drift.
                const due = started + (p.latencyMs * timed) / timedCount;
                await delay(due - Date.now(), local.signal);
              }
              controller.enqueue(part);
            }
            if (timed === 0) await delay(started + p.latencyMs - Date.now(), local.signal);
            controller.enqueue({ type: "finish", usage: p.usage, finishReason: p.finishReason });
            controller.close();
          } catch (err) {
            if (!local.signal.aborted || signal?.aborted) controller.error(err);
          } finally {
            cleanup();
          }
        },
        cancel(reason) {
          local.abort(reason);
          cleanup();
        },
      });
      return { stream, request: { body: { simulator: true } }, response: { headers: {} } };
    },
  };
}

/** Forgets [[fail-once]] / [[429-once]] / [[json-once]] history (tests only). */
export function resetSimulatorOnceState(): void {
  failedOnce.clear();
  rateLimitedOnce.clear();
  jsonOnce.clear();
}
