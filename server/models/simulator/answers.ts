import type { LanguageModelV3ToolResultOutput } from "@ai-sdk/provider";
import { type BatchSettledNotice, checkFailureLine, checkPassRate, isPilotPause, readToolOutput } from "@/lib/api/model-facts";
import type { ChildrenSettledNotice } from "@/lib/api/subagents";
import { projectFromPilot, projectionSentence } from "@/lib/pilot-projection";
import { stripDirectives } from "./directives";
import { outputToText } from "./prompt";

/**
 * What the simulator says: a deterministic answer to a prompt, a person's summary of tool
 * results (read from the task and swarm tools' typed outputs, never parsed from their text),
 * and the lead's report when a batch it started has settled. Text is shortened at sentence or
 * word boundaries, never mid-word.
 */

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

/** A single task's result up to this length is quoted whole; longer ones by whole sentences. */
const TASK_RESULT_CHARS = 600;
/** One line of a list (several tasks, swarm items, failures). */
const LINE_CHARS = 120;
/** Other tools' results in the post-tool summary. */
const RESULT_EXCERPT_CHARS = 160;

/**
 * `text` within `max` characters: whole when it fits; else its whole sentences when at least a
 * third of the room is used; else cut after a whole word, with "…". Whitespace is kept unless
 * `flat` (one line).
 */
export function clip(text: string, max: number, flat = true): string {
  const t = (flat ? text.replace(/\s+/g, " ") : text).trim();
  if (t.length <= max) return t;
  let sentenceEnd = 0;
  for (const m of t.slice(0, max + 1).matchAll(/[.!?](?=\s)/g)) sentenceEnd = m.index + 1;
  if (sentenceEnd >= max / 3) return t.slice(0, sentenceEnd);
  const space = t.slice(0, max).search(/\s\S*$/);
  return `${(space > 0 ? t.slice(0, space) : t.slice(0, max - 1)).trimEnd()}…`;
}

