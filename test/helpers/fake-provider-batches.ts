import { randomUUID } from "node:crypto";
import type { ServerResponse } from "node:http";
import type { FakeAnthropic, MessagesBody } from "./fake-anthropic";
import type { ChatRequestBody, FakeOpenAI } from "./fake-openai";
import { type RecordedRequest, sendJson } from "./fake-provider";

/**
 * The providers' batch endpoints on the fake servers (fake-openai.ts, fake-anthropic.ts):
 * OpenAI's files + batches (POST /v1/files, POST /v1/batches, GET /v1/batches/{id},
 * POST /v1/batches/{id}/cancel, GET /v1/files/{id}/content) and Anthropic's message batches
 * (POST /v1/messages/batches, GET .../{id}, POST .../{id}/cancel, GET .../{id}/results as JSONL).
 * Each request of a batch is answered by the fake's own `complete` (same handler, same usage and
 * cache). Controls a test sets or calls: finish after N polls, hold until `finishNow`, `expireNow`,
 * requests answered with an error, and requests done per poll (so a cancel can find some done);
 * and a hostile provider's: results files rewritten (lines that do not parse, huge ones, hundreds
 * of megabytes), sent slowly, request counts out of range, a cancel that fails, error text of its
 * choosing.
 */

export interface BatchControls {
  /** Polls (retrieves) before a batch ends; 0: the first retrieve ends it. */
  finishAfterPolls: number;
  /** Hold every batch in progress until finishNow / expireNow. */
  hold: boolean;
  /** Requests done per poll while in progress (default: all at the ending poll). */
  perPoll: number;
  /** A request answered with a provider error. */
  errorIf: (customId: string) => boolean;
  /** Each retrieve answers after this long (a poller is caught mid-poll). */
  pollDelayMs: number;
  /** What the results file holds (Anthropic's results, OpenAI's output file), from its honest lines; streamed. */
  resultLines: (lines: string[], b: FakeBatch) => Iterable<string>;
  /** A pause before each line of a results file. */
  lineDelayMs: number;
  /** The request counts a retrieve reports, from the honest ones. */
  requestCounts: (counts: Record<string, unknown>) => Record<string, unknown>;
  /** The cancel call answers 500 (and cancels nothing). */
  cancelFails: boolean;
  /** The error message of a request errorIf fails. */
  errorMessage: (customId: string) => string;
}

type Outcome = { kind: "succeeded"; body: unknown } | { kind: "errored"; status: number; message: string } | { kind: "expired" } | { kind: "cancelled" };

export interface FakeBatch {
  id: string;
  requests: { customId: string; body: Record<string, unknown> }[];
  outcomes: Map<string, Outcome>;
  polls: number;
  state: "in_progress" | "canceling" | "ended";
  /** How it ended. */
  end?: "completed" | "expired" | "cancelled";
  createdAt: number;
}

export interface FakeBatches {
  controls: BatchControls;
  batches: Map<string, FakeBatch>;
  /** Every retrieve, by batch id. */
  polls: string[];
  /** Cancel calls, by batch id. */
  cancels: string[];
  /** The most retrieves of one batch ever in flight at once. */
  maxConcurrentPolls: number;
  /** Ends every batch (or one) at its next retrieve: its remaining requests answered. */
  finishNow(id?: string): void;
  /** Ends every batch (or one) now: what is not done yet expires. */
  expireNow(id?: string): void;
}

export const HONEST: Omit<BatchControls, "finishAfterPolls" | "hold" | "perPoll" | "errorIf" | "pollDelayMs"> = {
  resultLines: (lines) => lines,
  lineDelayMs: 0,
  requestCounts: (counts) => counts,
  cancelFails: false,
  errorMessage: () => "the fake failed this request",
};

function newControls(over: Partial<BatchControls>): BatchControls {
  return { finishAfterPolls: 0, hold: false, perPoll: Number.POSITIVE_INFINITY, errorIf: () => false, pollDelayMs: 0, ...HONEST, ...over };
}

/** Writes `lines` as a streamed body (each `\n`-terminated), waiting for the client to drain it and `delayMs` before each line. */
async function streamLines(res: ServerResponse, lines: Iterable<string>, delayMs: number, contentType: string): Promise<void> {
  res.writeHead(200, { "content-type": contentType });
  for (const line of lines) {
    if (res.destroyed) return;
    if (delayMs > 0) await new Promise((r) => setTimeout(r, delayMs));
    if (!res.write(`${line}\n`)) await new Promise<void>((resolve) => {
      res.once("drain", resolve);
      res.once("close", resolve);
    });
  }
  res.end();
}

