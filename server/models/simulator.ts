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

/**
 * The built-in simulator: a real AI SDK v3 language model that needs no network. It answers
 * deterministically from the prompt, streams word-sized deltas spread over its latency, reports
 * token usage of about chars/4, and honours abort signals.
 *
 * Everything below is read from the latest user message only (never the system prompt or history):
 * - Directives: [[sleep:MS]] answer after MS ms; [[fail]] non-retryable provider error (HTTP 500);
 *   [[fail-once]] that error only on the first call with this exact message text in this process;
 *   [[429]] / [[429-once]] a retryable APICallError 429 with `retry-after: 1`; [[chars:N]] an answer
 *   of exactly N characters. Errors come at once unless [[sleep]] is also given.
 * - Tool calls, only for tools offered in the call and only when the last message is the user's
 *   (all calls of one message are emitted together, as parallel calls):
 *     [[call:TOOL {json}]]  anywhere, any number (`[[call:TOOL]]` means {})
 *     task: PROMPT          per line → task {subagent:"general", description, prompt}
 *     swarm: TEMPLATE | a; b; c → agent_swarm {profile:"general", prompt_template, items}
 *     batch: TEMPLATE | a; b; c → batch_task {prompt_template, items}
 *     batch xN: TEMPLATE    → batch_task {prompt_template, items: ["1".."N"]}
 *     batch status          → batch_status {}
 *   Directives inside consumed grammar belong to the delegated prompts, not to this call.
 * - After tool results it answers with a short human sentence per tool (task results grouped).
 * - "What can you do?" (or "help") answers with the phrasings above.
 * - [[tool:NAME {json}]] calls tool NAME with that input (offered or not: an unknown tool comes back
 *   as the SDK's tool error), one directive per model step, in order; once every directive has run
 *   the answer carries each tool's text output verbatim (its first 2,000 characters).
 * - [[echo]]: the answer is the rest of the message verbatim (the directive removed).
 */

export const SIMULATOR_MODEL_ID = "simulator";
export const SIMULATOR_PROVIDER = "flotilla";
/** The longest answer [[chars:N]] produces; keeps a typo from allocating gigabytes. */
export const SIMULATOR_MAX_CHARS = 10_000_000;
/** `batch xN:` accepts up to this many items (the config ceiling of max_items_per_batch). */
export const SIMULATOR_MAX_BATCH_COUNT = 100_000;
/** Node timers overflow (and fire at once) beyond 2^31-1 ms, so [[sleep]] is clamped there. */
const MAX_SLEEP_MS = 2_147_483_647;
/** At most this many streamed deltas per answer; long answers get longer deltas. */
const MAX_DELTAS = 400;
/** Tool results longer than this are cut in the post-tool summary. */
const RESULT_EXCERPT_CHARS = 160;
/** Characters of each tool's output a [[tool:...]] answer repeats verbatim. */
export const TOOL_DIRECTIVE_OUTPUT_CHARS = 2_000;
/** Tool-call ids of [[tool:...]] steps carry this prefix, so later steps can count them. */
const TOOL_DIRECTIVE_ID = "call_tool_";

export interface SimulatorOptions {
  /** Default time to answer, spread across the streamed deltas. */
  latencyMs: number;
}

export interface SimulatorDirectives {
  sleepMs?: number;
  fail: boolean;
  failOnce: boolean;
  rateLimit: boolean;
  rateLimitOnce: boolean;
  chars?: number;
}

export interface SimulatedToolCall {
  toolName: string;
  input: Record<string, unknown>;
}

// "Once" directives remember prompt texts for the life of the process, as the contract says.
const failedOnce = new Set<string>();
const rateLimitedOnce = new Set<string>();

// ---------------------------------------------------------------------------------------------
// Prompt helpers

/** Text of the latest user message (all its text parts joined). */
export function latestUserText(prompt: LanguageModelV3Prompt): string {
  for (let i = prompt.length - 1; i >= 0; i--) {
    const message = prompt[i];
    if (message.role === "user") {
      return message.content
        .filter((p) => p.type === "text")
        .map((p) => p.text)
        .join("\n");
    }
  }
  return "";
}

