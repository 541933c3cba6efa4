import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { batchProjectionSchema, itemPageSchema, resultLineSchema } from "@/lib/api/batches";
import { configSchema } from "@/lib/config";
import { listSubagents } from "@/server/agent/registry";
import {
  type CallOptions,
  call,
  finishItems,
  itemIdAt,
  makeThread,
  makeUser,
  noWorker,
  setupApiDatabase,
  type TestUser,
  workerAlive,
} from "./helpers";

/**
 * Walks every response of every route (successes and errors) and fails on any field name that
 * belongs to the engine's internals, or on any secret value planted in the rows (prompt text,
 * submission key, the tail of a full result outside the JSONL export, the stored spec).
 */

const tdb = await setupApiDatabase();

const FORBIDDEN_KEYS = new Set(
  [
    "execution_spec",
    "spec",
    "submission_key",
    "authorization",
    "caller",
    "allowed_subagents",
    "user_id",
    "prompt",
    "prompts",
    "prompt_template",
    "system_prompt",
    "lease_owner",
    "lease_expires_at",
    "lease_token",
    "leased_at",
    "available_at",
    "deferrals",
    "run_id",
    "last_claimed_at",
    "password_hash",
    "token_hash",
  ].flatMap((k) => [k, k.replace(/_([a-z])/g, (_m, c: string) => c.toUpperCase())]),
);

const marker = randomUUID().slice(0, 8);
const PROMPT_SECRET = `PROMPT-SECRET-${marker}`;
const SUBMISSION_SECRET = `SUBKEY-SECRET-${marker}`;
const RESULT_TAIL = `RESULT-TAIL-${marker}`;
/** Longer than any preview: its tail must only ever appear in the JSONL export. */
const FULL_RESULT = `${"r".repeat(10_000)}${RESULT_TAIL}`;
const SYSTEM_PROMPT = listSubagents(configSchema.parse({})).find((s) => s.name === "general")!.systemPrompt;

interface Recorded {
  label: string;
  status: number;
  contentType: string;
  text: string;
}
const recorded: Recorded[] = [];

async function hit(method: string, path: string, options: CallOptions = {}): Promise<Response> {
  const res = await call(method, path, options);
  recorded.push({
    label: `${method} ${path} → ${res.status}`,
    status: res.status,
    contentType: res.headers.get("content-type") ?? "",
    text: await res.clone().text(),
  });
  return res;
}

function forbiddenKeys(value: unknown, path: string, out: string[]): string[] {
  if (Array.isArray(value)) {
    for (const [i, v] of value.entries()) forbiddenKeys(v, `${path}[${i}]`, out);
  } else if (value && typeof value === "object")
    for (const [key, v] of Object.entries(value)) {
      if (FORBIDDEN_KEYS.has(key)) out.push(`${path}.${key}`);
      forbiddenKeys(v, `${path}.${key}`, out);
    }
  return out;
}

/** The value without the batch titles (`title`, `variant_of_title`), each handed to `check`. */
function withoutTitles(value: unknown, check: (title: string) => unknown): unknown {
  if (Array.isArray(value)) return value.map((v) => withoutTitles(v, check));
  if (!value || typeof value !== "object") return value;
  return Object.fromEntries(
    Object.entries(value).flatMap(([key, v]) => {
      if ((key === "title" || key === "variant_of_title") && typeof v === "string") {
        check(v);
        return [];
      }
      return [[key, withoutTitles(v, check)]];
    }),
  );
}

let user: TestUser;
let other: TestUser;
let thread: string;

beforeAll(async () => {
  user = await makeUser(tdb, "walker");
  other = await makeUser(tdb, "intruder");
  thread = await makeThread(tdb, user);
  await workerAlive(tdb);
});

