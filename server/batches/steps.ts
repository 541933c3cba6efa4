import type { ModelMessage } from "ai";
import type { ToolCallRecord } from "@/lib/api/runs";
import { type DbOrTx, driverOf } from "@/server/db/client";
import { storableJson } from "@/server/db/storable";
import type { ClaimedItem } from "./types";

/**
 * Durable steps of batch items (DESIGN "Durable steps"): a completed model step that another
 * step follows is stored under the item's lease (steps.sql); a new attempt after a lost lease or
 * a shutdown continues from the stored steps, so their tool calls are not run again and their
 * model calls not asked again. Every tool call of an item carries the idempotency key
 * `<batch_id>:<item_key>:<generation>:<step>:<call>`: the item's run from its start (advanced
 * whenever a re-run drops the steps: the settle when the item starts over, settle.sql, and any
 * retry, retry.sql), the 1-based model step that made the call and its 0-based position there.
 * A resumed attempt repeats a step under the same keys; a re-run never reuses the last run's.
 */

export interface StoredStep {
  /** The 1-based model step. */
  step: number;
  /** Its response messages: the assistant's tool calls, then their results. */
  messages: ModelMessage[];
  /** Its finished tool calls, as the run records them. */
  toolCalls: ToolCallRecord[];
}

/** What the executor needs to keep and resume an item's steps (server/agent/executor.ts). */
export interface StepJournal {
  /** Steps earlier attempts completed, from step 1 without a gap (empty: start from the prompt). */
  resumed: StoredStep[];
  /** Stores a completed step; false when the lease is gone (the run must stop). */
  save(step: StoredStep): Promise<boolean>;
  /** The idempotency key of call `call` (0-based) of model step `step`. */
  key(step: number, call: number): string;
}

export function idempotencyKey(batchId: string, itemKey: string, generation: number, step: number, call: number): string {
  return `${batchId}:${itemKey}:${generation}:${step}:${call}`;
}

/** The stored steps of an item, from step 1 up to the first gap. */
export async function loadSteps(db: DbOrTx, itemId: string): Promise<StoredStep[]> {
  const rows = await driverOf(db)<{ step: number; messages: ModelMessage[]; tool_calls: ToolCallRecord[] }[]>`
    select step, messages, tool_calls from subagent_batch_item_steps where item_id = ${itemId}::uuid order by step`;
  const out: StoredStep[] = [];
  for (const r of rows) {
    if (r.step !== out.length + 1) break;
    out.push({ step: r.step, messages: r.messages, toolCalls: r.tool_calls });
  }
  return out;
}

/**
 * Writes one step fenced by the lease (steps.sql); false when this worker no longer holds it.
 * Its messages and tool calls hold model and tool text: stored as storable JSON (storable.ts).
 */
export async function saveStep(
  db: DbOrTx,
  args: { workerId: string; itemId: string; leaseToken: number; step: StoredStep },
): Promise<boolean> {
  const [row] = await driverOf(db)<{ saved: boolean }[]>`
    select flotilla_save_step(${args.workerId}::text, ${args.itemId}::uuid, ${args.leaseToken}::bigint,
      ${args.step.step}::int, ${storableJson(args.step.messages)}::text::jsonb,
      ${storableJson(args.step.toolCalls)}::text::jsonb) as saved`;
  return row?.saved === true;
}

/**
 * The journal of one claimed item for one attempt. `used` says whether the attempt resumed or
 * stored a step (the settlement then drops the item's steps when it ends or starts over).
 */
export async function openStepJournal(
  db: DbOrTx,
  args: { workerId: string; item: ClaimedItem },
): Promise<StepJournal & { readonly used: boolean }> {
  const { item, workerId } = args;
  // Only an item the claim saw steps for pays the read.
  const resumed = item.resume ? await loadSteps(db, item.id) : [];
  let stored = false;
  return {
    resumed,
    get used() {
      return stored || resumed.length > 0 || item.resume;
    },
    save: async (step) => {
      stored = true;
      return saveStep(db, { workerId, itemId: item.id, leaseToken: item.leaseToken, step });
    },
    key: (step, call) => idempotencyKey(item.batchId, item.itemKey, item.generation, step, call),
  };
}