function outputToText(output: LanguageModelV3ToolResultOutput): string {
  switch (output.type) {
    case "text":
      return output.value;
    case "json":
      return JSON.stringify(output.value) ?? "null";
    case "error-text":
      return `error: ${output.value}`;
    case "error-json":
      return `error: ${JSON.stringify(output.value)}`;
    case "execution-denied":
      return `denied${output.reason ? `: ${output.reason}` : ""}`;
    case "content":
      return output.value.map((p) => (p.type === "text" ? p.text : `[${p.type}]`)).join(" ");
    default:
      return "";
  }
}

/** Characters the model "reads": every message, tool input and tool result, plus the tool definitions. */
function promptChars(options: LanguageModelV3CallOptions): number {
  let chars = 0;
  for (const message of options.prompt) {
    if (message.role === "system") {
      chars += message.content.length;
      continue;
    }
    for (const part of message.content) {
      if (part.type === "text" || part.type === "reasoning") chars += part.text.length;
      else if (part.type === "tool-call") chars += part.toolName.length + JSON.stringify(part.input ?? {}).length;
      else if (part.type === "tool-result") chars += part.toolName.length + outputToText(part.output).length;
    }
  }
  for (const tool of options.tools ?? []) {
    chars += JSON.stringify(tool).length;
  }
  return chars;
}

export function estimateTokens(chars: number): number {
  return chars <= 0 ? 0 : Math.ceil(chars / 4);
}

/** FNV-1a: a small, stable hash so the same prompt always yields the same answer. */
function hash(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

function promptFingerprint(prompt: LanguageModelV3Prompt): string {
  return prompt
    .map((m) => {
      if (m.role === "system") return `system:${m.content}`;
      const body = m.content
        .map((p) => {
          if (p.type === "text" || p.type === "reasoning") return p.text;
          if (p.type === "tool-call") return `${p.toolName}(${JSON.stringify(p.input ?? {})})`;
          if (p.type === "tool-result") return `${p.toolName}=>${outputToText(p.output)}`;
          return p.type;
        })
        .join("|");
      return `${m.role}:${body}`;
    })
    .join("\n");
}

// ---------------------------------------------------------------------------------------------
// Directives

const DIRECTIVE_RE = /\[\[\s*(sleep|fail|fail-once|429|429-once|chars)\s*(?::\s*(\d+)\s*)?\]\]/gi;

/** Reads the test directives from a prompt text. Unknown or malformed directives are ignored. */
export function parseDirectives(text: string): SimulatorDirectives {
  const out: SimulatorDirectives = { fail: false, failOnce: false, rateLimit: false, rateLimitOnce: false };
  for (const match of text.matchAll(DIRECTIVE_RE)) {
    const name = match[1].toLowerCase();
    const arg = match[2] === undefined ? undefined : Number(match[2]);
    if (name === "sleep" && arg !== undefined) out.sleepMs = Math.min(arg, MAX_SLEEP_MS);
    else if (name === "chars" && arg !== undefined) out.chars = Math.min(arg, SIMULATOR_MAX_CHARS);
    else if (name === "fail" && arg === undefined) out.fail = true;
    else if (name === "fail-once" && arg === undefined) out.failOnce = true;
    else if (name === "429" && arg === undefined) out.rateLimit = true;
    else if (name === "429-once" && arg === undefined) out.rateLimitOnce = true;
  }
  return out;
}

/** The text without its test directives (each becomes a space). */
export function stripDirectives(text: string): string {
  return text.replace(DIRECTIVE_RE, " ").replace(ECHO_RE, " ").replace(TOOL_DIRECTIVE_RE, " ");
}

const ECHO_RE = /\[\[\s*echo\s*\]\]/gi;
const TOOL_DIRECTIVE_RE = /\[\[tool:([A-Za-z0-9_.:-]+)\s*(\{(?:[^\]]|\](?!\]))*\})?\s*\]\]/g;

/**
 * The [[tool:NAME {json}]] directives of a message, in order. The JSON is read with the same
 * scanner as [[call:...]] (so "]]" inside a string is fine); a malformed one is skipped.
 */
