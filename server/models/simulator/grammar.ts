import type { z } from "zod";
import type { swarmInputSchema } from "@/lib/api/swarm";
import type { batchStatusInputSchema, batchTaskInputSchema } from "@/lib/api/batch-tools";
import type { taskInputSchema } from "@/lib/api/subagents";
import { clip } from "./answers";
import { scanCallDirectives, type SimulatedToolCall, stripDirectives } from "./directives";

/**
 * The chat grammar: how what a person types becomes the lead's tool calls. Only tools offered
 * in the call produce calls, and only when the last message is the user's (model.ts decides);
 * all calls of one message are emitted together, as parallel calls:
 *   [[call:TOOL {json}]]       anywhere, any number (`[[call:TOOL]]` means {})
 *   task: PROMPT               per line → task {subagent:"general", description, prompt}
 *   swarm: TEMPLATE | a; b; c  → agent_swarm {profile:"general", prompt_template, items}
 *   background task: PROMPT / background swarm: TEMPLATE | a; b  → the same with background: true
 *   batch: TEMPLATE | a; b; c  → batch_task {prompt_template, items}
 *   batch xN: TEMPLATE         → batch_task {prompt_template, items: ["1".."N"]}
 *   batch status               → batch_status {}
 * Each input is typed against the tool's own input schema, so a renamed field fails the typecheck.
 */

/** `batch xN:` accepts up to this many items (the config ceiling of max_items_per_batch). */
export const SIMULATOR_MAX_BATCH_COUNT = 100_000;

const taskCall = (prompt: string, background = false): SimulatedToolCall => ({
  toolName: "task",
  input: {
    subagent: "general",
    description: shortDescription(prompt),
    prompt,
    ...(background ? { background } : {}),
  } satisfies z.input<typeof taskInputSchema>,
});

const swarmCall = (prompt_template: string, items: string[], background = false): SimulatedToolCall => ({
  toolName: "agent_swarm",
  input: { profile: "general", prompt_template, items, ...(background ? { background } : {}) } satisfies z.input<typeof swarmInputSchema>,
});

const batchCall = (prompt_template: string, items: string[]): SimulatedToolCall => ({
  toolName: "batch_task",
  input: { prompt_template, items } satisfies z.input<typeof batchTaskInputSchema>,
});

const batchStatusCall = (): SimulatedToolCall => ({
  toolName: "batch_status",
  input: {} satisfies z.input<typeof batchStatusInputSchema>,
});

function splitItems(list: string): string[] {
  return list
    .split(";")
    .map((s) => s.trim())
    .filter((s) => s.length > 0);
}

/** The task card's label: the prompt's first words, at most 80 characters. */
function shortDescription(prompt: string): string {
  return clip(stripDirectives(prompt), 80) || "Task";
}

/**
 * The calls of a message in order of appearance (inline [[call:...]] first, then line forms) and
 * the text that remains once the consumed grammar is removed: where the directives for this call
 * are read, so `task: x [[fail]]` fails the sub-agent, not the caller.
 */
export function parseToolCalls(text: string, offered: ReadonlySet<string>): { calls: SimulatedToolCall[]; rest: string } {
  const inline = scanCallDirectives(text, "call", (name) => offered.has(name));
  const calls = [...inline.calls];
  const kept: string[] = [];
  for (const line of inline.rest.split("\n")) {
    const call = parseLineCall(line, offered);
    if (call) calls.push(call);
    else kept.push(line);
  }
  return { calls, rest: kept.join("\n") };
}

function parseLineCall(line: string, offered: ReadonlySet<string>): SimulatedToolCall | undefined {
  let trimmed = line.trim();
  // `background task:` / `background swarm:`: the same calls, answered at once.
  const background = /^background\s+(?=task:|swarm:)/i.exec(trimmed);
  if (background) trimmed = trimmed.slice(background[0].length);
  let m = /^task:\s*(\S.*)$/i.exec(trimmed);
  if (m && offered.has("task")) return taskCall(m[1].trim(), !!background);
  m = /^swarm:\s*(.+?)\s*\|([^|]*)$/i.exec(trimmed);
  if (m && offered.has("agent_swarm")) {
    const items = splitItems(m[2]);
    if (m[1] && items.length > 0) return swarmCall(m[1], items, !!background);
  }
  if (background) return undefined;
  m = /^batch\s+x\s*(\d+):\s*(\S.*)$/i.exec(trimmed);
  if (m && offered.has("batch_task")) {
    const n = Number(m[1]);
    if (n >= 1 && n <= SIMULATOR_MAX_BATCH_COUNT)
      return batchCall(
        m[2].trim(),
        Array.from({ length: n }, (_, i) => String(i + 1)),
      );
  }
  m = /^batch:\s*(.+?)\s*\|([^|]*)$/i.exec(trimmed);
  if (m && offered.has("batch_task")) {
    const items = splitItems(m[2]);
    if (m[1] && items.length > 0) return batchCall(m[1], items);
  }
  if (/^batch status$/i.test(trimmed) && offered.has("batch_status")) return batchStatusCall();
  return undefined;
}

/** The simulator's answer to "What can you do?": the phrasings it understands, as a short markdown list. */
export const CAPABILITIES_ANSWER = [
  "I'm the lead agent, running on the built-in simulator (no model endpoint is configured). I answer directly, or delegate work. Phrase a request like this:",
  "",
  "- **One sub-agent:** `task: list three facts about tides` (one line per task; several run in parallel)",
  "- **A swarm:** `swarm: Write a line about {{item}} | the sea; the moon; the wind` (items run in parallel, I summarise them)",
  "- **In the background:** `background task: ...` or `background swarm: ... | a; b` (I answer at once and report here when they finish)",
  "- **A durable batch:** `batch: Summarize {{item}} | Lisbon; Nairobi; Osaka` or `batch x300: Rate idea {{item}}` (runs in background workers; watch it in the batch panel)",
  "- **Batch progress:** `batch status`",
  "",
  "You can also start a batch from a CSV or JSONL file with **New batch** in the batch panel. Set MODEL_BASE_URL, MODEL_API_KEY and MODEL_NAME to talk to a real model.",
].join("\n");

/** The questions "What can you do?" stands for, once case, punctuation and a greeting are set aside. */
const CAPABILITY_QUESTION =
  /^(?:(?:hi|hello|hey)\s+)?(?:what can (?:you|u) do(?: for me)?|what (?:do|can) you (?:help(?: me)? with|do)|what are you(?:r (?:capabilities|commands|skills))?|(?:show )?(?:some )?help(?: me)?|how (?:do|can) i use (?:this|you|it)|(?:capabilities|commands)|what do you understand)(?: please)?$/;

/** "What can you do?", "what can you do", "Help!", "hi, what can you do for me?" and the like. */
export function asksForCapabilities(text: string): boolean {
  const words = stripDirectives(text)
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s]+/gu, " ")
    .replace(/\s+/g, " ")
    .trim();
  return CAPABILITY_QUESTION.test(words);
}