/** The shared machinery: requests done per poll, the end, cancel and expiry. */
function batchBook(complete: (body: Record<string, unknown>) => Promise<{ status: number; body: unknown }>, over: Partial<BatchControls>) {
  const controls = newControls(over);
  const batches = new Map<string, FakeBatch>();
  const finishing = new Set<string>();
  const inFlight = new Map<string, number>();
  const book = {
    maxConcurrentPolls: 0,
    controls,
    batches,
    polls: [] as string[],
    cancels: [] as string[],
    finishNow(id?: string) {
      for (const b of batches.values()) if (!id || b.id === id) finishing.add(b.id);
    },
    expireNow(id?: string) {
      for (const b of batches.values()) {
        if ((id && b.id !== id) || b.state === "ended") continue;
        for (const r of b.requests) if (!b.outcomes.has(r.customId)) b.outcomes.set(r.customId, { kind: "expired" });
        b.state = "ended";
        b.end = "expired";
      }
    },
    async answer(b: FakeBatch, n: number) {
      for (const r of b.requests) {
        if (n <= 0) break;
        if (b.outcomes.has(r.customId)) continue;
        n--;
        if (controls.errorIf(r.customId)) {
          b.outcomes.set(r.customId, { kind: "errored", status: 500, message: controls.errorMessage(r.customId) });
          continue;
        }
        const a = await complete(r.body);
        b.outcomes.set(r.customId, a.status === 200 ? { kind: "succeeded", body: a.body } : { kind: "errored", status: a.status, message: JSON.stringify(a.body) });
      }
    },
    /** One retrieve: progress, maybe the end. */
    async poll(b: FakeBatch) {
      book.polls.push(b.id);
      const n = (inFlight.get(b.id) ?? 0) + 1;
      inFlight.set(b.id, n);
      book.maxConcurrentPolls = Math.max(book.maxConcurrentPolls, n);
      try {
        if (controls.pollDelayMs > 0) await new Promise((r) => setTimeout(r, controls.pollDelayMs));
        await book.progress(b);
      } finally {
        inFlight.set(b.id, (inFlight.get(b.id) ?? 1) - 1);
      }
    },
    async progress(b: FakeBatch) {
      if (b.state === "ended") return;
      b.polls++;
      if (b.state === "canceling") {
        for (const r of b.requests) if (!b.outcomes.has(r.customId)) b.outcomes.set(r.customId, { kind: "cancelled" });
        b.state = "ended";
        b.end = "cancelled";
        return;
      }
      const ending = finishing.has(b.id) || (!controls.hold && b.polls > controls.finishAfterPolls);
      await book.answer(b, ending ? Number.POSITIVE_INFINITY : Number.isFinite(controls.perPoll) ? controls.perPoll : 0);
      if (ending) {
        b.state = "ended";
        b.end = "completed";
      }
    },
    cancel(b: FakeBatch) {
      book.cancels.push(b.id);
      if (b.state === "in_progress") b.state = "canceling";
    },
    create(requests: FakeBatch["requests"], prefix: string): FakeBatch {
      const b: FakeBatch = { id: `${prefix}${randomUUID().replaceAll("-", "")}`, requests, outcomes: new Map(), polls: 0, state: "in_progress", createdAt: Date.now() };
      batches.set(b.id, b);
      return b;
    },
  };
  return book;
}

type Book = ReturnType<typeof batchBook>;

function counts(b: FakeBatch) {
  const c = { processing: 0, succeeded: 0, errored: 0, canceled: 0, expired: 0 };
  for (const r of b.requests) {
    const o = b.outcomes.get(r.customId);
    if (!o) c.processing++;
    else if (o.kind === "succeeded") c.succeeded++;
    else if (o.kind === "errored") c.errored++;
    else if (o.kind === "cancelled") c.canceled++;
    else c.expired++;
  }
  return c;
}

const iso = (ms: number) => new Date(ms).toISOString();

