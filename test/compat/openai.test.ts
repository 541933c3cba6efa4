import type { ChildProcess } from "node:child_process";
import { connect } from "node:net";
import Ajv from "ajv";
import OpenAI, { toFile } from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openAiBatchSchema, openAiFileSchema } from "@/lib/api/compat";
import { call, makeUser, setupApiDatabase, type TestUser } from "../api/helpers";
import type { TestDatabase } from "../helpers/db";
import { type CompatServer, startCompatServer } from "./http-server";
import { chatLine, jsonl, spawnWorker, stopWorker, until } from "./support";

// The web side's configuration (read lazily by the handlers): one attempt per item, so a
// [[fail-once]] request ends failed and a retry from the panel is what makes it succeed.
process.env.FLOTILLA__SUBAGENT_BATCHES__MAX_ATTEMPTS = "1";
// Small file limits, so the refusals are cheap to reach.
process.env.FLOTILLA__COMPAT__MAX_REQUESTS_PER_FILE = "20";
process.env.FLOTILLA__COMPAT__MAX_FILE_BYTES = String(64 * 1024);

let tdb: TestDatabase;
let server: CompatServer;
let alice: TestUser;
let bob: TestUser;
let worker: ChildProcess | undefined;
let client: OpenAI;

const clientFor = (user: TestUser) => new OpenAI({ baseURL: `${server.origin}/v1`, apiKey: user.token, maxRetries: 0 });

async function upload(c: OpenAI, text: string, name = "input.jsonl") {
  return c.files.create({ file: await toFile(Buffer.from(text), name), purpose: "batch" });
}

async function text(res: Response): Promise<string> {
  return Buffer.from(await res.arrayBuffer()).toString("utf8");
}

const parseLines = (s: string) =>
  s
    .split("\n")
    .filter((l) => l.trim() !== "")
    .map((l) => JSON.parse(l));

beforeAll(async () => {
  tdb = await setupApiDatabase();
  server = await startCompatServer();
  alice = await makeUser(tdb, "alice");
  bob = await makeUser(tdb, "bob");
  client = clientFor(alice);
  worker = spawnWorker(tdb, { FLOTILLA__SUBAGENT_BATCHES__MAX_ATTEMPTS: "1" });
});

afterAll(async () => {
  await stopWorker(worker);
  await server?.close();
});

