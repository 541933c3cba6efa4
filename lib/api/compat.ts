import { z } from "zod";

/**
 * Wire shapes of the compatible batch APIs: the providers' own objects, field for field as the
 * official SDKs type them (openai: resources/files.ts, batches.ts; @anthropic-ai/sdk:
 * resources/messages/batches.ts). OpenAI times are Unix seconds, Anthropic's RFC 3339.
 */

export const openAiFileSchema = z
  .object({
    id: z.string(),
    object: z.literal("file"),
    bytes: z.number(),
    created_at: z.number(),
    filename: z.string(),
    purpose: z.enum(["batch", "batch_output"]),
    status: z.literal("processed"),
    expires_at: z.number().nullable(),
    status_details: z.string().nullable(),
  })
  .strict();
export type OpenAiFile = z.infer<typeof openAiFileSchema>;

export const openAiBatchStatusSchema = z.enum([
  "validating",
  "failed",
  "in_progress",
  "finalizing",
  "completed",
  "expired",
  "cancelling",
  "cancelled",
]);

export const openAiBatchErrorSchema = z
  .object({ code: z.string(), message: z.string(), param: z.string().nullable(), line: z.number().nullable() })
  .strict();

export const openAiBatchSchema = z
  .object({
    id: z.string(),
    object: z.literal("batch"),
    endpoint: z.string(),
    errors: z.object({ object: z.literal("list"), data: z.array(openAiBatchErrorSchema) }).strict().nullable(),
    input_file_id: z.string(),
    completion_window: z.string(),
    status: openAiBatchStatusSchema,
    output_file_id: z.string().nullable(),
    error_file_id: z.string().nullable(),
    created_at: z.number(),
    in_progress_at: z.number().nullable(),
    expires_at: z.number(),
    finalizing_at: z.number().nullable(),
    completed_at: z.number().nullable(),
    failed_at: z.number().nullable(),
    expired_at: z.number().nullable(),
    cancelling_at: z.number().nullable(),
    cancelled_at: z.number().nullable(),
    request_counts: z.object({ total: z.number(), completed: z.number(), failed: z.number() }).strict(),
    usage: z
      .object({
        input_tokens: z.number(),
        input_tokens_details: z.object({ cached_tokens: z.number() }).strict(),
        output_tokens: z.number(),
        output_tokens_details: z.object({ reasoning_tokens: z.number() }).strict(),
        total_tokens: z.number(),
      })
      .strict(),
    metadata: z.record(z.string(), z.string()).nullable(),
  })
  .strict();
export type OpenAiBatch = z.infer<typeof openAiBatchSchema>;

/** OpenAI's `metadata`: up to 16 pairs, keys ≤ 64 and values ≤ 512 characters. */
export const openAiMetadataSchema = z
  .record(z.string().max(64), z.string().max(512))
  .refine((m) => Object.keys(m).length <= 16, "at most 16 keys")
  .nullish();

export const openAiBatchCreateSchema = z.object({
  input_file_id: z.string().min(1),
  endpoint: z.literal("/v1/chat/completions", { error: 'only "/v1/chat/completions" is supported' }),
  completion_window: z.literal("24h", { error: 'only "24h" is supported' }),
  metadata: openAiMetadataSchema,
});

export const anthropicBatchSchema = z
  .object({
    id: z.string(),
    type: z.literal("message_batch"),
    processing_status: z.enum(["in_progress", "canceling", "ended"]),
    request_counts: z
      .object({
        processing: z.number(),
        succeeded: z.number(),
        errored: z.number(),
        canceled: z.number(),
        expired: z.number(),
      })
      .strict(),
    ended_at: z.string().nullable(),
    created_at: z.string(),
    expires_at: z.string(),
    archived_at: z.string().nullable(),
    cancel_initiated_at: z.string().nullable(),
    results_url: z.string().nullable(),
  })
  .strict();
export type AnthropicBatch = z.infer<typeof anthropicBatchSchema>;

export const anthropicCustomIdSchema = z
  .string()
  .regex(/^[a-zA-Z0-9_-]{1,64}$/, "must be 1 to 64 letters, digits, underscores or hyphens");
