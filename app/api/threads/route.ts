import { z } from "zod";
import { requireUser } from "@/server/auth/authenticate";
import { createThread, listThreads, openBlankThread, THREAD_TITLE_MAX, toThreadProjection } from "@/server/chat/threads";
import { getDatabase } from "@/server/db/client";
import { handle, json, readJson } from "@/server/http/route";

export const dynamic = "force-dynamic";

const createThreadBody = z
  .object({
    title: z.string({ error: "must be a string" }).max(THREAD_TITLE_MAX, { error: `must be at most ${THREAD_TITLE_MAX} characters` }).optional(),
    /** The sidebar's "New thread": answer the newest thread instead when it is still blank (200). */
    reuse_blank: z.boolean({ error: "must be true or false" }).optional(),
  })
  .strict();

export const POST = handle(async (req: Request) => {
  const { userId } = await requireUser(req);
  const body = await readJson(req, createThreadBody, 16 * 1024);
  const { db } = getDatabase();
  if (body.reuse_blank && body.title === undefined) {
    const { thread, created } = await openBlankThread(db, { userId });
    return json(toThreadProjection(thread), created ? 201 : 200);
  }
  const thread = await createThread(db, { userId, title: body.title });
  return json(toThreadProjection(thread), 201);
});

export const GET = handle(async (req: Request) => {
  const { userId } = await requireUser(req);
  const threads = await listThreads(getDatabase().db, { userId });
  return json({ threads: threads.map(toThreadProjection) });
});
