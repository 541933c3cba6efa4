import { z } from "zod";
import type { StopReportProjection } from "@/lib/api/runs";
import { stopRunTree } from "@/server/agent/runs";
import { requireUser } from "@/server/auth/authenticate";
import { notifyChatStream } from "@/server/chat/streams";
import { getThreadForUser } from "@/server/chat/threads";
import { getDatabase } from "@/server/db/client";
import { handle, json, parseParam } from "@/server/http/route";

export const dynamic = "force-dynamic";

type Ctx = { params: Promise<{ threadId: string; runId: string }> };

/** Stops a run and every descendant (queued ones included); reports how many stopped and how many did not. */
export const POST = handle(async (req: Request, ctx: Ctx) => {
  const { userId } = await requireUser(req);
  const params = await ctx.params;
  const { db } = getDatabase();
  const thread = await getThreadForUser(db, { userId, threadId: params.threadId });
  const runId = parseParam(z.uuid(), params.runId, "run");
  const report = await stopRunTree(db, { userId, threadId: thread.id, runId });
  // A lead response runs in whichever web process started it; reach it when it is not here.
  if (!report.runAborted) await notifyChatStream(db, `stop:${runId}`);
  const body: StopReportProjection = { run_id: runId, stopped: report.stopped, failed_to_stop: report.failedToStop };
  return json(body);
});
