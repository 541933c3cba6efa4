import { z } from "zod";
import { getRunForUser, getStopReport, toRunDetail } from "@/server/agent/runs";
import { requireUser } from "@/server/auth/authenticate";
import { getThreadForUser } from "@/server/chat/threads";
import { getDatabase } from "@/server/db/client";
import { handle, json, parseParam } from "@/server/http/route";

export const dynamic = "force-dynamic";

type Ctx = { params: Promise<{ threadId: string; runId: string }> };

/** One run of the caller's thread, with the outcome of its latest Stop and its tool calls (the cards show them). */
export const GET = handle(async (req: Request, ctx: Ctx) => {
  const { userId } = await requireUser(req);
  const params = await ctx.params;
  const { db } = getDatabase();
  const thread = await getThreadForUser(db, { userId, threadId: params.threadId });
  const runId = parseParam(z.uuid(), params.runId, "run");
  const run = await getRunForUser(db, { userId, threadId: thread.id, runId });
  return json(toRunDetail(run, await getStopReport(db, { runId: run.id })));
});
