import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { promisify } from "node:util";
import { startFakeOpenAI } from "../test/helpers/fake-openai";
import { benchServer, freshDatabase } from "./batch.bench";
import type { BenchRow } from "./types";

/**
 * Chat latency: time to the first text token of a chat turn through the gateway (the chat route:
 * authentication, thread and message writes, lead agent setup, the UI message stream) vs the
 * same model called directly in process with streamText, in a child process per model
 * (bench/chat-probe.ts): the built-in simulator (latency 0), and a real OpenAI-compatible stream
 * from a local fake server (test/helpers/fake-openai.ts). Target (issue 22): median overhead
 * <= 15 ms, expressed as gateway median / (direct median + 15 ms) <= 1.
 */

export const name = "chat";

const run_ = promisify(execFile);
/** The first-token overhead the chat route may add to the model's own (issue 22). */
const OVERHEAD_MS = 15;
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

async function probe(databaseUrl: string, env: Record<string, string>, label: string): Promise<BenchRow> {
  const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("FLOTILLA__") && !k.startsWith("MODEL_")));
  const { stdout } = await run_(process.execPath, ["--conditions=react-server", "--import", "tsx", "bench/chat-probe.ts"], {
    env: { ...base, NODE_ENV: "production", DATABASE_URL: databaseUrl, NEXTAUTH_SECRET: randomBytes(24).toString("base64url"), LOG_LEVEL: "warn", ...env },
    maxBuffer: 1 << 20,
  });
  const { gateway, direct } = JSON.parse(stdout.trim().split("\n").at(-1)!) as { gateway: number[]; direct: number[] };
  const g = median(gateway);
  const d = median(direct);
  return {
    metric: `chat TTFT, ${label}: median ms through the chat route vs direct streamText in process + ${OVERHEAD_MS} ms (overhead ${(g - d).toFixed(1)} ms, direct ${d.toFixed(1)} ms)`,
    ours: g,
    baseline: d + OVERHEAD_MS,
    ratio: g / (d + OVERHEAD_MS),
    target: 1,
  };
}

export async function run(): Promise<BenchRow[]> {
  const server = await benchServer();
  const fake = await startFakeOpenAI({ handler: () => ({ type: "text", text: "Hello there, nice to meet you.", chunkDelayMs: 0 }) });
  const rows: BenchRow[] = [];
  try {
    for (const [label, env] of [
      ["simulator", { FLOTILLA__SIMULATOR__LATENCY_MS: "0" }],
      ["OpenAI-compatible fake server", { MODEL_BASE_URL: fake.url, MODEL_API_KEY: "bench-key", MODEL_NAME: "bench-model" }],
    ] as const) {
      const bdb = await freshDatabase(server.adminUrl);
      try {
        rows.push(await probe(bdb.url, env, label));
      } finally {
        await bdb.close();
      }
    }
  } finally {
    await fake.close();
    await server.stop();
  }
  return rows;
}
