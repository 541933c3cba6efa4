import type { UIMessage } from "ai";
import { z } from "zod";

/** Largest chat request body (one user message). */
export const CHAT_MAX_BODY_BYTES = 256 * 1024;
/** Longest text a user message may carry; the composer refuses more before sending. */
export const CHAT_MAX_TEXT_CHARS = 100_000;
/** The limit in words people can picture (about six characters per English word, spaces included). */
export const CHAT_MAX_TEXT_WORDS_APPROX = Math.round(CHAT_MAX_TEXT_CHARS / 6 / 1000) * 1000;

/** What the composer says when a message is too long (the same words before sending and from the server). */
export function tooLongMessage(chars: number): string {
  return (
    `This message is ${chars.toLocaleString("en-US")} characters long; the limit is ` +
    `${CHAT_MAX_TEXT_CHARS.toLocaleString("en-US")} characters (about ${CHAT_MAX_TEXT_WORDS_APPROX.toLocaleString("en-US")} words). ` +
    "Shorten it, or put long material in a batch file."
  );
}

const textPartSchema = z
  .object({
    type: z.literal("text", { error: 'only "text" parts are accepted' }),
    text: z
      .string({ error: "must be a string" })
      .max(CHAT_MAX_TEXT_CHARS, { error: `must be at most ${CHAT_MAX_TEXT_CHARS} characters` }),
  })
  .strict();

const userMessageSchema = z
  .object(
    {
      id: z
        .string({ error: "must be a string" })
        .regex(/^[A-Za-z0-9_-]{1,100}$/, { error: "must be 1 to 100 letters, digits, '-' or '_'" }),
      role: z.literal("user", { error: 'must be "user"' }),
      parts: z
        .array(textPartSchema, { error: "must be an array" })
        .min(1, { error: "must contain a text part" })
        .max(16, { error: "must have at most 16 parts" })
        .refine((parts) => parts.some((p) => p.text.trim() !== ""), { error: "must contain non-empty text" }),
      metadata: z.record(z.string(), z.unknown()).optional(),
    },
    {
      error: (iss) =>
        iss.code !== "invalid_type" ? undefined : iss.input === undefined ? "is required (the new user message)" : "must be an object",
    },
  )
  .strict();

/** The body useChat sends (prepareSendMessagesRequest): only the new user message. */
export const chatRequestSchema = z
  .object({ message: userMessageSchema }, { error: (iss) => (iss.code === "invalid_type" ? "must be a JSON object" : undefined) })
  .strict();

export type ChatRequest = z.output<typeof chatRequestSchema>;

/**
 * What a message to a thread whose lead response still runs does: `enqueue` (202, answered in
 * order after the running response), `interrupt` (stops it as Stop does and answers this one
 * now), `reject` (409, nothing stored). Config `chat.busy_policy`; `?busy=` picks one per
 * request, except that a configured `reject` always refuses.
 */
export const BUSY_POLICIES = ["enqueue", "interrupt", "reject"] as const;
export type BusyPolicy = (typeof BUSY_POLICIES)[number];
export const busyPolicySchema = z.enum(BUSY_POLICIES, { error: `must be one of ${BUSY_POLICIES.join(", ")}` });

/** POST .../chat answers 202 with this when the message waits for the thread (enqueue). */
export const queuedMessageSchema = z.object({ queued: z.literal(true), position: z.number().int().min(1) });
export type QueuedMessage = z.output<typeof queuedMessageSchema>;

/** The 409 a thread answers while its lead response runs (busy policy `reject`). */
export const THREAD_BUSY_MESSAGE =
  "The lead agent is still answering your previous message in this thread. Wait for it to finish or press Stop, then send again.";

/** GET /api/threads/{id}: the thread with its stored messages (parts as the AI SDK wrote them). */
export const threadMessagesSchema = z.looseObject({
  messages: z.array(
    z.looseObject({
      id: z.string(),
      role: z.enum(["user", "assistant", "system"]),
      parts: z.array(z.unknown()),
      metadata: z.record(z.string(), z.unknown()).nullish(),
    }),
  ),
});

/** Metadata the server attaches to assistant messages (also streamed to the client). */
export interface ChatMessageMetadata {
  /** The lead run (agent_runs row) that produced this message. */
  runId?: string;
  model?: string;
  simulator?: boolean;
  usage?: { inputTokens: number; outputTokens: number };
  /** How the response ended when it did not complete normally. */
  status?: "completed" | "cancelled" | "failed";
  /**
   * On a user message waiting for the thread (busy policy `enqueue`): `queued` until its turn
   * comes (then both are cleared), `position` 1-based among the thread's queued messages when it
   * was sent.
   */
  queued?: boolean;
  position?: number;
  /**
   * Set on the lead's wake-up replies, never on a user turn: a settled batch
   * (server/chat/wakeup.ts) or settled background children (server/chat/children-wakeup.ts).
   */
  trigger?: "batch_settled" | "children_settled";
  batch_id?: string;
  run_ids?: string[];
  /**
   * Set on a short notice stored instead of a lead response nobody typed (a queued message's
   * turn or a wake-up): the model was not called, because the user's daily token quota is used
   * up, or because the lead already answered chat.max_system_turns times without a person.
   */
  notice?: UnattendedNotice;
  /**
   * On the user message that records a batch the person submitted to the thread outside the
   * chat (the New batch dialog): the chat shows the batch's receipt card in its place
   * (server/chat/batch-receipt.ts).
   */
  submitted_batch?: { id: string; total: number };
}

export type UnattendedNotice = "daily_token_quota" | "system_turns";

export type ChatMessage = UIMessage<ChatMessageMetadata>;
