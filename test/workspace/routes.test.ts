import { createHash } from "node:crypto";
import { beforeAll, describe, expect, it } from "vitest";
import { fileListSchema } from "@/lib/api/files";
import { ORIGIN } from "../api/helpers";
import { errorOf, makeThread, makeUser, setupApiDatabase, type TestUser } from "../api/helpers";
import type { TestDatabase } from "../helpers/db";
import { callFiles, fileUrl, listPaths, upload } from "./support";

// Small limits so the 413 paths are cheap: 1000 bytes a file, 3000 bytes a thread.
process.env.FLOTILLA__WORKSPACE__MAX_FILE_BYTES = "1000";
process.env.FLOTILLA__WORKSPACE__MAX_THREAD_BYTES = "3000";

let tdb: TestDatabase;
let alice: TestUser;
let bob: TestUser;

beforeAll(async () => {
  tdb = await setupApiDatabase();
  alice = await makeUser(tdb, "alice");
  bob = await makeUser(tdb, "bob");
});

async function fileRows(threadId: string): Promise<number> {
  const [row] = await tdb.sql<{ n: number }[]>`select count(*)::int as n from workspace_files where thread_id = ${threadId}`;
  return row!.n;
}

describe("upload, list, download, delete", () => {
  it("uploads one file and lists it with size, sha256, type and no run", async () => {
    const threadId = await makeThread(tdb, alice);
    const res = await upload(threadId, alice, [{ path: "notes.md", content: "# Hello\n", type: "text/markdown" }]);
    expect(res.status).toBe(201);
    const body = fileListSchema.parse(await res.json());
    expect(body.files).toEqual([
      {
        path: "notes.md",
        size: 8,
        sha256: createHash("sha256").update("# Hello\n").digest("hex"),
        content_type: "text/markdown",
        created_at: expect.any(String),
        created_by_run_id: null,
      },
    ]);
    const list = await callFiles("GET", `/api/threads/${threadId}/files`, { token: alice.token });
    expect(fileListSchema.parse(await list.json()).files).toEqual(body.files);
  });

  it("uploads many files in one request under a prefix, listed in path order", async () => {
    const threadId = await makeThread(tdb, alice);
    const res = await upload(
      threadId,
      alice,
      [
        { path: "b.txt", content: "bee" },
        { path: "a.txt", content: "ay" },
        { path: "sub/c.txt", content: "sea" },
      ],
      "reports/",
    );
    expect(res.status).toBe(201);
    expect(fileListSchema.parse(await res.json()).files.map((f) => f.path)).toEqual([
      "reports/b.txt",
      "reports/a.txt",
      "reports/sub/c.txt",
    ]);
    expect(await listPaths(threadId, alice)).toEqual(["reports/a.txt", "reports/b.txt", "reports/sub/c.txt"]);
  });

  it("overwrites a file of the same path", async () => {
    const threadId = await makeThread(tdb, alice);
    await upload(threadId, alice, [{ path: "x.txt", content: "first" }]);
    await upload(threadId, alice, [{ path: "x.txt", content: "second version" }]);
    const res = await callFiles("GET", fileUrl(threadId, "x.txt"), { token: alice.token });
    expect(await res.text()).toBe("second version");
    expect(await fileRows(threadId)).toBe(1);
  });

  it("downloads the exact bytes with type, attachment disposition and nosniff", async () => {
    const threadId = await makeThread(tdb, alice);
    const bytes = new Uint8Array(900).map((_, i) => (i * 7) % 256);
    await upload(threadId, alice, [{ path: "data/raw.bin", content: bytes, type: "application/octet-stream" }]);
    const res = await callFiles("GET", fileUrl(threadId, "data/raw.bin"), { token: alice.token });
    expect(res.status).toBe(200);
    expect(new Uint8Array(await res.arrayBuffer())).toEqual(bytes);
    expect(res.headers.get("content-type")).toBe("application/octet-stream");
    expect(res.headers.get("content-length")).toBe("900");
    expect(res.headers.get("content-disposition")).toBe(`attachment; filename="raw.bin"; filename*=UTF-8''raw.bin`);
    expect(res.headers.get("x-content-type-options")).toBe("nosniff");
  });

  it("names a non-ASCII file with RFC 6266 filename* and an ASCII fallback", async () => {
    const threadId = await makeThread(tdb, alice);
    const up = await upload(threadId, alice, [{ path: "résumé (1).txt", content: "ok" }]);
    expect(up.status).toBe(201);
    const res = await callFiles("GET", fileUrl(threadId, "résumé (1).txt"), { token: alice.token });
    expect(res.headers.get("content-disposition")).toBe(
      `attachment; filename="r_sum_ (1).txt"; filename*=UTF-8''r%C3%A9sum%C3%A9%20%281%29.txt`,
    );
    expect(res.headers.get("content-type")).toBe("text/plain");
  });

  it("deletes a file (204), then it is gone (404)", async () => {
    const threadId = await makeThread(tdb, alice);
    await upload(threadId, alice, [{ path: "gone.txt", content: "bye" }]);
    const del = await callFiles("DELETE", fileUrl(threadId, "gone.txt"), { token: alice.token });
    expect(del.status).toBe(204);
    expect(await listPaths(threadId, alice)).toEqual([]);
    const again = await callFiles("DELETE", fileUrl(threadId, "gone.txt"), { token: alice.token });
    expect(again.status).toBe(404);
    const get = await callFiles("GET", fileUrl(threadId, "gone.txt"), { token: alice.token });
    expect(get.status).toBe(404);
  });
});

