import { randomUUID } from "node:crypto";
import { beforeAll, beforeEach, describe, expect, it } from "vitest";
import { batchProjectionSchema } from "@/lib/api/batches";
import {
  buildRequest,
  type CallOptions,
  call,
  errorOf,
  finishItems,
  itemIdAt,
  makeThread,
  makeUser,
  ORIGIN,
  rowCounts,
  setupApiDatabase,
  type TestUser,
  workerAlive,
} from "./helpers";

/**
 * Every route × a table of bad inputs: each answered 4xx with { error: { code, message } },
 * the message naming what was wrong, and nothing written (row counts and row versions of
 * every batch table unchanged).
 */

const tdb = await setupApiDatabase();

let user: TestUser;
let thread: string;
let batchId: string;
let failedItemId: string;

beforeAll(async () => {
  user = await makeUser(tdb, "bad");
  thread = await makeThread(tdb, user);
  const res = await call("POST", `/api/threads/${thread}/subagent-batches`, {
    token: user.token,
    json: { submission_key: "fixture", items: ["a", "b", "c"] },
  });
  batchId = batchProjectionSchema.parse(await res.json()).id;
  await finishItems(tdb, batchId, [1], { status: "failed", error: "x" });
  failedItemId = await itemIdAt(tdb, batchId, 1);
});

beforeEach(() => workerAlive(tdb));

const submitPath = () => `/api/threads/${thread}/subagent-batches`;
const ok = (extra: Record<string, unknown> = {}) => ({ submission_key: `k-${randomUUID()}`, items: ["a"], ...extra });
const MB = 1024 * 1024;

interface Case {
  name: string;
  method: string;
  path: () => string;
  options: () => CallOptions;
  status: number;
  code: string;
  message: RegExp;
}