export function parseToolDirectives(text: string): { calls: SimulatedToolCall[]; rest: string } {
  const calls: SimulatedToolCall[] = [];
  let rest = "";
  let cursor = 0;
  const re = /\[\[tool:([A-Za-z0-9_.:-]+)\s*/g;
  for (let m = re.exec(text); m; m = re.exec(text)) {
    let end = m.index + m[0].length;
    let input: Record<string, unknown> = {};
    if (text[end] === "{") {
      const jsonEnd = scanJsonObject(text, end);
      if (jsonEnd === undefined) continue;
      try {
        const parsed = JSON.parse(text.slice(end, jsonEnd));
        if (!parsed || typeof parsed !== "object" || Array.isArray(parsed)) continue;
        input = parsed;
      } catch {
        continue;
      }
      end = jsonEnd;
    }
    const close = /^\s*\]\]/.exec(text.slice(end));
    if (!close) continue;
    end += close[0].length;
    calls.push({ toolName: m[1], input });
    rest += `${text.slice(cursor, m.index)} `;
    cursor = end;
    re.lastIndex = end;
  }
  rest += text.slice(cursor);
  return { calls, rest };
}

/** The message with [[echo]] removed, when it has one: the answer verbatim. */
export function echoText(text: string): string | undefined {
  if (!new RegExp(ECHO_RE.source, "i").test(text)) return undefined;
  return text.replace(ECHO_RE, "").trim();
}

/** Messages after the latest user message (this message's earlier steps). */
function sinceLatestUser(prompt: LanguageModelV3Prompt): LanguageModelV3Prompt {
  for (let i = prompt.length - 1; i >= 0; i--) if (prompt[i].role === "user") return prompt.slice(i + 1);
  return [];
}

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

// ---------------------------------------------------------------------------------------------
// Tool-call grammar

/** Reads one JSON object starting at `start` (which must be "{"); returns its end index (exclusive). */
function scanJsonObject(text: string, start: number): number | undefined {
  if (text[start] !== "{") return undefined;
  let depth = 0;
  let inString = false;
  for (let i = start; i < text.length; i++) {
    const c = text[i];
    if (inString) {
      if (c === "\\") i++;
      else if (c === '"') inString = false;
    } else if (c === '"') inString = true;
    else if (c === "{") depth++;
    else if (c === "}") {
      depth--;
      if (depth === 0) return i + 1;
    }
  }
  return undefined;
}

function splitItems(list: string): string[] {
  return list
    .split(";")
    .map((s) => s.trim())
    .filter((s) => s.length > 0);
}

function shortDescription(prompt: string): string {
  const clean = stripDirectives(prompt).replace(/\s+/g, " ").trim();
  return clean.length > 80 ? `${clean.slice(0, 79)}…` : clean || "Task";
}

/**
 * The tool-call grammar. Returns the calls in order of appearance (all of them run in parallel in
 * one step) and the text that remains once the consumed grammar is removed (where the directives
 * for this call are read, so `task: x [[fail]]` fails the sub-agent, not the caller).
 * Only tools named in `offered` produce calls; anything else stays ordinary text.
 */
export function parseToolCalls(text: string, offered: ReadonlySet<string>): { calls: SimulatedToolCall[]; rest: string } {
  const found: Array<{ at: number; call: SimulatedToolCall }> = [];
  let rest = "";
  // 1. Inline [[call:TOOL {json}]] anywhere in the text.
  const callRe = /\[\[call:([A-Za-z0-9_-]+)\s*/g;
  let cursor = 0;
  for (let m = callRe.exec(text); m; m = callRe.exec(text)) {
    const toolName = m[1];
    let end = m.index + m[0].length;
    let input: Record<string, unknown> = {};
    if (text[end] === "{") {
      const jsonEnd = scanJsonObject(text, end);
      if (jsonEnd === undefined) continue;
      try {
        const parsed = JSON.parse(text.slice(end, jsonEnd));
        if (!parsed || typeof parsed !== "object" || Array.isArray(parsed)) continue;
        input = parsed;
      } catch {
        continue;
      }
      end = jsonEnd;
    }
    const close = /^\s*\]\]/.exec(text.slice(end));
    if (!close || !offered.has(toolName)) continue;
    end += close[0].length;
    found.push({ at: m.index, call: { toolName, input } });
    rest += `${text.slice(cursor, m.index)} `;
    cursor = end;
    callRe.lastIndex = end;
  }
  rest += text.slice(cursor);

  // 2. Line forms. Offsets are recomputed on the remaining text; order within it is preserved.
  const lines = rest.split("\n");
  const kept: string[] = [];
  let offset = 0;
  for (const line of lines) {
    const at = 1e9 + offset; // line calls sort after inline calls but keep their own order
    offset += line.length + 1;
    const call = parseLineCall(line, offered);
    if (call) found.push({ at, call });
    else kept.push(line);
  }
  found.sort((a, b) => a.at - b.at);
  return { calls: found.map((f) => f.call), rest: kept.join("\n") };
}

