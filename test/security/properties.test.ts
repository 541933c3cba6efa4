import fc from "fast-check";
import { beforeAll, describe, expect, it } from "vitest";
import * as health from "@/app/api/health/route";
import * as metrics from "@/app/api/metrics/route";
import * as register from "@/app/api/register/route";
import * as threadRuns from "@/app/api/threads/[threadId]/runs/route";
import * as threadRun from "@/app/api/threads/[threadId]/runs/[runId]/route";
import * as stopRun from "@/app/api/threads/[threadId]/runs/[runId]/stop/route";
import * as thread from "@/app/api/threads/[threadId]/route";
import * as threads from "@/app/api/threads/route";
import * as tokenById from "@/app/api/tokens/[tokenId]/route";
import * as action from "@/app/api/threads/[threadId]/subagent-batches/[batchId]/[action]/route";
import * as batch from "@/app/api/threads/[threadId]/subagent-batches/[batchId]/route";
import * as retry from "@/app/api/threads/[threadId]/subagent-batches/[batchId]/items/[itemId]/retry/route";
import * as items from "@/app/api/threads/[threadId]/subagent-batches/[batchId]/items/route";
import * as results from "@/app/api/threads/[threadId]/subagent-batches/[batchId]/results.jsonl/route";
import * as batches from "@/app/api/threads/[threadId]/subagent-batches/route";
import * as tokens from "@/app/api/tokens/route";
import { batchProjectionSchema } from "@/lib/api/batches";
import { buildRequest, call, finishItems, makeThread, makeUser, ORIGIN, setupApiDatabase, type TestUser, workerAlive } from "../api/helpers";

/**
 * Generated bodies, query strings, headers, paths and multipart uploads at every route handler
 * (the chat turn excepted: a valid one starts a model run, covered by the chat suites). For
 * every answer: never a 5xx; a 4xx is `{ error: { code, message } }` and wrote nothing (row
 * counts of every table unchanged); no answer carries the other user's data.
 */

const tdb = await setupApiDatabase();
const SECRET = "B-SECRET-7f3a9c";

let a: TestUser;
let b: TestUser;
let aThread: string;
let bThread: string;
let aBatch: string;
let bBatch: string;
let bToken: string;

beforeAll(async () => {
  await workerAlive(tdb);
  a = await makeUser(tdb, "prop-a");
  b = await makeUser(tdb, "prop-b");
  aThread = await makeThread(tdb, a);
  bThread = await makeThread(tdb, b);
  const submit = async (u: TestUser, t: string, items: string[]) =>
    batchProjectionSchema.parse(
      await (await call("POST", `/api/threads/${t}/subagent-batches`, { token: u.token, json: { submission_key: "fixture", items } })).json(),
    ).id;
  aBatch = await submit(a, aThread, ["mine one", "mine two"]);
  bBatch = await submit(b, bThread, [`${SECRET} prompt`, `${SECRET} other`]);
  await finishItems(tdb, bBatch, [1], { status: "succeeded", result: `${SECRET} result` });
  const created = await tokens.POST(
    buildRequest("POST", new URL(`${ORIGIN}/api/tokens`), { token: b.token, json: { name: `${SECRET}-token` } }),
    undefined as never,
  );
  bToken = (await created.json()).id;
});

let countQuery = "";

/** Exact row counts of every application table (one statement). */
async function allRowCounts(): Promise<Record<string, number>> {
  if (!countQuery) {
    const tables = await tdb.sql<{ name: string }[]>`
      select tablename as name from pg_tables
       where schemaname = 'public' and tablename not in ('auth_rate_limits', 'worker_heartbeats') order by tablename`;
    countQuery = `select ${tables.map((t) => `(select count(*)::int from public."${t.name}") as "${t.name}"`).join(", ")}`;
  }
  const [row] = await tdb.sql.unsafe(countQuery);
  return row as Record<string, number>;
}

type Handler = (req: Request, ctx: { params: Promise<Record<string, string>> }) => Promise<Response>;
interface RouteCase {
  name: string;
  method: string;
  path: (p: Record<string, string>) => string;
  params: string[];
  handler: Handler;
}

/** The one [action] route, called as Next would for POST .../{batchId}/{action}. */
const control =
  (name: string): Handler =>
  (req, ctx) =>
    action.POST(req, { params: ctx.params.then((p) => ({ ...p, action: name })) as never });

