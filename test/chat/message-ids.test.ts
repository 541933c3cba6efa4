import { randomUUID } from "node:crypto";
import { eq, sql } from "drizzle-orm";
import { beforeAll, describe, expect, it } from "vitest";
import { POST as chat } from "@/app/api/threads/[threadId]/chat/route";
import { GET as getThread } from "@/app/api/threads/[threadId]/route";
import { configSchema } from "@/lib/config";
import { batchSubagent } from "@/server/agent/registry";
import { cancelBatch } from "@/server/batches/repository";
import { submitBatch } from "@/server/batches/submit";
import { createThread } from "@/server/chat/threads";
import { runOneWakeup, wakeupMessageId } from "@/server/chat/wakeup";
import { messages } from "@/server/db/schema";
import { createTestDatabase, type TestDatabase } from "../helpers/db";
import { makeUser, params, readUIChunks, request, sessionCookie, useSuiteEnv } from "./support";

/**
 * Message ids are scoped to their thread: an id one user sends (even one another thread already
 * uses, or will use for its next wake-up reply) is stored in that user's thread and keeps
 * nothing of another thread from being stored; a reused id within one thread is still a 409.
 */

let t: TestDatabase;
let alice: { id: string; email: string; password: string };
let bob: { id: string; email: string; password: string };
let aliceCookie: string;
let bobCookie: string;
const config = configSchema.parse({});

beforeAll(async () => {
  t = await createTestDatabase();
  useSuiteEnv(t.url, { FLOTILLA__SIMULATOR__LATENCY_MS: "0" });
  for (const k of ["MODEL_BASE_URL", "MODEL_API_KEY", "MODEL_NAME"]) delete process.env[k];
  alice = await makeUser(t.db, "alice");
  aliceCookie = await sessionCookie(alice);
  bob = await makeUser(t.db, "bob");
  bobCookie = await sessionCookie(bob);
});

const send = (threadId: string, cookie: string, id: string, text: string) =>
  chat(
    request(`/api/threads/${threadId}/chat`, { cookie, body: { message: { id, role: "user", parts: [{ type: "text", text }] } } }),
    params({ threadId }),
  );

async function shown(threadId: string, cookie: string) {
  const res = await getThread(request(`/api/threads/${threadId}`, { cookie }), params({ threadId }));
  expect(res.status).toBe(200);
  const body = (await res.json()) as { messages: { id: string; role: string; metadata?: Record<string, unknown> }[] };
  return body.messages;
}

const stored = async (threadId: string) =>
  (await t.db.select({ n: sql<number>`count(*)::int` }).from(messages).where(eq(messages.threadId, threadId)))[0].n;

describe("message ids scoped to their thread", () => {
  it("another user's message with the id of this thread's next wake-up reply, or of a message in it, blocks nothing", async () => {
    const aliceThread = await createThread(t.db, { userId: alice.id });
    const bobThread = await createThread(t.db, { userId: bob.id });
    const aliceFirst = `a-${randomUUID()}`;
    const res = await send(aliceThread.id, aliceCookie, aliceFirst, "Hello from Alice");
    expect(res.status).toBe(200);
    await readUIChunks(res);

    // Alice's lead batch settles (cancelled): a wake-up reply with a derivable id is due.
    const runId = randomUUID();
    const { batch } = await submitBatch(t.db, {
      ...batchSubagent(config, undefined),
      userId: alice.id,
      threadId: aliceThread.id,
      input: { submission_key: `${runId}:call-1`, items: ["one", "two"], max_running_items: 1 },
      config,
      model: { name: "simulator", simulator: true },
      origin: { kind: "tool", runId, toolCallId: "call-1" },
    });
    await cancelBatch(t.db, { userId: alice.id, threadId: aliceThread.id, batchId: batch.id });
    const wakeId = wakeupMessageId(batch.id, 1);

    // Bob sends a message under that id first, in his own thread: it is stored there.
    const taken = await send(bobThread.id, bobCookie, wakeId, "Bob's message");
    expect(taken.status).toBe(200);
    await readUIChunks(taken);

    // Alice's wake-up reply is still stored and shown in her thread, under its id.
    expect(await runOneWakeup({ db: t.db, config, owner: "in-test" })).toBe(true);
    const alices = await shown(aliceThread.id, aliceCookie);
    expect(alices.map((m) => [m.id, m.role])).toEqual([
      [aliceFirst, "user"],
      [expect.any(String), "assistant"],
      [wakeId, "assistant"],
    ]);
    expect(alices.at(-1)!.metadata).toMatchObject({ trigger: "batch_settled", batch_id: batch.id });

    // An id already in Alice's thread is Bob's to use in his.
    const reused = await send(bobThread.id, bobCookie, aliceFirst, "Bob again");
    expect(reused.status).toBe(200);
    await readUIChunks(reused);
    const bobs = await shown(bobThread.id, bobCookie);
    expect(bobs.filter((m) => m.role === "user").map((m) => m.id)).toEqual([wakeId, aliceFirst]);
    expect(bobs.some((m) => m.role === "assistant" && m.metadata?.trigger === "batch_settled")).toBe(false);
    // Alice's thread is as it was.
    expect((await shown(aliceThread.id, aliceCookie)).map((m) => m.id)).toEqual(alices.map((m) => m.id));
  });

  it("a reused id within one thread is still a 409 that writes nothing", async () => {
    const thread = await createThread(t.db, { userId: alice.id });
    const id = `same-${randomUUID()}`;
    await readUIChunks(await send(thread.id, aliceCookie, id, "once"));
    const before = await stored(thread.id);
    const again = await send(thread.id, aliceCookie, id, "twice");
    expect(again.status).toBe(409);
    expect((await again.json()).error.message).toMatch(/^message\.id: /);
    expect(await stored(thread.id)).toBe(before);
  });
});
