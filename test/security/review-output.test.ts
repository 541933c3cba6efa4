import type { ChildProcess } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MAX_JSON_DEPTH } from "@/lib/batch-rules";
import { REVIEW_OUTPUT_MAX_BYTES } from "@/server/batches/reviews";
import { makeThread, makeUser, setupApiDatabase, type TestUser } from "../api/helpers";
import { spawnWorker, stopWorker, until } from "../compat/support";
import { underHealthProbe } from "../helpers/health-probe";
import { send, startWebServer, type WebServer } from "../helpers/web-server";

/**
 * A corrected answer in a review decision under abuse (issue 46), black-box over real sockets,
 * PostgreSQL and a real worker process that runs the items: Ajv's `uniqueItems` compares items
 * pairwise, and the decision compiled and validated the corrected answer inline before it
 * looked at the version (a 1 MiB answer with a stale version got its 409 after 28.6 s with
 * /api/health held as long). Now a stale decision is a 409 at once whatever it carries, a
 * costly answer is validated off the event loop under the time limit while health answers, the
 * answer is capped (REVIEW_OUTPUT_MAX_BYTES of JSON) and nested at most MAX_JSON_DEPTH levels
 * (a NUL 300 levels deep was a 500).
 */

const tdb = await setupApiDatabase();
let server: WebServer;
let worker: ChildProcess | undefined;
let alice: TestUser;
let threadId: string;
let batchId: string;
let itemIds: string[];

const SCHEMA = { type: "object", properties: { xs: { type: "array", uniqueItems: true } }, required: ["xs"] };
const auth = () => ({ authorization: `Bearer ${alice.token}` });

beforeAll(async () => {
  server = await startWebServer({ preload: ["/api/threads/[threadId]/subagent-batches", "/api/health"] });
  alice = await makeUser(tdb, "reviewer");
  threadId = await makeThread(tdb, alice);
  worker = spawnWorker(tdb);
  const made = await send(server, `/api/threads/${threadId}/subagent-batches`, {
    headers: auth(),
    json: { submission_key: "review-abuse", items: Array.from({ length: 6 }, (_, i) => `[[json:{"xs":[${i}]}]]`), output_schema: SCHEMA, review: { when: "all" } },
  });
  expect(made.status, made.body).toBe(201);
  batchId = (JSON.parse(made.body) as { id: string }).id;
  const items = await until(
    async () => JSON.parse((await send(server, `/api/threads/${threadId}/subagent-batches/${batchId}/items`, { headers: auth() })).body) as { items: { id: string; status: string; review: { version: number } | null }[] },
    (page) => page.items.length === 6 && page.items.every((i) => i.status === "succeeded" && i.review !== null),
    60_000,
  );
  itemIds = items.items.map((i) => i.id);
}, 120_000);

afterAll(async () => {
  await stopWorker(worker);
  await server?.close();
});

function decide(itemId: string, body: Record<string, unknown>) {
  return send(server, `/api/threads/${threadId}/subagent-batches/${batchId}/items/${itemId}/review`, { headers: auth(), json: body, timeoutMs: 120_000 });
}

/** `count` distinct one-key objects: each pair costs Ajv's deep equality a key lookup that fails (~0.1 µs), so 6,000 take seconds. */
const costly = (count: number, duplicateFirst = false) => ({
  xs: Array.from({ length: count }, (_, i) => ({ [(duplicateFirst && i === 1 ? 0 : i).toString(36)]: 0 })),
});

const message = (body: string) => (JSON.parse(body) as { error: { message: string } }).error.message;
const reviewedOutput = async (itemId: string) =>
  (await tdb.sql<{ reviewed_output: unknown; review_version: number }[]>`select reviewed_output, review_version from subagent_batch_items where id = ${itemId}::uuid`)[0]!;