describe("OpenAI-compatible batches through the official SDK", () => {
  let completedBatchId = "";

  it("uploads, runs a batch to completion and serves its output and error files", async () => {
    const input = jsonl([
      chatLine("a", "Say hello to the batch", { temperature: 0.2, max_tokens: 64 }),
      chatLine("b", "Answer with [[chars:17]]"),
      chatLine("c", "Please [[fail-once]] now"),
      JSON.stringify({
        custom_id: "d",
        method: "POST",
        url: "/v1/chat/completions",
        body: {
          model: "flotilla:summarizer",
          messages: [
            { role: "system", content: "Be brief." },
            { role: "user", content: [{ type: "text", text: "Summarize: the sea is wide." }] },
          ],
        },
      }),
    ]);
    const file = await upload(client, input, "greetings.jsonl");
    expect(openAiFileSchema.parse(file)).toMatchObject({ object: "file", purpose: "batch", filename: "greetings.jsonl" });
    expect(file.bytes).toBe(Buffer.byteLength(input));
    expect((await client.files.retrieve(file.id)).id).toBe(file.id);
    expect(await text(await client.files.content(file.id))).toBe(input);

    const created = await client.batches.create({
      input_file_id: file.id,
      endpoint: "/v1/chat/completions",
      completion_window: "24h",
      metadata: { job: "greetings" },
    });
    expect(openAiBatchSchema.parse(created).status).toBe("in_progress");
    expect(created.request_counts).toEqual({ total: 4, completed: 0, failed: 0 });
    expect(created.metadata).toEqual({ job: "greetings" });
    // Unix seconds, as the provider sends them.
    expect(Math.abs(created.created_at - Date.now() / 1000)).toBeLessThan(60);
    expect(created.expires_at! - created.created_at).toBe(24 * 3600);

    const done = await until(
      () => client.batches.retrieve(created.id),
      (b) => b.status === "completed",
    );
    expect(openAiBatchSchema.parse(done).request_counts).toEqual({ total: 4, completed: 3, failed: 1 });
    expect(done.completed_at).toBeGreaterThanOrEqual(done.created_at);
    expect(done.output_file_id).toBeTruthy();
    expect(done.error_file_id).toBeTruthy();

    const output = parseLines(await text(await client.files.content(done.output_file_id!)));
    expect(output.map((l) => l.custom_id)).toEqual(["a", "b", "d"]);
    for (const line of output) {
      expect(line.error).toBeNull();
      expect(line.response.status_code).toBe(200);
      expect(line.response.request_id).toMatch(/^req_/);
      const body = line.response.body;
      expect(body).toMatchObject({ object: "chat.completion", choices: [{ index: 0, message: { role: "assistant" } }] });
      expect(body.choices[0].message.content.length).toBeGreaterThan(0);
      expect(body.usage.total_tokens).toBe(body.usage.prompt_tokens + body.usage.completion_tokens);
      expect(body.usage.prompt_tokens).toBeGreaterThan(0);
    }
    expect(output[1].response.body.choices[0].message.content).toHaveLength(17);
    expect(output[2].response.body.model).toBe("flotilla:summarizer");

    const errors = parseLines(await text(await client.files.content(done.error_file_id!)));
    expect(errors).toHaveLength(1);
    expect(errors[0]).toMatchObject({ custom_id: "c", response: { status_code: 500 }, error: null });
    expect(errors[0].response.body.error.message).toMatch(/fail/i);
    expect((await client.files.retrieve(done.error_file_id!)).bytes).toBeGreaterThan(0);
    completedBatchId = created.id;
  });

  it("regenerates the output file after a failed item is retried from the panel", async () => {
    const [row] = await tdb.sql<{ batch_id: string; thread_id: string; item_id: string }[]>`
      select b.id as batch_id, b.thread_id, i.id as item_id
        from compat_batches c join subagent_batches b on b.id = c.batch_id
        join subagent_batch_items i on i.batch_id = b.id
       where replace(c.id::text, '-', '') = ${completedBatchId.slice("batch_".length)} and i.item_key = 'c'`;
    const res = await call("POST", `/api/threads/${row!.thread_id}/subagent-batches/${row!.batch_id}/items/${row!.item_id}/retry`, {
      token: alice.token,
    });
    expect(res.status).toBe(200);
    // An ordinary durable batch in a thread of its own, titled from the file name.
    const [thread] = await tdb.sql<{ title: string }[]>`select title from threads where id = ${row!.thread_id}`;
    expect(thread!.title).toBe("greetings.jsonl");
    const panel = await call("GET", `/api/threads/${row!.thread_id}/subagent-batches/${row!.batch_id}`, { token: alice.token });
    expect(await panel.json()).toMatchObject({ subagent: "openai-batch", total: 4 });
    const done = await until(
      () => client.batches.retrieve(completedBatchId),
      (b) => b.status === "completed" && b.request_counts?.failed === 0,
    );
    expect(done.error_file_id).toBeNull();
    const output = parseLines(await text(await client.files.content(done.output_file_id!)));
    expect(output.map((l) => l.custom_id)).toEqual(["a", "b", "c", "d"]);
  });

  it("reports every malformed line as the provider does and runs nothing", async () => {
    const [before] = await tdb.sql<{ n: number }[]>`select count(*)::int as n from subagent_batches`;
    const file = await upload(
      client,
      jsonl([
        chatLine("ok", "fine"),
        "{not json",
        chatLine("ok", "duplicate id"),
        JSON.stringify({ custom_id: "u", method: "POST", url: "/v1/embeddings", body: {} }),
        chatLine("m", "unknown model", { model: "gpt-nonexistent" }),
        JSON.stringify({ custom_id: "g", method: "GET", url: "/v1/chat/completions", body: {} }),
        JSON.stringify({ custom_id: "e", method: "POST", url: "/v1/chat/completions", body: { model: "simulator", messages: [] } }),
      ]),
    );
    const batch = await client.batches.create({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" });
    expect(batch.status).toBe("failed");
    expect(batch.failed_at).toBeTypeOf("number");
    const data = batch.errors?.data ?? [];
    expect(data.map((e) => [e.line, e.code, e.param])).toEqual([
      [2, "invalid_json_line", null],
      [3, "duplicate_custom_id", "custom_id"],
      [4, "mismatched_url", "url"],
      [5, "model_not_found", "body.model"],
      [6, "invalid_method", "method"],
      [7, "invalid_body", "body.messages"],
    ]);
    expect(data[3]!.message).toContain("gpt-nonexistent");
    expect((await client.batches.retrieve(batch.id)).status).toBe("failed");
    const [after] = await tdb.sql<{ n: number }[]>`select count(*)::int as n from subagent_batches`;
    expect(after!.n).toBe(before!.n);
  });

  it("cancels mid-run: cancelling, then cancelled, with the finished output kept", async () => {
    const lines = [chatLine("quick", "answer at once")];
    for (let i = 0; i < 6; i++) lines.push(chatLine(`slow-${i}`, `take your time [[sleep:20000]] ${i}`));
    const file = await upload(client, jsonl(lines));
    const batch = await client.batches.create({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" });
    await until(
      () => client.batches.retrieve(batch.id),
      (b) => (b.request_counts?.completed ?? 0) >= 1,
    );
    const cancelling = await client.batches.cancel(batch.id);
    expect(cancelling.status).toBe("cancelling");
    expect(cancelling.cancelling_at).toBeTypeOf("number");
    const cancelled = await until(
      () => client.batches.retrieve(batch.id),
      (b) => b.status === "cancelled",
    );
    expect(cancelled.cancelled_at).toBeTypeOf("number");
    const output = parseLines(await text(await client.files.content(cancelled.output_file_id!)));
    expect(output.map((l) => l.custom_id)).toEqual(["quick"]);
    const errors = parseLines(await text(await client.files.content(cancelled.error_file_id!)));
    expect(errors).toHaveLength(6);
    for (const e of errors) expect(e).toMatchObject({ response: null, error: { code: "batch_cancelled" } });
    // The worker stops the in-flight calls: nothing is left leased or running.
    await until(
      () => tdb.sql<{ n: number }[]>`select count(*)::int as n from subagent_batch_items where status in ('leased', 'running')`,
      (rows) => rows[0]!.n === 0,
    );
  });

  it("expires unfinished requests when the completion window has passed", async () => {
    const file = await upload(client, jsonl([chatLine("late-1", "[[sleep:20000]] one"), chatLine("late-2", "[[sleep:20000]] two")]));
    const batch = await client.batches.create({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" });
    await tdb.sql`update compat_batches set expires_at = now() - interval '1 second'
                   where replace(id::text, '-', '') = ${batch.id.slice("batch_".length)}`;
    // Readers racing to expire it: each sees it expired, and it is cancelled once.
    const reads = await Promise.all([1, 2, 3, 4].map(() => client.batches.retrieve(batch.id)));
    expect(reads.map((b) => b.status)).toEqual(["expired", "expired", "expired", "expired"]);
    const expired = await client.batches.retrieve(batch.id);
    expect(expired.status).toBe("expired");
    expect(expired.expired_at).toBeTypeOf("number");
    const errors = parseLines(await text(await client.files.content(expired.error_file_id!)));
    expect(errors.map((e) => [e.custom_id, e.error.code])).toEqual([
      ["late-1", "batch_expired"],
      ["late-2", "batch_expired"],
    ]);
  });

  it("starts no request after the window: the worker expires the batch before its next request", async () => {
    // 4 worker slots: four requests run, four wait for a slot.
    const file = await upload(client, jsonl([0, 1, 2, 3, 4, 5, 6, 7].map((i) => chatLine(`w${i}`, `[[sleep:2500]] ${i}`))));
    const batch = await client.batches.create({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" });
    const id = batch.id.slice("batch_".length);
    await until(
      () => tdb.sql<{ n: number }[]>`
        select count(*)::int as n from subagent_batch_items i join compat_batches c on c.batch_id = i.batch_id
         where replace(c.id::text, '-', '') = ${id} and i.status = 'running'`,
      (rows) => rows[0]!.n === 4,
    );
    await tdb.sql`update compat_batches set expires_at = now() where replace(id::text, '-', '') = ${id}`;
    // Nobody reads the batch: at its next claim the worker expires it instead of starting a request.
    const rows = await until(
      () => tdb.sql<{ expired: boolean; succeeded: number; cancelled: number }[]>`
        select c.expired_at is not null as expired, b.succeeded_count as succeeded, b.cancelled_count as cancelled
          from compat_batches c join subagent_batches b on b.id = c.batch_id where replace(c.id::text, '-', '') = ${id}`,
      (r) => r[0]!.expired && r[0]!.succeeded + r[0]!.cancelled === 8,
      20_000,
    );
    // The first finished request frees a slot; that claim expires the batch, cancelling the waiting
    // four and whatever was still running.
    const { succeeded, cancelled } = rows[0]!;
    expect(succeeded).toBeGreaterThanOrEqual(1);
    expect(cancelled).toBeGreaterThanOrEqual(4);
    const read = await client.batches.retrieve(batch.id);
    expect(read.status).toBe("expired");
    expect(read.request_counts).toEqual({ total: 8, completed: succeeded, failed: 0 });
  });

  it("lists batches newest first with cursor pagination", async () => {
    const all: string[] = [];
    for await (const b of client.batches.list({ limit: 2 })) all.push(b.id);
    expect(all.length).toBe(5);
    const first = await client.batches.list({ limit: 2 });
    expect(first.has_more).toBe(true);
    expect(first.data.map((b) => b.id)).toEqual(all.slice(0, 2));
    const rows = await tdb.sql<{ id: string }[]>`select id from compat_batches where api = 'openai' order by created_at desc, id desc`;
    expect(all).toEqual(rows.map((r) => `batch_${r.id.replace(/-/g, "")}`));

    const files: string[] = [];
    for await (const f of client.files.list({ limit: 2 })) files.push(f.id);
    expect(files.length).toBe(5);
  });

  it("scopes every object to its owner and refuses a missing or wrong key", async () => {
    const [mine] = (await client.batches.list({ limit: 1 })).data;
    const [myFile] = (await client.files.list({ limit: 1 })).data;
    const other = clientFor(bob);
    await expect(other.batches.retrieve(mine!.id)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    await expect(other.batches.cancel(mine!.id)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    await expect(other.files.retrieve(myFile!.id)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    await expect(other.files.content(myFile!.id)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    await expect(other.files.delete(myFile!.id)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    expect(mine!.error_file_id).toBeTruthy();
    await expect(other.files.retrieve(mine!.error_file_id!)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    await expect(other.files.content(mine!.error_file_id!)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    await expect(
      other.batches.create({ input_file_id: myFile!.id, endpoint: "/v1/chat/completions", completion_window: "24h" }),
    ).rejects.toBeInstanceOf(OpenAI.BadRequestError);
    expect((await other.batches.list()).data).toEqual([]);

    const anonymous = new OpenAI({ baseURL: `${server.origin}/v1`, apiKey: "flt_not-a-real-token", maxRetries: 0 });
    const err = await anonymous.batches.list().catch((e) => e);
    expect(err).toBeInstanceOf(OpenAI.AuthenticationError);
    expect(err.error).toMatchObject({ type: "invalid_request_error", code: "invalid_api_key" });
  });

  it("refuses files over compat.max_file_bytes or compat.max_requests_per_file, storing nothing", async () => {
    const [before] = await tdb.sql<{ files: number; chunks: number }[]>`
      select (select count(*)::int from compat_files) as files, (select count(*)::int from compat_file_chunks) as chunks`;
    const tooMany = await upload(client, jsonl(Array.from({ length: 21 }, (_, i) => chatLine(`r${i}`, "x")))).catch((e) => e);
    expect(tooMany).toBeInstanceOf(OpenAI.BadRequestError);
    expect(tooMany.error).toMatchObject({ param: "file" });
    expect(tooMany.error.message).toContain("compat.max_requests_per_file");
    const tooBig = await upload(client, `${chatLine("big", "y".repeat(70 * 1024))}\n`).catch((e) => e);
    expect(tooBig).toBeInstanceOf(OpenAI.APIError);
    expect(tooBig.status).toBe(413);
    const [after] = await tdb.sql<{ files: number; chunks: number }[]>`
      select (select count(*)::int from compat_files) as files, (select count(*)::int from compat_file_chunks) as chunks`;
    expect(after).toEqual(before);
  });

  it("rolls back an upload whose client goes away mid-file, leaving no open transaction", async () => {
    const [before] = await tdb.sql<{ n: number }[]>`select count(*)::int as n from compat_files`;
    const url = new URL(server.origin);
    const socket = connect(Number(url.port), url.hostname);
    await new Promise<void>((resolve) => socket.once("connect", () => resolve()));
    const boundary = "----compat-abort";
    const head =
      `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="gone.jsonl"\r\n` +
      "Content-Type: application/jsonl\r\n\r\n";
    socket.write(
      `POST /v1/files HTTP/1.1\r\nHost: ${url.host}\r\nAuthorization: Bearer ${alice.token}\r\n` +
        `Content-Type: multipart/form-data; boundary=${boundary}\r\nContent-Length: 1000000\r\n\r\n${head}`,
    );
    socket.write(`${chatLine("partial", "the rest never comes")}\n`);
    await new Promise((r) => setTimeout(r, 300));
    socket.destroy();
    await until(
      () => tdb.sql<{ n: number }[]>`
        select count(*)::int as n from pg_stat_activity where datname = current_database() and state like 'idle in transaction%'`,
      (rows) => rows[0]!.n === 0,
      10_000,
    );
    const [after] = await tdb.sql<{ n: number }[]>`select count(*)::int as n from compat_files`;
    expect(after!.n).toBe(before!.n);
    expect((await upload(client, jsonl([chatLine("next", "still works")]))).object).toBe("file");
  });

  it("refuses a bad upload and deletes files", async () => {
    const wrongPurpose = await client.files
      .create({ file: await toFile(Buffer.from(chatLine("x", "y")), "x.jsonl"), purpose: "assistants" })
      .catch((e) => e);
    expect(wrongPurpose).toBeInstanceOf(OpenAI.BadRequestError);
    expect(wrongPurpose.error).toMatchObject({ param: "purpose" });
    const file = await upload(client, jsonl([chatLine("x", "y")]));
    expect(await client.files.delete(file.id)).toEqual({ id: file.id, object: "file", deleted: true });
    await expect(client.files.retrieve(file.id)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
  });
});

// Last: the listing test above counts this suite's batches and files.
describe("response_format through the official SDK", () => {
  it("answers response_format json_object and json_schema with content valid against it, one repair turn included", async () => {
    const label = {
      type: "object",
      properties: { label: { enum: ["spam", "ham"] }, reason: { type: "string", minLength: 1 } },
      required: ["label", "reason"],
      additionalProperties: false,
    };
    const jsonSchema = (schema: object) => ({ type: "json_schema", json_schema: { name: "label", schema, strict: true } });
    const input = jsonl([
      chatLine("obj", "Describe the sea as JSON", { response_format: { type: "json_object" } }),
      chatLine("schema", "Is 'WIN A FREE CRUISE' spam?", { response_format: jsonSchema(label) }),
      chatLine("text", "Plain text please", { response_format: { type: "text" } }),
      // Invalid at first: the repair turn quoting the errors gets a valid answer.
      chatLine("repaired", 'Is this spam? [[json-once:{"label":"eggs"}]]', { response_format: jsonSchema(label) }),
      // Invalid every time: the request fails with the validator's errors.
      chatLine("invalid", 'Is this spam? [[json:{"label":"eggs"}]]', { response_format: jsonSchema(label) }),
      chatLine("not-object", "A number please [[json:42]]", { response_format: { type: "json_object" } }),
      chatLine("agent", "Summarize: the sea is wide.", { model: "flotilla:summarizer", response_format: jsonSchema(label) }),
    ]);
    const file = await upload(client, input, "typed.jsonl");
    const created = await client.batches.create({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" });
    const done = await until(
      () => client.batches.retrieve(created.id),
      (b) => b.status === "completed",
      60_000,
    );
    expect(done.request_counts).toEqual({ total: 7, completed: 5, failed: 2 });
    const output = parseLines(await text(await client.files.content(done.output_file_id!)));
    const content = Object.fromEntries(output.map((l) => [l.custom_id, l.response.body.choices[0].message.content as string]));
    expect(Object.keys(content)).toEqual(["obj", "schema", "text", "repaired", "agent"]);
    const ajv = new Ajv({ allErrors: true });
    const validLabel = ajv.compile(label);
    const isObject = ajv.compile({ type: "object" });
    for (const key of ["schema", "repaired", "agent"]) {
      const value = JSON.parse(content[key]!);
      expect(validLabel(value), `${key}: ${content[key]} ${ajv.errorsText(validLabel.errors)}`).toBe(true);
    }
    expect(isObject(JSON.parse(content.obj!))).toBe(true);
    expect(() => JSON.parse(content.text!)).toThrow(); // no format: the usual prose
    // The repair turn's call counts too: two calls' tokens.
    const usage = (key: string) => output.find((l) => l.custom_id === key).response.body.usage.completion_tokens as number;
    expect(usage("repaired")).toBeGreaterThan(usage("schema"));

    const errors = parseLines(await text(await client.files.content(done.error_file_id!)));
    expect(errors.map((e) => e.custom_id)).toEqual(["invalid", "not-object"]);
    expect(errors[0].response.body.error.message).toBe(
      'invalid_output: / must have required property \'reason\'; /label must be equal to one of the allowed values: "spam", "ham"',
    );
    expect(errors[1].response.body.error.message).toBe("invalid_output: / must be object");
  }, 90_000);

  it("refuses a malformed response_format naming the line and the field, and runs nothing", async () => {
    const line = (id: string, response_format: unknown) => chatLine(id, "x", { response_format });
    const file = await upload(
      client,
      jsonl([
        line("ok", { type: "json_schema", json_schema: { name: "fine", schema: { type: "object" } } }),
        line("kind", { type: "xml" }),
        line("missing", { type: "json_schema" }),
        line("name", { type: "json_schema", json_schema: { name: "no spaces allowed", schema: { type: "object" } } }),
        line("compile", { type: "json_schema", json_schema: { name: "bad", schema: { type: "nonsense" } } }),
        line("huge", { type: "json_schema", json_schema: { name: "huge", schema: { description: "x".repeat(17_000) } } }),
        line("array", { type: "json_schema", json_schema: { name: "arr", schema: [] } }),
      ]),
    );
    const batch = await client.batches.create({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" });
    expect(batch.status).toBe("failed");
    const data = batch.errors?.data ?? [];
    expect(data.map((e) => [e.line, e.code, e.param])).toEqual([
      [2, "invalid_body", "body.response_format.type"],
      [3, "invalid_body", "body.response_format.json_schema"],
      [4, "invalid_body", "body.response_format.json_schema.name"],
      [5, "invalid_body", "body.response_format.json_schema.schema"],
      [6, "invalid_body", "body.response_format.json_schema.schema"],
      [7, "invalid_body", "body.response_format.json_schema.schema"],
    ]);
    expect(data[3]!.message).toMatch(/^Line 5: body\.response_format\.json_schema\.schema: .*type/);
    expect(data[4]!.message).toContain("at most 16384 bytes");
  });
});
