import type { ChildProcess } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { countLiveWorkers } from "@/server/runtime/heartbeat";
import { MATCH_TIME_LIMIT_MS, VALIDATION_RETRY_LIMIT_MS } from "@/server/runtime/pattern-thread";
import { makeThread, makeUser, setupApiDatabase, type TestUser } from "../api/helpers";
import { spawnWorker, stopWorker, until } from "../compat/support";
import { send, startWebServer, type WebServer } from "../helpers/web-server";

/**
 * A legitimate large typed answer whose validation takes longer than the matching thread's time
 * limit (issue 46): it used to fail for good (invalid_output, no repair turn, no retry), as on a
 * loaded machine where the thread gets little CPU. Now it is checked once more under a longer
 * limit before it fails. Black-box: a real socket, PostgreSQL, a real worker process whose
 * simulator answers a valid 5,000-item `uniqueItems` array (pairwise: seconds of the thread's
 * CPU, past MATCH_TIME_LIMIT_MS, within VALIDATION_RETRY_LIMIT_MS).
 */

const tdb = await setupApiDatabase();
let server: WebServer;
let worker: ChildProcess | undefined;
let alice: TestUser;
let threadId: string;

beforeAll(async () => {
  server = await startWebServer({ preload: ["/api/threads/[threadId]/subagent-batches"] });
  alice = await makeUser(tdb, "large-answer");
  threadId = await makeThread(tdb, alice);
  worker = spawnWorker(tdb);
  await until(() => countLiveWorkers(tdb.db, 5), (n) => n > 0, 60_000);
}, 90_000);

afterAll(async () => {
  await stopWorker(worker);
  await server?.close();
});

describe("a large typed answer over the time limit", () => {
  it("is checked once more under a longer limit and succeeds, instead of failing for good", async () => {
    // Distinct one-key objects: each of the 12.5 million pairs costs Ajv's deep equality a failed key lookup.
    const answer = { xs: Array.from({ length: 5_000 }, (_, i) => ({ [i.toString(36)]: 0 })) };
    const made = await send(server, `/api/threads/${threadId}/subagent-batches`, {
      headers: { authorization: `Bearer ${alice.token}` },
      json: {
        submission_key: "large-answer",
        items: [`[[json:${JSON.stringify(answer)}]]`],
        output_schema: { type: "object", properties: { xs: { type: "array", uniqueItems: true } }, required: ["xs"] },
      },
    });
    expect(made.status, made.body).toBe(201);
    const batchId = (JSON.parse(made.body) as { id: string }).id;
    const [item] = await until(
      () => tdb.sql<{ status: string; error: string | null; attempts: number; n: number | null }[]>`
        select status, error, attempts, jsonb_array_length(output -> 'xs') as n from subagent_batch_items where batch_id = ${batchId}::uuid`,
      (rows) => rows.length === 1 && ["succeeded", "failed"].includes(rows[0]!.status),
      MATCH_TIME_LIMIT_MS * 5 + VALIDATION_RETRY_LIMIT_MS * 5 + 30_000,
    );
    expect(item, item!.error ?? "").toMatchObject({ status: "succeeded", error: null, attempts: 1, n: 5_000 });
  }, 180_000);
});
