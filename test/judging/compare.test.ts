import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { CompareSummary, ComparePage } from "@/lib/api/compare";
import { mcnemarExactP } from "@/lib/stats";
import { resolveModel } from "@/server/models/index";
import { createSubagentRuntime } from "@/server/runtime/admission";
import { BatchWorker } from "@/server/worker/loop";
import { call, errorOf, makeThread, makeUser, setupApiDatabase, type TestUser, workerAlive } from "../api/helpers";
import type { TestDatabase } from "../helpers/db";
import { testConfig } from "../batches/support";

/**
 * Two runs of the same items compared through the HTTP routes, the items run by a real worker on
 * the simulator: `[[echo]]` answers the filled template, so each item's answer (and so its regex
 * check) is chosen per batch by which field the template names.
 */

let t: TestDatabase;
let worker: BatchWorker;
let owner: TestUser;
let stranger: TestUser;
let thread: string;

// k: [answer in run a, answer in run b]. 2 both pass, 1 both fail, 6 improve, 1 regresses, 1 changes text only.
const ROWS: Record<string, [string, string]> = {
  k01: ["yes", "yes"],
  k02: ["yes", "yes"],
  k03: ["no", "no"],
  k04: ["no", "yes"],
  k05: ["no", "yes"],
  k06: ["no", "yes"],
  k07: ["no", "yes"],
  k08: ["no", "yes"],
  k09: ["no", "yes"],
  k10: ["yes", "no"],
  k11: ["yes!", "yes."],
};

beforeAll(async () => {
  t = await setupApiDatabase();
  const cfg = testConfig({ subagent_batches: { poll_interval_seconds: 0.1 }, simulator: { latency_ms: 1 } });
  worker = new BatchWorker({
    database: t,
    config: cfg,
    instanceId: "compare-worker",
    runtime: createSubagentRuntime(cfg),
    model: resolveModel(cfg, {}),
  });
  void worker.start();
  owner = await makeUser(t, "owner");
  stranger = await makeUser(t, "stranger");
  thread = await makeThread(t, owner);
  await workerAlive(t);
});

afterAll(async () => {
  await worker.stop({ waitMs: 2_000 });
});

async function submit(field: "ra" | "rb", extra: Record<string, unknown> = {}): Promise<string> {
  const items = Object.entries(ROWS).map(([item_key, [ra, rb]]) => ({ item_key, ra, rb }));
  const res = await call("POST", `/api/threads/${thread}/subagent-batches`, {
    token: owner.token,
    json: {
      submission_key: `compare-${field}-${Math.random()}`,
      subagent: "general",
      prompt_template: `[[echo]]{{${field}}}`,
      items,
      checks: [{ name: "says_yes", type: "regex", pattern: "^yes" }],
      ...extra,
    },
  });
  expect(res.status, await res.clone().text()).toBe(201);
  return ((await res.json()) as { id: string }).id;
}

async function settled(batchId: string): Promise<void> {
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    const res = await call("GET", `/api/threads/${thread}/subagent-batches/${batchId}`, { token: owner.token });
    const body = (await res.json()) as { status: string };
    if (body.status === "completed" || body.status === "failed") return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`batch ${batchId} did not settle`);
}