function parseLineCall(line: string, offered: ReadonlySet<string>): SimulatedToolCall | undefined {
  const trimmed = line.trim();
  let m = /^task:\s*(\S.*)$/i.exec(trimmed);
  if (m && offered.has("task")) {
    const prompt = m[1].trim();
    return { toolName: "task", input: { subagent: "general", description: shortDescription(prompt), prompt } };
  }
  m = /^swarm:\s*(.+?)\s*\|([^|]*)$/i.exec(trimmed);
  if (m && offered.has("agent_swarm")) {
    const items = splitItems(m[2]);
    if (m[1] && items.length > 0)
      return { toolName: "agent_swarm", input: { profile: "general", prompt_template: m[1], items } };
  }
  m = /^batch\s+x\s*(\d+):\s*(\S.*)$/i.exec(trimmed);
  if (m && offered.has("batch_task")) {
    const n = Number(m[1]);
    if (n >= 1 && n <= SIMULATOR_MAX_BATCH_COUNT) {
      const items = Array.from({ length: n }, (_, i) => String(i + 1));
      return { toolName: "batch_task", input: { prompt_template: m[2].trim(), items } };
    }
  }
  m = /^batch:\s*(.+?)\s*\|([^|]*)$/i.exec(trimmed);
  if (m && offered.has("batch_task")) {
    const items = splitItems(m[2]);
    if (m[1] && items.length > 0) return { toolName: "batch_task", input: { prompt_template: m[1], items } };
  }
  if (/^batch status$/i.test(trimmed) && offered.has("batch_status")) {
    return { toolName: "batch_status", input: {} };
  }
  return undefined;
}

// ---------------------------------------------------------------------------------------------
// Answers

const SENTENCES = [
  "The simulator read the request and prepared a deterministic reply.",
  "No external model was contacted; this text is generated locally.",
  "Every identical prompt produces exactly this answer.",
  "Token usage is estimated at roughly four characters per token.",
  "Configure MODEL_BASE_URL, MODEL_API_KEY and MODEL_NAME to use a real model.",
  "The answer streams word by word across the configured latency.",
  "Directives such as [sleep], [fail] and [chars] shape this behaviour in tests.",
  "Key points were noted and summarised briefly.",
  "Nothing further is required for this step.",
  "The request looks complete and well formed.",
  "A short summary follows the acknowledgement.",
  "This reply is stable across runs of the same process and across processes.",
];

function baseAnswer(userText: string, seed: number): string {
  const clean = stripDirectives(userText).replace(/\s+/g, " ").trim();
  const excerpt = clean.length > 120 ? `${clean.slice(0, 119)}…` : clean;
  const head = excerpt ? `Simulated answer to "${excerpt}".` : "Simulated answer.";
  const count = 2 + (seed % 3);
  const picked: string[] = [];
  let h = seed;
  for (let i = 0; i < count; i++) {
    h = Math.imul(h ^ (h >>> 15), 0x2c1b3c6d) >>> 0;
    picked.push(SENTENCES[h % SENTENCES.length]);
  }
  return `${head} ${picked.join(" ")}`;
}

/** Exactly n characters: the normal answer, padded deterministically or cut. */
function exactChars(base: string, n: number): string {
  if (n <= 0) return "";
  let out = base;
  let i = 0;
  while (out.length < n) out += ` ${SENTENCES[i++ % SENTENCES.length]}`;
  return out.slice(0, n);
}

function excerpt(text: string, max = RESULT_EXCERPT_CHARS): string {
  const flat = text.replace(/\s+/g, " ").trim();
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
}

const rec = (v: unknown): Record<string, unknown> | null =>
  v && typeof v === "object" && !Array.isArray(v) ? (v as Record<string, unknown>) : null;
