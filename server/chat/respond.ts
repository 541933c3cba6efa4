import { randomUUID } from "node:crypto";
import { createUIMessageStream, type UIMessageChunk } from "ai";
import { z } from "zod";
import type { FlotillaConfig } from "@/lib/config";
import { startLeadResponse } from "@/server/agent/lead";
import type { Db } from "@/server/db/client";
import { log } from "@/server/log";
import { stripDirectives } from "@/server/models/simulator";
import type { ResolvedModel } from "@/server/models/types";
import { type ChatMessage, insertMessage, loadMessages, saveMessage } from "./messages";
import { getThreadForUser, touchThread } from "./threads";

/** Largest chat request body (one user message). */
export const CHAT_MAX_BODY_BYTES = 256 * 1024;
export const CHAT_MAX_TEXT_CHARS = 100_000;

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

/** The thread's title from its first message, without the simulator's test directives (empty keeps the default). */
function titleFrom(message: ChatMessage, model: ResolvedModel): string {
  const text = message.parts.map((p) => (p.type === "text" ? p.text : "")).join(" ");
  return (model.simulator ? stripDirectives(text) : text).replace(/\s+/g, " ").trim().slice(0, 80);
}

function responseText(message: ChatMessage): string {
  return message.parts
    .map((p) => (p.type === "text" ? p.text : ""))
    .join("")
    .trim();
}

/**
 * One chat turn: checks ownership, stores the user message, starts the lead run and returns
 * the UI message stream of the reply. The assistant message is stored when the stream ends,
 * also when it was aborted (whatever streamed so far) or failed.
 */
export async function respondToChat(
  db: Db,
  input: {
    config: FlotillaConfig;
    model: ResolvedModel;
    userId: string;
    threadId: string;
    request: ChatRequest;
    signal: AbortSignal;
  },
): Promise<ReadableStream<UIMessageChunk>> {
  const { config, model, userId } = input;
  const thread = await getThreadForUser(db, { userId, threadId: input.threadId });
  const userMessage: ChatMessage = {
    id: input.request.message.id,
    role: "user",
    parts: input.request.message.parts,
  };
  const history = await loadMessages(db, { threadId: thread.id });
  await insertMessage(db, { threadId: thread.id, message: userMessage });
  await touchThread(db, { userId, threadId: thread.id, titleIfDefault: history.length === 0 ? titleFrom(userMessage, model) : undefined });

  const messages = [...history, userMessage];
  const lead = await startLeadResponse({ db, config, model, userId, threadId: thread.id, messages, signal: input.signal });
  const responseId = `msg_${randomUUID().replace(/-/g, "")}`;

  return createUIMessageStream<ChatMessage>({
    originalMessages: messages,
    onError: lead.errorText,
    async execute({ writer }) {
      writer.write({
        type: "start",
        messageId: responseId,
        messageMetadata: { runId: lead.runId, model: model.name, simulator: model.simulator },
      });
      await lead.execute(writer);
    },
    async onFinish({ responseMessage, isAborted, finishReason }) {
      try {
        const metadata = await lead.finish({ aborted: isAborted, responseText: responseText(responseMessage), finishReason });
        if (responseMessage.parts.length > 0) {
          await saveMessage(db, {
            threadId: thread.id,
            message: { ...responseMessage, metadata: { ...responseMessage.metadata, ...metadata } },
          });
        }
        await touchThread(db, { userId, threadId: thread.id });
      } catch (err) {
        log.error({ err, run_id: lead.runId, thread_id: thread.id }, "could not persist the lead response");
      }
    },
  });
}
