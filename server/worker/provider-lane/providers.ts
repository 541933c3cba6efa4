import Anthropic from "@anthropic-ai/sdk";
import OpenAI, { toFile } from "openai";
import type { BatchProvider } from "@/server/batches/provider-lane/store";
import type { CatalogEntry } from "@/server/models/catalog";
import { readLines } from "./lines";

/**
 * The providers' batch APIs through their official clients: OpenAI (a JSONL file with purpose
 * `batch`, then a batch on /v1/chat/completions with a 24 h window) and Anthropic Message Batches.
 * Each request's body is what the live call would send (requests.ts); `custom_id` is the item id.
 */

export interface BatchRequest {
  customId: string;
  /** The provider's request body, exactly as the live call sends it. */
  body: Record<string, unknown>;
}

export interface PolledBatch {
  /** The provider's own status word. */
  status: string;
  ended: boolean;
  counts: { succeeded: number; errored: number; expired: number; cancelled: number };
}

/** One request's outcome: the live response body it got, or why it has none. */
export type BatchResult =
  | { customId: string; kind: "succeeded"; body: unknown }
  | { customId: string; kind: "errored"; error: string }
  | { customId: string; kind: "expired" }
  | { customId: string; kind: "cancelled" };

/** A line of a results file: a request's outcome, or a line that could not be read (too long, not JSON, not a result). */
export type ResultLine = BatchResult | { kind: "unreadable" };

/**
 * A count a provider reported as stored: a whole number from 0 to the requests one provider batch
 * may hold, whatever it sent (1e30, negative, NaN, a string), as tokenCount keeps token counts.
 */
export function requestCount(n: unknown, max: number): number {
  if (typeof n !== "number" || !Number.isFinite(n) || n <= 0) return 0;
  return Math.min(Math.round(n), max);
}

/** A provider's status word as stored (a word, not a novel). */
const statusWord = (s: unknown) => (typeof s === "string" ? s.slice(0, 64) : "unknown");

/** Each line of a results body read as `parse` reads it; one that does not parse is `unreadable`, never an error. */
async function* resultLines(body: ReadableStream<Uint8Array> | null, parse: (line: unknown) => BatchResult | null): AsyncIterable<ResultLine> {
  if (!body) return;
  for await (const line of readLines(body as unknown as AsyncIterable<Uint8Array>)) {
    let result: BatchResult | null = null;
    try {
      result = line === null ? null : parse(JSON.parse(line));
    } catch {
      result = null;
    }
    yield result && typeof result.customId === "string" ? result : { kind: "unreadable" };
  }
}

export interface ProviderBatchApi {
  readonly provider: BatchProvider;
  /** Requests one provider batch may hold. */
  readonly maxRequests: number;
  /** Bytes of requests one provider batch may hold. */
  readonly maxBytes: number;
  /** The bytes one request adds to a batch (a JSONL line, or its share of the JSON body). */
  size(request: BatchRequest): number;
  create(requests: readonly BatchRequest[], label: string): Promise<{ externalId: string; inputFileId?: string }>;
  poll(externalId: string): Promise<PolledBatch>;
  cancel(externalId: string): Promise<void>;
  /** The results file(s), a line at a time. */
  results(externalId: string): AsyncIterable<ResultLine>;
}

const MB = 1024 * 1024;

function openaiLine(r: BatchRequest): string {
  return JSON.stringify({ custom_id: r.customId, method: "POST", url: "/v1/chat/completions", body: r.body });
}

class OpenAIBatches implements ProviderBatchApi {
  readonly provider = "openai" as const;
  readonly maxRequests = 50_000;
  readonly maxBytes = 200 * MB;
  private readonly client: OpenAI;

  constructor(entry: CatalogEntry) {
    this.client = new OpenAI({ apiKey: entry.apiKey ?? "unused", baseURL: entry.baseURL, maxRetries: 2 });
  }

  size(r: BatchRequest): number {
    return Buffer.byteLength(openaiLine(r)) + 1;
  }

  async create(requests: readonly BatchRequest[], label: string) {
    const jsonl = `${requests.map(openaiLine).join("\n")}\n`;
    const file = await this.client.files.create({ file: await toFile(Buffer.from(jsonl), `${label}.jsonl`), purpose: "batch" });
    const batch = await this.client.batches.create({
      input_file_id: file.id,
      endpoint: "/v1/chat/completions",
      completion_window: "24h",
      metadata: { flotilla_provider_batch: label },
    });
    return { externalId: batch.id, inputFileId: file.id };
  }

  async poll(externalId: string): Promise<PolledBatch> {
    const b = await this.client.batches.retrieve(externalId);
    const ended = ["completed", "expired", "cancelled", "failed"].includes(b.status);
    const count = (n: unknown) => requestCount(n, this.maxRequests);
    const total = count(b.request_counts?.total);
    const done = count(b.request_counts?.completed);
    const failed = count(b.request_counts?.failed);
    const rest = Math.max(0, total - done - failed);
    return {
      status: statusWord(b.status),
      ended,
      counts: {
        succeeded: done,
        errored: failed,
        expired: ended && b.status === "expired" ? rest : 0,
        cancelled: ended && b.status === "cancelled" ? rest : 0,
      },
    };
  }