/** A reason as a sentence: ends with a full stop. */
const sentence = (text: string) => (/[.!?]$/.test(text) ? text : `${text}.`);
const plural = (n: number, one: string, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;
const short = (id: unknown) => (typeof id === "string" ? id.slice(0, 8) : "?");
const rec = (v: unknown): Record<string, unknown> | null =>
  v && typeof v === "object" && !Array.isArray(v) ? (v as Record<string, unknown>) : null;

export function baseAnswer(userText: string, seed: number): string {
  const clean = clip(stripDirectives(userText), LINE_CHARS);
  const head = clean ? `Simulated answer to "${clean}".` : "Simulated answer.";
  const count = 2 + (seed % 3);
  const picked: string[] = [];
  let h = seed;
  while (picked.length < count) {
    h = Math.imul(h ^ (h >>> 15), 0x2c1b3c6d) >>> 0;
    // Never the same sentence twice in one answer.
    const next = SENTENCES[h % SENTENCES.length];
    if (!picked.includes(next)) picked.push(next);
  }
  return `${head} ${picked.join(" ")}`;
}

/** Exactly n characters: the normal answer, padded deterministically or cut. */
export function exactChars(base: string, n: number): string {
  if (n <= 0) return "";
  let out = base;
  let i = 0;
  while (out.length < n) out += ` ${SENTENCES[i++ % SENTENCES.length]}`;
  return out.slice(0, n);
}

// ---------------------------------------------------------------------------------------------
// After tool results

type ToolResult = { toolName: string; output: LanguageModelV3ToolResultOutput };

const isError = (output: LanguageModelV3ToolResultOutput) => output.type === "error-text" || output.type === "error-json";
const errorText = (output: LanguageModelV3ToolResultOutput) => outputToText(output).replace(/^error: /, "");

/** One task result as "who, how it ended, what it said". A tool other than ours (no typed output) is taken as its text. */
function taskOutcome({ output }: ToolResult): { name: string; status: string; text: string } {
  const typed = readToolOutput("task", output);
  if (!typed) return isError(output) ? { name: "task", status: "failed", text: sentence(errorText(output)) } : { name: "task", status: "completed", text: outputToText(output) };
  if (typed.status === "completed") return { name: typed.definition, status: "completed", text: typed.result };
  const status = typed.status === "not_run" ? "was not run" : typed.status.replace("_", " ");
  return { name: typed.definition, status, text: sentence(typed.error ?? typed.stopReason ?? "no result") };
}

function taskSentence(results: ToolResult[]): string {
  const outcomes = results.map(taskOutcome);
  if (outcomes.length === 1) {
    const [o] = outcomes;
    if (o.status !== "completed") return `The ${o.name} sub-agent ${o.status}: ${clip(o.text, TASK_RESULT_CHARS)}`;
    const text = clip(o.text, TASK_RESULT_CHARS, false);
    const more = text.length < o.text.trim().length ? "\n\n(The whole answer is in the task card above.)" : "";
    if (!text) return `The ${o.name} sub-agent finished without an answer.`;
    return `The ${o.name} sub-agent finished:${text.includes("\n") ? "\n\n" : " "}${text}${more}`;
  }
  const failed = outcomes.filter((o) => o.status !== "completed").length;
  const head = `${outcomes.length} sub-agents finished${failed ? ` (${failed} without a result)` : ""}:`;
  const lines = outcomes.map((o) => `- ${o.status === "completed" ? "" : `${o.status}: `}${clip(o.text, LINE_CHARS)}`);
  return [head, ...lines].join("\n");
}

function swarmSentence({ output }: ToolResult): string {
  if (isError(output)) return `The swarm failed: ${clip(sentence(errorText(output)), RESULT_EXCERPT_CHARS)}`;
  const typed = readToolOutput("agent_swarm", output);
  if (!typed) return "The swarm finished.";
  if (typed.rejection) return `The swarm did not run: ${clip(sentence(typed.rejection.message), RESULT_EXCERPT_CHARS)}`;
  const { counts } = typed.aggregate;
  const rest = [counts.failed ? `${counts.failed} failed` : "", counts.cancelled ? `${counts.cancelled} cancelled` : ""].filter(Boolean);
  const head = `The swarm finished: ${counts.completed} of ${plural(counts.total, "item")} completed${rest.length ? `, ${rest.join(", ")}` : ""}.`;
  const shown = typed.items.slice(0, 5).map((row) => {
    const said = row.status === "completed" ? (row.summary ?? "") : sentence(row.error ?? row.status);
    return `- ${row.item_id}${row.status === "completed" ? "" : ` ${row.status}`}: ${clip(said, LINE_CHARS)}`;
  });
  const more = typed.items.length > shown.length ? [`- … and ${plural(typed.items.length - shown.length, "more item")} in the swarm card above.`] : [];
  return [head, ...shown, ...more].join("\n");
}

/** Background calls answered at once: what runs, and that the report comes later. */
function backgroundSentence(results: ToolResult[]): string {
  const runs = results.reduce((n, r) => n + (readToolOutput("background", r.output)?.run_ids.length ?? 0), 0);
  const what = results.every((r) => r.toolName === "task") ? plural(runs, "sub-agent") : `${plural(runs, "sub-agent")} (a swarm)`;
  return `Started ${what} in the background; I'll report the results here when ${runs === 1 ? "it finishes" : "they finish"}.`;
}

function batchTaskSentence(value: unknown): string {
  const o = rec(value);
  if (typeof o?.error === "string") return `The batch was not started: ${clip(o.error, RESULT_EXCERPT_CHARS)}`;
  const total = typeof o?.total === "number" ? plural(o.total, "item") : "its items";
  if (o?.created === false) return `Batch ${short(o?.batch_id)} was already submitted with ${total}; it keeps running.`;
  return `Started batch ${short(o?.batch_id)} with ${total}; I'll report when it finishes.`;
}

function batchStatusSentence(value: unknown): string {
  const o = rec(value);
  if (typeof o?.error === "string") return `Batch status is unavailable: ${clip(o.error, RESULT_EXCERPT_CHARS)}`;
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

function otherSentence({ toolName, output }: ToolResult): string {
  if (isError(output)) return `${toolName} failed: ${clip(errorText(output), RESULT_EXCERPT_CHARS)}`;
  if (output.type === "text" || output.type === "content") return `${toolName}: ${clip(outputToText(output), RESULT_EXCERPT_CHARS)}`;
  // A tool answering an object with text in it (read_file's `content`) is reported by that text.
  const value = output.type === "json" ? (output.value as { content?: unknown; text?: unknown } | null) : null;
  const text = value && typeof value === "object" ? (value.content ?? value.text) : undefined;
  if (typeof text === "string") return `${toolName}: ${clip(text, RESULT_EXCERPT_CHARS)}`;
  return `${toolName} finished.`;
}

/** After tool results the simulator answers as a person would: a few sentences per tool (task results grouped), never JSON. */
export function summariseToolResults(results: ToolResult[]): string | undefined {
  if (results.length === 0) return undefined;
  const sentences: string[] = [];
  const background = results.filter((r) => readToolOutput("background", r.output));
  if (background.length) sentences.push(backgroundSentence(background));
  const tasks = results.filter((r) => r.toolName === "task" && !background.includes(r));
  if (tasks.length) sentences.push(taskSentence(tasks));
  for (const result of results) {
    const { toolName, output } = result;
    const value = output.type === "json" ? output.value : undefined;
    if (toolName === "task" || background.includes(result)) continue;
    if (toolName === "agent_swarm") sentences.push(swarmSentence(result));
    else if (toolName === "batch_task" && value !== undefined) sentences.push(batchTaskSentence(value));
    else if (toolName === "batch_status" && value !== undefined) sentences.push(batchStatusSentence(value));
    else sentences.push(otherSentence(result));
  }
  return sentences.join("\n\n");
}

// ---------------------------------------------------------------------------------------------
// Wake-ups

const tokens = (n: number) => n.toLocaleString("en-US");

/** The lead's report when a batch it started has settled: what happened, what failed and why, where the results are. */
export function batchSettledAnswer(n: BatchSettledNotice): string {
  const name = `Batch ${short(n.batch_id)}`;
  const again = n.settlement > 1 ? " again after the retry" : "";
  const items = plural(n.total, "item");
  const others = [n.failed ? `${n.failed} failed` : "", n.cancelled ? `${n.cancelled} cancelled` : ""].filter(Boolean).join(", ");
  let head: string;
  const ran = n.succeeded + n.failed + n.cancelled;
  if (isPilotPause(n))
    head = `${name} paused after its pilot: ${n.succeeded} of its first ${plural(ran, "item")} succeeded${others ? `, ${others}` : ""}.`;
  else if (n.status === "cancelled")
    head = `${name} was cancelled${again}: ${n.succeeded} of ${items} had succeeded before it stopped${others ? `, ${others}` : ""}.`;
  else if (n.succeeded === n.total) head = `${name} finished${again}: ${n.total === 1 ? "its item" : `all ${items}`} succeeded.`;
  else head = `${name} finished${again}: ${n.succeeded} of ${items} succeeded${others ? `, ${others}` : ""}.`;

  const cost = n.cost_usd > 0 ? `, about $${n.cost_usd.toFixed(4)}` : "";
  const paragraphs = [
    `${head} The ${n.subagent} sub-agent used ${tokens(n.usage.input_tokens)} input and ${tokens(n.usage.output_tokens)} output tokens${cost}.`,
  ];
  if (n.failures.length > 0) {
    const lines = n.failures.map((f) => {
      const examples = f.item_keys.join(", ") + (f.count > f.item_keys.length ? ", …" : "");
      return `- ${plural(f.count, "item")} (${examples}): ${clip(sentence(f.error), LINE_CHARS * 2)}`;
    });
    const order = n.failures.length > 1 ? ", most common reason first" : "";
    const sampled = n.failures_sampled ? " (among the first failed items)" : "";
    paragraphs.push([`What failed${order}${sampled}:`, ...lines].join("\n"));
  }
  // The checks' lines verbatim, as the notice gives them (a person reads the same numbers).
  if (n.checks.length > 0) paragraphs.push(["How the answers did on the checks:", ...n.checks.map((c) => `- ${checkPassRate(c)}`)].join("\n"));
  if (n.check_failures.length > 0)
    paragraphs.push(["First items that failed a check:", ...n.check_failures.map((f) => `- ${checkFailureLine(f)}`)].join("\n"));
  const jsonl = `/api/threads/${n.thread_id}/subagent-batches/${n.batch_id}/results.jsonl`;
  if (isPilotPause(n)) {
    const rest = n.total - ran;
    const projection = projectFromPilot({ total: n.total, succeeded: n.succeeded, failed: n.failed, costUsd: n.cost_usd });
    if (projection) paragraphs.push(projectionSentence(n.total, projection));
    paragraphs.push(
      `The pilot's results are in the batch panel and in [results.jsonl](${jsonl}). If they look right, resume the batch there to run the other ${plural(rest, "item")}.`,
    );
    return paragraphs.join("\n\n");
  }
  const retry = n.failed > 0 ? " The failed items can be retried from there." : "";
  paragraphs.push(`Every item's result is in the batch panel; download them all as [results.jsonl](${jsonl}).${retry}`);
  return paragraphs.join("\n\n");
}

/** The lead's report when the children of a background call have settled: each child's outcome, in order. */
export function childrenSettledAnswer(n: ChildrenSettledNotice): string {
  const done = n.children.filter((c) => c.status === "completed").length;
  const what = n.tool === "task" ? "The background task" : "The background swarm";
  const head = n.interrupted
    ? `${what} was interrupted by a server restart: ${done} of ${plural(n.children.length, "sub-agent")} had finished; the others were not restarted.`
    : n.tool === "task" && n.children.length === 1
      ? `${what} has finished (${n.children[0]!.status.replace("_", " ")}).`
      : `${what} has finished: ${done} of ${plural(n.children.length, "sub-agent")} completed.`;
  const lines = n.children.map((c) => {
    const said = c.status === "completed" ? (c.result ?? "") : sentence(c.error ?? c.status);
    const who = c.item_id ?? c.definition;
    return `- ${who}${c.status === "completed" ? "" : ` ${c.status.replace("_", " ")}`}: ${clip(said, TASK_RESULT_CHARS)}`;
  });
  return [head, ...lines].join("\n");
}
