import { sql } from "drizzle-orm";
import { createApiToken } from "@/server/auth/tokens";
import { createDatabase } from "@/server/db/client";
import { catalogEndpointKey } from "@/server/runtime/rate-limit";
import { startFakeAnthropic } from "../test/helpers/fake-anthropic";
import { startFakeOpenAI } from "../test/helpers/fake-openai";
import type { FakeReply } from "../test/helpers/fake-provider";
import { type AccountLimitsOptions, FakeAccount } from "../test/helpers/fake-rate-limits";
import { benchServer, freshDatabase, owner } from "./batch.bench";
import type { BenchRow } from "./types";
import { startWeb } from "./web";
import { spawnBenchWorkers, stopBenchWorkers, waitForWorkers } from "./workers";

/**
 * Goodput at the provider's limit (issue 45). Fakes of OpenAI and Anthropic that enforce an
 * account's limits as the providers document them (test/helpers/fake-rate-limits.ts: a bucket
 * of one second's share per limit, refilled continuously; rejected requests count against the
 * limit; the headers on every answer; 429 with retry-after-ms / retry-after) answer each call
 * in 400 ms. Batches are submitted over HTTP through scripts/web.ts (as `npm start` runs it)
 * and run by real worker processes (16 slots each, 64 a batch), first one worker, then four.
 *
 * Runs, each on its own fake (a fresh account and a fresh limiter row):
 *   - requests-bound: 1,200 requests/min; tokens-bound: 200 tokens an item (150 in, 50 out)
 *     against 240,000 tokens/min (Anthropic: 180,000 input and 75,000 output tokens/min);
 *   - the catalog entry states the limit, or states nothing (learned from the headers);
 *   - a second program drawing half the requests limit on the same key for the whole run.
 * Rows: the wall time from the first request to the last answer against the ideal (items at
 * the rate the limit allows: ≥ 0.95 of it unstated, ≥ 0.97 stated), the 429s (≤ 2 % unstated,
 * none stated), and with the second program how soon `remaining` was noticed (the shared row's
 * share fell below 0.75) and the 429s. PROVIDER_LIMIT_BENCH_ITEMS sizes each run (default 400, 20 s);
 * PROVIDER_LIMIT_BENCH_RUNS picks runs by key, PROVIDER_LIMIT_BENCH_PORT moves the web process.
 */

export const name = "provider-limit";

const ITEMS = Number(process.env.PROVIDER_LIMIT_BENCH_ITEMS ?? 400);
const LATENCY_MS = 400;
const PORT = Number(process.env.PROVIDER_LIMIT_BENCH_PORT ?? 3237);
const SLOTS = 16;
const RPM = 1_200;
const TOKENS_IN = 150;
const TOKENS_OUT = 50;
const TRACE = process.env.PROVIDER_LIMIT_BENCH_TRACE === "1";
const log = (msg: string) => process.stderr.write(`  provider-limit: ${msg}\n`);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

type Provider = "openai" | "anthropic";
interface Run {
  key: string;
  provider: Provider;
  bound: "requests" | "tokens";
  stated: boolean;
  workers: 1 | 4;
  /** A second program on the key drawing this share of the requests limit. */
  other?: number;
}

const ALL_RUNS: Run[] = [
  { key: "oa-req-unstated-1", provider: "openai", bound: "requests", stated: false, workers: 1 },
  { key: "oa-req-stated-1", provider: "openai", bound: "requests", stated: true, workers: 1 },
  { key: "oa-tok-unstated-1", provider: "openai", bound: "tokens", stated: false, workers: 1 },
  { key: "an-req-unstated-1", provider: "anthropic", bound: "requests", stated: false, workers: 1 },
  { key: "oa-req-unstated-4", provider: "openai", bound: "requests", stated: false, workers: 4 },
  { key: "oa-req-stated-4", provider: "openai", bound: "requests", stated: true, workers: 4 },
  { key: "oa-tok-unstated-4", provider: "openai", bound: "tokens", stated: false, workers: 4 },
  { key: "oa-tok-stated-4", provider: "openai", bound: "tokens", stated: true, workers: 4 },
  { key: "an-tok-unstated-4", provider: "anthropic", bound: "tokens", stated: false, workers: 4 },
  { key: "oa-req-shared-4", provider: "openai", bound: "requests", stated: false, workers: 4, other: 0.5 },
];

