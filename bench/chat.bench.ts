import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { startFakeOpenAI } from "../test/helpers/fake-openai";
import { benchServer, freshDatabase } from "./batch.bench";
import { newThread, type Product, startProduct } from "./e2e.bench";
import { traceSink, tracingRows } from "./tracing";
import type { BenchRow } from "./types";
import { benchEnv } from "./web";

/**
 * Chat latency: time to the first text token of a chat turn POSTed over HTTP to `npm start`
 * (scripts/web.ts: the front door and Next; bearer token, a new thread per turn, the UI message
 * stream read as it arrives) vs the same model called directly with streamText in a child process
 * of the same environment (bench/chat-probe.ts), ROUNDS each (CHAT_BENCH_ROUNDS, 40): the
 * built-in simulator (latency 0), and a real OpenAI-compatible stream from a local fake server
 * (test/helpers/fake-openai.ts). Target (issue 22): median overhead <= 15 ms, expressed as
 * gateway median / (direct median + 15 ms) <= 1. Needs `npx next build`.
 * BENCH_TRACING=1 adds both rows again with tracing on: the web and worker export every span to a
 * local OTLP receiver (bench/tracing.ts); the rows above run with tracing off, as by default.
 */

export const name = "chat";

const run_ = promisify(execFile);
/** The first-token overhead the chat route may add to the model's own (issue 22). */
const OVERHEAD_MS = 15;
const ROUNDS = Number(process.env.CHAT_BENCH_ROUNDS ?? 40);
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

/** The probe's JSON line, wherever it is among its output (a log line may come before or after). */
function jsonLine<T>(stdout: string, key: string): T {
  for (const line of stdout.split("\n").reverse()) {
    if (!line.startsWith("{")) continue;
    try {
      const value = JSON.parse(line) as Record<string, unknown>;
      if (key in value) return value as T;
    } catch {
      // a log line that happens to start with "{"
    }
  }
  throw new Error(`chat probe: no JSON line with "${key}" in its output: ${stdout.slice(-500)}`);
}

async function gatewayFirstToken(p: Product): Promise<number> {
  const threadId = await newThread(p);
  const t0 = performance.now();
  const res = await fetch(`${p.base}/api/threads/${threadId}/chat`, {
    method: "POST",
    headers: { authorization: `Bearer ${p.token}`, "content-type": "application/json" },
    body: JSON.stringify({ message: { id: `m${Math.random().toString(36).slice(2)}`, role: "user", parts: [{ type: "text", text: "Say hello in one short sentence." }] } }),
  });
  if (res.status !== 200) throw new Error(`chat: HTTP ${res.status} ${await res.text()}`);
  const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
  let first = Number.NaN;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    if (Number.isNaN(first) && value.includes('"type":"text-delta"')) first = performance.now() - t0;
  }
  if (Number.isNaN(first)) throw new Error("chat: no text-delta in the stream");
  return first;
}

export async function probe(adminUrl: string, env: Record<string, string>, label: string, rounds = ROUNDS): Promise<BenchRow> {
  const bdb = await freshDatabase(adminUrl);
  let product: Product | undefined;
  try {
    product = await startProduct(bdb.url, 1, 8, env);
    await gatewayFirstToken(product); // warm-up: route compilation caches, prepared statements
    const gateway: number[] = [];
    for (let i = 0; i < rounds; i++) gateway.push(await gatewayFirstToken(product));
    const { stdout } = await run_(process.execPath, ["--import", "tsx", "bench/chat-probe.ts"], {
      env: benchEnv({ ...env, CHAT_BENCH_ROUNDS: String(rounds) }),
      maxBuffer: 1 << 20,
    });
    const { direct } = jsonLine<{ direct: number[] }>(stdout, "direct");
    const g = median(gateway);
    const d = median(direct);
    return {
      metric: `chat TTFT, ${label}: median ms over HTTP through npm start vs direct streamText + ${OVERHEAD_MS} ms (overhead ${(g - d).toFixed(1)} ms, direct ${d.toFixed(1)} ms)`,
      ours: g,
      baseline: d + OVERHEAD_MS,
      ratio: g / (d + OVERHEAD_MS),
      target: 1,
    };
  } finally {
    await product?.stop();
    await bdb.close();
  }
}

export async function run(): Promise<BenchRow[]> {
  const server = await benchServer();
  const fake = await startFakeOpenAI({ handler: () => ({ type: "text", text: "Hello there, nice to meet you.", chunkDelayMs: 0 }) });
  const rows: BenchRow[] = [];
  try {
    rows.push(await probe(server.adminUrl, { FLOTILLA__SIMULATOR__LATENCY_MS: "0" }, "simulator"));
    rows.push(await probe(server.adminUrl, { MODEL_BASE_URL: fake.url, MODEL_API_KEY: "bench-key", MODEL_NAME: "bench-model" }, "OpenAI-compatible fake server"));
    if (tracingRows()) {
      const models = [
        ["simulator", { FLOTILLA__SIMULATOR__LATENCY_MS: "0" }],
        ["OpenAI-compatible fake server", { MODEL_BASE_URL: fake.url, MODEL_API_KEY: "bench-key", MODEL_NAME: "bench-model" }],
      ] as const;
      for (const [label, env] of models) {
        const sink = await traceSink();
        try {
          const row = await probe(server.adminUrl, { ...env, ...sink.env }, `${label}, tracing on`);
          // The product has stopped (and flushed its spans): none received means tracing was off.
          if (sink.spans() === 0) throw new Error("chat bench: tracing on, but no span reached the receiver");
          rows.push({ ...row, metric: `${row.metric}; ${sink.spans()} spans exported` });
        } finally {
          await sink.close();
        }
      }
    }
  } finally {
    await fake.close();
    await server.stop();
  }
  return rows;
}
