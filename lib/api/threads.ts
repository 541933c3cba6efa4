import { z } from "zod";

/** A thread as the API answers it (snake_case, no owner id): server/chat/threads toThreadProjection. */
export const threadProjectionSchema = z.object({
  id: z.string(),
  title: z.string(),
  created_at: z.string(),
  updated_at: z.string(),
});
export type ThreadProjection = z.infer<typeof threadProjectionSchema>;

export const threadListSchema = z.object({ threads: z.array(threadProjectionSchema) });

/**
 * GET /api/threads/{id}: the thread with its stored messages. Messages are AI SDK UI messages
 * the chat renders part by part; here only their envelope is checked.
 */
export const threadDetailSchema = threadProjectionSchema.extend({
  messages: z.array(z.looseObject({ id: z.string(), role: z.enum(["system", "user", "assistant"]), parts: z.array(z.unknown()) })),
});

export const threadDeletedSchema = z.object({ id: z.string(), deleted: z.literal(true), cancelled_batches: z.number().int() });