describe("a corrected answer in a review decision", () => {
  it("with a stale version: 409 at once, however costly the answer is to validate, /api/health under 1 s", async () => {
    const answer = costly(6_000);
    expect(JSON.stringify(answer).length).toBeLessThan(REVIEW_OUTPUT_MAX_BYTES);
    const { result, ms, slowestHealthMs } = await underHealthProbe(server, () => decide(itemIds[0]!, { decision: "accept", output: answer, version: 7 }));
    console.info(`stale decision with a 6,000-item uniqueItems answer: ${result.status} in ${ms.toFixed(0)} ms; slowest health ${slowestHealthMs.toFixed(0)} ms`);
    expect(result.status, result.body).toBe(409);
    expect(message(result.body)).toBe("version: the review is at version 0 now (someone decided since); reload it and decide again");
    expect(ms).toBeLessThan(1_000);
    expect(slowestHealthMs).toBeLessThan(1_000);
    expect(await reviewedOutput(itemIds[0]!)).toEqual({ reviewed_output: null, review_version: 0 });
  });

  it("at the current version, a costly answer is validated off the event loop: its 400 names the duplicate, /api/health under 1 s meanwhile", async () => {
    const { result, ms, slowestHealthMs } = await underHealthProbe(server, () => decide(itemIds[1]!, { decision: "accept", output: costly(6_000, true), version: 0 }));
    console.info(`current decision with a 6,000-item uniqueItems answer: ${result.status} in ${ms.toFixed(0)} ms; slowest health ${slowestHealthMs.toFixed(0)} ms`);
    expect(result.status, result.body).toBe(400);
    // Either Ajv's verdict (the first two items are equal) or the time limit's, whichever the machine's load allows.
    expect(message(result.body)).toMatch(/^output: (does not match the batch's output_schema: \/xs must NOT have duplicate items \(items ## \d+ and \d+ are identical\)|output_schema validation took longer than \d+ s)$/);
    expect(slowestHealthMs).toBeLessThan(1_000);
    expect(await reviewedOutput(itemIds[1]!)).toEqual({ reviewed_output: null, review_version: 0 });
  });

  it(`over ${REVIEW_OUTPUT_MAX_BYTES} bytes of JSON: 400 naming output, nothing decided`, async () => {
    const answer = { xs: ["x".repeat(900_000)] };
    const res = await decide(itemIds[2]!, { decision: "accept", output: answer, version: 0 });
    expect(res.status, res.body).toBe(400);
    expect(message(res.body)).toBe(`output: must be at most ${REVIEW_OUTPUT_MAX_BYTES} bytes as JSON`);
    expect(await reviewedOutput(itemIds[2]!)).toEqual({ reviewed_output: null, review_version: 0 });
  });

  it(`a NUL 300 levels deep: 400 past ${MAX_JSON_DEPTH} levels, as the other doors answer, not a 500`, async () => {
    let deep: unknown = "a\u0000b";
    for (let i = 0; i < 300; i++) deep = { d: deep };
    const res = await decide(itemIds[3]!, { decision: "accept", output: { xs: [deep] }, version: 0 });
    expect(res.status, res.body).toBe(400);
    expect(message(res.body)).toBe(`output: must be nested at most ${MAX_JSON_DEPTH} levels deep`);
    const shallow = await decide(itemIds[3]!, { decision: "accept", output: { xs: ["a\u0000b"] }, version: 0 });
    expect(shallow.status, shallow.body).toBe(400);
    expect(message(shallow.body)).toBe("output: must not contain NUL (\\u0000) characters");
    expect(await reviewedOutput(itemIds[3]!)).toEqual({ reviewed_output: null, review_version: 0 });
  });

  it("a fair corrected answer is checked and kept", async () => {
    const bad = await decide(itemIds[4]!, { decision: "accept", output: { xs: [1, 1] }, version: 0 });
    expect(bad.status, bad.body).toBe(400);
    expect(message(bad.body)).toBe("output: does not match the batch's output_schema: /xs must NOT have duplicate items (items ## 0 and 1 are identical)");
    const ok = await decide(itemIds[4]!, { decision: "reject", note: "two, not one", output: { xs: [1, 2] }, version: 0 });
    expect(ok.status, ok.body).toBe(200);
    expect(JSON.parse(ok.body)).toMatchObject({ state: "rejected", corrected: true, version: 1 });
    expect(await reviewedOutput(itemIds[4]!)).toEqual({ reviewed_output: { xs: [1, 2] }, review_version: 1 });
  });
});