describe("limits", () => {
  it("refuses a file over workspace.max_file_bytes with 413 and stores nothing of the upload", async () => {
    const threadId = await makeThread(tdb, alice);
    const res = await upload(threadId, alice, [
      { path: "small.txt", content: "fits" },
      { path: "big.txt", content: "x".repeat(1001) },
    ]);
    expect(res.status).toBe(413);
    const err = await errorOf(res);
    expect(err.code).toBe("payload_too_large");
    expect(err.message).toContain("workspace.max_file_bytes");
    expect(err.message).toContain("big.txt");
    expect(await fileRows(threadId)).toBe(0);
  });

  it("accepts a file of exactly max_file_bytes", async () => {
    const threadId = await makeThread(tdb, alice);
    expect((await upload(threadId, alice, [{ path: "edge.txt", content: "x".repeat(1000) }])).status).toBe(201);
  });

  it("refuses an upload that would take the thread over workspace.max_thread_bytes; earlier files stay", async () => {
    const threadId = await makeThread(tdb, alice);
    const first = await upload(threadId, alice, [
      { path: "a.txt", content: "a".repeat(1000) },
      { path: "b.txt", content: "b".repeat(1000) },
    ]);
    expect(first.status).toBe(201);
    const res = await upload(threadId, alice, [
      { path: "c.txt", content: "c".repeat(900) },
      { path: "d.txt", content: "d".repeat(200) },
    ]);
    expect(res.status).toBe(413);
    expect((await errorOf(res)).message).toContain("workspace.max_thread_bytes");
    expect(await listPaths(threadId, alice)).toEqual(["a.txt", "b.txt"]);
    // Overwriting counts the new size, not old + new.
    expect((await upload(threadId, alice, [{ path: "a.txt", content: "z".repeat(1000) }])).status).toBe(201);
  });

  it("two concurrent uploads that fit alone but not together: exactly one succeeds", async () => {
    for (let round = 0; round < 3; round++) {
      const threadId = await makeThread(tdb, alice);
      // Both uploads write their files, then meet at the thread's lock (held here until both wait).
      const both = await whileLockHeld(`workspace:${threadId}`, 2, () =>
        Promise.all(
          ["a", "b"].map((tag) =>
            upload(threadId, alice, [
              { path: `${tag}-1.txt`, content: tag.repeat(1000) },
              { path: `${tag}-2.txt`, content: tag.repeat(900) },
            ]),
          ),
        ),
      );
      expect(both.map((r) => r.status).sort()).toEqual([201, 413]);
      const [row] = await tdb.sql<{ total: number; n: number }[]>`
        select coalesce(sum(size), 0)::int as total, count(*)::int as n from workspace_files where thread_id = ${threadId}`;
      expect(row).toEqual({ total: 1900, n: 2 });
    }
  });
});

