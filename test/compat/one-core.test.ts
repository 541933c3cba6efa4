import type { ChildProcess } from "node:child_process";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI, { toFile } from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { batchProjectionSchema } from "@/lib/api/batches";
import { call, makeUser, setupApiDatabase, type TestUser } from "../api/helpers";
import type { TestDatabase } from "../helpers/db";
import { type FakeOpenAI, startFakeOpenAI } from "../helpers/fake-openai";
import { type CompatServer, startCompatServer } from "./http-server";
import { chatLine, jsonl, spawnWorker, stopWorker, until } from "./support";

/**
 * Compatible batches go through the one batch writer: the per-user quotas refuse them in each
 * provider's error shape with nothing written, they are priced from the catalog (cost_usd), and
 * the daily token quota pauses them (pause_reason "quota") and then refuses the next one. The
 * official SDKs over real HTTP, real PostgreSQL, a real worker process, and a local fake
 * OpenAI-compatible endpoint as the priced model.
 */

// $2 per million input and $10 per million output tokens; every call uses 1,000 in + 100 out = $0.003.
const PRICES = { price_per_million_input: 2, price_per_million_output: 10 };
const PER_CALL = (1_000 * 2 + 100 * 10) / 1_000_000;
const DAILY_TOKENS = 3_000;

// The web side's configuration, read lazily by the handlers.
process.env.FLOTILLA__QUOTAS__MAX_QUEUED_ITEMS = "8";
process.env.FLOTILLA__QUOTAS__MAX_ACTIVE_BATCHES = "2";
process.env.FLOTILLA__QUOTAS__MAX_TOKENS_PER_DAY = String(DAILY_TOKENS);

let tdb: TestDatabase;
let server: CompatServer;
let fake: FakeOpenAI;
let worker: ChildProcess | undefined;

const openai = (user: TestUser) => new OpenAI({ baseURL: `${server.origin}/v1`, apiKey: user.token, maxRetries: 0 });
const anthropic = (user: TestUser) =>
  new Anthropic({ baseURL: server.origin, apiKey: null, authToken: user.token, maxRetries: 0 });

const request = (customId: string, model = "simulator") => ({
  custom_id: customId,
  params: { model, max_tokens: 64, messages: [{ role: "user" as const, content: `Say ${customId}` }] },
});

beforeAll(async () => {
  tdb = await setupApiDatabase();
  server = await startCompatServer();
  fake = await startFakeOpenAI({
    handler: async () => {
      await new Promise((r) => setTimeout(r, 100));
      return { type: "text", text: "priced answer", usage: { prompt_tokens: 1_000, completion_tokens: 100 } };
    },
  });
  process.env.FLOTILLA__MODELS = JSON.stringify([{ name: "priced", base_url: fake.url, model: "fake-priced", ...PRICES }]);
});

afterAll(async () => {
  // A worker process may run another suite next: leave the environment as it was.
  for (const name of ["MAX_QUEUED_ITEMS", "MAX_ACTIVE_BATCHES", "MAX_TOKENS_PER_DAY"]) delete process.env[`FLOTILLA__QUOTAS__${name}`];
  delete process.env.FLOTILLA__MODELS;
  await stopWorker(worker);
  await server?.close();
  await fake?.close();
});

/** Every table a compatible create could write to (uploads are counted separately: they come first). */
async function written(): Promise<Record<string, number>> {
  const [row] = await tdb.sql<Record<string, number>[]>`
    select (select count(*)::int from threads) as threads,
           (select count(*)::int from subagent_batches) as batches,
           (select count(*)::int from subagent_batch_items) as items,
           (select count(*)::int from compat_batches) as compat_batches,
           (select count(*)::int from compat_requests) as compat_requests`;
  return row!;
}

