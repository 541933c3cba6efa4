import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { makeThread, makeUser, setupApiDatabase, type TestUser, workerAlive } from "../api/helpers";
import { multipartBody } from "../helpers/multipart";
import { send, startWebServer, type WebServer } from "../helpers/web-server";

/**
 * No text field is left unsanitized (issue 38), over real sockets: a NUL or a lone surrogate in
 * any field a person sends is either stored as U+FFFD (names, titles, metadata) or, where the
 * value must be exact (a submission key), a 400 naming the field that writes nothing; never a
 * 500 from PostgreSQL's text or jsonb refusing it.
 */

const U0 = "\u0000";
const LONE = "\ud800";
const FFFD = "\ufffd";

const tdb = await setupApiDatabase();
let server: WebServer;
let alice: TestUser;
let threadId: string;

beforeAll(async () => {
  server = await startWebServer();
  alice = await makeUser(tdb, "nul-sender");
  threadId = await makeThread(tdb, alice);
  await workerAlive(tdb);
});

afterAll(async () => {
  await server?.close();
});

async function api(path: string, init: { method?: string; json?: unknown; body?: Buffer; headers?: Record<string, string> } = {}) {
  const res = await send(server, path, { ...init, headers: { authorization: `Bearer ${alice.token}`, ...init.headers } });
  let json: unknown;
  try {
    json = JSON.parse(res.body);
  } catch {
    json = undefined;
  }
  return { status: res.status, body: res.body, json: json as Record<string, unknown> & { error?: { message?: string } } };
}

describe("API token names", () => {
  it.each([U0, LONE])("a token name holding %j is stored with U+FFFD (was a 500)", async (bad) => {
    const res = await api("/api/tokens", { json: { name: `ci${bad}bot`, expires_in_days: 1 } });
    expect(res.status, res.body).toBe(201);
    const list = await api("/api/tokens");
    expect(list.status).toBe(200);
    expect(JSON.stringify(list.json)).toContain(JSON.stringify(`ci${FFFD}bot`).slice(1, -1));
  });
});

describe("submission keys must be exact", () => {
  it.each([U0, LONE])("a submission_key holding %j is a 400 naming submission_key and writes nothing", async (bad) => {
    const before = await tdb.sql`select count(*)::int as n from subagent_batches`;
    const res = await api(`/api/threads/${threadId}/subagent-batches`, { json: { submission_key: `key${bad}`, items: ["a"] } });
    expect(res.status, res.body).toBe(400);
    expect(res.json.error?.message).toMatch(/^submission_key: /);
    const after = await tdb.sql`select count(*)::int as n from subagent_batches`;
    expect(after[0]!.n).toBe(before[0]!.n);
  });
});

describe("every other text of a submission, a thread, a file is never a 500", () => {
  const submissions: [string, Record<string, unknown>][] = [
    ["title", { title: `t${U0}` }],
    ["item", { items: [`a${U0}`] }],
    ["item_key", { items: [{ item_key: `k${U0}`, x: "1" }], prompt_template: "{{x}}" }],
    ["a field's name", { items: [{ [`f${U0}`]: "1" }], prompt_template: "go" }],
    ["a field's value", { items: [{ f: `v${U0}` }], prompt_template: "{{f}}" }],
    ["expected", { items: [{ f: "v", expected: `e${U0}` }], prompt_template: "{{f}}" }],
    ["webhook_url", { items: ["a"], webhook_url: `https://example.com/${U0}` }],
    ["subagent", { items: ["a"], subagent: `s${U0}` }],
    ["model", { items: ["a"], model: `m${U0}` }],
    ["a check's name", { items: ["a"], checks: [{ name: `c${U0}`, type: "regex", pattern: "a" }] }],
    ["output_schema", { items: ["a"], output_schema: { type: "object", properties: { [`p${U0}`]: { type: "string", description: `d${LONE}` } } } }],
  ];
  let n = 0;
  it.each(submissions)("a submission with NUL in its %s answers 201 or 400, not 500", async (_what, body) => {
    const res = await api(`/api/threads/${threadId}/subagent-batches`, { json: { submission_key: `nul-${++n}`, ...body } });
    expect([201, 400], res.body).toContain(res.status);
  });

  it("a thread's title holding NUL, on create and rename", async () => {
    const made = await api("/api/threads", { json: { title: `t${U0}x` } });
    expect([201, 200, 400], made.body).toContain(made.status);
    const renamed = await api(`/api/threads/${threadId}`, { method: "PATCH", json: { title: `r${U0}${LONE}` } });
    expect([200, 400], renamed.body).toContain(renamed.status);
  });

  it("a workspace file path holding NUL", async () => {
    const { body, contentType } = multipartBody([{ filename: `a${U0}b.txt`, content: "x", type: "text/plain" }]);
    const res = await api(`/api/threads/${threadId}/files`, { body, headers: { "content-type": contentType } });
    expect([200, 201, 400], res.body).toContain(res.status);
  });
});

