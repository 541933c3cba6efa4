import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { configSchema } from "@/lib/config";
import { buildGroupTools, ToolCallRecorder } from "@/server/tools";
import { closeMcpClients } from "@/server/tools/mcp";
import type { BenchRow } from "./types";

/**
 * One MCP tool call through the gateway's tool wrapper (registry → bounds, timeout and record →
 * the shared @ai-sdk/mcp client) against the same call with the MCP SDK's own client, same
 * server package (@modelcontextprotocol/server-filesystem over stdio), same process. Calls run
 * one after another; rounds alternate so both sides see the same machine load.
 */

export const name = "mcp";

const CALLS = 200;
const ROUNDS = 9;
const WARMUP = 20;

const dir = mkdtempSync(path.join(tmpdir(), "flotilla-bench-mcp-"));
const file = path.join(dir, "note.txt");
writeFileSync(file, "The harbour opens at six.\n".repeat(20));
const serverArgs = [path.resolve("node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"), dir];

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function timeCalls(call: () => Promise<unknown>): Promise<number> {
  const t0 = performance.now();
  for (let i = 0; i < CALLS; i++) await call();
  return ((performance.now() - t0) * 1000) / CALLS; // µs per call
}

export async function run(): Promise<BenchRow[]> {
  const config = configSchema.parse({ mcp: { servers: { fs: { command: process.execPath, args: serverArgs } } } });
  const ctx = { db: undefined as never, config, userId: "bench", threadId: null, runId: "bench", signal: new AbortController().signal };
  const recorder = new ToolCallRecorder();
  const tools = await buildGroupTools(["mcp:fs"], ctx, recorder);
  const gateway = tools.fs__read_text_file.execute;
  if (!gateway) throw new Error("fs__read_text_file has no execute");
  const options = { toolCallId: "bench", messages: [] };
  const viaGateway = () => gateway({ path: file }, options);

  const client = new Client({ name: "bench", version: "1.0.0" });
  await client.connect(new StdioClientTransport({ command: process.execPath, args: serverArgs, stderr: "ignore" }));
  const direct = () => client.callTool({ name: "read_text_file", arguments: { path: file } });

  for (let i = 0; i < WARMUP; i++) {
    await viaGateway();
    await direct();
  }
  const ours: number[] = [];
  const base: number[] = [];
  for (let r = 0; r < ROUNDS; r++) {
    if (r % 2 === 0) {
      ours.push(await timeCalls(viaGateway));
      base.push(await timeCalls(direct));
    } else {
      base.push(await timeCalls(direct));
      ours.push(await timeCalls(viaGateway));
    }
    recorder.calls.length = 0; // the recorder belongs to one run; a bench "run" must not grow forever
  }
  await client.close();
  await closeMcpClients();
  const o = median(ours);
  const b = median(base);
  return [{ metric: "read_text_file call (µs, median of rounds)", ours: o, baseline: b, ratio: o / b, target: 1.2 }];
}
