import type { ChatMessage, ChatMessageMetadata } from "@/lib/api/chat";
import { and, asc, eq, type SQL, sql } from "drizzle-orm";
import type { DbOrTx } from "@/server/db/client";
import { storable } from "@/server/db/storable";
import { messages } from "@/server/db/schema";
import { AppError } from "@/server/errors";

type Row = typeof messages.$inferSelect;

function toUIMessage(row: Pick<Row, "id" | "role" | "parts" | "metadata">): ChatMessage {
  return {
    id: row.id,
    role: row.role,
    parts: row.parts as ChatMessage["parts"],
    ...(row.metadata ? { metadata: row.metadata as ChatMessageMetadata } : {}),
  };
}

/** A user message waiting for its thread (metadata.queued); the partial index messages_queued_idx covers it. */
const isQueued = sql`(${messages.metadata} ->> 'queued') = 'true'`;

/**
 * The thread's messages in conversation order. Callers must have checked ownership (getThreadForUser).
 * Queued user messages are not part of the conversation yet (a model never reads them as
 * answered turns); `withQueued` adds them for display.
 */
export async function loadMessages(db: DbOrTx, input: { threadId: string; withQueued?: boolean }): Promise<ChatMessage[]> {
  const rows = await db
    .select()
    .from(messages)
    .where(and(eq(messages.threadId, input.threadId), input.withQueued ? undefined : sql`not coalesce(${isQueued}, false)`))
    .orderBy(asc(messages.createdAt), asc(messages.id));
  return rows.map(toUIMessage);
}

/**
 * Inserts a new message (its parts and metadata storable: server/db/storable.ts). Ids are unique per thread (clients choose them, so another thread's
 * ids never matter); an id already in this thread is a conflict and overwrites nothing.
 */
export async function insertMessage(db: DbOrTx, input: { threadId: string; message: ChatMessage }): Promise<void> {
  const { message } = input;
  const [row] = await db
    .insert(messages)
    .values({
      id: message.id,
      threadId: input.threadId,
      role: message.role,
      parts: storable(message.parts),
      metadata: storable((message.metadata ?? null) as Record<string, unknown> | null),
      // clock_timestamp, not the transaction's start: under the thread's queue lock, later
      // inserts sort later (a queue's order is its insert order).
      createdAt: sql`clock_timestamp()`,
    })
    .onConflictDoNothing({ target: [messages.threadId, messages.id] })
    .returning({ id: messages.id });
  if (!row) throw new AppError("conflict", "message.id: a message with this id already exists");
}

/** Inserts or replaces a message of this thread (assistant messages grow while a response streams), storable. */
export async function saveMessage(db: DbOrTx, input: { threadId: string; message: ChatMessage }): Promise<void> {
  const { message } = input;
  const metadata = storable((message.metadata ?? null) as Record<string, unknown> | null);
  const [row] = await db
    .insert(messages)
    .values({ id: message.id, threadId: input.threadId, role: message.role, parts: storable(message.parts), metadata })
    .onConflictDoUpdate({
      target: [messages.threadId, messages.id],
      set: { parts: sql`excluded.parts`, metadata: sql`excluded.metadata` },
      // A user message never becomes an assistant's.
      setWhere: eq(messages.role, message.role),
    })
    .returning({ id: messages.id });
  if (!row) throw new AppError("conflict", "message.id: a message with this id already exists");
}

/**
 * Serializes the queue of one thread for the rest of the transaction: an enqueue counts its
 * position and inserts, a dequeue picks the head and un-queues it, never interleaved.
 */
export async function lockThreadQueue(tx: DbOrTx, threadId: string): Promise<void> {
  await tx.execute(sql`select pg_advisory_xact_lock(hashtextextended(${`flotilla:chat-queue:${threadId}`}, 0))`);
}

/** Whether the thread has queued messages, as a condition for another statement (one index probe). */
export function queuedIn(threadId: string): SQL {
  return sql`exists (select 1 from ${messages} where ${messages.threadId} = ${threadId} and ${isQueued})`;
}

/** Whether the thread has queued messages (one index probe). */
export async function hasQueuedMessages(db: DbOrTx, threadId: string): Promise<boolean> {
  const [row] = await db
    .select({ id: messages.id })
    .from(messages)
    .where(and(eq(messages.threadId, threadId), isQueued))
    .limit(1);
  return row !== undefined;
}

/**
 * Stores a user message that waits for its thread (under lockThreadQueue). An `interrupt`
 * message goes to the head of the queue and takes no position (it is answered as soon as the
 * running response has stopped); others go to its tail. Returns the position. A queue that
 * already holds `max` messages (interrupting ones too) takes no more: 429 queue_full.
 */
export async function enqueueMessage(
  tx: DbOrTx,
  input: { threadId: string; message: ChatMessage; interrupt?: boolean; max: number },
): Promise<number> {
  const [count] = await tx
    .select({
      all: sql<number>`count(*)::int`,
      ahead: sql<number>`(count(*) filter (where (${messages.metadata} ->> 'interrupt') is null))::int`,
    })
    .from(messages)
    .where(and(eq(messages.threadId, input.threadId), isQueued));
  if ((count?.all ?? 0) >= input.max)
    throw new AppError(
      "queue_full",
      `chat.max_queued_messages: ${count?.all} messages already wait in this thread (at most ${input.max}); send again once the lead has answered some`,
    );
  const position = (count?.ahead ?? 0) + 1;
  const queued = input.interrupt ? { queued: true, interrupt: true } : { queued: true, position };
  await insertMessage(tx, {
    threadId: input.threadId,
    message: { ...input.message, metadata: { ...input.message.metadata, ...queued } },
  });
  return position;
}

/** The head of the thread's queue (interrupting messages first, then in insert order), or undefined. */
export async function queueHead(tx: DbOrTx, threadId: string): Promise<ChatMessage | undefined> {
  const [row] = await tx
    .select({ id: messages.id, role: messages.role, parts: messages.parts, metadata: messages.metadata })
    .from(messages)
    .where(and(eq(messages.threadId, threadId), isQueued))
    .orderBy(sql`(${messages.metadata} ->> 'interrupt') is null`, asc(messages.createdAt), asc(messages.id))
    .limit(1);
  return row ? toUIMessage(row) : undefined;
}

/**
 * Takes a queued message out of the queue: its flags are cleared and it moves to now in the
 * conversation (after the reply that ran while it waited). Returns it as the model reads it.
 */
export async function unqueueMessage(tx: DbOrTx, input: { threadId: string; message: ChatMessage }): Promise<ChatMessage> {
  const [row] = await tx
    .update(messages)
    .set({
      metadata: sql`nullif(${messages.metadata} - 'queued' - 'position' - 'interrupt', '{}'::jsonb)`,
      createdAt: sql`clock_timestamp()`,
    })
    .where(and(eq(messages.threadId, input.threadId), eq(messages.id, input.message.id), isQueued))
    .returning({ id: messages.id, role: messages.role, parts: messages.parts, metadata: messages.metadata });
  if (!row) throw new AppError("conflict", `message ${input.message.id} is no longer queued`);
  return toUIMessage(row);
}

/** Threads that have queued messages (for the web process's sweep), oldest queue first. */
export async function threadsWithQueuedMessages(db: DbOrTx, limit: number): Promise<string[]> {
  const rows = await db.execute<{ thread_id: string }>(sql`
    select thread_id from ${messages} where ${isQueued}
     group by thread_id order by min(created_at) limit ${limit}`);
  return rows.map((r) => r.thread_id);
}
