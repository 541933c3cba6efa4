import { and, eq } from "drizzle-orm";
import type { ItemDetail } from "@/lib/api/batches";
import type { DbOrTx } from "@/server/db/client";
import { agentRuns, subagentBatchItems } from "@/server/db/schema";
import { notFound } from "@/server/errors";
import { toItemProjection } from "./projection";
import { getBatch, itemSummaryColumns } from "./repository";
import { editableInput } from "./retry-input";
import type { ItemSummary } from "./types";

/**
 * One item of the caller's batch with the tool calls of its latest run (what the agent did): a run
 * that resumed from durable steps (steps.ts) starts with their calls, so it lists the item's
 * transcript across attempts, every completed call once.
 * Owner- and thread-scoped through getBatch; an item of another batch is 404. It carries the
 * item's whole input as a corrected-input retry takes it (`editable_input`), for the editor.
 */
export async function getItemDetail(
  db: DbOrTx,
  args: { userId: string; threadId: string; batchId: string; itemId: string; previewMaxChars?: number },
): Promise<ItemDetail> {
  const batch = await getBatch(db, args);
  const [row] = await db
    .select({
      ...itemSummaryColumns(args.previewMaxChars),
      toolCallList: agentRuns.toolCalls,
      wholeInput: subagentBatchItems.input,
      prompt: subagentBatchItems.prompt,
      wholeExpected: subagentBatchItems.expected,
    })
    .from(subagentBatchItems)
    .leftJoin(agentRuns, eq(agentRuns.id, subagentBatchItems.runId))
    .where(and(eq(subagentBatchItems.id, args.itemId), eq(subagentBatchItems.batchId, args.batchId)));
  if (!row) throw notFound("item");
  const { toolCallList, wholeInput, prompt, wholeExpected, ...summary } = row;
  const item: ItemSummary = {
    ...summary,
    inputTokens: Number(summary.inputTokens),
    outputTokens: Number(summary.outputTokens),
  };
  return {
    ...toItemProjection(item, args.previewMaxChars),
    tool_call_list: toolCallList ?? [],
    editable_input: editableInput(batch, { input: wholeInput, prompt, expected: wholeExpected }),
  };
}