/** PROVIDER_LIMIT_BENCH_RUNS=oa-tok-stated-4,… runs only those (comma-separated keys). */
const only = process.env.PROVIDER_LIMIT_BENCH_RUNS?.split(",").map((k) => k.trim());
const RUNS = only ? ALL_RUNS.filter((r) => only.includes(r.key)) : ALL_RUNS;

function accountLimits(run: Run): AccountLimitsOptions {
  if (run.bound === "requests") return { requestsPerMinute: RPM };
  const perSecond = RPM / 60;
  if (run.provider === "openai") return { requestsPerMinute: 60_000, tokensPerMinute: (TOKENS_IN + TOKENS_OUT) * perSecond * 60 };
  return { requestsPerMinute: 60_000, inputTokensPerMinute: TOKENS_IN * perSecond * 60, outputTokensPerMinute: TOKENS_OUT * perSecond * 60 * 1.25 };
}

/** Items a second the limit allows (both bounds are set to 20 a second, less the other program's share). */
const idealRate = (run: Run) => (RPM / 60) * (1 - (run.other ?? 0));

interface Live {
  run: Run;
  account: FakeAccount;
  url: string;
  requests: () => { receivedAt: number; usage?: unknown }[];
  close(): Promise<void>;
}

const reply: FakeReply = { type: "text", text: "ok", chunkDelayMs: 0, usage: { prompt_tokens: TOKENS_IN, completion_tokens: TOKENS_OUT } };

async function startFake(run: Run): Promise<Live> {
  const account = new FakeAccount(accountLimits(run));
  if (run.provider === "openai") {
    const f = await startFakeOpenAI({ account, latencyMs: LATENCY_MS, handler: () => reply });
    return { run, account, url: f.url, requests: () => f.requests, close: () => f.close() };
  }
  const f = await startFakeAnthropic({ account, latencyMs: LATENCY_MS, handler: () => reply });
  return { run, account, url: f.url, requests: () => f.requests, close: () => f.close() };
}

function catalogEntry(live: Live) {
  const { run } = live;
  const limits = accountLimits(run);
  return {
    name: run.key,
    provider: run.provider,
    base_url: live.url,
    api_key_env: "BENCH_PROVIDER_KEY",
    model: run.provider === "openai" ? "gpt-bench" : "claude-sonnet-4-5",
    ...(run.stated && run.bound === "requests" ? { requests_per_minute: RPM } : {}),
    ...(run.stated && run.bound === "tokens" ? { tokens_per_minute: limits.tokensPerMinute } : {}),
  };
}

interface Measured {
  run: Run;
  wallS: number;
  idealS: number;
  requests: number;
  rejected: number;
  detectS?: number;
  waitingSeen: number;
}

