import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { createThread } from "@/server/chat/threads";
import { makeUser, setupApiDatabase, type TestUser, workerAlive } from "../api/helpers";
import { startWebServer, type WebServer } from "../helpers/web-server";

/**
 * A batch a person submits to a thread outside the chat (the New batch dialog posts to this door)
 * joins the conversation, over a real socket: one user message carrying the receipt
 * (metadata.submitted_batch, which the chat shows as the batch's receipt card, and a text that
 * names the batch for the lead), and a thread still called "New thread" takes its title from the
 * batch. A replay adds nothing; a refused submission writes nothing; a named thread keeps its name.
 */

const tdb = await setupApiDatabase();
let server: WebServer;
let alice: TestUser;
let bob: TestUser;

beforeAll(async () => {
  server = await startWebServer({ preload: ["/api/threads/[threadId]/subagent-batches", "/api/threads/[threadId]"] });
  alice = await makeUser(tdb, "receipt");
  bob = await makeUser(tdb, "other");
});
afterAll(async () => {
  await server?.close();
});
beforeEach(async () => {
  await workerAlive(tdb);
});

let n = 0;
async function submit(user: TestUser, threadId: string, body: string, init: { contentType?: string; query?: Record<string, string> } = {}) {
  const query = new URLSearchParams(init.query ?? {}).toString();
  const res = await fetch(`${server.origin}/api/threads/${threadId}/subagent-batches${query ? `?${query}` : ""}`, {
    method: "POST",
    headers: { authorization: `Bearer ${user.token}`, "content-type": init.contentType ?? "application/json" },
    body,
  });
  return { status: res.status, body: (await res.json()) as { id?: string; total?: number; error?: { code: string; message: string } } };
}

type StoredMessage = { id: string; role: string; parts: { type: string; text?: string }[]; metadata?: Record<string, unknown> | null };
async function thread(user: TestUser, threadId: string): Promise<{ title: string; messages: StoredMessage[] }> {
  const res = await fetch(`${server.origin}/api/threads/${threadId}`, { headers: { authorization: `Bearer ${user.token}` } });
  expect(res.status).toBe(200);
  return (await res.json()) as { title: string; messages: StoredMessage[] };
}

const newThread = async (user: TestUser, title?: string) => (await createThread(tdb.db, { userId: user.userId, title })).id;

describe("a batch submitted to a thread outside the chat", () => {
  it("stores one receipt message and titles a default thread from the template; a replay adds nothing", async () => {
    const threadId = await newThread(alice);
    const body = {
      submission_key: `receipt-${++n}`,
      items: ["The app crashes when I upload a photo", "Love the new dark mode", "Refund please"],
      prompt_template: "Classify the urgency of this support message: {{item}}",
    };
    const first = await submit(alice, threadId, JSON.stringify(body));
    expect(first.status).toBe(201);
    const batchId = first.body.id!;

    const after = await thread(alice, threadId);
    expect(after.title).toBe("Classify the urgency of this support message: {{item}}");
    expect(after.messages).toHaveLength(1);
    const [receipt] = after.messages;
    expect(receipt).toMatchObject({
      id: `batch_${batchId.replace(/-/g, "")}`,
      role: "user",
      metadata: { submitted_batch: { id: batchId, total: 3 } },
    });
    // What the lead reads: the batch's id, its size and sub-agent, the template.
    const text = receipt!.parts.map((p) => p.text ?? "").join("");
    expect(text).toContain(`Batch ${batchId}: 3 items for sub-agent general.`);
    expect(text).toContain("Prompt template: Classify the urgency of this support message: {{item}}");

    const replay = await submit(alice, threadId, JSON.stringify(body));
    expect(replay.status).toBe(200);
    expect(replay.body.id).toBe(batchId);
    expect((await thread(alice, threadId)).messages).toHaveLength(1);
  });

  it("cuts a long title at a word with an ellipsis (a CSV upload), and keeps a title the person gave", async () => {
    const threadId = await newThread(alice);
    const template =
      "Read this customer message and decide whether it needs a reply from the billing team today: {{message}}";
    const csv = "message\nI was charged twice\nWhere is my invoice?\n";
    const res = await submit(alice, threadId, csv, {
      contentType: "text/csv",
      query: { submission_key: `receipt-${++n}`, prompt_template: template },
    });
    expect(res.status, JSON.stringify(res.body)).toBe(201);
    const { title, messages } = await thread(alice, threadId);
    expect(title).toBe("Read this customer message and decide whether it needs a reply from the billing…");
    expect(title.length).toBeLessThanOrEqual(80);
    expect(messages.map((m) => m.metadata?.submitted_batch)).toEqual([{ id: res.body.id, total: 2 }]);

    const named = await newThread(alice, "Billing triage");
    const second = await submit(alice, named, JSON.stringify({ submission_key: `receipt-${++n}`, items: ["Summarize the refund policy"] }));
    expect(second.status).toBe(201);
    const kept = await thread(alice, named);
    expect(kept.title).toBe("Billing triage");
    expect(kept.messages).toHaveLength(1);
  });

  it("titles from the first item's prompt when there is no template", async () => {
    const threadId = await newThread(alice);
    const res = await submit(
      alice,
      threadId,
      JSON.stringify({ submission_key: `receipt-${++n}`, items: [{ item_key: "a", prompt: "Translate 'good morning' into Portuguese" }, "Second"] }),
    );
    expect(res.status).toBe(201);
    expect((await thread(alice, threadId)).title).toBe("Translate 'good morning' into Portuguese");
  });

  it("leaves the simulator's directives ([[sleep:…]], [[fail]]) out of the title", async () => {
    const threadId = await newThread(alice);
    const res = await submit(
      alice,
      threadId,
      JSON.stringify({ submission_key: `receipt-${++n}`, prompt_template: "Rate {{item}} [[sleep:200]] [[fail]]", items: ["one", "two"] }),
    );
    expect(res.status).toBe(201);
    expect((await thread(alice, threadId)).title).toBe("Rate {{item}}");
  });

  it("writes nothing for a refused submission, nor into another user's thread", async () => {
    const threadId = await newThread(alice);
    const refused = await submit(alice, threadId, JSON.stringify({ submission_key: `receipt-${++n}`, items: ["x"], prompt_template: "no slot" }));
    expect(refused.status).toBe(400);
    const untouched = await thread(alice, threadId);
    expect(untouched).toMatchObject({ title: "New thread", messages: [] });

    const foreign = await submit(bob, threadId, JSON.stringify({ submission_key: `receipt-${++n}`, items: ["Summarize this"] }));
    expect(foreign.status).toBe(404);
    expect(await thread(alice, threadId)).toMatchObject({ title: "New thread", messages: [] });
  });
});
