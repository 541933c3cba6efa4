import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ITEM_KEY_MAX_CHARS } from "@/lib/batch-rules";
import { loadMessages } from "@/server/chat/messages";
import { makeThread, makeUser, setupApiDatabase, type TestUser, workerAlive } from "../api/helpers";
import { startWebServer, type WebServer } from "../helpers/web-server";

/**
 * A model that calls batch_task with arguments the doors refuse gets the writer's words, as every
 * other door answers (`items.0.item_key: must be at most 200 characters`), never the AI SDK's
 * "Invalid input for tool batch_task: Type validation failed: …". Through the lead over a real
 * socket: the simulator issues the call the chat message spells out ([[call:batch_task {...}]]),
 * and the JSON door is asked the same for comparison. Nothing is written.
 */

process.env.FLOTILLA__SIMULATOR__LATENCY_MS = "5";
for (const k of ["MODEL_BASE_URL", "MODEL_API_KEY", "MODEL_NAME"]) delete process.env[k];
const tdb = await setupApiDatabase();
let server: WebServer;
let alice: TestUser;

beforeAll(async () => {
  server = await startWebServer({ preload: ["/api/threads/[threadId]/chat"] });
  alice = await makeUser(tdb, "model");
  // batch_task is offered only while a worker is alive.
  await workerAlive(tdb);
});

afterAll(() => server.close());

let seq = 0;
async function chat(threadId: string, text: string): Promise<string> {
  const message = { id: `u${Date.now().toString(36)}x${++seq}`, role: "user", parts: [{ type: "text", text }] };
  const res = await fetch(`${server.origin}/api/threads/${threadId}/chat`, {
    method: "POST",
    headers: { authorization: `Bearer ${alice.token}`, "content-type": "application/json" },
    body: JSON.stringify({ message }),
  });
  expect(res.status).toBe(200);
  return res.text();
}

/** What the JSON door answers for the same arguments. */
async function door(threadId: string, args: Record<string, unknown>): Promise<{ status: number; message: string }> {
  const res = await fetch(`${server.origin}/api/threads/${threadId}/subagent-batches`, {
    method: "POST",
    headers: { authorization: `Bearer ${alice.token}`, "content-type": "application/json" },
    body: JSON.stringify({ submission_key: `door-${++seq}`, ...args }),
  });
  return { status: res.status, message: ((await res.json()) as { error: { message: string } }).error.message };
}

type Part = { type: string; toolCallId?: string; state?: string; output?: unknown; errorText?: string };

/** The batch_task part of the lead's stored reply. */
async function batchTaskPart(threadId: string): Promise<Part> {
  const messages = await loadMessages(tdb.db, { threadId });
  const reply = messages.filter((m) => m.role === "assistant").at(-1)!;
  const parts = (reply.parts as Part[]).filter((p) => p.type === "tool-batch_task");
  expect(parts).toHaveLength(1);
  return parts[0]!;
}

const batches = async () => (await tdb.sql<{ n: number }[]>`select count(*)::int as n from subagent_batches`)[0]!.n;

describe("batch_task's refusals are the writer's", () => {
  const cases: { what: string; args: Record<string, unknown>; message: string }[] = [
    {
      what: `an item_key of ${ITEM_KEY_MAX_CHARS + 1} characters`,
      args: { items: [{ item_key: "k".repeat(ITEM_KEY_MAX_CHARS + 1), prompt: "Say hi" }] },
      message: `items.0.item_key: must be at most ${ITEM_KEY_MAX_CHARS} characters`,
    },
    { what: "an empty item", args: { prompt_template: "Rate {{item}}", items: ["ok", ""] }, message: "items.1" },
    { what: "a negative max_running_items", args: { items: ["a"], max_running_items: -2 }, message: "max_running_items: must be a positive whole number" },
    { what: "a sub-agent name as a number", args: { items: ["a"], subagent: 7 }, message: "subagent: " },
  ];

  for (const { what, args, message } of cases)
    it(`${what}: the model reads the same words as the JSON door answers, and nothing is written`, async () => {
      const threadId = await makeThread(tdb, alice);
      const before = await batches();
      const answered = await door(threadId, args);
      expect(answered.status).toBe(400);
      expect(answered.message.startsWith(message)).toBe(true);

      const stream = await chat(threadId, `[[call:batch_task ${JSON.stringify(args)}]]`);
      expect(stream).not.toContain("Invalid input for tool");
      expect(stream).not.toContain("Type validation failed");
      const part = await batchTaskPart(threadId);
      // A tool result the model reads (not a tool error the AI SDK wrote), in the writer's words.
      expect(part.state).toBe("output-available");
      expect(part.output).toEqual({ error: answered.message });
      expect(await batches()).toBe(before);
    });

  it("arguments the doors accept still submit the batch", async () => {
    const threadId = await makeThread(tdb, alice);
    await chat(threadId, `[[call:batch_task ${JSON.stringify({ items: [{ item_key: "k".repeat(ITEM_KEY_MAX_CHARS), prompt: "Say hi" }] })}]]`);
    const part = await batchTaskPart(threadId);
    expect(part.state).toBe("output-available");
    expect(part.output).toMatchObject({ created: true, total: 1 });
    const [row] = await tdb.sql<{ item_key: string }[]>`
      select it.item_key from subagent_batch_items it join subagent_batches b on b.id = it.batch_id where b.thread_id = ${threadId}`;
    expect(row!.item_key).toHaveLength(ITEM_KEY_MAX_CHARS);
  });
});
