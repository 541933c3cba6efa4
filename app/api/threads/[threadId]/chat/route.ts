import { consumeStream, createUIMessageStreamResponse } from "ai";
import { requireUser } from "@/server/auth/authenticate";
import { assertDailyTokenQuota } from "@/server/batches/budget";
import { CHAT_MAX_BODY_BYTES, chatRequestSchema, respondToChat } from "@/server/chat/respond";
import { getConfig } from "@/server/config/load";
import { getDatabase } from "@/server/db/client";
import { handle, readJson } from "@/server/http/route";
import { resolveModel } from "@/server/models";

export const dynamic = "force-dynamic";
// A lead response with delegated work can take a while; never cut it off at a platform default.
export const maxDuration = 3600;

type Ctx = { params: Promise<{ threadId: string }> };

/** Streams the lead agent's reply to one new user message (AI SDK UI message stream, SSE). */
export const POST = handle(async (req: Request, ctx: Ctx) => {
  const { userId } = await requireUser(req);
  const { threadId } = await ctx.params;
  const request = await readJson(req, chatRequestSchema, CHAT_MAX_BODY_BYTES);
  const config = getConfig();
  await assertDailyTokenQuota(getDatabase().db, config, userId); // 429 quota_exceeded
  const stream = await respondToChat(getDatabase().db, {
    config,
    model: resolveModel(config),
    userId,
    threadId,
    request,
    signal: req.signal,
  });
  // Consuming a copy keeps the response going to its end (and its persistence) when the
  // browser disconnects; the request signal still aborts the model call.
  return createUIMessageStreamResponse({ stream, consumeSseStream: consumeStream });
});
