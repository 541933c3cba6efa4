import { eq } from "drizzle-orm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { POST as chat } from "@/app/api/threads/[threadId]/chat/route";
import { createThread } from "@/server/chat/threads";
import { agentRuns } from "@/server/db/schema";
import { createTestDatabase, type TestDatabase } from "../helpers/db";
import { type FakeAnthropic, startFakeAnthropic } from "../helpers/fake-anthropic";
import { makeUser, params, readUIChunks, request, sessionCookie, useSuiteEnv } from "./support";

/**
 * A lead chat turn on a native provider: MODEL_PROVIDER=anthropic makes the env's "default"
 * entry an Anthropic one (no MODEL_BASE_URL needed in production; here it points at the fake).
 * The lead streams through @ai-sdk/anthropic's Messages API, with its tools and its system prompt
 * marked for the prompt cache, and the run keeps the usage the provider reported, cache included.
 */

let t: TestDatabase;
let fake: FakeAnthropic;

beforeAll(async () => {
  t = await createTestDatabase();
  fake = await startFakeAnthropic();
  useSuiteEnv(t.url, {
    MODEL_PROVIDER: "anthropic",
    MODEL_BASE_URL: fake.url,
    MODEL_NAME: "claude-sonnet-4-5",
    MODEL_API_KEY: "sk-ant-lead",
  });
});
afterAll(() => fake?.close());

describe("a lead turn on an anthropic default entry", () => {
  it("streams the provider's answer, sends the tools and the key, and records the run's usage", async () => {
    const alice = await makeUser(t.db, "native-lead");
    const cookie = await sessionCookie(alice);
    const thread = await createThread(t.db, { userId: alice.id });
    const res = await chat(
      request(`/api/threads/${thread.id}/chat`, {
        method: "POST",
        cookie,
        body: { message: { id: "u-native-1", role: "user", parts: [{ type: "text", text: "How are the contracts?" }] } },
      }),
      params({ threadId: thread.id }),
    );
    expect(res.status).toBe(200);
    const chunks = await readUIChunks(res);
    const text = chunks.filter((c) => c.type === "text-delta").map((c) => c.delta as string).join("");
    expect(text).toBe("Echo: How are the contracts?");
    const start = chunks[0] as { messageMetadata: { runId: string; model: string; simulator: boolean } };
    expect(start.messageMetadata).toMatchObject({ model: "claude-sonnet-4-5", simulator: false });

    const sent = fake.requests.at(-1)!;
    expect(sent.path).toBe("/v1/messages");
    expect(sent.headers["x-api-key"]).toBe("sk-ant-lead");
    expect(sent.body).toMatchObject({ model: "claude-sonnet-4-5", stream: true });
    // The lead's tools travel natively (task, batch_task, ...).
    expect((sent.body?.tools ?? []).map((tool) => tool.name)).toContain("task");

    // The lead's system prompt (its tools before it) is the same every turn: marked, and written on the first.
    const system = sent.body?.system as Array<{ text: string; cache_control?: unknown }>;
    expect(system[0]!.cache_control).toEqual({ type: "ephemeral" });
    const u = sent.usage!;
    expect(u.cache_creation_input_tokens).toBeGreaterThan(1_024);

    const [run] = await t.db.select().from(agentRuns).where(eq(agentRuns.id, start.messageMetadata.runId));
    expect(run).toMatchObject({ kind: "lead", status: "completed", model: "default" });
    expect(run!.inputTokens).toBe(u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens);
    expect(run!.cacheWriteTokens).toBe(u.cache_creation_input_tokens);
    expect(run!.outputTokens).toBe(u.output_tokens);

    // The next turn reads it.
    const again = await chat(
      request(`/api/threads/${thread.id}/chat`, {
        method: "POST",
        cookie,
        body: { message: { id: "u-native-2", role: "user", parts: [{ type: "text", text: "And the invoices?" }] } },
      }),
      params({ threadId: thread.id }),
    );
    const next = (await readUIChunks(again))[0] as { messageMetadata: { runId: string } };
    expect(fake.requests.at(-1)!.usage!.cache_read_input_tokens).toBe(u.cache_creation_input_tokens);
    const [second] = await t.db.select().from(agentRuns).where(eq(agentRuns.id, next.messageMetadata.runId));
    expect(second!.cachedInputTokens).toBe(u.cache_creation_input_tokens);
  });
});
