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

export const threadDeletedSchema = z.object({ id: z.string(), deleted: z.literal(true), cancelled_batches: z.number().int() });
