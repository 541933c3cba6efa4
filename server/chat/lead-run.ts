import { randomUUID } from "node:crypto";
import { createUIMessageStream, type ProviderMetadata } from "ai";
import { sql } from "drizzle-orm";
import { THREAD_BUSY_MESSAGE } from "@/lib/api/chat";
import type { FlotillaConfig } from "@/lib/config";
import { startLeadResponse } from "@/server/agent/lead";
import type { Db } from "@/server/db/client";
import { chatStreams } from "@/server/db/schema";
import { AppError } from "@/server/errors";
import { log } from "@/server/log";
import { stripDirectives } from "@/server/models/simulator";
import type { ResolvedModel } from "@/server/models/types";
import { abortLiveRun } from "@/server/runtime/run-registry";
import type { ChatMessage, ChatMessageMetadata } from "@/lib/api/chat";
import { insertMessage, loadMessages, saveMessage } from "./messages";
import { ChunkWriter, closeAbandonedStreams, onChatStreamEvent, pruneFinishedStreams } from "./streams";
import { getThreadForUser, touchThread } from "./threads";

/**
 * What starts a lead response: a user message (stored, shown in the thread) or a system
 * trigger (e.g. a batch settled): its text goes to the model as the last turn but is not
 * stored, and its metadata is merged into the stored reply; its providerMetadata (model-facts'
 * notice) rides on the text part.
 */
export type LeadTrigger =
  | { kind: "user"; message: ChatMessage }
  | { kind: "system"; text: string; metadata?: Record<string, unknown>; providerMetadata?: ProviderMetadata };

export interface StartedLeadRun {
  /** The chat_streams row: read it with readChatStream (any web process). */
  streamId: string;
  runId: string;
  /** The id of the assistant message being built (stored under it when the response ends). */
  messageId: string;
  /** Settles once the reply is stored and the stream is finished. Never rejects. */
  done: Promise<void>;
}

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
 * Takes the thread's lock: one active stream row per thread (partial unique index). A lock
 * left by a dead process is released and taken again (looked for only when the lock is held,
 * so a free thread costs one statement). Runs in the caller's transaction with the user
 * message insert, so a 409 writes nothing.
 */
async function lockThread(
  db: Parameters<Parameters<Db["transaction"]>[0]>[0],
  input: { threadId: string; userId: string; messageId: string },
): Promise<string> {
  const take = async () =>
    (
      await db.execute<{ id: string }>(sql`
        insert into ${chatStreams} (thread_id, user_id, message_id)
        values (${input.threadId}, ${input.userId}, ${input.messageId})
        on conflict (thread_id) where status = 'active' do nothing
        returning id`)
    )[0]?.id;
  const id = (await take()) ?? ((await closeAbandonedStreams(db, { threadId: input.threadId })) > 0 ? await take() : undefined);
  if (!id) throw new AppError("conflict", THREAD_BUSY_MESSAGE);
  return id;
}

/**
 * The one way to start a lead response in a thread (chat route, batch wake-up): checks
 * ownership, takes the thread's lock (409 while a response runs), stores the user message,
 * and runs the response in this process independent of any HTTP request. Its UI message
 * chunks go to PostgreSQL, so any web process can stream it (readChatStream); only Stop
 * (run registry, or a `stop:` notification from another process) ends it early. The reply
 * is stored when it ends, whatever any client did.
 */
export async function startLeadRun(
  db: Db,
  input: { config: FlotillaConfig; model: ResolvedModel; userId: string; threadId: string; trigger: LeadTrigger },
): Promise<StartedLeadRun> {
  const { config, model, userId, trigger } = input;
  // In parallel: the history is used only once the ownership check has passed.
  const [thread, history] = await Promise.all([
    getThreadForUser(db, { userId, threadId: input.threadId }),
    loadMessages(db, { threadId: input.threadId }),
  ]);
  const messageId = `msg_${randomUUID().replace(/-/g, "")}`;

  const streamId = await db.transaction(async (tx) => {
    const id = await lockThread(tx, { threadId: thread.id, userId, messageId });
    if (trigger.kind === "user") await insertMessage(tx, { threadId: thread.id, message: trigger.message });
    return id;
  });
  // The thread's activity and title, beside the run's start rather than before it (one commit
  // less on the first token's path); a failure here only leaves the sidebar order stale.
  const touched = touchThread(db, {
    userId,
    threadId: thread.id,
    titleIfDefault: trigger.kind === "user" && history.length === 0 ? titleFrom(trigger.message, model) : undefined,
  }).catch((err) => log.warn({ err, thread_id: thread.id }, "could not mark the thread's activity"));
  const writer = new ChunkWriter(db, streamId);

  const turn: ChatMessage =
    trigger.kind === "user"
      ? trigger.message
      : { id: `trigger_${messageId}`, role: "user", parts: [{ type: "text", text: trigger.text, providerMetadata: trigger.providerMetadata }] };
  const triggerMetadata = trigger.kind === "system" ? trigger.metadata : undefined;

  const messages = [...history, turn];
  let lead: Awaited<ReturnType<typeof startLeadResponse>>;
  try {
    lead = await startLeadResponse({ db, config, model, userId, threadId: thread.id, messages });
    await touched;
  } catch (err) {
    await writer.close();
    throw err;
  }
  const runId = lead.runId;
  // Off the first token's path: the stream is a minute away from counting as abandoned
  // without its run, and the writer finishes it only after this settles.
  const attached = db
    .update(chatStreams)
    .set({ runId })
    .where(sql`${chatStreams.id} = ${streamId}`)
    .then(
      () => undefined,
      (err) => log.error({ err, stream_id: streamId, run_id: runId }, "could not attach the run to its chat stream"),
    );
  // Stop pressed on another web process reaches this one as a notification.
  const unsubscribeStop = await onChatStreamEvent(db, (payload) => {
    if (payload === `stop:${runId}`) abortLiveRun(runId);
  });

  const stream = createUIMessageStream<ChatMessage>({
    originalMessages: messages,
    onError: lead.errorText,
    async execute({ writer: ui }) {
      const start: ChatMessageMetadata = { runId, model: model.name, simulator: model.simulator };
      ui.write({ type: "start", messageId, messageMetadata: { ...start, ...triggerMetadata } });
      await lead.execute(ui);
    },
    async onFinish({ responseMessage, isAborted, finishReason }) {
      try {
        const metadata = await lead.finish({ aborted: isAborted, responseText: responseText(responseMessage), finishReason });
        if (responseMessage.parts.length > 0) {
          await saveMessage(db, {
            threadId: thread.id,
            message: { ...responseMessage, metadata: { ...responseMessage.metadata, ...triggerMetadata, ...metadata } },
          });
        }
        await touchThread(db, { userId, threadId: thread.id });
      } catch (err) {
        log.error({ err, run_id: runId, thread_id: thread.id }, "could not persist the lead response");
      }
    },
  });

  const done = (async () => {
    const reader = stream.getReader();
    try {
      for (;;) {
        const { done: ended, value } = await reader.read();
        if (ended) break;
        writer.write(value);
      }
    } catch (err) {
      log.error({ err, run_id: runId }, "lead response stream failed");
    } finally {
      unsubscribeStop();
      await attached;
      await writer.close().catch((err) => log.error({ err, stream_id: streamId }, "could not finish the chat stream"));
      await pruneFinishedStreams(db).catch((err) => log.warn({ err }, "could not prune finished chat streams"));
    }
  })();

  return { streamId, runId, messageId, done };
}
