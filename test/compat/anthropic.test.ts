import type { ChildProcess } from "node:child_process";
import Anthropic from "@anthropic-ai/sdk";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { anthropicBatchSchema } from "@/lib/api/compat";
import { makeUser, setupApiDatabase, type TestUser } from "../api/helpers";
import type { TestDatabase } from "../helpers/db";
import { type CompatServer, startCompatServer } from "./http-server";
import { spawnWorker, stopWorker, until } from "./support";

let tdb: TestDatabase;
let server: CompatServer;
let alice: TestUser;
let bob: TestUser;
let worker: ChildProcess | undefined;
let client: Anthropic;

/** `apiKey` is sent as x-api-key (older clients' way), `authToken` as Authorization: Bearer. */
const withKey = (user: TestUser) => new Anthropic({ baseURL: server.origin, apiKey: user.token, maxRetries: 0 });
const withBearer = (user: TestUser) =>
  new Anthropic({ baseURL: server.origin, apiKey: null, authToken: user.token, maxRetries: 0 });

const request = (customId: string, content: string, params: Record<string, unknown> = {}) => ({
  custom_id: customId,
  params: { model: "simulator", max_tokens: 256, messages: [{ role: "user" as const, content }], ...params },
});

async function results(c: Anthropic, id: string) {
  const out: Anthropic.Messages.MessageBatchIndividualResponse[] = [];
  for await (const line of await c.messages.batches.results(id)) out.push(line);
  return out;
}

beforeAll(async () => {
  tdb = await setupApiDatabase();
  server = await startCompatServer();
  alice = await makeUser(tdb, "alice");
  bob = await makeUser(tdb, "bob");
  client = withBearer(alice);
  worker = spawnWorker(tdb);
});

afterAll(async () => {
  await stopWorker(worker);
  await server?.close();
});

