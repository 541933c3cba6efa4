import { and, desc, eq, sql } from "drizzle-orm";
import { z } from "zod";
import type { ThreadProjection } from "@/lib/api/threads";
import type { DbOrTx } from "@/server/db/client";
import { storableText } from "@/server/db/storable";
import { messages, subagentBatches, threads, workspaceFiles } from "@/server/db/schema";
import { AppError } from "@/server/errors";

export const DEFAULT_THREAD_TITLE = "New thread";
export const THREAD_TITLE_MAX = 200;
/** A title taken from a message or a batch: a sidebar line, not the whole text. */
export const DERIVED_TITLE_MAX = 80;
export const THREAD_LIST_LIMIT = 200;

export interface ThreadRecord {
  id: string;
  userId: string;
  title: string;
  createdAt: Date;
  updatedAt: Date;
}

export type { ThreadProjection };

export function toThreadProjection(t: ThreadRecord): ThreadProjection {
  return { id: t.id, title: t.title, created_at: t.createdAt.toISOString(), updated_at: t.updatedAt.toISOString() };
}

export const threadIdSchema = z.uuid();

/**
 * Collapses whitespace and bounds the length at `max` characters: a longer text is cut at the
 * last word boundary that fits (mid-word only when a single word is longer than half of it),
 * without the punctuation before the cut, and ends with "…". Empty stays empty.
 */
export function shortTitle(text: string, max: number): string {
  const clean = text.replace(/\s+/g, " ").trim();
  if (clean.length <= max) return clean;
  const room = clean.slice(0, max); // one character is left for the ellipsis
  const space = room.lastIndexOf(" ");
  // A lone high surrogate would be half an emoji.
  const cut = (space >= max / 2 ? room.slice(0, space) : room.slice(0, max - 1)).replace(/[\uD800-\uDBFF]$/, "");
  return `${cut.replace(/[\s,;:.!?\-–—(]+$/, "") || cut}…`;
}

/** Collapses whitespace and bounds the length (shortTitle); empty titles fall back to the default. */
export function normalizeTitle(title: string | undefined, max = THREAD_TITLE_MAX): string {
  return shortTitle(storableText(title ?? ""), max) || DEFAULT_THREAD_TITLE;
}

export async function createThread(db: DbOrTx, input: { userId: string; title?: string }): Promise<ThreadRecord> {
  const [row] = await db
    .insert(threads)
    .values({ userId: input.userId, title: normalizeTitle(input.title) })
    .returning();
  return row;
}

/** What a thread holds besides its title: messages, batches, workspace files (one round trip). */
export async function threadUse(db: DbOrTx, threadId: string): Promise<{ messages: boolean; batches: boolean; files: boolean }> {
  const [row] = await db
    .select({
      messages: sql<boolean>`exists (select 1 from ${messages} where ${messages.threadId} = ${threadId})`,
      batches: sql<boolean>`exists (select 1 from ${subagentBatches} where ${subagentBatches.threadId} = ${threadId})`,
      files: sql<boolean>`exists (select 1 from ${workspaceFiles} where ${workspaceFiles.threadId} = ${threadId})`,
    })
    .from(threads)
    .where(eq(threads.id, threadId));
  return row ?? { messages: false, batches: false, files: false };
}

/**
 * "New thread" for a person: their newest thread when nothing happened in it yet (no message,
 * batch or file), else a new one, so repeated clicks never pile up empty threads. A per-user
 * transaction lock makes two clicks at once agree on one thread.
 */
export async function openBlankThread(db: DbOrTx, input: { userId: string }): Promise<{ thread: ThreadRecord; created: boolean }> {
  return db.transaction(async (tx) => {
    await tx.execute(sql`select pg_advisory_xact_lock(hashtextextended(${`new-thread:${input.userId}`}, 0))`);
    const [newest] = await listThreads(tx, { userId: input.userId, limit: 1 });
    if (newest && newest.title === DEFAULT_THREAD_TITLE) {
      const use = await threadUse(tx, newest.id);
      if (!use.messages && !use.batches && !use.files) return { thread: newest, created: false };
    }
    return { thread: await createThread(tx, { userId: input.userId }), created: true };
  });
}

/** The caller's threads, most recently active first. */
export async function listThreads(
  db: DbOrTx,
  input: { userId: string; limit?: number },
): Promise<ThreadRecord[]> {
  return db
    .select()
    .from(threads)
    .where(eq(threads.userId, input.userId))
    .orderBy(desc(threads.updatedAt), desc(threads.id))
    .limit(Math.min(Math.max(input.limit ?? THREAD_LIST_LIMIT, 1), THREAD_LIST_LIMIT));
}

/** The thread when it belongs to the caller; AppError not_found for anything else (never reveals existence). */
export async function getThreadForUser(db: DbOrTx, input: { userId: string; threadId: string }): Promise<ThreadRecord> {
  if (!threadIdSchema.safeParse(input.threadId).success) throw new AppError("not_found", "thread not found");
  const [row] = await db
    .select()
    .from(threads)
    .where(and(eq(threads.id, input.threadId), eq(threads.userId, input.userId)))
    .limit(1);
  if (!row) throw new AppError("not_found", "thread not found");
  return row;
}

/** Marks activity on the thread (sidebar order); optionally replaces a still-default title. */
export async function touchThread(
  db: DbOrTx,
  input: { userId: string; threadId: string; titleIfDefault?: string },
): Promise<void> {
  const title = input.titleIfDefault ? normalizeTitle(input.titleIfDefault) : undefined;
  await db
    .update(threads)
    .set({
      updatedAt: sql`now()`,
      ...(title ? { title: sql`case when ${threads.title} = ${DEFAULT_THREAD_TITLE} then ${title} else ${threads.title} end` } : {}),
    })
    .where(and(eq(threads.id, input.threadId), eq(threads.userId, input.userId)));
}

/** Renames the caller's thread (not counted as activity: the sidebar order stays by last message). */
export async function renameThread(
  db: DbOrTx,
  input: { userId: string; threadId: string; title: string },
): Promise<ThreadRecord> {
  const thread = await getThreadForUser(db, input);
  const [row] = await db
    .update(threads)
    .set({ title: normalizeTitle(input.title) })
    .where(and(eq(threads.id, thread.id), eq(threads.userId, input.userId)))
    .returning();
  if (!row) throw new AppError("not_found", "thread not found");
  return row;
}
