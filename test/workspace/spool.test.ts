import { createHash } from "node:crypto";
import { mkdtempSync, readdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { fileUrl } from "@/lib/api/files";
import { makeThread, makeUser, setupApiDatabase, type TestUser } from "../api/helpers";
import { type CompatServer, startCompatServer } from "../compat/http-server";
import { multipartBody } from "../helpers/multipart";
import { callFiles } from "./support";

/**
 * Uploads larger than a request's memory share (4 MiB) wait on disk between their last byte and
 * their transaction: the bytes stored are the bytes sent, and the temporary files are gone
 * afterwards, whether the upload was stored or refused.
 */

const spoolDir = mkdtempSync(join(tmpdir(), "flotilla-spool-test-"));
process.env.TMPDIR = spoolDir;
process.env.FLOTILLA__WORKSPACE__MAX_FILE_BYTES = String(8 * 1024 * 1024);

const tdb = await setupApiDatabase();
let server: CompatServer;
let user: TestUser;

beforeAll(async () => {
  server = await startCompatServer();
  user = await makeUser(tdb, "spool");
});

afterAll(async () => {
  await server?.close();
});

const pseudoRandom = (size: number, seed: number) => Buffer.from(Uint8Array.from({ length: size }, (_, i) => (i * 31 + seed * 17 + (i >> 9)) % 251));
const sha = (b: Buffer | ArrayBuffer) => createHash("sha256").update(Buffer.from(b as ArrayBuffer)).digest("hex");

describe("the upload spool", () => {
  it("stores workspace files past the memory share byte for byte and leaves no temporary file", async () => {
    const threadId = await makeThread(tdb, user);
    const a = pseudoRandom(3 * 1024 * 1024, 1);
    const b = pseudoRandom(3 * 1024 * 1024 + 7, 2);
    const { body, contentType } = multipartBody([
      { filename: "a.bin", content: a },
      { filename: "b.bin", content: b },
    ]);
    const res = await callFiles("POST", `/api/threads/${threadId}/files`, { token: user.token, body, contentType });
    expect(res.status).toBe(201);
    for (const [name, bytes] of [["a.bin", a], ["b.bin", b]] as const) {
      const got = await callFiles("GET", fileUrl(threadId, name), { token: user.token });
      expect(sha(await got.arrayBuffer())).toBe(sha(bytes));
    }
    expect(readdirSync(spoolDir)).toEqual([]);
  });

  it("stores a /v1 file past the memory share byte for byte and leaves no temporary file", async () => {
    const line = `{"custom_id":"big","pad":"${"q".repeat(5 * 1024 * 1024)}"}\n`;
    const { body, contentType } = multipartBody([
      { filename: "big.jsonl", content: line, type: "application/jsonl" },
      { name: "purpose", content: "batch" },
    ]);
    const up = await fetch(`${server.origin}/v1/files`, {
      method: "POST",
      headers: { authorization: `Bearer ${user.token}`, "content-type": contentType },
      body,
    });
    expect(up.status).toBe(200);
    const { id } = (await up.json()) as { id: string };
    const content = await fetch(`${server.origin}/v1/files/${id}/content`, { headers: { authorization: `Bearer ${user.token}` } });
    expect(sha(await content.arrayBuffer())).toBe(sha(Buffer.from(line)));
    expect(readdirSync(spoolDir)).toEqual([]);
  });

  it("removes what was spilled when the upload is refused", async () => {
    const threadId = await makeThread(tdb, user);
    const { body, contentType } = multipartBody([
      { filename: "fits.bin", content: pseudoRandom(5 * 1024 * 1024, 3) },
      { filename: "too-big.bin", content: pseudoRandom(9 * 1024 * 1024, 4) },
    ]);
    const res = await callFiles("POST", `/api/threads/${threadId}/files`, { token: user.token, body, contentType });
    expect(res.status).toBe(413);
    expect(readdirSync(spoolDir)).toEqual([]);
    const [row] = await tdb.sql<{ n: number }[]>`select count(*)::int as n from workspace_files where thread_id = ${threadId}`;
    expect(row!.n).toBe(0);
  });
});