/** Anthropic Message Batches on a fake Anthropic server. */
export function addAnthropicBatches(fake: FakeAnthropic, over: Partial<BatchControls> = {}): FakeBatches {
  const book = batchBook((body) => fake.complete(body as MessagesBody), over);
  const view = (b: FakeBatch) => ({
    id: b.id,
    type: "message_batch",
    processing_status: b.state,
    request_counts: book.controls.requestCounts(counts(b)),
    created_at: iso(b.createdAt),
    expires_at: iso(b.createdAt + 86_400_000),
    ended_at: b.state === "ended" ? iso(Date.now()) : null,
    cancel_initiated_at: b.state === "canceling" || b.end === "cancelled" ? iso(Date.now()) : null,
    archived_at: null,
    results_url: b.state === "ended" ? `${fake.server.origin}/v1/messages/batches/${b.id}/results` : null,
  });
  const find = (res: ServerResponse, id: string | undefined) => {
    const b = id ? book.batches.get(id) : undefined;
    if (!b) sendJson(res, 404, { type: "error", error: { type: "not_found_error", message: "batch not found" } });
    return b;
  };
  fake.server.route({
    method: "POST",
    path: /^\/v1\/messages\/batches$/,
    handle(req, res) {
      const requests = (req.body as { requests?: { custom_id?: string; params?: Record<string, unknown> }[] } | undefined)?.requests;
      if (!Array.isArray(requests) || requests.length === 0)
        return sendJson(res, 400, { type: "error", error: { type: "invalid_request_error", message: "requests: Field required" } });
      const b = book.create(requests.map((r) => ({ customId: String(r.custom_id), body: r.params ?? {} })), "msgbatch_");
      sendJson(res, 200, view(b));
    },
  });
  fake.server.route({
    method: "GET",
    path: /^\/v1\/messages\/batches\/([^/]+)$/,
    async handle(_req, res, ctx) {
      const b = find(res, ctx.match[1]);
      if (!b) return;
      await book.poll(b);
      sendJson(res, 200, view(b));
    },
  });
  fake.server.route({
    method: "POST",
    path: /^\/v1\/messages\/batches\/([^/]+)\/cancel$/,
    handle(_req, res, ctx) {
      const b = find(res, ctx.match[1]);
      if (!b) return;
      if (book.controls.cancelFails) return sendJson(res, 500, { type: "error", error: { type: "api_error", message: "the fake could not cancel" } });
      book.cancel(b);
      sendJson(res, 200, view(b));
    },
  });
  fake.server.route({
    method: "GET",
    path: /^\/v1\/messages\/batches\/([^/]+)\/results$/,
    async handle(_req, res, ctx) {
      const b = find(res, ctx.match[1]);
      if (!b) return;
      const lines = b.requests.map((r) => {
        const o = b.outcomes.get(r.customId) ?? { kind: "expired" };
        const result =
          o.kind === "succeeded"
            ? { type: "succeeded", message: o.body }
            : o.kind === "errored"
              ? { type: "errored", error: { type: "error", error: { type: "api_error", message: o.message } } }
              : { type: o.kind === "cancelled" ? "canceled" : "expired" };
        return JSON.stringify({ custom_id: r.customId, result });
      });
      await streamLines(res, book.controls.resultLines(lines, b), book.controls.lineDelayMs, "application/binary");
    },
  });
  return book;
}

/** The file part of a multipart/form-data body, and its other fields. */
function multipart(req: RecordedRequest): { file?: string; fields: Record<string, string> } {
  const type = String(req.headers["content-type"] ?? "");
  const boundary = /boundary=(?:"([^"]+)"|([^;]+))/.exec(type);
  const out: { file?: string; fields: Record<string, string> } = { fields: {} };
  if (!boundary) return out;
  for (const part of req.rawBody.split(`--${boundary[1] ?? boundary[2]}`)) {
    const at = part.indexOf("\r\n\r\n");
    if (at < 0) continue;
    const head = part.slice(0, at);
    const value = part.slice(at + 4).replace(/\r\n$/, "");
    const name = /name="([^"]+)"/.exec(head)?.[1];
    if (!name) continue;
    if (/filename=/.test(head)) out.file = value;
    else out.fields[name] = value;
  }
  return out;
}

