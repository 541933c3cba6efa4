import { chatApprovalDecisionSchema } from "@/lib/api/approvals";
import { decideChatApproval } from "@/server/agent/chat-approvals";
import { requireUser } from "@/server/auth/authenticate";
import { continueDecidedReply } from "@/server/chat/approval-continuation";
import { getThreadForUser } from "@/server/chat/threads";
import { getConfig } from "@/server/config/load";
import { getDatabase } from "@/server/db/client";
import { handle, json, readJson } from "@/server/http/route";
import { log } from "@/server/log";
import { resolveModel } from "@/server/models";

export const dynamic = "force-dynamic";

type Ctx = { params: Promise<{ threadId: string; approvalId: string }> };

/**
 * A person's decision on one waiting call: `{ decision: "approve" | "deny", reason?, option? }` (option
 * "pilot": a batch_task's "Run a pilot of 10") and
 * nothing about the call itself. 200 with the decided call; 409 when it no longer waits
 * (decided, timed out, its run ended); 404 for a call that is not yours. A decided lead call
 * whose reply has no other call waiting goes on at once (the sweep catches a busy moment).
 */
export const POST = handle(async (req: Request, ctx: Ctx) => {
  const { userId } = await requireUser(req);
  const { threadId, approvalId } = await ctx.params;
  const { db } = getDatabase();
  const thread = await getThreadForUser(db, { userId, threadId });
  const { decision, reason, option } = await readJson(req, chatApprovalDecisionSchema, 16 * 1024);
  const decided = await decideChatApproval(db, { userId, threadId: thread.id, approvalId, decision, reason, option });
  if (decided.kind === "lead") {
    const config = getConfig();
    await continueDecidedReply(db, { config, model: resolveModel(config), threadId: thread.id }).catch((err) =>
      log.warn({ err, thread_id: thread.id }, "could not continue the reply now; the approvals sweep will"),
    );
  }
  return json({ approval: decided.approval });
});