const submitCases: Case[] = [
  ...(
    [
      ["malformed JSON", "{", 400, "invalid_json", /not valid JSON/],
      ["truncated JSON", '{"submission_key":"k","items":["a"', 400, "invalid_json", /not valid JSON/],
      ["empty body", "", 400, "invalid_json", /not valid JSON/],
      ["JSON array body", "[]", 400, "validation_failed", /expected object/],
      ["JSON null body", "null", 400, "validation_failed", /expected object/],
      ["JSON string body", '"items"', 400, "validation_failed", /expected object/],
    ] as const
  ).map(([name, body, status, code, message]) => ({
    name,
    method: "POST",
    path: submitPath,
    options: () => ({ body, contentType: "application/json" }),
    status,
    code,
    message,
  })),
  ...(
    [
      ["missing submission_key", { items: ["a"] }, /^submission_key:/],
      ["missing items", { submission_key: "k" }, /^items:/],
      ["submission_key wrong type", ok({ submission_key: 42 }), /^submission_key:/],
      ["submission_key empty", ok({ submission_key: "" }), /^submission_key:/],
      ["submission_key too long", ok({ submission_key: "k".repeat(201) }), /^submission_key:/],
      ["items wrong type", ok({ items: "a" }), /^items:/],
      ["items object", ok({ items: { a: 1 } }), /^items:/],
      ["empty batch", ok({ items: [] }), /^items: must contain at least one item/],
      ["item number", ok({ items: ["a", 7] }), /^items\.1: expected a string or an object/],
      ["item null", ok({ items: [null] }), /^items\.0:/],
      ["item empty string", ok({ items: [""] }), /^items\.0: must not be empty/],
      ["item with a key and nothing else", ok({ items: [{ item_key: "x" }] }), /^items\.0: an object item needs at least one field/],
      ["item prompt wrong type", ok({ items: [{ prompt: 5 }] }), /^items\.0\.prompt:/],
      ["item field of a wrong type", ok({ items: [{ prompt: "p", priority: { high: true } }] }), /^items\.0\.priority: must be a string, a number or a boolean/],
      ["item_key empty", ok({ items: [{ item_key: "", prompt: "p" }] }), /^items\.0\.item_key:/],
      ["item_key too long", ok({ items: [{ item_key: "k".repeat(201), prompt: "p" }] }), /^items\.0\.item_key:/],
      ["unknown field", ok({ priority: "high" }), /priority/],
      ["duplicate item keys", ok({ items: [{ item_key: "a", prompt: "1" }, "x", { item_key: "a", prompt: "2" }] }), /^items\.2: duplicate item_key "a"/],
      ["explicit key clashing with a default key", ok({ items: ["x", "y", { item_key: "item-2", prompt: "p" }] }), /^items\.2: duplicate item_key "item-2"/],
      ["5,001 items", ok({ items: Array.from({ length: 5_001 }, (_, i) => `i${i}`) }), /^items: at most 5000 items per batch \(got 5001\)/],
      ["negative max_live_items", ok({ max_live_items: -1 }), /^max_live_items:/],
      ["zero max_live_items", ok({ max_live_items: 0 }), /^max_live_items:/],
      ["oversized max_live_items", ok({ max_live_items: 1_001 }), /^max_live_items: must be at most 1000/],
      ["huge max_live_items", ok({ max_live_items: 1e20 }), /^max_live_items:/],
      ["fractional max_running_items", ok({ max_running_items: 2.5 }), /^max_running_items:/],
      ["string max_running_items", ok({ max_running_items: "3" }), /^max_running_items:/],
      ["oversized max_running_items", ok({ max_running_items: 65 }), /^max_running_items: must be at most 64/],
      ["negative max_running_items", ok({ max_running_items: -3 }), /^max_running_items:/],
      ["template without {{item}}", ok({ prompt_template: "no slot" }), /^prompt_template: must contain \{\{item\}\}/],
      ["template wrong type", ok({ prompt_template: ["x"] }), /^prompt_template:/],
      ["template holding NUL", ok({ prompt_template: "a\u0000 {{item}}" }), /^prompt_template: must not contain NUL/],
      ["template holding a lone surrogate", ok({ prompt_template: "a\uD800 {{item}}" }), /^prompt_template: must not contain lone surrogate/],
      ["unknown sub-agent", ok({ subagent: "wizard" }), /^subagent: unknown sub-agent "wizard"/],
      ["sub-agent wrong type", ok({ subagent: 3 }), /^subagent:/],
      ["prompt too long after expansion", ok({ items: ["x".repeat(100_001)] }), /^items\.0: prompt is 100001 characters/],
    ] as const
  ).map(([name, json, message]) => ({
    name,
    method: "POST",
    path: submitPath,
    options: () => ({ json }),
    status: 400,
    code: "validation_failed",
    message,
  })),
  ...(
    [
      ["NDJSON bad line", "k", '"a"\n"b"\n{"prompt":\n', /^line 3: not valid JSON/],
      ["NDJSON number line", "k", '"a"\n\n42\n', /^line 3: expected a string or an object/],
      ["NDJSON array line", "k", '["a"]\n', /^line 1: expected a string or an object/],
      ["NDJSON item field of a wrong type", "k", '{"prompt":"p","x":[1]}\n', /^line 1: x: must be a string, a number or a boolean/],
      ["NDJSON empty prompt", "k", '"a"\n{"prompt":""}\n', /^line 2: prompt: must not be empty/],
      ["NDJSON duplicate keys", "k", '{"item_key":"a","prompt":"1"}\n{"item_key":"a","prompt":"2"}\n', /^line 2: duplicate item_key "a" \(first used by line 1\)/],
      ["NDJSON empty body", "k", "", /^items: must contain at least one item/],
      ["NDJSON blank lines only", "k", "\n \n\r\n", /^items: must contain at least one item/],
      ["NDJSON 5,001 items", "k", Array.from({ length: 5_001 }, (_, i) => JSON.stringify(`i${i}`)).join("\n"), /^line 5001: at most 5000 items/],
      ["NDJSON prompt too long after expansion", "k&prompt_template=%7B%7Bitem%7D%7D", `"a"\n\n${JSON.stringify("y".repeat(100_001))}\n`, /^line 3: prompt is 100001 characters/],
      ["NDJSON missing submission_key", "", '"a"\n', /^submission_key:/],
      ["NDJSON unknown query parameter", "k&priority=high", '"a"\n', /^priority: unknown query parameter/],
      ["NDJSON repeated query parameter", "k&submission_key=j", '"a"\n', /^submission_key: given more than once/],
      ["NDJSON negative max_live_items", "k&max_live_items=-1", '"a"\n', /^max_live_items:/],
      ["NDJSON oversized max_live_items", "k&max_live_items=1001", '"a"\n', /^max_live_items: must be at most 1000/],
      ["NDJSON text max_running_items", "k&max_running_items=lots", '"a"\n', /^max_running_items:/],
      ["NDJSON unknown sub-agent", "k&subagent=wizard", '"a"\n', /^subagent: unknown sub-agent/],
    ] as const
  ).map(([name, key, body, message]) => ({
    name,
    method: "POST",
    path: () => {
      const [first, ...rest] = key.split("&");
      return `${submitPath()}?${[first ? `submission_key=${first}-${randomUUID()}` : "", ...rest].filter(Boolean).join("&")}`;
    },
    options: () => ({ body, contentType: "application/x-ndjson" }),
    status: 400,
    code: "validation_failed",
    message,
  })),
  {
    name: "query parameters with a JSON body",
    method: "POST",
    path: () => `${submitPath()}?max_live_items=3`,
    options: () => ({ json: ok() }),
    status: 400,
    code: "validation_failed",
    message: /^max_live_items: query parameters are only read with an application\/x-ndjson or text\/csv body/,
  },
  {
    name: "text/plain body",
    method: "POST",
    path: submitPath,
    options: () => ({ body: JSON.stringify(ok()), contentType: "text/plain" }),
    status: 415,
    code: "unsupported_media_type",
    message: /text\/plain/,
  },
  {
    name: "form body",
    method: "POST",
    path: submitPath,
    options: () => ({ body: "submission_key=k", contentType: "application/x-www-form-urlencoded" }),
    status: 415,
    code: "unsupported_media_type",
    message: /application\/x-www-form-urlencoded/,
  },
  {
    name: "20 MB JSON body",
    method: "POST",
    path: submitPath,
    options: () => ({ json: ok({ items: ["z".repeat(20 * MB)] }) }),
    status: 413,
    code: "payload_too_large",
    message: /exceeds 10485760 bytes/,
  },
  {
    name: "20 MB JSON body with a declared Content-Length",
    method: "POST",
    path: submitPath,
    options: () => {
      const body = JSON.stringify(ok({ items: ["z".repeat(20 * MB)] }));
      return { body, contentType: "application/json", headers: { "content-length": String(Buffer.byteLength(body)) } };
    },
    status: 413,
    code: "payload_too_large",
    message: /exceeds/,
  },
  {
    name: "20 MB NDJSON body",
    method: "POST",
    path: () => `${submitPath()}?submission_key=big`,
    options: () => ({ body: `${JSON.stringify("w".repeat(1000))}\n`.repeat(20 * 1024), contentType: "application/x-ndjson" }),
    status: 413,
    code: "payload_too_large",
    message: /exceeds/,
  },
  {
    name: "malformed thread id",
    method: "POST",
    path: () => "/api/threads/nope/subagent-batches",
    options: () => ({ json: ok() }),
    status: 404,
    code: "not_found",
    message: /thread not found/,
  },
];

