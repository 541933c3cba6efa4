import { createUIMessageStreamResponse } from "ai";
import { CHAT_MAX_BODY_BYTES, chatRequestSchema } from "@/lib/api/chat";
import { requireUser } from "@/server/auth/authenticate";
import { assertDailyTokenQuota } from "@/server/batches/budget";
import { startLeadRun } from "@/server/chat/lead-run";
import { readChatStream } from "@/server/chat/streams";
import { getConfig } from "@/server/config/load";
import { getDatabase } from "@/server/db/client";
import { handle, readJson } from "@/server/http/route";
import { resolveModel } from "@/server/models";

export const dynamic = "force-dynamic";
// The stream follows a response that can take a while; never cut it off at a platform default.
export const maxDuration = 3600;

type Ctx = { params: Promise<{ threadId: string }> };

/**
 * Starts the lead agent's reply to one new user message and streams it (AI SDK UI message
 * stream, SSE). The response runs on the server: a client that disconnects reattaches with
 * GET .../chat/stream. 409 while the thread's previous response still runs.
 */
export const POST = handle(async (req: Request, ctx: Ctx) => {
  const { userId } = await requireUser(req);
  const { threadId } = await ctx.params;
  const request = await readJson(req, chatRequestSchema, CHAT_MAX_BODY_BYTES);
  const config = getConfig();
  const { db } = getDatabase();
  await assertDailyTokenQuota(db, config, userId); // 429 quota_exceeded
  const run = await startLeadRun(db, {
    config,
    model: resolveModel(config),
    userId,
    threadId,
    trigger: { kind: "user", message: { id: request.message.id, role: "user", parts: request.message.parts } },
  });
  return createUIMessageStreamResponse({ stream: readChatStream(db, { streamId: run.streamId }) });
});
