import { beforeAll, describe, expect, it } from "vitest";
import { featuresSchema } from "@/lib/api/batches";
import { call, errorOf, makeThread, makeUser, rowCounts, setupApiDatabase, type TestUser } from "./helpers";

/**
 * A data batch on the providers' batch lane needs no sub-agent of one's own: the built-in "data"
 * has no tool groups, and a submission names the model its items run on (the New batch dialog's
 * Model field). Read through the real route handlers on the suite's database.
 */

// An anthropic entry the submissions name; nothing here calls it.
process.env.FLOTILLA__MODELS = JSON.stringify([
  { name: "claude", provider: "anthropic", base_url: "http://127.0.0.1:9/v1", model: "claude-x", price_per_million_input: 3, price_per_million_output: 15 },
]);

const tdb = await setupApiDatabase();
let user: TestUser;
let thread: string;
const items = ["Refund not received", "App crashes on login", "Love the new design"];

beforeAll(async () => {
  user = await makeUser(tdb, "data");
  thread = await makeThread(tdb, user);
});

const submit = (json: Record<string, unknown>) =>
  call("POST", `/api/threads/${thread}/subagent-batches`, { token: user.token, json: { prompt_template: "Label: {{item}}", items, ...json } });

describe("the built-in data sub-agent and a batch's model", () => {
  it("the features list the data sub-agent without tool groups, and the catalog's models with their providers", async () => {
    const res = await call("GET", "/api/features", { token: user.token });
    const f = featuresSchema.parse(await res.json());
    const data = f.subagents.find((s) => s.name === "data");
    expect(data).toMatchObject({ tool_groups: [], provider: "simulator", provider_batch: false });
    expect(f.subagents.filter((s) => s.name !== "data").every((s) => s.tool_groups.length > 0)).toBe(true);
    expect(f.models).toEqual(expect.arrayContaining([{ name: "claude", provider: "anthropic" }, expect.objectContaining({ provider: "simulator" })]));
  });

  it("takes the providers' batch lane for data on an anthropic model named by the submission", async () => {
    const estimate = await call("POST", `/api/threads/${thread}/subagent-batches/estimate`, {
      token: user.token,
      json: { submission_key: "e", prompt_template: "Label: {{item}}", items, subagent: "data", model: "claude", lane: "provider_batch" },
    });
    expect(estimate.status).toBe(200);
    const cost = ((await estimate.json()) as { cost_usd: { live: number; provider_batch?: number } }).cost_usd;
    expect(cost.live).toBeGreaterThan(0);
    expect(cost.provider_batch).toBeCloseTo(cost.live / 2, 10);

    const res = await submit({ submission_key: "lane", subagent: "data", model: "claude", lane: "provider_batch" });
    expect(res.status).toBe(201);
    expect(await res.json()).toMatchObject({ subagent: "data", model: "claude", lane: "provider_batch" });
  });

  it("runs a batch of any sub-agent on the model the submission names", async () => {
    const res = await submit({ submission_key: "general-claude", subagent: "general", model: "claude" });
    expect(res.status).toBe(201);
    expect(await res.json()).toMatchObject({ subagent: "general", model: "claude", lane: "live" });
  });

  it("refuses, writing nothing, an unknown model and the lane for a sub-agent with tools", async () => {
    const before = await rowCounts(tdb);
    const unknown = await submit({ submission_key: "nope", subagent: "data", model: "gpt-nope" });
    expect(unknown.status).toBe(400);
    expect((await errorOf(unknown)).message).toMatch(/^model: unknown model "gpt-nope"/);
    const tooled = await submit({ submission_key: "tooled", subagent: "general", model: "claude", lane: "provider_batch" });
    expect(tooled.status).toBe(400);
    expect((await errorOf(tooled)).message).toMatch(/lane: .*"general" has tool groups/);
    const simulated = await submit({ submission_key: "sim", subagent: "data", lane: "provider_batch" });
    expect(simulated.status).toBe(400);
    expect((await errorOf(simulated)).message).toMatch(/lane: provider_batch needs an openai or anthropic model/);
    expect(await rowCounts(tdb)).toEqual(before);
  });
});