const plural = (n: number, one: string, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;
const short = (id: unknown) => (typeof id === "string" ? id.slice(0, 8) : "?");

/** `task` results read `Sub-agent "NAME" (run ID) STATUS. Result:\n…` or `…) STATUS: error…` (server/agent/tools/task.ts). */
function taskSentence(texts: string[]): string {
  const parsed = texts.map((t) => {
    const m = /^Sub-agent "([^"]+)" \(run [^)]*\) ([a-z ]+?)(?:\. Result:\n([\s\S]*)|: ([\s\S]*))$/.exec(t);
    if (!m) return { name: "task", status: "completed", text: t };
    const error = (m[4] ?? "").replace(/\s*No result is available from this task\.\s*$/, "");
    return { name: m[1], status: m[2], text: m[2] === "completed" ? (m[3] ?? "") : error };
  });
  if (parsed.length === 1) {
    const [p] = parsed;
    return p.status === "completed"
      ? `The ${p.name} sub-agent finished: ${excerpt(p.text)}`
      : `The ${p.name} sub-agent ${p.status}: ${excerpt(p.text)}`;
  }
  const failed = parsed.filter((p) => p.status !== "completed").length;
  const head = `${parsed.length} sub-agents finished${failed ? ` (${failed} without a result)` : ""}:`;
  return [head, ...parsed.map((p) => `- ${p.status === "completed" ? "" : `${p.status}: `}${excerpt(p.text, 120)}`)].join("\n");
}

/** `agent_swarm` results start `agent_swarm STATUS: N items, C completed, F failed, X cancelled.` (server/agent/tools/swarm.ts). */
function swarmSentence(text: string): string {
  if (text.startsWith("agent_swarm was rejected")) return `The swarm did not run: ${excerpt(text.replace(/^[^:]*:\s*/, ""))}`;
  const m = /^agent_swarm (\w+): (\d+) items?, (\d+) completed, (\d+) failed, (\d+) cancelled/.exec(text);
  if (!m) return "The swarm finished.";
  const [, , total, completed, failed, cancelled] = m.map(Number);
  const rest = [Number(failed) ? `${failed} failed` : "", Number(cancelled) ? `${cancelled} cancelled` : ""].filter(Boolean);
  return `The swarm finished: ${completed} of ${plural(Number(total), "item")} completed${rest.length ? `, ${rest.join(", ")}` : ""}.`;
}

function batchTaskSentence(value: unknown): string {
  const o = rec(value);
  if (typeof o?.error === "string") return `The batch was not started: ${excerpt(o.error)}`;
  const total = typeof o?.total === "number" ? plural(o.total, "item") : "its items";
  if (o?.created === false) return `Batch ${short(o?.batch_id)} was already submitted with ${total}; it keeps running.`;
  return `Started batch ${short(o?.batch_id)} with ${total}; I'll report when it finishes.`;
}

function batchStatusSentence(value: unknown): string {
  const o = rec(value);
  if (typeof o?.error === "string") return `Batch status is unavailable: ${excerpt(o.error)}`;
  const batches = (Array.isArray(o?.batches) ? o.batches : []).map(rec).filter((b) => b !== null);
  if (batches.length === 0) return "There are no batches on this thread yet.";
  const n = (b: Record<string, unknown>, k: string) => (typeof b[k] === "number" ? (b[k] as number) : 0);
  const lines = batches.map((b) => {
    const split = [n(b, "failed") ? `${n(b, "failed")} failed` : "", n(b, "cancelled") ? `${n(b, "cancelled")} cancelled` : ""];
    const moving = [n(b, "running") ? `${n(b, "running")} in progress` : "", n(b, "waiting") ? `${n(b, "waiting")} waiting` : ""];
    const extra = [...split, ...moving].filter(Boolean);
    return `Batch ${short(b.batch_id)} is ${String(b.status ?? "unknown")}: ${n(b, "succeeded")} / ${n(b, "total")} done${extra.length ? `, ${extra.join(", ")}` : ""}.`;
  });
  return lines.length === 1 ? lines[0] : lines.map((l) => `- ${l}`).join("\n");
}

function otherSentence(toolName: string, output: LanguageModelV3ToolResultOutput): string {
  if (output.type === "error-text" || output.type === "error-json") return `${toolName} failed: ${excerpt(outputToText(output).replace(/^error: /, ""))}`;
  if (output.type === "text" || output.type === "content") return `${toolName}: ${excerpt(outputToText(output))}`;
  // A tool answering an object with text in it (read_file's `content`) is reported by that text.
  const value = output.type === "json" ? (output.value as { content?: unknown; text?: unknown } | null) : null;
  const text = value && typeof value === "object" ? (value.content ?? value.text) : undefined;
  if (typeof text === "string") return `${toolName}: ${excerpt(text)}`;
  return `${toolName} finished.`;
}

/**
 * After tool results the simulator answers as a person would: one short sentence per tool
 * (task results grouped), never serialized JSON.
 */
