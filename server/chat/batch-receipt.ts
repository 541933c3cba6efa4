import { type BatchSubmission, isFileSubmission, isGoldenSubmission } from "@/lib/api/files";
import type { ChatMessage } from "@/lib/api/chat";
import type { DbOrTx } from "@/server/db/client";
import { messages } from "@/server/db/schema";
import { storable } from "@/server/db/storable";
import { stripDirectives } from "@/server/models/simulator";
import { DERIVED_TITLE_MAX, shortTitle, touchThread } from "./threads";

/**
 * A batch a person submitted to a thread outside the chat (the New batch dialog, or the same
 * HTTP door from a script) joins its conversation: a user message `batch_<id>` whose text tells
 * the lead what was started (so "how did it go?" names the batch) and whose metadata
 * `submitted_batch` the chat shows as the batch's receipt card; and a thread still called
 * "New thread" takes its title from the batch. A replay of the submission adds nothing.
 */

/** What the batch is about, in the person's own words: its template, else its first item's prompt, else its glob. */
export function batchTitle(input: BatchSubmission): string {
  if (input.prompt_template) return input.prompt_template;
  if (isFileSubmission(input)) return input.files;
  if (isGoldenSubmission(input)) return `golden set ${input.golden_set.id}`;
  const first = input.items[0];
  if (typeof first === "string") return first;
  return typeof first?.prompt === "string" ? first.prompt : "";
}

/** The receipt's message id: one per batch, so a replayed submission stores nothing twice. */
export const receiptMessageId = (batchId: string) => `batch_${batchId.replace(/-/g, "")}`;

/** Bounds the template the lead reads in the receipt (the batch keeps the whole of it). */
const RECEIPT_TEMPLATE_CHARS = 500;

export async function recordSubmittedBatch(
  db: DbOrTx,
  args: {
    userId: string;
    threadId: string;
    batch: { id: string; total: number; subagent: string; variantOf?: string | null };
    input: BatchSubmission;
  },
): Promise<void> {
  const { batch, input } = args;
  const items = `${batch.total} item${batch.total === 1 ? "" : "s"}`;
  const what = isFileSubmission(input)
    ? `${items} (the workspace files matching ${input.files})`
    : isGoldenSubmission(input)
      ? `${items} (golden set ${input.golden_set.id}, graded by the check "golden")`
      : items;
  const template = input.prompt_template ? ` Prompt template: ${shortTitle(input.prompt_template, RECEIPT_TEMPLATE_CHARS)}` : "";
  const message: ChatMessage = {
    id: receiptMessageId(batch.id),
    role: "user",
    parts: [
      {
        type: "text",
        text: `[I started a batch myself, outside this chat] Batch ${batch.id}${batch.variantOf ? ` (a variant of batch ${batch.variantOf})` : ""}: ${what} for sub-agent ${batch.subagent}.${template}`,
      },
    ],
    metadata: { submitted_batch: { id: batch.id, total: batch.total } },
  };
  const [stored] = await db
    .insert(messages)
    .values({
      id: message.id,
      threadId: args.threadId,
      role: message.role,
      // The template is the person's text: NUL or a lone surrogate in it becomes U+FFFD.
      parts: storable(message.parts),
      metadata: message.metadata as Record<string, unknown>,
    })
    .onConflictDoNothing({ target: [messages.threadId, messages.id] })
    .returning({ id: messages.id });
  if (!stored) return; // a replay: recorded the first time
  // Without the simulator's test directives ([[sleep:…]] and the like), as a chat's first message.
  const title = shortTitle(stripDirectives(batchTitle(input)), DERIVED_TITLE_MAX);
  await touchThread(db, { userId: args.userId, threadId: args.threadId, titleIfDefault: title || undefined });
}