const itemsPath = () => `/api/threads/${thread}/subagent-batches/${batchId}/items`;
const itemsCases: Case[] = (
  [
    ["negative limit", "limit=-1", /^limit:/],
    ["zero limit", "limit=0", /^limit:/],
    ["oversized limit", "limit=201", /^limit: must be a whole number between 1 and 200/],
    ["huge limit", "limit=99999999999", /^limit:/],
    ["fractional limit", "limit=1.5", /^limit:/],
    ["text limit", "limit=ten", /^limit:/],
    ["empty limit", "limit=", /^limit:/],
    ["unknown status", "status=done", /^status: must be one of/],
    ["garbage cursor", "cursor=abc$", /^cursor: not a cursor returned by this API/],
    ["forged cursor", `cursor=${Buffer.from("v1:abc").toString("base64url")}`, /^cursor:/],
    ["SQL in cursor", `cursor=${encodeURIComponent("1 or 1=1")}`, /^cursor:/],
    ["unknown parameter", "page=2", /^page: unknown query parameter/],
    ["repeated parameter", "limit=5&limit=6", /^limit: given more than once/],
  ] as const
).map(([name, query, message]) => ({
  name: `items: ${name}`,
  method: "GET",
  path: () => `${itemsPath()}?${query}`,
  options: () => ({}),
  status: 400,
  code: "validation_failed",
  message,
}));

