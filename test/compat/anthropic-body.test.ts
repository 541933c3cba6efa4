import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { requestElements } from "@/server/compat/anthropic-body";
import { makeUser, setupApiDatabase, type TestUser } from "../api/helpers";
import { type CompatServer, startCompatServer } from "./http-server";

/**
 * Anthropic batch creates are read request by request with bounded memory: the envelope is
 * scanned once and each element of `requests` parsed on its own; a request larger than
 * http.max_body_bytes, or a body past compat.max_file_bytes, is refused with 413 naming it.
 */

process.env.FLOTILLA__HTTP__MAX_BODY_BYTES = String(64 * 1024);
process.env.FLOTILLA__COMPAT__MAX_FILE_BYTES = String(1024 * 1024);

async function collect(body: string, pieceBytes: number, maxValueBytes = 1 << 20): Promise<unknown[]> {
  const bytes = Buffer.from(body);
  async function* chunks() {
    for (let i = 0; i < bytes.length; i += pieceBytes) yield bytes.subarray(i, i + pieceBytes);
  }
  const out: unknown[] = [];
  for await (const text of requestElements(chunks(), { maxValueBytes, limitName: "the limit" })) out.push(JSON.parse(text));
  return out;
}

describe("requestElements", () => {
  const requests = [
    { custom_id: "a", params: { messages: [{ role: "user", content: 'quote " brace } bracket ] comma , \\ backslash' }] } },
    { custom_id: "é日本🚀", params: { nested: [[1, [2]], { "k]": "v}" }], n: -1.5e3, t: true, f: false, z: null } },
    "a string element",
    42,
  ];
  const body = JSON.stringify({ before: { x: [1, 2, { requests: [] }] }, requests, after: "[}]" }, null, 1);

  it.each([1, 2, 3, 7, 64, 100_000])("splits the elements exactly, whatever the chunk size (%i bytes)", async (piece) => {
    expect(await collect(body, piece)).toEqual(requests);
  });

  it("refuses what is not the envelope: invalid JSON, requests not an array, given twice, missing", async () => {
    for (const bad of ['{"requests":[{"a":1},]}', '{"requests":[1 2]}', '{"requests":[1]', '{"requests":[1]} x', "[1]", '{"requests":[1],}'])
      await expect(collect(bad, 5), bad).rejects.toMatchObject({ code: expect.stringMatching(/invalid_json|validation_failed/) });
    await expect(collect('{"requests":{"a":1}}', 5)).rejects.toThrow("requests: must be an array");
    await expect(collect('{"requests":[1],"requests":[2]}', 5)).rejects.toThrow("requests: given more than once");
    await expect(collect('{"other":1}', 5)).rejects.toThrow("requests: at least one request is required");
  });

  it("refuses an element larger than the limit while it arrives, naming the element", async () => {
    const big = JSON.stringify({ requests: [1, { custom_id: "b", pad: "x".repeat(5000) }] });
    await expect(collect(big, 256, 1000)).rejects.toMatchObject({
      code: "payload_too_large",
      message: "requests.1: larger than the limit (1000 bytes)",
    });
  });
});

const tdb = await setupApiDatabase();

describe("POST /v1/messages/batches", () => {
  let server: CompatServer;
  let user: TestUser;

  beforeAll(async () => {
    server = await startCompatServer();
    user = await makeUser(tdb, "anthropic-body");
  });

  afterAll(async () => {
    await server?.close();
  });

  const create = (body: string) =>
    fetch(`${server.origin}/v1/messages/batches`, {
      method: "POST",
      headers: { "x-api-key": user.token, "content-type": "application/json" },
      body,
    });
  const request = (id: string, content: string) => ({
    custom_id: id,
    params: { model: "simulator", max_tokens: 16, messages: [{ role: "user", content }] },
  });
  const batches = async () => (await tdb.sql<{ n: number }[]>`select count(*)::int as n from compat_batches`)[0]!.n;

  it("creates from many requests read one at a time", async () => {
    const requests = Array.from({ length: 300 }, (_, i) => request(`r${i}`, `hello ${i} ${"y".repeat(1000)}`));
    const res = await create(JSON.stringify({ requests }));
    expect(res.status).toBe(200);
    expect(((await res.json()) as { request_counts: { processing: number } }).request_counts.processing).toBe(300);
  });

  it("refuses one request larger than http.max_body_bytes with 413 naming it, writing nothing", async () => {
    const before = await batches();
    const res = await create(JSON.stringify({ requests: [request("a", "ok"), request("b", "z".repeat(70 * 1024))] }));
    expect(res.status).toBe(413);
    expect(await res.json()).toEqual({
      type: "error",
      error: { type: "request_too_large", message: "requests.1: larger than http.max_body_bytes (65536 bytes)" },
    });
    expect(await batches()).toBe(before);
  });

  it("refuses a body past compat.max_file_bytes with 413 naming it", async () => {
    const requests = Array.from({ length: 40 }, (_, i) => request(`r${i}`, "w".repeat(30 * 1024)));
    const res = await create(JSON.stringify({ requests }));
    expect(res.status).toBe(413);
    expect(((await res.json()) as { error: { message: string } }).error.message).toContain("compat.max_file_bytes");
  });

  it("names a bad request as before", async () => {
    const res = await create(JSON.stringify({ requests: [request("a", "ok"), { custom_id: "b", params: { model: "nope", max_tokens: 1, messages: [{ role: "user", content: "x" }] } }] }));
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: { message: string } }).error.message).toMatch(/^requests\.1\.params\.model: /);
  });
});