describe("Anthropic-compatible message batches through the official SDK", () => {
  let endedId = "";

  it("creates a batch, polls it to ended and decodes the results", async () => {
    const created = await client.messages.batches.create({
      requests: [
        request("first", "Write one line about tides", {
          system: "You are terse.",
          temperature: 0.5,
          stop_sequences: ["END"],
        }),
        request("second", "[[fail]] this one"),
        request("third", [{ type: "text", text: "Answer with [[chars:12]]" }] as never),
      ],
    });
    expect(anthropicBatchSchema.parse(created)).toMatchObject({
      type: "message_batch",
      processing_status: "in_progress",
      results_url: null,
      request_counts: { processing: 3, succeeded: 0, errored: 0, canceled: 0, expired: 0 },
    });
    expect(Date.parse(created.expires_at) - Date.parse(created.created_at)).toBe(24 * 3600 * 1000);

    const ended = await until(
      () => client.messages.batches.retrieve(created.id),
      (b) => b.processing_status === "ended",
    );
    expect(ended.request_counts).toEqual({ processing: 0, succeeded: 2, errored: 1, canceled: 0, expired: 0 });
    expect(ended.ended_at).not.toBeNull();
    expect(ended.results_url).toBe(`${server.origin}/v1/messages/batches/${created.id}/results`);

    const lines = await results(client, created.id);
    expect(lines.map((l) => [l.custom_id, l.result.type])).toEqual([
      ["first", "succeeded"],
      ["second", "errored"],
      ["third", "succeeded"],
    ]);
    const first = lines[0]!.result as Anthropic.Messages.MessageBatchSucceededResult;
    expect(first.message).toMatchObject({ type: "message", role: "assistant", model: "simulator", stop_reason: "end_turn" });
    expect(first.message.content[0]).toMatchObject({ type: "text" });
    expect(first.message.usage.input_tokens).toBeGreaterThan(0);
    const third = lines[2]!.result as Anthropic.Messages.MessageBatchSucceededResult;
    expect((third.message.content[0] as Anthropic.TextBlock).text).toHaveLength(12);
    const errored = lines[1]!.result as Anthropic.Messages.MessageBatchErroredResult;
    expect(errored.error).toMatchObject({ type: "error", error: { type: "api_error" } });
    endedId = created.id;
  });

  it("refuses a request with an unknown model, naming it, and writes nothing", async () => {
    const [before] = await tdb.sql<{ n: number }[]>`select count(*)::int as n from subagent_batches`;
    const err = await client.messages.batches
      .create({ requests: [request("ok", "fine"), request("bad", "x", { model: "claude-unknown" })] })
      .catch((e) => e);
    expect(err).toBeInstanceOf(Anthropic.BadRequestError);
    expect(err.error).toMatchObject({ type: "error", error: { type: "invalid_request_error" } });
    expect(err.error.error.message).toContain("requests.1.params.model");
    const dup = await client.messages.batches.create({ requests: [request("same", "a"), request("same", "b")] }).catch((e) => e);
    expect(dup).toBeInstanceOf(Anthropic.BadRequestError);
    expect(dup.error.error.message).toContain("requests.1.custom_id");
    const [after] = await tdb.sql<{ n: number }[]>`select count(*)::int as n from subagent_batches`;
    expect(after!.n).toBe(before!.n);
  });

  it("cancels mid-run: canceling, then ended with canceled results", async () => {
    const created = await client.messages.batches.create({
      requests: [request("fast", "quick one"), ...[0, 1, 2, 3, 4].map((i) => request(`slow-${i}`, `[[sleep:20000]] ${i}`))],
    });
    await until(
      () => client.messages.batches.retrieve(created.id),
      (b) => b.request_counts.succeeded >= 1,
    );
    // Two cancels racing: both are accepted, one instant is recorded.
    const [canceling, again] = await Promise.all([
      client.messages.batches.cancel(created.id),
      client.messages.batches.cancel(created.id),
    ]);
    expect(canceling.processing_status).toBe("canceling");
    expect(again.processing_status).toBe("canceling");
    expect(canceling.cancel_initiated_at).not.toBeNull();
    expect(again.cancel_initiated_at).toBe(canceling.cancel_initiated_at);
    const ended = await until(
      () => client.messages.batches.retrieve(created.id),
      (b) => b.processing_status === "ended",
    );
    expect(ended.request_counts).toMatchObject({ processing: 0, succeeded: 1, canceled: 5 });
    const lines = await results(client, created.id);
    expect(lines.map((l) => l.result.type)).toEqual(["succeeded", "canceled", "canceled", "canceled", "canceled", "canceled"]);
  });

  it("reports expired requests once the window has passed", async () => {
    const created = await client.messages.batches.create({ requests: [request("late", "[[sleep:20000]] late")] });
    await tdb.sql`update compat_batches set expires_at = now() - interval '1 second'
                   where replace(id::text, '-', '') = ${created.id.slice("msgbatch_".length)}`;
    const ended = await client.messages.batches.retrieve(created.id);
    expect(ended.processing_status).toBe("ended");
    expect(ended.request_counts).toMatchObject({ expired: 1, canceled: 0 });
    expect((await results(client, created.id)).map((l) => l.result.type)).toEqual(["expired"]);
  });

  it("lists newest first with after_id / before_id pagination", async () => {
    const all: string[] = [];
    for await (const b of client.messages.batches.list({ limit: 1 })) all.push(b.id);
    expect(all).toHaveLength(3);
    const page = await client.messages.batches.list({ limit: 1, after_id: all[0] });
    expect(page.data.map((b) => b.id)).toEqual([all[1]]);
    expect(page.has_more).toBe(true);
    expect(page.first_id).toBe(all[1]);
    const newer = await client.messages.batches.list({ limit: 5, before_id: all[2] });
    expect(newer.data.map((b) => b.id)).toEqual([all[0], all[1]]);
  });

  it("accepts the token as x-api-key and scopes every batch to its owner", async () => {
    expect((await withKey(alice).messages.batches.retrieve(endedId)).id).toBe(endedId);
    for (const other of [withKey(bob), withBearer(bob)]) {
      await expect(other.messages.batches.retrieve(endedId)).rejects.toBeInstanceOf(Anthropic.NotFoundError);
      await expect(other.messages.batches.cancel(endedId)).rejects.toBeInstanceOf(Anthropic.NotFoundError);
      await expect(other.messages.batches.delete(endedId)).rejects.toBeInstanceOf(Anthropic.NotFoundError);
      expect((await other.messages.batches.list()).data).toEqual([]);
    }
    const res = await fetch(`${server.origin}/v1/messages/batches/${endedId}/results`, { headers: { "x-api-key": bob.token } });
    expect(res.status).toBe(404);
    expect(await res.json()).toMatchObject({ type: "error", error: { type: "not_found_error" } });
    const anonymous = await fetch(`${server.origin}/v1/messages/batches`);
    expect(anonymous.status).toBe(401);
    expect(await anonymous.json()).toMatchObject({ type: "error", error: { type: "authentication_error" } });
  });

  it("deletes an ended batch (with its thread) and refuses to delete a running one", async () => {
    const running = await client.messages.batches.create({ requests: [request("hold", "[[sleep:20000]] hold")] });
    await expect(client.messages.batches.delete(running.id)).rejects.toBeInstanceOf(Anthropic.ConflictError);
    await client.messages.batches.cancel(running.id);

    const deleted = await client.messages.batches.delete(endedId);
    expect(deleted).toEqual({ id: endedId, type: "message_batch_deleted" });
    await expect(client.messages.batches.retrieve(endedId)).rejects.toBeInstanceOf(Anthropic.NotFoundError);
    const [left] = await tdb.sql<{ n: number }[]>`select count(*)::int as n from threads where title = 'first'`;
    expect(left!.n).toBe(0);
  });
});