function summariseToolResults(prompt: LanguageModelV3Prompt): string | undefined {
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
  if (results.length === 0) return undefined;
  const sentences: string[] = [];
  const tasks = results.filter((r) => r.toolName === "task").map((r) => outputToText(r.output));
  if (tasks.length) sentences.push(taskSentence(tasks));
  for (const { toolName, output } of results) {
    if (toolName === "task") continue;
    const value = output.type === "json" ? output.value : undefined;
    if (toolName === "agent_swarm") sentences.push(swarmSentence(outputToText(output)));
    else if (toolName === "batch_task" && value !== undefined) sentences.push(batchTaskSentence(value));
    else if (toolName === "batch_status" && value !== undefined) sentences.push(batchStatusSentence(value));
    else sentences.push(otherSentence(toolName, output));
  }
  return sentences.join("\n\n");
}

/** The simulator's answer to "What can you do?": the phrasings it understands, as a short markdown list. */
export const CAPABILITIES_ANSWER = [
  "I'm the lead agent, running on the built-in simulator (no model endpoint is configured). I answer directly, or delegate work. Phrase a request like this:",
  "",
  "- **One sub-agent:** `task: list three facts about tides` (one line per task; several run in parallel)",
  "- **A swarm:** `swarm: Write a line about {{item}} | the sea; the moon; the wind` (items run in parallel, I summarise them)",
  "- **A durable batch:** `batch: Summarize {{item}} | Lisbon; Nairobi; Osaka` or `batch x300: Rate idea {{item}}` (runs in background workers; watch it in the batch panel)",
  "- **Batch progress:** `batch status`",
  "",
  "You can also start a batch from a CSV or JSONL file with **New batch** in the batch panel. Set MODEL_BASE_URL, MODEL_API_KEY and MODEL_NAME to talk to a real model.",
].join("\n");

const CAPABILITIES_RE = /^\s*(what can you do|help|what are you|how do i use (this|you))\s*[?!.]*\s*$/i;

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

function plan(options: LanguageModelV3CallOptions, defaultLatencyMs: number): Plan {
  const prompt = options.prompt;
  const userText = latestUserText(prompt);
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
  if (last?.role !== "user" || directed.calls.length > 0) grammar.calls = [];
  const directives = parseDirectives(directed.rest);
  const latencyMs = directives.sleepMs ?? defaultLatencyMs;
  const inputTokens = estimateTokens(promptChars(options));

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

  const callId = (prefix: string) => `${prefix}${randomUUID().replace(/-/g, "").slice(0, 16)}`;
  const calls = nextDirected
    ? [{ ...nextDirected, toolCallId: callId(`${TOOL_DIRECTIVE_ID}${directedDone}_`) }]
    : grammar.calls.map((c) => ({ ...c, toolCallId: callId("call_sim_") }));
  let text = "";
  const echo = echoText(directed.calls.length > 0 ? directed.rest : userText);
  if (calls.length === 0 && directed.calls.length > 0) {
    const answer = toolDirectiveAnswer(prompt);
    text = echo === undefined ? answer : `${echo}\n\n${answer}`;
  } else if (calls.length === 0 && echo !== undefined) text = echo;
  else if (calls.length === 0) {
    const seed = hash(promptFingerprint(prompt));
    const base =
      last?.role === "tool"
        ? (summariseToolResults(prompt) ?? baseAnswer(userText, seed))
        : CAPABILITIES_RE.test(stripDirectives(userText))
          ? CAPABILITIES_ANSWER
          : baseAnswer(userText, seed);
    text = directives.chars === undefined ? base : exactChars(base, directives.chars);
  }
  const outputChars = text.length + calls.reduce((n, c) => n + c.toolName.length + JSON.stringify(c.input).length, 0);
  const outputTokens = estimateTokens(outputChars);
  return {
    latencyMs,
    explicitSleep: directives.sleepMs !== undefined,
    text,
    calls,
    error,
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
      const onAbort = () => local.abort(abortReason(signal as AbortSignal));
      signal?.addEventListener("abort", onAbort, { once: true });
      const cleanup = () => signal?.removeEventListener("abort", onAbort);

      const stream = new ReadableStream<LanguageModelV3StreamPart>({
        async start(controller) {
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

/** Forgets [[fail-once]] / [[429-once]] history (tests only). */
export function resetSimulatorOnceState(): void {
  failedOnce.clear();
  rateLimitedOnce.clear();
}