/** OpenAI files + batches on a fake OpenAI server. */
export function addOpenAIBatches(fake: FakeOpenAI, over: Partial<BatchControls> = {}): FakeBatches & { files: Map<string, string> } {
  const book: Book = batchBook((body) => fake.complete(body as ChatRequestBody), over);
  const files = new Map<string, string>();
  /** Output files, served through the results controls. */
  const outputs = new Map<string, { lines: string[]; batch: FakeBatch }>();
  const meta = new Map<string, { input_file_id: string; output_file_id?: string; error_file_id?: string; metadata: unknown }>();
  const status = (b: FakeBatch) => (b.state === "canceling" ? "cancelling" : b.state === "in_progress" ? "in_progress" : (b.end ?? "completed"));
  const writeFiles = (b: FakeBatch) => {
    const m = meta.get(b.id)!;
    if (b.state !== "ended" || m.output_file_id !== undefined) return;
    const out: string[] = [];
    const err: string[] = [];
    for (const r of b.requests) {
      const o = b.outcomes.get(r.customId) ?? { kind: "expired" };
      const id = `batch_req_${randomUUID().replaceAll("-", "")}`;
      if (o.kind === "succeeded") out.push(JSON.stringify({ id, custom_id: r.customId, response: { status_code: 200, request_id: id, body: o.body }, error: null }));
      else if (o.kind === "errored")
        err.push(JSON.stringify({ id, custom_id: r.customId, response: { status_code: o.status, request_id: id, body: { error: { message: o.message, type: "server_error" } } }, error: null }));
      else
        err.push(JSON.stringify({ id, custom_id: r.customId, response: null, error: { code: o.kind === "expired" ? "batch_expired" : "batch_cancelled", message: `This request ${o.kind === "expired" ? "expired" : "was cancelled"} before it ran.` } }));
    }
    const save = (lines: string[]) => {
      if (lines.length === 0) return undefined;
      const id = `file-${randomUUID().replaceAll("-", "")}`;
      files.set(id, `${lines.join("\n")}\n`);
      return id;
    };
    const output = `file-${randomUUID().replaceAll("-", "")}`;
    outputs.set(output, { lines: out, batch: b });
    m.output_file_id = output;
    m.error_file_id = save(err);
  };
  const view = (b: FakeBatch) => {
    writeFiles(b);
    const m = meta.get(b.id)!;
    const c = counts(b);
    return {
      id: b.id,
      object: "batch",
      endpoint: "/v1/chat/completions",
      errors: null,
      input_file_id: m.input_file_id,
      completion_window: "24h",
      status: status(b),
      output_file_id: m.output_file_id || null,
      error_file_id: m.error_file_id ?? null,
      created_at: Math.floor(b.createdAt / 1000),
      in_progress_at: Math.floor(b.createdAt / 1000),
      expires_at: Math.floor(b.createdAt / 1000) + 86_400,
      request_counts: book.controls.requestCounts({ total: b.requests.length, completed: c.succeeded, failed: c.errored }),
      metadata: m.metadata ?? null,
    };
  };
  const notFound = (res: ServerResponse) => sendJson(res, 404, { error: { message: "No such object", type: "invalid_request_error" } });
  fake.server.route({
    method: "POST",
    path: /^\/v1\/files$/,
    handle(req, res) {
      const form = multipart(req);
      if (form.file === undefined || form.fields.purpose !== "batch")
        return sendJson(res, 400, { error: { message: "file and purpose=batch are required", type: "invalid_request_error" } });
      const id = `file-${randomUUID().replaceAll("-", "")}`;
      files.set(id, form.file);
      sendJson(res, 200, { id, object: "file", bytes: Buffer.byteLength(form.file), created_at: Math.floor(Date.now() / 1000), filename: "batch.jsonl", purpose: "batch", status: "processed" });
    },
  });
  fake.server.route({
    method: "POST",
    path: /^\/v1\/batches$/,
    handle(req, res) {
      const body = req.body as { input_file_id?: string; endpoint?: string; completion_window?: string; metadata?: unknown } | undefined;
      const input = body?.input_file_id ? files.get(body.input_file_id) : undefined;
      if (!input || body?.endpoint !== "/v1/chat/completions" || body.completion_window !== "24h")
        return sendJson(res, 400, { error: { message: "input_file_id, endpoint /v1/chat/completions and completion_window 24h are required", type: "invalid_request_error" } });
      const requests = input
        .split("\n")
        .filter((l) => l.trim())
        .map((l) => JSON.parse(l) as { custom_id: string; body: Record<string, unknown> })
        .map((l) => ({ customId: l.custom_id, body: l.body }));
      const b = book.create(requests, "batch_");
      meta.set(b.id, { input_file_id: body.input_file_id!, metadata: body.metadata });
      sendJson(res, 200, view(b));
    },
  });
  fake.server.route({
    method: "GET",
    path: /^\/v1\/batches\/([^/]+)$/,
    async handle(_req, res, ctx) {
      const b = book.batches.get(ctx.match[1]!);
      if (!b) return notFound(res);
      await book.poll(b);
      sendJson(res, 200, view(b));
    },
  });
  fake.server.route({
    method: "POST",
    path: /^\/v1\/batches\/([^/]+)\/cancel$/,
    handle(_req, res, ctx) {
      const b = book.batches.get(ctx.match[1]!);
      if (!b) return notFound(res);
      if (book.controls.cancelFails) return sendJson(res, 500, { error: { message: "the fake could not cancel", type: "server_error" } });
      book.cancel(b);
      sendJson(res, 200, view(b));
    },
  });
  fake.server.route({
    method: "GET",
    path: /^\/v1\/files\/([^/]+)\/content$/,
    async handle(_req, res, ctx) {
      const output = outputs.get(ctx.match[1]!);
      if (output) return streamLines(res, book.controls.resultLines(output.lines, output.batch), book.controls.lineDelayMs, "application/octet-stream");
      const text = files.get(ctx.match[1]!);
      if (text === undefined) return notFound(res);
      res.writeHead(200, { "content-type": "application/octet-stream" });
      res.end(text);
    },
  });
  return Object.assign(book, { files });
}