export async function run(): Promise<BenchRow[]> {
  const server = await benchServer();
  const bdb = await freshDatabase(server.adminUrl);
  const database = createDatabase(bdb.url, { max: 2 });
  const fakes: Live[] = [];
  for (const r of RUNS) fakes.push(await startFake(r));
  const models = fakes.map(catalogEntry);
  const definitions = RUNS.map((r) => ({
    name: `agent-${r.key}`,
    description: "Labels an item.",
    system_prompt: "Answer ok.",
    tool_groups: [],
    model: r.key,
  }));
  const env = {
    FLOTILLA__MODELS: JSON.stringify(models),
    FLOTILLA__SUBAGENTS: JSON.stringify({ definitions }),
    BENCH_PROVIDER_KEY: "bench",
  };
  const web = await startWeb(bdb.url, { env, port: PORT });
  const workers = spawnBenchWorkers({ databaseUrl: bdb.url, count: 1, slots: SLOTS, env });
  const measured: Measured[] = [];
  try {
    await waitForWorkers(database.sql, 1);
    const scope = await owner(database.db);
    const token = await createApiToken(database.db, { userId: scope.userId });
    const headers = { authorization: `Bearer ${token}`, "content-type": "application/json" };
    const base = `${web.base}/api/threads/${scope.threadId}/subagent-batches`;
    for (const live of fakes) {
      if (live.run.workers === 4 && workers.length === 1) {
        workers.push(...spawnBenchWorkers({ databaseUrl: bdb.url, count: 3, slots: SLOTS, env }));
        await waitForWorkers(database.sql, 4);
      }
      measured.push(await measure(live, { base, headers, db: database }));
    }
  } finally {
    await stopBenchWorkers(workers);
    await web.stop();
    for (const f of fakes) await f.close();
    await database.close();
    await bdb.close();
    await server.stop();
  }
  return measured.flatMap(rowsOf);
}

async function measure(
  live: Live,
  ctx: { base: string; headers: Record<string, string>; db: ReturnType<typeof createDatabase> },
): Promise<Measured> {
  const { run } = live;
  const items = run.other ? Math.round(ITEMS * (1 - run.other)) : ITEMS;
  const body = {
    submission_key: run.key,
    subagent: `agent-${run.key}`,
    prompt_template: "Item {{text}}",
    items: Array.from({ length: items }, (_, i) => ({ item_key: `k${i}`, text: `number ${i}` })),
    max_running_items: 64,
  };
  // The other program: paced at its share of the limit, from before the batch to its end.
  let otherRejected = 0;
  const other = run.other
    ? setInterval(() => {
        if (!live.account.draw()) otherRejected++;
      }, 1000 / ((RPM / 60) * run.other))
    : undefined;
  if (other) await sleep(2_000); // its draw is under way when the batch starts
  const endpoint = catalogEndpointKey({ baseURL: live.url, model: run.provider === "openai" ? "gpt-bench" : "claude-sonnet-4-5" });
  const submittedAt = Date.now();
  const res = await fetch(ctx.base, { method: "POST", headers: ctx.headers, body: JSON.stringify(body) });
  if (res.status !== 201) throw new Error(`provider-limit: submit HTTP ${res.status} ${(await res.text()).slice(0, 300)}`);
  const id = ((await res.json()) as { id: string }).id;
  let detectS: number | undefined;
  const trace: string[] = [];
  let waitingSeen = 0;
  let status = "";
  let succeeded = 0;
  for (;;) {
    const r = await fetch(`${ctx.base}/${id}`, { headers: ctx.headers });
    const b = (await r.json()) as { status: string; succeeded_count?: number; counts?: { succeeded?: number }; waiting_reason?: string | null };
    status = b.status;
    succeeded = b.succeeded_count ?? b.counts?.succeeded ?? 0;
    if (b.waiting_reason === "rate_limited") waitingSeen++;
    if (TRACE) {
      const [r] = (await ctx.db.db.execute(
        sql`select share_requests as r, share_tokens as t, round(extract(epoch from greatest(next_request_at, next_token_at) - now()) * 1000) as ahead_ms, round(extract(epoch from slow_until - now()) * 1000) as slow_ms from model_rate_limits where endpoint = ${endpoint}`,
      )) as unknown as Record<string, unknown>[];
      trace.push(`${((Date.now() - submittedAt) / 1000).toFixed(1)}s ${JSON.stringify(r ?? {})}`);
    }
    if (run.other && detectS === undefined) {
      const [row] = (await ctx.db.db.execute(
        sql`select share_requests as share from model_rate_limits where endpoint = ${endpoint}`,
      )) as unknown as { share: number }[];
      if (row && Number(row.share) < 0.75) detectS = (Date.now() - submittedAt) / 1000;
    }
    if (["completed", "failed", "cancelled"].includes(status)) break;
    if (Date.now() - submittedAt > 10 * 60_000) throw new Error(`provider-limit: ${run.key} did not finish`);
    await sleep(200);
  }
  if (other) clearInterval(other);
  if (status !== "completed") throw new Error(`provider-limit: ${run.key} ended ${status} (${succeeded}/${items} succeeded)`);
  const reqs = live.requests();
  const admitted = reqs.filter((q) => q.usage).map((q) => q.receivedAt);
  const first = Math.min(...reqs.map((q) => q.receivedAt));
  const wallS = (Math.max(...admitted) + LATENCY_MS - first) / 1000;
  const idealS = items / idealRate(run);
  const rejected = live.account.rejected - otherRejected;
  const [row] = (await ctx.db.db.execute(sql`
    select learned_requests_per_minute as rpm, learned_tokens_per_minute as tpm,
           learned_input_tokens_per_minute as itpm, learned_output_tokens_per_minute as otpm
      from model_rate_limits where endpoint = ${endpoint}`)) as unknown as Record<string, number | null>[];
  log(
    `${run.key}: ${items} items in ${wallS.toFixed(1)} s (ideal ${idealS.toFixed(1)} s, share ${(idealS / wallS).toFixed(3)}), ` +
      `${reqs.length} requests, ${rejected} 429s${run.other ? `, other program's 429s ${otherRejected}, detected after ${detectS?.toFixed(1)} s` : ""}; ` +
      `learned ${JSON.stringify(row ?? {})}; panel said rate_limited ${waitingSeen}×`,
  );
  if (TRACE) {
    const perS = new Map<number, string>();
    for (const q of reqs) {
      const sec = Math.floor((q.receivedAt - first) / 1000);
      perS.set(sec, (perS.get(sec) ?? "") + (q.usage ? "." : "x"));
    }
    log(`${run.key} admitted per second: ${[...perS.entries()].map(([k, v]) => `${k}:${v.length}${v.includes("x") ? `(${v.split("x").length - 1}x)` : ""}`).join(" ")}`);
    log(`${run.key} row: ${trace.join(" | ")}`);
  }
  return { run, wallS, idealS, requests: reqs.length, rejected, detectS, waitingSeen };
}

