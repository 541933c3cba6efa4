import { and, eq, sql } from "drizzle-orm";
import { expect } from "vitest";
import { type ChatApproval, chatApprovalsSchema } from "@/lib/api/approvals";
import { loadMessages } from "@/server/chat/messages";
import { chatStreams } from "@/server/db/schema";
import { makeUser, type TestUser } from "../api/helpers";
import { waitUntil } from "../loop/support";
import type { TestDatabase } from "./db";
import { startWebServer, type WebServer } from "./web-server";

/**
 * A person talking to the lead over a real socket (the simulator answers; `[[tool:NAME {json}]]`
 * in a message makes it call NAME): their messages, the thread's approval cards and their
 * decisions, and the tool parts of the stored replies.
 */

export type ToolPart = {
  type: string;
  state?: string;
  input?: Record<string, unknown>;
  output?: Record<string, unknown>;
  approval?: { reason?: string };
};

export interface LeadChat {
  /** Sends a message as the user and waits until the thread's response has ended. */
  say(threadId: string, text: string): Promise<void>;
  /** Waits until no response of the thread is streaming. */
  idle(threadId: string): Promise<void>;
  /** The thread's approval cards waiting for a decision. */
  waiting(threadId: string): Promise<ChatApproval[]>;
  decide(threadId: string, approvalId: string, body: unknown, user?: TestUser): Promise<Response>;
  /** The calls of one tool across the thread's stored messages, oldest first. */
  toolParts(threadId: string, tool: string): Promise<ToolPart[]>;
}

export function leadChat(server: WebServer, t: TestDatabase, user: TestUser): LeadChat {
  let seq = 0;
  const api = (path: string, init: { method?: string; body?: unknown; as?: TestUser } = {}) =>
    fetch(`${server.origin}/api/threads/${path}`, {
      method: init.method ?? "GET",
      headers: { authorization: `Bearer ${(init.as ?? user).token}`, "content-type": "application/json" },
      ...(init.body === undefined ? {} : { body: JSON.stringify(init.body) }),
    });
  const chat: LeadChat = {
    async say(threadId, text) {
      const message = { id: `u${Date.now().toString(36)}x${++seq}`, role: "user", parts: [{ type: "text", text }] };
      const res = await api(`${threadId}/chat`, { method: "POST", body: { message } });
      expect(res.status).toBe(200);
      await res.text();
      await chat.idle(threadId);
    },
    async idle(threadId) {
      await waitUntil(
        "the thread is idle",
        async () => {
          const [row] = await t.db
            .select({ n: sql<number>`count(*)::int` })
            .from(chatStreams)
            .where(and(eq(chatStreams.status, "active"), eq(chatStreams.threadId, threadId)));
          return row!.n === 0 ? true : undefined;
        },
        60_000,
        50,
      );
    },
    async waiting(threadId) {
      return chatApprovalsSchema.parse(await (await api(`${threadId}/approvals`)).json()).approvals;
    },
    decide(threadId, approvalId, body, as = user) {
      return api(`${threadId}/approvals/${approvalId}`, { method: "POST", body, as });
    },
    async toolParts(threadId, tool) {
      const messages = await loadMessages(t.db, { threadId });
      return messages.flatMap((m) => m.parts as ToolPart[]).filter((p) => p.type === `tool-${tool}`);
    },
  };
  return chat;
}

/** A chat suite's cast: the web server (the chat and approval routes loaded, and `preload`), alice talking to the lead, and bob. */
export async function startLeadChat(
  t: TestDatabase,
  preload: string[] = [],
): Promise<{ server: WebServer; alice: TestUser; bob: TestUser; chat: LeadChat }> {
  const server = await startWebServer({
    preload: ["/api/threads/[threadId]/chat", "/api/threads/[threadId]/approvals", "/api/threads/[threadId]/approvals/[approvalId]", ...preload],
  });
  const alice = await makeUser(t, "alice");
  const bob = await makeUser(t, "bob");
  return { server, alice, bob, chat: leadChat(server, t, alice) };
}
