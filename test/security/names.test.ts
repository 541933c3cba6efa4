import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { fileUrl } from "@/lib/api/files";
import { makeThread, makeUser, setupApiDatabase, type TestUser } from "../api/helpers";
import { type CompatServer, startCompatServer } from "../compat/http-server";
import { dispositionName, multipartBody } from "../helpers/multipart";
import { callFiles } from "../workspace/support";

/**
 * Any file name that uploads also downloads: the download's Content-Disposition names it
 * exactly (RFC 6266 `filename*`) with a plain-ASCII fallback, never a 500. Workspace files
 * through their routes, `/v1` files through a real socket.
 */

const tdb = await setupApiDatabase();
let server: CompatServer;
let alice: TestUser;

beforeAll(async () => {
  server = await startCompatServer();
  alice = await makeUser(tdb, "names");
});

afterAll(async () => {
  await server?.close();
});

const NAMES = ['résumé "final".txt', "日本語.csv", "100% done.txt", "🚀 launch.md", "it's (1)*.txt", "tab\u00a0nbsp.txt"];
// Not workspace paths (a backslash is refused there as a separator), but a /v1 file may be named so.
const V1_ONLY = ["back\\slash.jsonl", "line\r\nbreak.jsonl", "C:\\Users\\me\\input.jsonl"];

function expectSafeDisposition(header: string | null, name: string) {
  expect(header).not.toBeNull();
  expect(header!.startsWith("attachment; ")).toBe(true);
  expect(dispositionName(header)).toBe(name);
  // The fallback is printable ASCII with nothing that could end the quoted string early.
  const fallback = /filename="([^"]*)"/.exec(header!)?.[1];
  expect(fallback).toMatch(/^[\x20-\x7e]*$/);
  expect(fallback).not.toMatch(/["\\]/);
}

describe("workspace files", () => {
  it.each(NAMES)("uploads and downloads %j under its exact name", async (name) => {
    const threadId = await makeThread(tdb, alice);
    const { body, contentType } = multipartBody([{ filename: name, content: "content" }]);
    const up = await callFiles("POST", `/api/threads/${threadId}/files`, { token: alice.token, body, contentType });
    expect(up.status).toBe(201);
    expect(((await up.json()) as { files: { path: string }[] }).files[0]!.path).toBe(name);
    const res = await callFiles("GET", fileUrl(threadId, name), { token: alice.token });
    expect(res.status).toBe(200);
    expectSafeDisposition(res.headers.get("content-disposition"), name);
    expect(await res.text()).toBe("content");
  });
});

describe("/v1 files", () => {
  it.each([...NAMES, ...V1_ONLY])("uploads and downloads %j under its exact name", async (name) => {
    const { body, contentType } = multipartBody([
      { filename: name, content: '{"custom_id":"a"}\n', type: "application/jsonl" },
      { name: "purpose", content: "batch" },
    ]);
    const up = await fetch(`${server.origin}/v1/files`, {
      method: "POST",
      headers: { authorization: `Bearer ${alice.token}`, "content-type": contentType },
      body,
    });
    expect(up.status).toBe(200);
    const file = (await up.json()) as { id: string; filename: string };
    expect(file.filename).toBe(name);
    const res = await fetch(`${server.origin}/v1/files/${file.id}/content`, { headers: { authorization: `Bearer ${alice.token}` } });
    expect(res.status).toBe(200);
    expectSafeDisposition(res.headers.get("content-disposition"), name);
    expect(await res.text()).toBe('{"custom_id":"a"}\n');
  });
});