describe("overlapping uploads", () => {
  it("two uploads overwriting the same paths in opposite orders: the second waits for the first, never a mix", async () => {
    const threadId = await makeThread(tdb, alice);
    const send = (first: string, second: string, tag: string) =>
      upload(threadId, alice, [
        { path: first, content: `${tag}:${first}` },
        { path: second, content: `${tag}:${second}` },
      ]);
    // One has written both rows and waits at the thread's lock; the other waits for its rows.
    const [a, b] = await whileLockHeld(
      `workspace:${threadId}`,
      1,
      () => Promise.all([send("p.txt", "q.txt", "A"), send("q.txt", "p.txt", "B")]),
      async () => (await rowWaiters()) === 1,
    );
    expect([a!.status, b!.status]).toEqual([201, 201]);
    const p = await (await callFiles("GET", fileUrl(threadId, "p.txt"), { token: alice.token })).text();
    const q = await (await callFiles("GET", fileUrl(threadId, "q.txt"), { token: alice.token })).text();
    expect([p, q]).toEqual(p.startsWith("A:") ? ["A:p.txt", "A:q.txt"] : ["B:p.txt", "B:q.txt"]);
  });
});

/**
 * Runs `work` while this test holds the advisory lock the writers take on `key`, releasing it
 * once `waiters` transactions wait for it (and `also` holds): their writes overlap for certain.
 */
async function whileLockHeld<T>(key: string, waiters: number, work: () => Promise<T>, also = async () => true): Promise<T> {
  const holder = await tdb.sql.reserve();
  try {
    await holder`select pg_advisory_lock(hashtextextended(${key}, 0))`;
    const done = work();
    await waitFor(async () => (await lockWaiters()) === waiters && (await also()));
    await holder`select pg_advisory_unlock(hashtextextended(${key}, 0))`;
    return await done;
  } finally {
    holder.release();
  }
}

async function lockWaiters(): Promise<number> {
  const [row] = await tdb.sql<{ n: number }[]>`
    select count(*)::int as n from pg_locks l join pg_stat_activity a on a.pid = l.pid
     where a.datname = current_database() and l.locktype = 'advisory' and not l.granted`;
  return row!.n;
}

async function rowWaiters(): Promise<number> {
  const [row] = await tdb.sql<{ n: number }[]>`
    select count(*)::int as n from pg_locks l join pg_stat_activity a on a.pid = l.pid
     where a.datname = current_database() and l.locktype = 'transactionid' and not l.granted`;
  return row!.n;
}