  async cancel(externalId: string): Promise<void> {
    await this.client.batches.cancel(externalId);
  }

  async *results(externalId: string): AsyncIterable<ResultLine> {
    const b = await this.client.batches.retrieve(externalId);
    for (const fileId of [b.output_file_id, b.error_file_id]) {
      if (!fileId) continue;
      const file = await this.client.files.content(fileId);
      yield* resultLines(file.body, (line) => openaiResult(line as OpenAIResultLine, statusWord(b.status)));
    }
  }
}

interface OpenAIResultLine {
  custom_id: string;
  response?: { status_code?: number; body?: unknown } | null;
  error?: { code?: string; message?: string } | null;
}

function openaiResult(line: OpenAIResultLine, batchStatus: string): BatchResult | null {
  if (typeof line !== "object" || line === null) return null;
  const customId = line.custom_id;
  const code = line.error?.code ?? "";
  if (code === "batch_expired") return { customId, kind: "expired" };
  if (code === "batch_cancelled") return { customId, kind: "cancelled" };
  const status = line.response?.status_code ?? 0;
  if (!line.error && status >= 200 && status < 300) return { customId, kind: "succeeded", body: line.response?.body };
  // A request the batch never reached before it ended.
  if (!line.response && batchStatus === "expired") return { customId, kind: "expired" };
  const bodyError = (line.response?.body as { error?: { message?: string } } | undefined)?.error?.message;
  return { customId, kind: "errored", error: `${status || code || "error"}: ${line.error?.message ?? bodyError ?? "the request failed"}` };
}

class AnthropicBatches implements ProviderBatchApi {
  readonly provider = "anthropic" as const;
  readonly maxRequests = 100_000;
  readonly maxBytes = 256 * MB;
  private readonly client: Anthropic;

  constructor(entry: CatalogEntry) {
    // The catalog's base URL carries the version path, as the AI SDK takes it; the official client adds its own.
    const baseURL = entry.baseURL?.replace(/\/+$/, "").replace(/\/v1$/, "");
    this.client = new Anthropic({ apiKey: entry.apiKey ?? "unused", baseURL, maxRetries: 2 });
  }

  size(r: BatchRequest): number {
    return Buffer.byteLength(JSON.stringify({ custom_id: r.customId, params: r.body })) + 1;
  }

  async create(requests: readonly BatchRequest[]) {
    const batch = await this.client.messages.batches.create({
      requests: requests.map((r) => ({ custom_id: r.customId, params: r.body as unknown as Anthropic.MessageCreateParamsNonStreaming })),
    });
    return { externalId: batch.id };
  }

  async poll(externalId: string): Promise<PolledBatch> {
    const b = await this.client.messages.batches.retrieve(externalId);
    const c = b.request_counts as Partial<Record<keyof typeof b.request_counts, unknown>> | undefined;
    const count = (n: unknown) => requestCount(n, this.maxRequests);
    return {
      status: statusWord(b.processing_status),
      ended: b.processing_status === "ended",
      counts: { succeeded: count(c?.succeeded), errored: count(c?.errored), expired: count(c?.expired), cancelled: count(c?.canceled) },
    };
  }

  async cancel(externalId: string): Promise<void> {
    await this.client.messages.batches.cancel(externalId);
  }

  /**
   * The results file at the batch's results_url, read here rather than by the client's own decoder
   * (which parses every line or throws, and rescans a long line as it grows). Only on the API's own
   * origin: the key goes with the request.
   */
  async *results(externalId: string): AsyncIterable<ResultLine> {
    const b = await this.client.messages.batches.retrieve(externalId);
    const url = b.results_url ? new URL(b.results_url, this.client.baseURL) : null;
    if (!url || url.origin !== new URL(this.client.baseURL).origin)
      throw new Error(`the batch's results_url is not on the API's origin (${url?.origin ?? "none"})`);
    const response = await this.client.get(url.toString(), { headers: { Accept: "application/binary" }, __binaryResponse: true }).asResponse();
    yield* resultLines(response.body, anthropicResult);
  }
}

interface AnthropicResultLine {
  custom_id: string;
  result?: { type?: string; message?: unknown; error?: { error?: { type?: string; message?: string } } };
}

function anthropicResult(value: unknown): BatchResult | null {
  const line = value as AnthropicResultLine;
  if (typeof line !== "object" || line === null || typeof line.result !== "object" || line.result === null) return null;
  const customId = line.custom_id;
  const r = line.result;
  if (r.type === "succeeded") return { customId, kind: "succeeded", body: r.message };
  if (r.type === "expired") return { customId, kind: "expired" };
  if (r.type === "canceled") return { customId, kind: "cancelled" };
  if (r.type === "errored") return { customId, kind: "errored", error: `${r.error?.error?.type ?? "error"}: ${r.error?.error?.message ?? "the request failed"}` };
  return null;
}

/** The batch API of a catalog entry's provider (its base URL and key). */
export function batchApiFor(provider: BatchProvider, entry: CatalogEntry): ProviderBatchApi {
  return provider === "openai" ? new OpenAIBatches(entry) : new AnthropicBatches(entry);
}