describe("compare two runs", () => {
  let a: string;
  let b: string;

  beforeAll(async () => {
    a = await submit("ra");
    b = await submit("rb");
    await Promise.all([settled(a), settled(b)]);
  }, 60_000);

  it("counts verdict changes item by item, with the exact McNemar p-value", async () => {
    const res = await call("GET", `/api/threads/${thread}/subagent-batches/${a}/compare/${b}`, { token: owner.token });
    expect(res.status).toBe(200);
    const body = (await res.json()) as CompareSummary;
    expect(body.items).toEqual({ matched: 11, only_a: 0, only_b: 0 });
    expect(body.pending).toBe(0);
    // k11: "yes!" and "yes." both pass: the text changed, not the verdict.
    expect(body.verdicts).toEqual({ both_passed: 3, both_failed: 1, improved: 6, regressed: 1, unjudged: 0 });
    expect(body.p_value).toBeCloseTo(0.125, 10); // 2 * (1 + 7) / 2^7
    expect(body.p_value_words).toMatch(/could be chance/);
    expect(body.a.pass_rate).toBeCloseTo(4 / 11, 10);
    expect(body.b.pass_rate).toBeCloseTo(9 / 11, 10);
    expect(body.checks).toEqual([{ name: "says_yes", a: { passed: 4, failed: 7 }, b: { passed: 9, failed: 2 }, improved: 6, regressed: 1 }]);
    expect(body.a.title).toBe("[[echo]]{{ra}}");
    expect(body.tokens.a.input).toBeGreaterThan(0);
    expect(body.duration_ms_p50.a).not.toBeNull();
  });

  it("pages pairs by change with a keyset cursor", async () => {
    const base = `/api/threads/${thread}/subagent-batches/${a}/compare/${b}/items`;
    const improved: string[] = [];
    let cursor: string | null = null;
    do {
      const res = await call("GET", `${base}?change=improved&limit=4${cursor ? `&cursor=${cursor}` : ""}`, { token: owner.token });
      expect(res.status).toBe(200);
      const page = (await res.json()) as ComparePage;
      expect(page.items.length).toBeLessThanOrEqual(4);
      improved.push(...page.items.map((p) => p.item_key));
      for (const p of page.items) expect([p.change, p.a.verdict, p.b.verdict]).toEqual(["improved", "failed", "passed"]);
      cursor = page.next_cursor;
    } while (cursor);
    expect(improved).toEqual(["k04", "k05", "k06", "k07", "k08", "k09"]);

    const regressed = (await (await call("GET", `${base}?change=regressed`, { token: owner.token })).json()) as ComparePage;
    expect(regressed.items.map((p) => [p.item_key, p.a.output, p.b.output])).toEqual([["k10", "yes", "no"]]);
    const changed = (await (await call("GET", `${base}?change=changed`, { token: owner.token })).json()) as ComparePage;
    expect(changed.items.map((p) => p.item_key)).toEqual(["k04", "k05", "k06", "k07", "k08", "k09", "k10", "k11"]);
    const same = (await (await call("GET", `${base}?change=same`, { token: owner.token })).json()) as ComparePage;
    expect(same.items.map((p) => p.item_key)).toEqual(["k01", "k02", "k03"]);
  });

  it("writes compare.csv with a.* and b.* columns, formula cells guarded", async () => {
    const res = await call("GET", `/api/threads/${thread}/subagent-batches/${a}/compare/${b}/compare.csv?change=regressed`, { token: owner.token });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-disposition")).toContain(".regressed.csv");
    const lines = (await res.text()).trim().split("\r\n");
    expect(lines[0]).toContain('"a.status","a.verdict","a.output"');
    expect(lines).toHaveLength(2);
    expect(lines[1]).toMatch(/^"k10",.*,regressed,succeeded,passed,"yes",/);
  });

  it("matches by item_key and counts what only one side has; unfinished pairs count in no column", async () => {
    const items = [{ item_key: "k04", ra: "no", rb: "yes" }, { item_key: "extra", ra: "x", rb: "x" }];
    const c = await submit("rb", { items });
    await settled(c);
    const body = (await (await call("GET", `/api/threads/${thread}/subagent-batches/${a}/compare/${c}`, { token: owner.token })).json()) as CompareSummary;
    expect(body.items).toEqual({ matched: 1, only_a: 10, only_b: 1 });
    expect(body.verdicts.improved).toBe(1);

    // Still running: the pair is pending and counts in no verdict column.
    const slow = await submit("rb", { items, prompt_template: "[[sleep:60000]][[echo]]{{rb}}" });
    const running = (await (await call("GET", `/api/threads/${thread}/subagent-batches/${a}/compare/${slow}`, { token: owner.token })).json()) as CompareSummary;
    expect(running.pending).toBe(1);
    expect(running.verdicts).toEqual({ both_passed: 0, both_failed: 0, improved: 0, regressed: 0, unjudged: 0 });
    const pairs = (await (await call("GET", `/api/threads/${thread}/subagent-batches/${a}/compare/${slow}/items`, { token: owner.token })).json()) as ComparePage;
    expect(pairs.items.map((p) => p.change)).toEqual(["pending"]);
    await call("POST", `/api/threads/${thread}/subagent-batches/${slow}/cancel`, { token: owner.token });
  });

  it("refuses what the caller may not see (404) and bad queries (400 naming the parameter)", async () => {
    const other = await makeThread(t, stranger);
    const theirs = await call("POST", `/api/threads/${other}/subagent-batches`, {
      token: stranger.token,
      json: { submission_key: "theirs", subagent: "general", prompt_template: "[[echo]]{{x}}", items: [{ item_key: "k01", x: "yes" }] },
    });
    const theirId = ((await theirs.json()) as { id: string }).id;
    const cross = await call("GET", `/api/threads/${thread}/subagent-batches/${a}/compare/${theirId}`, { token: owner.token });
    expect(cross.status).toBe(404);
    const asStranger = await call("GET", `/api/threads/${thread}/subagent-batches/${a}/compare/${b}`, { token: stranger.token });
    expect(asStranger.status).toBe(404);
    const malformed = await call("GET", `/api/threads/${thread}/subagent-batches/${a}/compare/not-a-uuid`, { token: owner.token });
    expect(malformed.status).toBe(404);
    const bad = await call("GET", `/api/threads/${thread}/subagent-batches/${a}/compare/${b}/items?change=better`, { token: owner.token });
    expect(bad.status).toBe(400);
    expect((await errorOf(bad)).message).toMatch(/^change: must be one of improved/);
    const unknown = await call("GET", `/api/threads/${thread}/subagent-batches/${a}/compare/${b}/items?sort=x`, { token: owner.token });
    expect((await errorOf(unknown)).message).toBe("sort: unknown query parameter");
  });
});

describe("the exact McNemar test", () => {
  it("matches the binomial tail, symmetric, and stays finite for huge counts", () => {
    expect(mcnemarExactP(0, 0)).toBe(1);
    expect(mcnemarExactP(5, 0)).toBeCloseTo(2 / 32, 12);
    expect(mcnemarExactP(0, 5)).toBeCloseTo(2 / 32, 12);
    expect(mcnemarExactP(3, 3)).toBe(1);
    // 2 * P(X <= 2), X ~ Bin(12, 0.5) = 2 * (1 + 12 + 66) / 4096
    expect(mcnemarExactP(10, 2)).toBeCloseTo((2 * 79) / 4096, 12);
    const p = mcnemarExactP(60_000, 40_000);
    expect(p).toBeGreaterThanOrEqual(0);
    expect(p).toBeLessThan(1e-100);
    expect(mcnemarExactP(50_000, 50_000)).toBe(1);
  });
});

