import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { errorOf, makeThread, makeUser, setupApiDatabase, type TestUser } from "../api/helpers";
import { type CompatServer, startCompatServer } from "../compat/http-server";
import { multipartBody } from "../helpers/multipart";
import { callFiles, upload } from "../workspace/support";

/**
 * quotas.max_storage_bytes bounds one user's workspace files (every thread) and `/v1` files
 * together: an upload past it answers 413 naming the quota and writes nothing, and two
 * uploads that fit alone but not together cannot both pass.
 */

process.env.FLOTILLA__QUOTAS__MAX_STORAGE_BYTES = "5000";
process.env.FLOTILLA__WORKSPACE__MAX_FILE_BYTES = "100000";
process.env.FLOTILLA__WORKSPACE__MAX_THREAD_BYTES = "100000";

const tdb = await setupApiDatabase();
let server: CompatServer;

beforeAll(async () => {
  server = await startCompatServer();
});

afterAll(async () => {
  await server?.close();
});

async function v1Upload(user: TestUser, bytes: number): Promise<Response> {
  const line = `{"custom_id":"${"x".repeat(Math.max(0, bytes - 17))}"}\n`.slice(-bytes);
  const { body, contentType } = multipartBody([
    { filename: "input.jsonl", content: line, type: "application/jsonl" },
    { name: "purpose", content: "batch" },
  ]);
  return fetch(`${server.origin}/v1/files`, {
    method: "POST",
    headers: { authorization: `Bearer ${user.token}`, "content-type": contentType },
    body,
  });
}

async function storedBytes(user: TestUser): Promise<number> {
  const [row] = await tdb.sql<{ total: number }[]>`
    select (coalesce((select sum(size) from workspace_files where user_id = ${user.userId}), 0)
          + coalesce((select sum(bytes) from compat_files where user_id = ${user.userId}), 0))::int as total`;
  return row!.total;
}

describe("quotas.max_storage_bytes", () => {
  it("counts workspace files of every thread and /v1 files together; past it 413 naming the quota, nothing written", async () => {
    const user = await makeUser(tdb, "storage");
    const one = await makeThread(tdb, user);
    const two = await makeThread(tdb, user);
    expect((await upload(one, user, [{ path: "a.txt", content: "a".repeat(2000) }])).status).toBe(201);
    expect((await upload(two, user, [{ path: "b.txt", content: "b".repeat(2000) }])).status).toBe(201);
    expect((await v1Upload(user, 900)).status).toBe(200);
    expect(await storedBytes(user)).toBe(4900);

    // 101 more bytes: a third thread's upload and a /v1 upload are both refused.
    const three = await makeThread(tdb, user);
    const refused = await upload(three, user, [
      { path: "ok.txt", content: "o".repeat(50) },
      { path: "c.txt", content: "c".repeat(51) },
    ]);
    expect(refused.status).toBe(413);
    expect(await errorOf(refused)).toEqual({ code: "payload_too_large", message: expect.stringContaining("quotas.max_storage_bytes") });
    const v1 = await v1Upload(user, 101);
    expect(v1.status).toBe(413);
    expect(((await v1.json()) as { error: { message: string } }).error.message).toContain("quotas.max_storage_bytes");
    expect(await storedBytes(user)).toBe(4900);

    // Exactly the quota fits; overwriting a file counts its new size only.
    expect((await upload(three, user, [{ path: "c.txt", content: "c".repeat(100) }])).status).toBe(201);
    expect((await upload(one, user, [{ path: "a.txt", content: "a".repeat(1000) }])).status).toBe(201);
    expect(await storedBytes(user)).toBe(4000);

    // Deleting makes room; another user's storage is their own.
    expect((await callFiles("DELETE", `/api/threads/${two}/files/b.txt`, { token: user.token })).status).toBe(204);
    expect((await v1Upload(user, 2900)).status).toBe(200);
    const other = await makeUser(tdb, "storage-other");
    expect((await upload(await makeThread(tdb, other), other, [{ path: "x.txt", content: "x".repeat(5000) }])).status).toBe(201);
  });

  it("is race-safe: two uploads that fit alone but not together, one workspace and one /v1, cannot both pass", async () => {
    for (let round = 0; round < 3; round++) {
      const user = await makeUser(tdb, `storage-race-${round}`);
      const thread = await makeThread(tdb, user);
      // Both write their rows, then meet at the user's storage lock (held here until both wait).
      const holder = await tdb.sql.reserve();
      let results: Response[];
      try {
        await holder`select pg_advisory_lock(hashtextextended(${`storage:${user.userId}`}, 0))`;
        const both = Promise.all([upload(thread, user, [{ path: "w.txt", content: "w".repeat(3000) }]), v1Upload(user, 3000)]);
        for (const deadline = Date.now() + 10_000; (await storageLockWaiters()) < 2; ) {
          if (Date.now() > deadline) throw new Error("the uploads never met at the lock");
          await new Promise((r) => setTimeout(r, 20));
        }
        await holder`select pg_advisory_unlock(hashtextextended(${`storage:${user.userId}`}, 0))`;
        results = await both;
      } finally {
        holder.release();
      }
      expect(results.filter((r) => r.status === 413)).toHaveLength(1);
      expect(results.filter((r) => r.status === 200 || r.status === 201)).toHaveLength(1);
      expect(await storedBytes(user)).toBe(3000);
    }
  });
});

async function storageLockWaiters(): Promise<number> {
  const [row] = await tdb.sql<{ n: number }[]>`
    select count(*)::int as n from pg_locks l join pg_stat_activity a on a.pid = l.pid
     where a.datname = current_database() and l.locktype = 'advisory' and not l.granted`;
  return row!.n;
}