/** Ids are the only inputs of the other routes: any malformed or unknown one is a 404. */
const idCases: Case[] = [];
for (const [label, suffix] of [
  ["detail", ""],
  ["items", "/items"],
  ["export", "/results.jsonl"],
  ["pause", "/pause"],
  ["resume", "/resume"],
  ["cancel", "/cancel"],
] as const) {
  const method = ["pause", "resume", "cancel"].includes(label) ? "POST" : "GET";
  for (const [what, path] of [
    ["malformed batch id", () => `/api/threads/${thread}/subagent-batches/not-a-uuid${suffix}`],
    ["unknown batch id", () => `/api/threads/${thread}/subagent-batches/${randomUUID()}${suffix}`],
    ["malformed thread id", () => `/api/threads/1/subagent-batches/${batchId}${suffix}`],
    ["unknown thread id", () => `/api/threads/${randomUUID()}/subagent-batches/${batchId}${suffix}`],
  ] as const)
    idCases.push({ name: `${label}: ${what}`, method, path, options: () => ({}), status: 404, code: "not_found", message: /not found/ });
}
for (const [what, item] of [
  ["malformed item id", () => "x"],
  ["unknown item id", () => randomUUID()],
  ["item id with a trailing space", () => `${failedItemId} `],
] as const)
  idCases.push({
    name: `retry: ${what}`,
    method: "POST",
    path: () => `/api/threads/${thread}/subagent-batches/${batchId}/items/${encodeURIComponent(item())}/retry`,
    options: () => ({}),
    status: 404,
    code: "not_found",
    message: /item not found/,
  });
idCases.push({
  name: "list: malformed thread id",
  method: "GET",
  path: () => "/api/threads/abc/subagent-batches",
  options: () => ({}),
  status: 404,
  code: "not_found",
  message: /thread not found/,
});

describe.each([
  ["submission", submitCases],
  ["item page", itemsCases],
  ["ids", idCases],
])("bad inputs: %s", (_label, cases) => {
  it.each(cases.map((c) => [c.name, c] as const))("%s", async (_name, c) => {
    const before = await rowCounts(tdb);
    const res = await call(c.method, c.path(), { token: user.token, ...c.options() });
    expect(res.status).toBe(c.status);
    const err = await errorOf(res);
    expect(err.code).toBe(c.code);
    expect(err.message).toMatch(c.message);
    expect(await rowCounts(tdb)).toEqual(before);
  });
});

describe("oversized bodies are refused before they are read whole", () => {
  it.each(["application/json", "application/x-ndjson"])("%s streamed without Content-Length", async (contentType) => {
    const before = await rowCounts(tdb);
    let pulledBytes = 0;
    const chunk = new TextEncoder().encode(`${JSON.stringify("v".repeat(65_000))}\n`);
    const body = new ReadableStream<Uint8Array>({
      pull(controller) {
        if (pulledBytes >= 20 * MB) return controller.close();
        pulledBytes += chunk.byteLength;
        controller.enqueue(chunk);
      },
    });
    const query = contentType === "application/x-ndjson" ? "?submission_key=streamed" : "";
    const res = await call("POST", `${submitPath()}${query}`, { token: user.token, body, contentType });
    expect(res.status).toBe(413);
    expect((await errorOf(res)).code).toBe("payload_too_large");
    // Read up to the 10 MB cap plus at most a chunk or two of read-ahead, never the whole 20 MB.
    expect(pulledBytes).toBeLessThan(10 * MB + 4 * chunk.byteLength);
    expect(await rowCounts(tdb)).toEqual(before);
  });

  it("a 20 MB body from a cross-site cookie request is refused before the body matters", async () => {
    const before = await rowCounts(tdb);
    const res = await call("POST", submitPath(), {
      cookie: user.cookie,
      headers: { origin: "https://evil.example" },
      json: ok({ items: ["z".repeat(20 * MB)] }),
    });
    expect(res.status).toBe(403);
    expect(await rowCounts(tdb)).toEqual(before);
  });
});

describe("control bodies", () => {
  it("ignore what a control does not read: pause with junk JSON still pauses exactly once", async () => {
    const req = buildRequest("POST", new URL(`/api/threads/${thread}/subagent-batches/${batchId}/pause`, ORIGIN), {
      token: user.token,
      body: "{not json",
      contentType: "application/json",
    });
    const { POST } = await import("@/app/api/threads/[threadId]/subagent-batches/[batchId]/[action]/route");
    const res = await POST(req, { params: Promise.resolve({ threadId: thread, batchId, action: "pause" }) });
    expect(res.status).toBe(200);
    expect(batchProjectionSchema.parse(await res.json()).status).toBe("paused");
    await call("POST", `/api/threads/${thread}/subagent-batches/${batchId}/resume`, { token: user.token });
  });
});