describe("projection walk", () => {
  it("exercises every route", async () => {
    const base = `/api/threads/${thread}/subagent-batches`;
    const body = {
      submission_key: SUBMISSION_SECRET,
      prompt_template: `${PROMPT_SECRET} {{item}}`,
      // Explicit prompts are what the owner submitted (item `input`), so only the template carries the secret:
      // expanded prompts must never come back.
      items: ["one", { item_key: "two", prompt: "explicit prompt of two" }, "three", "four", "five"],
      max_live_items: 3,
    };
    const created = await hit("POST", base, { token: user.token, json: body });
    expect(created.status).toBe(201);
    const batch = batchProjectionSchema.parse(await created.json());
    await hit("POST", base, { token: user.token, json: body });
    await hit(
      "POST",
      `${base}?submission_key=${SUBMISSION_SECRET}-nd&prompt_template=${encodeURIComponent(`${PROMPT_SECRET} {{item}}`)}`,
      { token: user.token, body: '"x"\n{"prompt":"y"}\n', contentType: "application/x-ndjson" },
    );

    await finishItems(tdb, batch.id, [1], { status: "succeeded", result: FULL_RESULT });
    // A hand-edited row whose preview holds the full result must still come out bounded.
    await tdb.sql`update subagent_batch_items set preview = ${FULL_RESULT} where batch_id = ${batch.id} and position = 1`;
    await finishItems(tdb, batch.id, [2], { status: "failed", error: `${"e".repeat(5_000)}${RESULT_TAIL}` });
    await finishItems(tdb, batch.id, [3], { status: "running" });

    const b = `${base}/${batch.id}`;
    await hit("GET", base, { token: user.token });
    await hit("GET", b, { token: user.token });
    for (const query of ["", "?limit=1", "?status=succeeded", "?status=failed", "?status=running", "?limit=200"]) {
      const res = await hit("GET", `${b}/items${query}`, { token: user.token });
      const page = itemPageSchema.parse(await res.json());
      if (page.next_cursor) await hit("GET", `${b}/items?cursor=${page.next_cursor}`, { token: user.token });
    }
    await hit("GET", `${b}/results.jsonl`, { token: user.token });
    await hit("POST", `${b}/items/${await itemIdAt(tdb, batch.id, 2)}/retry`, { token: user.token });
    await hit("POST", `${b}/items/${await itemIdAt(tdb, batch.id, 1)}/retry`, { token: user.token }); // 409
    await hit("POST", `${b}/pause`, { token: user.token });
    await hit("POST", `${b}/resume`, { token: user.token });
    await noWorker(tdb);
    await hit("POST", `${b}/cancel`, { token: user.token }); // 503
    await workerAlive(tdb);
    await hit("POST", `${b}/cancel`, { token: user.token });
    await hit("POST", `${b}/resume`, { token: user.token }); // 409
    await hit("GET", `${b}/results.jsonl`, { token: user.token });
    await hit("GET", "/api/features", { token: user.token });
    // Error responses are responses too.
    await hit("GET", b, { token: other.token });
    await hit("GET", b);
    await hit("POST", base, { token: user.token, json: { ...body, items: [] } });
    await hit("POST", base, { token: user.token, json: { ...body, submission_key: "new", extra: PROMPT_SECRET } });
    await hit("GET", `${b}/items?limit=999`, { token: user.token });

    const statuses = new Set(recorded.map((r) => r.status));
    for (const s of [200, 201, 400, 401, 404, 409, 503]) expect(statuses, `saw ${s}`).toContain(s);
  });

  it("finds no internal field names and no planted secrets in any response", () => {
    expect(recorded.length).toBeGreaterThan(20);
    const problems: string[] = [];
    for (const r of recorded) {
      const isExport = r.contentType.startsWith("application/x-ndjson");
      const documents = isExport ? r.text.trimEnd().split("\n").filter(Boolean).map((l) => JSON.parse(l)) : [JSON.parse(r.text)];
      for (const doc of documents) {
        for (const key of forbiddenKeys(doc, "$", [])) problems.push(`${r.label}: field ${key}`);
        if (isExport) {
          const line = resultLineSchema.safeParse(doc);
          if (!line.success) problems.push(`${r.label}: export line is not exactly the result-line projection`);
        }
      }
      // A request body echoed into an error message must not carry the rejected value either.
      // A batch's title is the one place its template shows: its first line, cut to 80 (lib/batch-title.ts).
      const titled = documents.map((doc) => JSON.stringify(withoutTitles(doc, (title) => title.length > 80 && problems.push(`${r.label}: a title over 80`))));
      if (titled.some((text) => text.includes(PROMPT_SECRET))) problems.push(`${r.label}: prompt text`);
      if (r.text.includes(SUBMISSION_SECRET)) problems.push(`${r.label}: submission key`);
      if (r.text.includes(SYSTEM_PROMPT.slice(0, 60))) problems.push(`${r.label}: sub-agent system prompt`);
      if (!isExport && r.text.includes(RESULT_TAIL)) problems.push(`${r.label}: full result or error text outside the export`);
    }
    expect(problems).toEqual([]);
    // The export is the one place the full result goes, so it must be there.
    expect(recorded.some((r) => r.contentType.startsWith("application/x-ndjson") && r.text.includes(RESULT_TAIL))).toBe(true);
  });
});

afterAll(() => {
  recorded.length = 0;
});