const batchBase = (p: Record<string, string>) => `/api/threads/${p.threadId}/subagent-batches`;
const ROUTES: RouteCase[] = [
  { name: "GET /api/threads", method: "GET", path: () => "/api/threads", params: [], handler: threads.GET as Handler },
  { name: "POST /api/threads", method: "POST", path: () => "/api/threads", params: [], handler: threads.POST as Handler },
  { name: "GET thread", method: "GET", path: (p) => `/api/threads/${p.threadId}`, params: ["threadId"], handler: thread.GET as Handler },
  { name: "GET runs", method: "GET", path: (p) => `/api/threads/${p.threadId}/runs`, params: ["threadId"], handler: threadRuns.GET as Handler },
  { name: "GET run", method: "GET", path: (p) => `/api/threads/${p.threadId}/runs/${p.runId}`, params: ["threadId", "runId"], handler: threadRun.GET as Handler },
  { name: "POST stop run", method: "POST", path: (p) => `/api/threads/${p.threadId}/runs/${p.runId}/stop`, params: ["threadId", "runId"], handler: stopRun.POST as Handler },
  { name: "GET batches", method: "GET", path: batchBase, params: ["threadId"], handler: batches.GET as Handler },
  { name: "POST batches", method: "POST", path: batchBase, params: ["threadId"], handler: batches.POST as Handler },
  { name: "GET batch", method: "GET", path: (p) => `${batchBase(p)}/${p.batchId}`, params: ["threadId", "batchId"], handler: batch.GET as Handler },
  { name: "GET items", method: "GET", path: (p) => `${batchBase(p)}/${p.batchId}/items`, params: ["threadId", "batchId"], handler: items.GET as Handler },
  { name: "POST pause", method: "POST", path: (p) => `${batchBase(p)}/${p.batchId}/pause`, params: ["threadId", "batchId"], handler: control("pause") },
  { name: "POST resume", method: "POST", path: (p) => `${batchBase(p)}/${p.batchId}/resume`, params: ["threadId", "batchId"], handler: control("resume") },
  { name: "POST cancel", method: "POST", path: (p) => `${batchBase(p)}/${p.batchId}/cancel`, params: ["threadId", "batchId"], handler: control("cancel") },
  { name: "POST retry", method: "POST", path: (p) => `${batchBase(p)}/${p.batchId}/items/${p.itemId}/retry`, params: ["threadId", "batchId", "itemId"], handler: retry.POST as Handler },
  { name: "GET results.jsonl", method: "GET", path: (p) => `${batchBase(p)}/${p.batchId}/results.jsonl`, params: ["threadId", "batchId"], handler: results.GET as Handler },
  { name: "GET /api/tokens", method: "GET", path: () => "/api/tokens", params: [], handler: tokens.GET as Handler },
  { name: "POST /api/tokens", method: "POST", path: () => "/api/tokens", params: [], handler: tokens.POST as Handler },
  { name: "DELETE token", method: "DELETE", path: (p) => `/api/tokens/${p.tokenId}`, params: ["tokenId"], handler: tokenById.DELETE as Handler },
  { name: "POST /api/register", method: "POST", path: () => "/api/register", params: [], handler: register.POST as Handler },
  { name: "GET /api/metrics", method: "GET", path: () => "/api/metrics", params: [], handler: metrics.GET as Handler },
  { name: "GET /api/health", method: "GET", path: () => "/api/health", params: [], handler: health.GET as unknown as Handler },
];

/** Path values: the caller's own ids, the other user's ids, unknown uuids, and junk. */
const idArb = () =>
  fc.oneof(
    fc.constantFrom("own", "other"),
    fc.uuid().map((u) => `raw:${u}`),
    fc.string({ maxLength: 40 }).map((s) => `raw:${s}`),
    fc.constantFrom("raw:..", "raw:%2e%2e", "raw:null", "raw:0", "raw:-1", "raw:%00"),
  );

const jsonBody = fc.oneof(
  fc.json({ maxDepth: 3 }),
  fc.record(
    {
      submission_key: fc.oneof(fc.string({ maxLength: 30 }), fc.integer()),
      items: fc.oneof(fc.array(fc.string({ maxLength: 20 }), { maxLength: 5 }), fc.anything({ maxDepth: 2 })),
      prompt_template: fc.string({ maxLength: 30 }),
      max_live_items: fc.oneof(fc.integer(), fc.double()),
      max_running_items: fc.oneof(fc.integer(), fc.string()),
      name: fc.oneof(fc.string({ maxLength: 120 }), fc.integer()),
      expires_in_days: fc.oneof(fc.integer({ min: -5, max: 5000 }), fc.double()),
      email: fc.oneof(fc.emailAddress(), fc.string()),
      password: fc.string({ maxLength: 30 }),
      invite_code: fc.string({ maxLength: 40 }),
      title: fc.oneof(fc.string({ maxLength: 300 }), fc.integer()),
    },
    { requiredKeys: [] },
  ).map((o) => JSON.stringify(o)),
);

const bodyArb = fc.oneof(
  fc.constant({ kind: "none" as const }),
  jsonBody.map((text) => ({ kind: "json" as const, text })),
  fc.string({ maxLength: 200 }).map((text) => ({ kind: "text" as const, text })),
  fc.array(fc.oneof(fc.json({ maxDepth: 2 }), fc.string({ maxLength: 30 })), { maxLength: 5 }).map((lines) => ({ kind: "ndjson" as const, text: lines.join("\n") })),
  fc.record({ field: fc.string({ maxLength: 10 }), content: fc.string({ maxLength: 100 }), filename: fc.string({ maxLength: 20 }) }).map((m) => ({ kind: "multipart" as const, ...m })),
  fc.uint8Array({ maxLength: 200 }).map((bytes) => ({ kind: "bytes" as const, bytes })),
);

