import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { call, makeThread, makeUser, setupApiDatabase, type TestUser, workerAlive } from "../api/helpers";
import { type CompatServer, startCompatServer } from "../compat/http-server";
import { multipartBody } from "../helpers/multipart";
import { callFiles } from "../workspace/support";

/**
 * No database connection is held while a request body is still arriving: uploads (workspace,
 * /v1 files) and batch submissions are received whole before their transaction. Twelve clients
 * stopping mid-body (more than the web pool's ten connections) leave the pool free.
 */

const tdb = await setupApiDatabase();
let server: CompatServer;
let user: TestUser;
let threadId: string;

beforeAll(async () => {
  server = await startCompatServer();
  user = await makeUser(tdb, "slow");
  threadId = await makeThread(tdb, user);
  await workerAlive(tdb);
});

afterAll(async () => {
  await server?.close();
});

/** A body that sends all but its last bytes, then waits for `gate` before sending the rest. */
function stalled(bytes: Buffer | string, gate: Promise<void>): ReadableStream<Uint8Array> {
  const all = Buffer.from(bytes);
  let step = 0;
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      if (step === 0) controller.enqueue(all.subarray(0, all.length - 8));
      else if (step === 1) {
        await gate;
        controller.enqueue(all.subarray(all.length - 8));
      } else controller.close();
      step++;
    },
  });
}

/** Web-pool connections doing anything (in a transaction, or running a query). */
async function busyWebConnections(): Promise<number> {
  const [row] = await tdb.sql<{ n: number }[]>`
    select count(*)::int as n from pg_stat_activity
     where datname = current_database() and application_name = 'flotilla-web' and state <> 'idle'`;
  return row!.n;
}

describe("slow bodies hold no connection", () => {
  it("twelve stalled uploads and submissions: no web connection busy, other requests answer at once, then all complete", async () => {
    let release: () => void = () => {};
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    const pending: Promise<Response>[] = [];
    for (let i = 0; i < 5; i++) {
      const { body, contentType } = multipartBody([{ filename: `w${i}.txt`, content: `workspace file ${i}`.repeat(100) }]);
      pending.push(callFiles("POST", `/api/threads/${threadId}/files`, { token: user.token, body: stalled(body, gate), contentType }));
    }
    for (let i = 0; i < 5; i++) {
      const { body, contentType } = multipartBody([
        { filename: `in${i}.jsonl`, content: `{"custom_id":"r${i}"}\n`.repeat(50), type: "application/jsonl" },
        { name: "purpose", content: "batch" },
      ]);
      pending.push(
        fetch(`${server.origin}/v1/files`, {
          method: "POST",
          headers: { authorization: `Bearer ${user.token}`, "content-type": contentType },
          body: stalled(body, gate),
          duplex: "half",
        } as RequestInit),
      );
    }
    for (let i = 0; i < 2; i++) {
      const json = JSON.stringify({ submission_key: `slow-${i}`, items: ["a", "b", "c"] });
      pending.push(
        call("POST", `/api/threads/${threadId}/subagent-batches`, {
          token: user.token,
          body: stalled(json, gate),
          contentType: "application/json",
        }),
      );
    }
    // Every request authenticates (a short query each) and then waits for the rest of its body
    // holding nothing: the bodies stay stalled, so a connection held for them would stay busy.
    await expect.poll(() => busyWebConnections(), { timeout: 10_000, interval: 100 }).toBe(0);
    const started = Date.now();
    const list = await callFiles("GET", `/api/threads/${threadId}/files`, { token: user.token });
    expect(list.status).toBe(200);
    expect(Date.now() - started).toBeLessThan(1000);

    release();
    const answers = await Promise.all(pending);
    expect(answers.map((r) => r.status)).toEqual([...Array(5).fill(201), ...Array(5).fill(200), 201, 201]);
  });
});