describe("/v1", () => {
  async function upload(name: string, content: string): Promise<{ status: number; id?: string; body: string }> {
    const { body, contentType } = multipartBody([
      { filename: name, content, type: "application/jsonl" },
      { name: "purpose", content: "batch" },
    ]);
    const res = await api("/v1/files", { body, headers: { "content-type": contentType } });
    return { status: res.status, id: res.json?.id as string | undefined, body: res.body };
  }
  const line = (id: string) =>
    JSON.stringify({ custom_id: id, method: "POST", url: "/v1/chat/completions", body: { model: "simulator", messages: [{ role: "user", content: "hi" }] } });

  it("a file name holding NUL is stored with U+FFFD", async () => {
    const up = await upload(`in${U0}.jsonl`, `${line("a")}\n`);
    expect(up.status, up.body).toBe(200);
  });

  it("metadata holding NUL or a lone surrogate is stored with U+FFFD", async () => {
    const up = await upload("in.jsonl", `${line("a")}\n`);
    const res = await api("/v1/batches", {
      json: { input_file_id: up.id, endpoint: "/v1/chat/completions", completion_window: "24h", metadata: { [`k${U0}`]: `v${LONE}` } },
    });
    expect(res.status, res.body).toBe(200);
    expect(res.json.metadata).toEqual({ [`k${FFFD}`]: `v${FFFD}` });
  });

  it("a failed batch whose line holds a raw NUL is failed with its errors, not a 500", async () => {
    // Not JSON, with a raw NUL in it: the parser's message quotes the line.
    const up = await upload("bad.jsonl", `${line("ok")}\n{"custom_id": "x${U0}", oops}\n`);
    expect(up.status, up.body).toBe(200);
    const res = await api("/v1/batches", { json: { input_file_id: up.id, endpoint: "/v1/chat/completions", completion_window: "24h" } });
    expect(res.status, res.body).toBe(200);
    expect(res.json.status).toBe("failed");
    const errors = JSON.stringify(res.json.errors);
    expect(errors).not.toContain("\\u0000");
    expect(res.json.errors).toBeTruthy();
  });

  it("an Anthropic request whose custom_id holds NUL answers 400, not 500", async () => {
    const res = await api("/v1/messages/batches", {
      json: { requests: [{ custom_id: `c${U0}`, params: { model: "simulator", max_tokens: 10, messages: [{ role: "user", content: "hi" }] } }] },
    });
    expect([200, 400], res.body).toContain(res.status);
  });
});

describe("sign-in and registration", () => {
  it("a sign-in whose email holds NUL is a wrong sign-in, not a server error", async () => {
    const csrf = await send(server, "/api/auth/csrf");
    const cookie = ([] as string[])
      .concat(csrf.headers["set-cookie"] ?? [])
      .map((c) => c.split(";")[0])
      .join("; ");
    const { csrfToken } = JSON.parse(csrf.body) as { csrfToken: string };
    for (const email of [`${alice.email}${U0}`, `x${LONE}@example.test`]) {
      const res = await send(server, "/api/auth/callback/credentials", {
        headers: { cookie, "content-type": "application/x-www-form-urlencoded" },
        body: new URLSearchParams({ csrfToken, email, password: "correct horse battery", json: "true" }).toString(),
      });
      expect(res.status, res.body).toBeLessThan(500);
      expect(new URL(JSON.parse(res.body).url, "http://x").searchParams.get("error"), res.body).toBe("CredentialsSignin");
    }
  });

  it("a registration whose email or invite code holds NUL is a 4xx", async () => {
    for (const body of [
      { email: `new${U0}@example.test`, password: "correct horse battery", invite_code: "x" },
      { email: "new@example.test", password: "correct horse battery", invite_code: `x${U0}` },
      { email: "new@example.test", password: `p${U0}ssword-long-enough`, invite_code: "x" },
    ]) {
      const res = await send(server, "/api/register", { json: body });
      expect(res.status, res.body).toBeGreaterThanOrEqual(400);
      expect(res.status, res.body).toBeLessThan(500);
    }
  });
});
