import type { JSONObject, LanguageModelV3ToolResultOutput, SharedV3ProviderOptions } from "@ai-sdk/provider";
import type { SwarmResult } from "@/lib/api/swarm";
import type { BackgroundReceipt, ChildrenSettledNotice, TaskToolOutput } from "@/lib/api/subagents";

/**
 * Typed facts that travel beside the text a model reads, as provider options under `flotilla`.
 * A real provider ignores them (each provider reads only its own key); the built-in simulator
 * answers from them instead of parsing the text. Three kinds:
 * - a lead turn that is a notice, not a user message (a batch or background children settled): on its text part;
 * - the typed output of the `task` and `agent_swarm` tools: on the tool result;
 * - a sub-agent's repair turn (its typed answer was invalid): on the text part asking again.
 * Both are written and read in the same process, so the types below are the contract.
 */

const KEY = "flotilla";

/** The lead's wake-up after a batch it submitted settled (server/chat/wakeup.ts). */
export interface BatchSettledNotice {
  kind: "batch_settled";
  batch_id: string;
  thread_id: string;
  subagent: string;
  /** The batch status at settlement: completed, failed or cancelled; paused when its pilot's items have run. */
  status: string;
  /** 1 for the first settlement; more after retries re-opened the batch. */
  settlement: number;
  total: number;
  succeeded: number;
  failed: number;
  cancelled: number;
  usage: { input_tokens: number; output_tokens: number };
  cost_usd: number;
  /** Failed items grouped by their error, largest group first (a bounded sample). */
  failures: Array<{ error: string; count: number; item_keys: string[] }>;
  /** True when only the first failed items were grouped (there are more). */
  failures_sampled: boolean;
  /** Items whose every check passed / at least one failed (both 0 without checks). */
  verdicts: { passed: number; failed: number };
  /** Per check of the batch (in the submission's order): how many finished answers passed and failed it. */
  checks: Array<{ name: string; passed: number; failed: number }>;
  /** The first items (in position order) whose verdict is failed, with their failed checks' reasons. */
  check_failures: Array<{ item_key: string; checks: Array<{ name: string; reason: string | null }> }>;
}

/** The batch paused after its pilot (its first N items ran; the rest wait for the person). */
export function isPilotPause(n: BatchSettledNotice): boolean {
  return n.status === "paused";
}

/**
 * One check's pass rate as the lead reads it and repeats it: `label_matches: 3 of 4 passed (75%)`.
 * The percentage is rounded but never to 0 or 100 unless it is exactly that.
 */
export function checkPassRate(c: { name: string; passed: number; failed: number }): string {
  const total = c.passed + c.failed;
  if (total === 0) return `${c.name}: 0 of 0 passed (no finished answers)`;
  const pct = Math.min(Math.max(Math.round((100 * c.passed) / total), c.passed > 0 ? 1 : 0), c.failed > 0 ? 99 : 100);
  return `${c.name}: ${c.passed} of ${total} passed (${pct}%)`;
}

/** One failing item as a line: `item-3: label_matches: expected "spam", got "ham"; is_short: failed`. */
export function checkFailureLine(f: BatchSettledNotice["check_failures"][number]): string {
  return `${f.item_key}: ${f.checks.map((c) => `${c.name}: ${c.reason ?? "failed"}`).join("; ")}`;
}

export type LeadNotice = BatchSettledNotice | ChildrenSettledNotice;

/** The tools whose typed output rides along their model text. */
export interface TypedToolOutputs {
  task: TaskToolOutput;
  agent_swarm: SwarmResult;
  /** `task` or `agent_swarm` with `background: true`. */
  background: BackgroundReceipt;
}

/** JSON without undefined members (provider options are validated as JSON). */
function json(value: object): JSONObject {
  return JSON.parse(JSON.stringify(value)) as JSONObject;
}

/** Provider options (a UI text part's providerMetadata) marking a lead turn as this notice. */
export function noticeOptions(notice: LeadNotice): SharedV3ProviderOptions {
  return { [KEY]: { notice: json(notice) } };
}

/** The notice a prompt part carries, if it is one. */
export function readNotice(providerOptions: SharedV3ProviderOptions | undefined): LeadNotice | undefined {
  const notice = providerOptions?.[KEY]?.notice as LeadNotice | undefined;
  return notice?.kind === "batch_settled" || notice?.kind === "children_settled" ? notice : undefined;
}

/** Provider options marking a user message as the repair turn of a typed answer (server/agent/structured-output.ts). */
export function repairOptions(): SharedV3ProviderOptions {
  return { [KEY]: { repair: true } };
}

/** True when a prompt part is a repair turn's request. */
export function isRepairRequest(providerOptions: SharedV3ProviderOptions | undefined): boolean {
  return providerOptions?.[KEY]?.repair === true;
}

/** A tool's model output: the text the model reads, with the typed output beside it. */
export function textWithOutput<N extends keyof TypedToolOutputs>(tool: N, text: string, output: TypedToolOutputs[N]) {
  return { type: "text" as const, value: text, providerOptions: { [KEY]: { tool, output: json(output) } } };
}

/** The typed output of tool `tool` carried by a tool result's output, if it has one. */
export function readToolOutput<N extends keyof TypedToolOutputs>(
  tool: N,
  output: LanguageModelV3ToolResultOutput,
): TypedToolOutputs[N] | undefined {
  const facts = "providerOptions" in output ? output.providerOptions?.[KEY] : undefined;
  return facts?.tool === tool ? (facts.output as unknown as TypedToolOutputs[N]) : undefined;
}
