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

/**
 * An answer whose judges were rate limited (a deferral): kept under the item's lease as step 0,
 * so the next attempt runs only the checks on it instead of paying for the answer again. It lives
 * and goes with the item's steps (settle.sql drops them when the item ends or starts over).
 */
export interface KeptAnswer {
  text: string;
  /** The parsed answer of a typed batch. */
  output?: unknown;
  model: string;
  stopReason: string;
  runId?: string;
}

/** The step number a kept answer is stored under (model steps count from 1). */
const KEPT_ANSWER_STEP = 0;

/** What the executor needs to keep and resume an item's steps (server/agent/executor.ts). */
export interface StepJournal {
  /** Steps earlier attempts completed, from step 1 without a gap (empty: start from the prompt). */
  resumed: StoredStep[];
  /** Stores a completed step; false when the lease is gone (the run must stop). */
  save(step: StoredStep): Promise<boolean>;
  /** The answer an earlier attempt kept when its judges were rate limited (null: none). */
  kept: KeptAnswer | null;
  /** Keeps the answer for the next attempt's checks; false when the lease is gone. */
  keep(answer: KeptAnswer): Promise<boolean>;
  /** The idempotency key of call `call` (0-based) of model step `step`. */
  key(step: number, call: number): string;
}

export function idempotencyKey(batchId: string, itemKey: string, generation: number, step: number, call: number): string {
  return `${batchId}:${itemKey}:${generation}:${step}:${call}`;
}

/** The stored steps of an item, from step 1 up to the first gap. */
export async function loadSteps(db: DbOrTx, itemId: string): Promise<StoredStep[]> {
  return (await loadJournal(db, itemId)).steps;
}

/** The stored steps of an item and its kept answer, in one read. */
async function loadJournal(db: DbOrTx, itemId: string): Promise<{ steps: StoredStep[]; kept: KeptAnswer | null }> {
  const rows = await driverOf(db)<{ step: number; messages: ModelMessage[]; tool_calls: ToolCallRecord[] }[]>`
    select step, messages, tool_calls from subagent_batch_item_steps where item_id = ${itemId}::uuid order by step`;
  const out: StoredStep[] = [];
  let kept: KeptAnswer | null = null;
  for (const r of rows) {
    if (r.step === KEPT_ANSWER_STEP) {
      kept = r.tool_calls as unknown as KeptAnswer;
      continue;
    }
    if (r.step !== out.length + 1) break;
    out.push({ step: r.step, messages: r.messages, toolCalls: r.tool_calls });
  }
  return { steps: out, kept };
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
  const { steps: resumed, kept } = item.resume ? await loadJournal(db, item.id) : { steps: [], kept: null };
  let stored = false;
  return {
    resumed,
    kept,
    keep: async (answer) => {
      stored = true;
      // The answer is the step's tool_calls value (no messages): the model text in it is storable.
      const step = { step: KEPT_ANSWER_STEP, messages: [], toolCalls: answer as unknown as ToolCallRecord[] };
      return saveStep(db, { workerId, itemId: item.id, leaseToken: item.leaseToken, step });
    },
    get used() {
      return stored || resumed.length > 0 || kept !== null || item.resume;
    },
    save: async (step) => {
      stored = true;
      return saveStep(db, { workerId, itemId: item.id, leaseToken: item.leaseToken, step });
    },
    key: (step, call) => idempotencyKey(item.batchId, item.itemKey, item.generation, step, call),
  };
}