const authArb = fc.constantFrom("token", "cookie", "none", "junk-bearer", "other-scheme", "junk-cookie");
const queryArb = fc.dictionary(
  fc.oneof(fc.constantFrom("status", "cursor", "limit", "submission_key", "items", "callbackUrl"), fc.string({ maxLength: 8 })),
  fc.oneof(fc.string({ maxLength: 20 }), fc.integer().map(String), fc.constantFrom("-1", "1e9", "NaN", "succeeded", "queued")),
  { maxKeys: 4 },
);
const headerArb = fc.dictionary(
  fc.constantFrom("x-forwarded-for", "accept", "content-length", "origin", "sec-fetch-site", "x-api-key", "user-agent"),
  fc.string({ maxLength: 40 }),
  { maxKeys: 3 },
);

function resolve(value: string, kind: string): string {
  if (value.startsWith("raw:")) return value.slice(4);
  const own = { threadId: aThread, batchId: aBatch, runId: aBatch, itemId: aBatch, tokenId: bToken };
  const other = { threadId: bThread, batchId: bBatch, runId: bBatch, itemId: bBatch, tokenId: bToken };
  return (value === "own" ? own : other)[kind as keyof typeof own];
}

interface GeneratedInput {
  ids: string[];
  body: unknown;
  auth: string;
  query: Record<string, string>;
  headers: Record<string, string>;
}

function toRequest(route: RouteCase, input: GeneratedInput) {
  const params: Record<string, string> = {};
  route.params.forEach((name, i) => {
    params[name] = resolve(input.ids[i] ?? "own", name);
  });
  const url = new URL(`${ORIGIN}${route.path(Object.fromEntries(Object.entries(params).map(([k, v]) => [k, encodeURIComponent(v)])))}`);
  for (const [k, v] of Object.entries(input.query)) url.searchParams.set(k, v);
  const headers: Record<string, string> = {};
  for (const [k, v] of Object.entries(input.headers)) if (/^[\t\x20-\x7e]*$/.test(v)) headers[k] = v;
  if (input.auth === "token") headers.authorization = `Bearer ${a.token}`;
  if (input.auth === "cookie") headers.cookie = a.cookie;
  if (input.auth === "junk-bearer") headers.authorization = "Bearer flt_not-a-token";
  if (input.auth === "other-scheme") headers.authorization = `Basic ${btoa("a:b")}`;
  if (input.auth === "junk-cookie") headers.cookie = "next-auth.session-token=garbage";
  const body = input.body as { kind: string; text?: string; bytes?: Uint8Array; field?: string; content?: string; filename?: string };
  let payload: BodyInit | undefined;
  let contentType: string | undefined;
  if (route.method !== "GET") {
    if (body.kind === "json") [payload, contentType] = [body.text, "application/json"];
    if (body.kind === "text") [payload, contentType] = [body.text, "text/plain"];
    if (body.kind === "ndjson") [payload, contentType] = [body.text, "application/x-ndjson"];
    if (body.kind === "bytes") [payload, contentType] = [new Blob([body.bytes as Uint8Array<ArrayBuffer>]), "application/octet-stream"];
    if (body.kind === "multipart") {
      const form = new FormData();
      form.append(body.field || "file", new Blob([body.content ?? ""]), body.filename || "upload.jsonl");
      payload = form;
    }
  }
  if (contentType) headers["content-type"] = contentType;
  if (headers["content-length"] !== undefined) delete headers["content-length"]; // the runtime sets it
  return { params, url, request: buildRequest(route.method, url, { headers, body: payload }) };
}

const inputArb = fc.record({
  ids: fc.array(idArb(), { minLength: 3, maxLength: 3 }),
  body: bodyArb,
  auth: authArb,
  query: queryArb,
  headers: headerArb,
});

describe.each(ROUTES)("$name", (route) => {
  it("never answers 5xx; a 4xx is the JSON error shape and writes nothing; nothing of the other user leaks", async () => {
    await fc.assert(
      fc.asyncProperty(inputArb, async (input) => {
        const before = await allRowCounts();
        const { params, request } = toRequest(route, input);
        // Called directly with the params Next would pass (even ones its router would not route).
        const res = await route.handler(request, { params: Promise.resolve(params) });
        const text = await res.text();
        expect(res.status, text).toBeLessThan(500);
        if (res.status >= 400) {
          const parsed = JSON.parse(text) as { error?: { code?: unknown; message?: unknown } };
          expect(typeof parsed.error?.code, text).toBe("string");
          expect(typeof parsed.error?.message, text).toBe("string");
          expect(await allRowCounts()).toEqual(before);
        }
        expect(text).not.toContain(SECRET);
        expect(text).not.toContain(b.email);
      }),
      { numRuns: 60, seed: Number(process.env.FAST_CHECK_SEED ?? 16) },
    );
  }, 60_000);
});
