import { z } from "zod";
import { requireUser } from "@/server/auth/authenticate";
import { deleteThread } from "@/server/chat/delete-thread";
import { loadMessages } from "@/server/chat/messages";
import { getThreadForUser, renameThread, THREAD_TITLE_MAX, toThreadProjection } from "@/server/chat/threads";
import { getDatabase } from "@/server/db/client";
import { handle, json, readJson } from "@/server/http/route";

export const dynamic = "force-dynamic";

type Ctx = { params: Promise<{ threadId: string }> };

const renameBody = z
  .object(
    {
      title: z
        .string({ error: (iss) => (iss.input === undefined ? "is required" : "must be a string") })
        .refine((t) => t.trim() !== "", { error: "must not be empty" })
        .refine((t) => t.length <= THREAD_TITLE_MAX, { error: `must be at most ${THREAD_TITLE_MAX} characters` }),
    },
    { error: (iss) => (iss.code === "invalid_type" ? "must be a JSON object" : undefined) },
  )
  .strict();

export const GET = handle(async (req: Request, ctx: Ctx) => {
  const { userId } = await requireUser(req);
  const { threadId } = await ctx.params;
  const { db } = getDatabase();
  const thread = await getThreadForUser(db, { userId, threadId });
  const messages = await loadMessages(db, { threadId: thread.id, withQueued: true });
  return json({ ...toThreadProjection(thread), messages });
});

/** Renames the thread: `{ "title": "…" }`. */
export const PATCH = handle(async (req: Request, ctx: Ctx) => {
  const { userId } = await requireUser(req);
  const { threadId } = await ctx.params;
  const body = await readJson(req, renameBody, 16 * 1024);
  const thread = await renameThread(getDatabase().db, { userId, threadId, title: body.title });
  return json(toThreadProjection(thread));
});

/** Deletes the thread with its messages, runs and batches (active batches are cancelled first). */
export const DELETE = handle(async (req: Request, ctx: Ctx) => {
  const { userId } = await requireUser(req);
  const { threadId } = await ctx.params;
  const deleted = await deleteThread(getDatabase().db, { userId, threadId });
  return json({ id: deleted.id, deleted: true, cancelled_batches: deleted.cancelledBatches });
});
