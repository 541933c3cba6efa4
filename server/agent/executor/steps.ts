import type { LanguageModelMiddleware, ModelMessage } from "ai";
import type { StepJournal, StoredStep } from "@/server/batches/steps";
import { AbortReason } from "@/server/errors";
import { log } from "@/server/log";
import type { ToolCallRecorder } from "@/server/tools";

/**
 * The step store stage (batch items only): the run starts after the steps earlier attempts
 * stored, each tool call gets its idempotency key, and each step another follows is stored.
 */

/** Abort reason when a step write finds the item's lease gone: the worker settles nothing. */
export const stepLeaseLost = () =>
  new AbortReason("lease_lost", "the lease on this item is no longer held (a step could not be stored)");

type FinishedStep = { toolCalls: readonly unknown[]; response: { messages: ModelMessage[] } };

/**
 * The executor's side of durable steps: where the run starts, where each tool call sits (its
 * model step and its 0-based position in that step: the idempotency key), and storing a completed
 * step that another follows. A step whose write is refused (lease gone) aborts the run; a write
 * that fails otherwise is logged and the run goes on (at worst a later attempt repeats the step
 * under the same keys).
 */
export function durableSteps(journal: StepJournal, recorder: ToolCallRecorder, onLeaseLost: () => void) {
  let done = journal.resumed.length;
  // Within one generateText call: response messages so far, and calls recorded so far.
  let seenMessages = 0;
  const placed = new Map<string, { step: number; call: number }>();
  const place = (step: number, ids: readonly string[]) => {
    for (const [call, id] of ids.entries()) placed.set(id, { step, call });
  };
  for (const s of journal.resumed) {
    for (const c of s.toolCalls) recorder.add(c);
    // A resumed step's calls can still run here: the approved ones of the step that parked.
    place(s.step, s.messages.flatMap(toolCallIdsOf));
  }
  let seenCalls = recorder.calls.length;
  return {
    resumedSteps: journal.resumed.length,
    input(prompt: string): ModelMessage[] {
      return [{ role: "user", content: prompt }, ...journal.resumed.flatMap((s) => s.messages)];
    },
    /** Places the calls of each model answer (step done + 1), in order, before any of them runs. */
    middleware: {
      specificationVersion: "v3",
      wrapGenerate: async ({ doGenerate }) => {
        const result = await doGenerate();
        place(
          done + 1,
          result.content.flatMap((p) => (p.type === "tool-call" ? [p.toolCallId] : [])),
        );
        return result;
      },
    } satisfies LanguageModelMiddleware,
    key(toolCallId: string): string {
      const at = placed.get(toolCallId);
      // Every call the tools see came from a model answer or a stored step; never guess a key.
      if (!at) throw new Error(`tool call ${toolCallId} has no place in this item's steps`);
      return journal.key(at.step, at.call);
    },
    async stepFinished(step: FinishedStep, maxTurns: number): Promise<void> {
      done++;
      const all = step.response.messages;
      const messages = all.slice(seenMessages);
      seenMessages = all.length;
      const toolCalls = recorder.calls.slice(seenCalls);
      seenCalls = recorder.calls.length;
      // Only a step another follows: an answer (no tool calls) or the last allowed turn ends the run.
      if (step.toolCalls.length === 0 || done >= maxTurns) return;
      const stored: StoredStep = { step: done, messages, toolCalls };
      try {
        if (!(await journal.save(stored))) onLeaseLost();
      } catch (err) {
        log.warn({ err, step: done }, "could not store a batch item's step; a later attempt may repeat it");
      }
    },
  };
}

/** The ids of an assistant message's tool calls, in order. */
function toolCallIdsOf(message: ModelMessage): string[] {
  if (message.role !== "assistant" || typeof message.content === "string") return [];
  return message.content.flatMap((p) => (p.type === "tool-call" ? [p.toolCallId] : []));
}

export type DurableSteps = ReturnType<typeof durableSteps>;