/** The raw answer, to check the exact error shape the SDKs decode. */
async function raw(path: string, user: TestUser, body: unknown): Promise<{ status: number; body: unknown }> {
  const res = await fetch(`${server.origin}${path}`, {
    method: "POST",
    headers: { authorization: `Bearer ${user.token}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  return { status: res.status, body: await res.json() };
}

async function refusedBoth(user: TestUser, requests: number, quota: RegExp): Promise<void> {
  const file = await openai(user).files.create({
    file: await toFile(Buffer.from(jsonl(Array.from({ length: requests }, (_, i) => chatLine(`r${i}`, `hello ${i}`)))), "q.jsonl"),
    purpose: "batch",
  });
  const before = await written();

  const viaSdk = await openai(user)
    .batches.create({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" })
    .then(
      () => null,
      (err: unknown) => err,
    );
  expect(viaSdk).toBeInstanceOf(OpenAI.RateLimitError);
  const openaiErr = viaSdk as InstanceType<typeof OpenAI.RateLimitError>;
  expect(openaiErr.status).toBe(429);
  expect(openaiErr.code).toBe("quota_exceeded");
  expect(openaiErr.type).toBe("rate_limit_error");
  expect(openaiErr.error).toMatchObject({ message: expect.stringMatching(quota) });
  const openaiRaw = await raw("/v1/batches", user, {
    input_file_id: file.id,
    endpoint: "/v1/chat/completions",
    completion_window: "24h",
  });
  expect(openaiRaw).toEqual({
    status: 429,
    body: { error: { type: "rate_limit_error", code: "quota_exceeded", message: expect.stringMatching(quota), param: null } },
  });

  const requestList = Array.from({ length: requests }, (_, i) => request(`r${i}`));
  const viaAnthropic = await anthropic(user)
    .messages.batches.create({ requests: requestList })
    .then(
      () => null,
      (err: unknown) => err,
    );
  expect(viaAnthropic).toBeInstanceOf(Anthropic.RateLimitError);
  const anthropicErr = viaAnthropic as InstanceType<typeof Anthropic.RateLimitError>;
  expect(anthropicErr.status).toBe(429);
  expect(anthropicErr.error).toEqual({ type: "error", error: { type: "rate_limit_error", message: expect.stringMatching(quota) } });
  expect(await raw("/v1/messages/batches", user, { requests: requestList })).toEqual({
    status: 429,
    body: { type: "error", error: { type: "rate_limit_error", message: expect.stringMatching(quota) } },
  });

  expect(await written()).toEqual(before);
}

describe("per-user quotas refuse compatible batches in the provider's error shape", () => {
  it("quotas.max_queued_items: nine requests over a quota of eight, from either API, write nothing", async () => {
    const user = await makeUser(tdb, "queued");
    await refusedBoth(user, 9, /^quotas\.max_queued_items: /);
  });

  it("quotas.max_active_batches: a third batch while two are active, from either API, writes nothing", async () => {
    const user = await makeUser(tdb, "active");
    // No worker runs yet: these two stay active.
    const first = await anthropic(user).messages.batches.create({ requests: [request("one")] });
    const file = await openai(user).files.create({
      file: await toFile(Buffer.from(jsonl([chatLine("two", "hello")])), "two.jsonl"),
      purpose: "batch",
    });
    const second = await openai(user).batches.create({
      input_file_id: file.id,
      endpoint: "/v1/chat/completions",
      completion_window: "24h",
    });
    await refusedBoth(user, 1, /^quotas\.max_active_batches: /);
    await anthropic(user).messages.batches.cancel(first.id);
    await openai(user).batches.cancel(second.id);
  });
});

describe("the compatible doors name the bad request by their own locator", () => {
  it("OpenAI: `Line N: <param>: <message>` in errors.data; Anthropic: `requests.N.<param>: <message>`", async () => {
    const user = await makeUser(tdb, "doors");
    const bad = JSON.stringify({
      custom_id: "b",
      method: "POST",
      url: "/v1/chat/completions",
      body: { model: "simulator", messages: [] },
    });
    const file = await openai(user).files.create({
      file: await toFile(Buffer.from(jsonl([chatLine("a", "fine"), bad])), "bad.jsonl"),
      purpose: "batch",
    });
    const failed = await openai(user).batches.create({
      input_file_id: file.id,
      endpoint: "/v1/chat/completions",
      completion_window: "24h",
    });
    expect(failed.status).toBe("failed");
    expect(failed.errors?.data).toEqual([
      { code: "invalid_body", line: 2, param: "body.messages", message: expect.stringMatching(/^Line 2: body\.messages: /) },
    ]);

    const { max_tokens: _dropped, ...noMax } = request("b").params;
    const refused = await anthropic(user)
      .messages.batches.create({ requests: [request("a"), { custom_id: "b", params: noMax as never }] })
      .then(
        () => null,
        (err: unknown) => err as InstanceType<typeof Anthropic.BadRequestError>,
      );
    expect(refused?.status).toBe(400);
    expect(refused?.error).toEqual({
      type: "error",
      error: { type: "invalid_request_error", message: expect.stringMatching(/^requests\.1\.params\.max_tokens: /) },
    });
  });
});

describe("compatible batches are priced and paused by the daily token quota", () => {
  it("cost_usd from the catalog entry's prices; pauses at quotas.max_tokens_per_day; the next create is refused", async () => {
    worker = spawnWorker(tdb, { FLOTILLA__MODELS: process.env.FLOTILLA__MODELS! });
    const user = await makeUser(tdb, "daily");
    const client = openai(user);
    const lines = Array.from({ length: 8 }, (_, i) => chatLine(`p${i}`, `priced ${i}`, { model: "priced" }));
    const file = await client.files.create({ file: await toFile(Buffer.from(jsonl(lines)), "priced.jsonl"), purpose: "batch" });
    const created = await client.batches.create({
      input_file_id: file.id,
      endpoint: "/v1/chat/completions",
      completion_window: "24h",
    });

    const [row] = await tdb.sql<{ id: string; thread_id: string; price_input_per_million: number; daily_token_quota: string }[]>`
      select b.id, b.thread_id, b.price_input_per_million, b.daily_token_quota
        from subagent_batches b join threads t on t.id = b.thread_id
       where b.user_id = ${user.userId}`;
    expect(row!.price_input_per_million).toBe(2);
    expect(Number(row!.daily_token_quota)).toBe(DAILY_TOKENS);

    const project = async () =>
      batchProjectionSchema.parse(
        await (await call("GET", `/api/threads/${row!.thread_id}/subagent-batches/${row!.id}`, { token: user.token })).json(),
      );
    const paused = await until(project, (p) => p.status === "paused" && p.counts.leased + p.counts.running === 0, 60_000);
    expect(paused.pause_reason).toBe("quota");
    const calls = paused.counts.succeeded;
    expect(calls * 1_100).toBeGreaterThanOrEqual(DAILY_TOKENS);
    expect(calls).toBeLessThan(8);
    expect(paused.usage).toEqual({ input_tokens: calls * 1_000, output_tokens: calls * 100 , cached_input_tokens: 0, cache_write_tokens: 0 });
    expect(paused.cost_usd).toBeGreaterThan(0);
    expect(paused.cost_usd).toBeCloseTo(calls * PER_CALL, 10);
    // The provider's object: still in progress, the unstarted requests neither completed nor failed.
    const polled = await client.batches.retrieve(created.id);
    expect(polled.status).toBe("in_progress");
    expect(polled.request_counts).toMatchObject({ total: 8, completed: calls });

    // The day's quota is spent: a new compatible batch is refused, from either API, writing nothing.
    await refusedBoth(user, 1, /daily token quota reached: \d+ of 3000 tokens used today \(quotas\.max_tokens_per_day\)/);
  });
});
