import { type BusyPolicy, busyPolicySchema, CHAT_MAX_BODY_BYTES, chatRequestSchema, type QueuedMessage } from "@/lib/api/chat";
import { requireUser } from "@/server/auth/authenticate";
import { assertDailyTokenQuota } from "@/server/batches/budget";
import { postUserMessage } from "@/server/chat/lead-run";
import { getConfig } from "@/server/config/load";
import { getDatabase } from "@/server/db/client";
import { AppError, zodMessage } from "@/server/errors";
import { chatStreamResponse } from "@/server/http/chat-stream";
import { handle, json, readJson } from "@/server/http/route";
import { resolveModel } from "@/server/models";

export const dynamic = "force-dynamic";
// The stream follows a response that can take a while; never cut it off at a platform default.
export const maxDuration = 3600;

type Ctx = { params: Promise<{ threadId: string }> };

/** `?busy=`: what this message asks for when the thread is busy (postUserMessage decides). */
function requestedBusyPolicy(req: Request): BusyPolicy | undefined {
  const value = new URL(req.url).searchParams.get("busy");
  if (value === null) return undefined;
  const parsed = busyPolicySchema.safeParse(value);
  if (!parsed.success) throw new AppError("validation_failed", zodMessage(parsed.error, "busy"));
  return parsed.data;
}

/**
 * One new user message. An idle thread starts the lead agent's reply and streams it (AI SDK UI
 * message stream, SSE); the response runs on the server, and a client that disconnects
 * reattaches with GET .../chat/stream. A busy thread follows the busy policy: 202
 * `{ queued, position }` (enqueue), the new reply's stream after stopping the running one
 * (interrupt), 409 (reject), or 429 queue_full when too many messages already wait.
 */
export const POST = handle(async (req: Request, ctx: Ctx) => {
  const { userId } = await requireUser(req);
  const { threadId } = await ctx.params;
  const config = getConfig();
  const requested = requestedBusyPolicy(req);
  const request = await readJson(req, chatRequestSchema, CHAT_MAX_BODY_BYTES);
  const { db } = getDatabase();
  await assertDailyTokenQuota(db, config, userId); // 429 quota_exceeded
  const posted = await postUserMessage(db, {
    config,
    model: resolveModel(config),
    userId,
    threadId,
    message: { id: request.message.id, role: "user", parts: request.message.parts },
    requested,
  });
  if (posted.kind === "queued") return json({ queued: true, position: posted.position } satisfies QueuedMessage, 202);
  return chatStreamResponse(db, posted.streamId);
});