async function waitFor(check: () => Promise<boolean>, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error("condition not reached in time");
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe("bad input", () => {
  it.each([
    ["../escape.txt", 'must not contain a ".." segment'],
    ["a/../b.txt", 'must not contain a ".." segment'],
    ["/etc/passwd", "must be relative"],
    ["bad\u009fname.txt", "control characters"],
    ["a//b.txt", "empty segments"],
    ["dir\\file.txt", "backslash"],
    [`${"x".repeat(513)}`, "at most 512 characters"],
  ])("refuses the path %j with 400 naming it", async (path, problem) => {
    const threadId = await makeThread(tdb, alice);
    const res = await upload(threadId, alice, [{ path, content: "nope" }]);
    expect(res.status).toBe(400);
    const err = await errorOf(res);
    expect(err.code).toBe("validation_failed");
    expect(err.message).toContain(problem);
    expect(err.message).toContain(JSON.stringify(path.slice(0, 40)).slice(0, -1));
    expect(await fileRows(threadId)).toBe(0);
  });

  it("refuses a bad prefix, a prefix after the files, unknown fields, no files and other content types", async () => {
    const threadId = await makeThread(tdb, alice);
    const url = `/api/threads/${threadId}/files`;
    const bad = await upload(threadId, alice, [{ path: "a.txt", content: "a" }], "../up");
    expect(bad.status).toBe(400);
    expect((await errorOf(bad)).message).toMatch(/^prefix: /);

    const late = new FormData();
    late.append("file", new Blob(["a"]), "a.txt");
    late.append("prefix", "docs");
    const lateRes = await callFiles("POST", url, { token: alice.token, body: late });
    expect(lateRes.status).toBe(400);
    expect((await errorOf(lateRes)).message).toContain("prefix: must come before");

    const other = new FormData();
    other.append("attachment", new Blob(["a"]), "a.txt");
    const otherRes = await callFiles("POST", url, { token: alice.token, body: other });
    expect(otherRes.status).toBe(400);
    expect((await errorOf(otherRes)).message).toContain("attachment: unknown field");

    const none = new FormData();
    none.append("prefix", "docs");
    const noneRes = await callFiles("POST", url, { token: alice.token, body: none });
    expect(noneRes.status).toBe(400);
    expect((await errorOf(noneRes)).message).toContain("file: at least one file");

    const json = await callFiles("POST", url, { token: alice.token, json: { path: "a.txt" } });
    expect(json.status).toBe(415);

    const dup = await upload(threadId, alice, [
      { path: "same.txt", content: "1" },
      { path: "same.txt", content: "2" },
    ]);
    expect(dup.status).toBe(400);
    expect(await fileRows(threadId)).toBe(0);
  });

  it("refuses a part whose header carries a raw control character", async () => {
    const threadId = await makeThread(tdb, alice);
    const res = await upload(threadId, alice, [{ path: "bad\u0001name.txt", content: "nope" }]);
    expect(res.status).toBe(400);
    expect(await fileRows(threadId)).toBe(0);
  });

  it("refuses a bad path on download and delete with 400", async () => {
    const threadId = await makeThread(tdb, alice);
    for (const bad of ["a%5Cb.txt", "a%01b.txt"]) {
      const res = await callFiles("GET", `/api/threads/${threadId}/files/${bad}`, { token: alice.token });
      expect(res.status).toBe(400);
      expect((await errorOf(res)).message).toMatch(/^path: /);
      const del = await callFiles("DELETE", `/api/threads/${threadId}/files/${bad}`, { token: alice.token });
      expect(del.status).toBe(400);
    }
  });
});

describe("ownership", () => {
  it("answers 404 to another user for every route, and touches nothing", async () => {
    const threadId = await makeThread(tdb, alice);
    await upload(threadId, alice, [{ path: "secret.txt", content: "alice only" }]);
    const list = await callFiles("GET", `/api/threads/${threadId}/files`, { token: bob.token });
    expect(list.status).toBe(404);
    expect((await upload(threadId, bob, [{ path: "planted.txt", content: "x" }])).status).toBe(404);
    expect((await callFiles("GET", fileUrl(threadId, "secret.txt"), { token: bob.token })).status).toBe(404);
    expect((await callFiles("DELETE", fileUrl(threadId, "secret.txt"), { token: bob.token })).status).toBe(404);
    expect(await listPaths(threadId, alice)).toEqual(["secret.txt"]);
  });

  it("needs authentication, and a cookie upload from another origin is refused", async () => {
    const threadId = await makeThread(tdb, alice);
    const anon = await callFiles("GET", `/api/threads/${threadId}/files`);
    expect(anon.status).toBe(401);
    const form = new FormData();
    form.append("file", new Blob(["x"]), "x.txt");
    const cross = await callFiles("POST", `/api/threads/${threadId}/files`, {
      cookie: alice.cookie,
      body: form,
      headers: { origin: "https://evil.example" },
    });
    expect(cross.status).toBe(403);
    const same = await callFiles("POST", `/api/threads/${threadId}/files`, {
      cookie: alice.cookie,
      body: form,
      headers: { origin: ORIGIN },
    });
    expect(same.status).toBe(201);
    expect(await listPaths(threadId, alice)).toEqual(["x.txt"]);
  });
});
