import type { ChatMessage, ChatMessageMetadata } from "@/lib/api/chat";
import { asc, eq, sql } from "drizzle-orm";
import type { DbOrTx } from "@/server/db/client";
import { messages } from "@/server/db/schema";
import { AppError } from "@/server/errors";

type Row = typeof messages.$inferSelect;

function toUIMessage(row: Row): ChatMessage {
  return {
    id: row.id,
    role: row.role,
    parts: row.parts as ChatMessage["parts"],
    ...(row.metadata ? { metadata: row.metadata as ChatMessageMetadata } : {}),
  };
}

/** The thread's messages in conversation order. Callers must have checked ownership (getThreadForUser). */
export async function loadMessages(db: DbOrTx, input: { threadId: string }): Promise<ChatMessage[]> {
  const rows = await db
    .select()
    .from(messages)
    .where(eq(messages.threadId, input.threadId))
    .orderBy(asc(messages.createdAt), asc(messages.id));
  return rows.map(toUIMessage);
}

/**
 * Inserts a new message. Ids are unique per thread (clients choose them, so another thread's
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
      parts: message.parts,
      metadata: (message.metadata ?? null) as Record<string, unknown> | null,
    })
    .onConflictDoNothing({ target: [messages.threadId, messages.id] })
    .returning({ id: messages.id });
  if (!row) throw new AppError("conflict", "message.id: a message with this id already exists");
}

/** Inserts or replaces a message of this thread (assistant messages grow while a response streams). */
export async function saveMessage(db: DbOrTx, input: { threadId: string; message: ChatMessage }): Promise<void> {
  const { message } = input;
  const metadata = (message.metadata ?? null) as Record<string, unknown> | null;
  const [row] = await db
    .insert(messages)
    .values({ id: message.id, threadId: input.threadId, role: message.role, parts: message.parts, metadata })
    .onConflictDoUpdate({
      target: [messages.threadId, messages.id],
      set: { parts: sql`excluded.parts`, metadata: sql`excluded.metadata` },
      // A user message never becomes an assistant's.
      setWhere: eq(messages.role, message.role),
    })
    .returning({ id: messages.id });
  if (!row) throw new AppError("conflict", "message.id: a message with this id already exists");
}