function rowsOf(m: Measured): BenchRow[] {
  const { run } = m;
  const what = `${run.provider} ${run.bound}-bound, limit ${run.stated ? "stated" : "unstated"}, ${run.workers} worker${run.workers > 1 ? "s" : ""}${run.other ? `, a second program drawing ${run.other * 100} %` : ""}`;
  const shareTarget = run.stated ? 0.97 : 0.95;
  const rows: BenchRow[] = [];
  if (!run.other)
    rows.push({
      metric: `${what}: wall s (first request to last answer) vs ideal at the limit (share >= ${shareTarget})`,
      ours: m.wallS,
      baseline: m.idealS,
      ratio: m.wallS / m.idealS,
      target: Number((1 / shareTarget).toFixed(4)),
    });
  if (run.stated)
    rows.push({ metric: `${what}: provider 429s (none)`, ours: m.rejected, baseline: 1, ratio: m.rejected, target: 0 });
  else
    rows.push({
      metric: `${what}: provider 429s as a share of requests (${m.rejected} of ${m.requests}) vs 2 %`,
      ours: m.rejected / m.requests,
      baseline: 0.02,
      ratio: m.rejected / m.requests / 0.02,
      target: 1,
    });
  if (run.other)
    rows.push({
      metric: `${what}: s from submission until the shared row's share fell below 0.75 (from remaining) vs 5 s`,
      ours: m.detectS ?? Number.POSITIVE_INFINITY,
      baseline: 5,
      ratio: (m.detectS ?? Number.POSITIVE_INFINITY) / 5,
      target: 1,
    });
  return rows;
}
