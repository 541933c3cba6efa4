import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { featuresSchema } from "@/lib/api/batches";
import { configSchema } from "@/lib/config";
import { createDatabase } from "@/server/db/client";
import { getFeatures } from "@/server/features";
import { SIMULATOR_MODEL_ID } from "@/server/models/simulator";
import { writeHeartbeat } from "@/server/runtime/heartbeat";
import { call, errorOf, makeUser, noWorker, ORIGIN, setupApiDatabase, type TestUser, workerAlive } from "./helpers";

// Read once by the route's getConfig(): the limits it reports must be the configured ones.
process.env.FLOTILLA__SUBAGENT_BATCHES__MAX_ITEMS_PER_BATCH = "1234";
process.env.FLOTILLA__SUBAGENT_BATCHES__MAX_RUNNING_ITEMS_PER_BATCH = "17";
for (const key of ["MODEL_BASE_URL", "MODEL_API_KEY", "MODEL_NAME"]) delete process.env[key];

const tdb = await setupApiDatabase();
let user: TestUser;

beforeAll(async () => {
  user = await makeUser(tdb, "features");
});
beforeEach(() => noWorker(tdb));
afterAll(() => {
  delete process.env.FLOTILLA__SUBAGENT_BATCHES__MAX_ITEMS_PER_BATCH;
  delete process.env.FLOTILLA__SUBAGENT_BATCHES__MAX_RUNNING_ITEMS_PER_BATCH;
});

async function features(options: { token?: string; cookie?: string } = { token: user.token }) {
  const res = await call("GET", "/api/features", options);
  expect(res.status).toBe(200);
  expect(res.headers.get("cache-control")).toBe("no-store");
  return featuresSchema.parse(await res.json());
}

describe("GET /api/features", () => {
  it("requires a signed-in user", async () => {
    const res = await call("GET", "/api/features");
    expect(res.status).toBe(401);
    expect((await errorOf(res)).code).toBe("unauthorized");
  });

  it("answers for a session cookie as well as a Bearer token", async () => {
    const viaCookie = await features({ cookie: user.cookie });
    expect(viaCookie.sql_repository.available).toBe(true);
    const res = await call("GET", "/api/features", { cookie: user.cookie, headers: { origin: ORIGIN } });
    expect(res.status).toBe(200);
  });

  it("reports the SQL repository and the worker runtime separately", async () => {
    const none = await features();
    expect(none.sql_repository).toEqual({ available: true });
    expect(none.worker_runtime).toEqual({ alive: false, workers: 0, slots: 0, last_heartbeat_at: null });

    await workerAlive(tdb);
    await writeHeartbeat(tdb.db, { id: "second-worker", capacity: 2, running: 1 });
    await writeHeartbeat(tdb.db, { id: "a-web-process", capacity: 3, running: 0, kind: "web" });
    const two = await features();
    expect(two.worker_runtime.alive).toBe(true);
    expect(two.worker_runtime.workers).toBe(2);
    // The workers' slots in all (a web process's capacity is not a worker's).
    expect(two.worker_runtime.slots).toBe(4 + 2);
    const [row] = await tdb.sql<{ t: string }[]>`
      select max(last_heartbeat_at)::text as t from worker_heartbeats where kind = 'worker'`;
    expect(two.worker_runtime.last_heartbeat_at).toBe(new Date(row!.t).toISOString());

    // Heartbeats older than the liveness window: not alive, but the last one is still reported.
    await tdb.sql`update worker_heartbeats set last_heartbeat_at = now() - interval '1 hour'`;
    const stale = await features();
    expect(stale.worker_runtime.alive).toBe(false);
    expect(stale.worker_runtime.workers).toBe(0);
    expect(stale.worker_runtime.last_heartbeat_at).not.toBeNull();
    expect(stale.sql_repository.available).toBe(true);

    // A worker that said it stopped is not alive.
    await workerAlive(tdb);
    await tdb.sql`update worker_heartbeats set stopped_at = now() where id = 'second-worker'`;
    expect((await features()).worker_runtime.workers).toBe(1);
  });

  it("reports the configured batch limits, the model and the sub-agents", async () => {
    const f = await features();
    const defaults = configSchema.parse({}).subagent_batches;
    expect(f.batches).toEqual({
      enabled: true,
      max_items_per_batch: 1234,
      default_max_live_items: defaults.default_max_live_items,
      max_live_items_per_batch: defaults.max_live_items_per_batch,
      default_max_running_items: defaults.default_max_running_items,
      max_running_items_per_batch: 17,
      max_attempts: defaults.max_attempts,
      max_total_prompt_chars: defaults.max_total_prompt_chars,
    });
    expect(f.model).toEqual({ name: SIMULATOR_MODEL_ID, simulator: true });
    const general = f.subagents.find((s) => s.name === "general");
    expect(general?.description.length).toBeGreaterThan(0);
  });

  it("tells each sub-agent's model, its provider and whether its batches may take the provider's batch lane", async () => {
    const config = configSchema.parse({
      models: [
        { name: "local", base_url: "http://127.0.0.1:1/v1", model: "m" },
        { name: "claude", provider: "anthropic", model: "claude-x" },
      ],
      subagents: {
        definitions: [
          { name: "plain", description: "No tools.", system_prompt: "Answer.", tool_groups: [], model: "local" },
          { name: "tooled", description: "Tools.", system_prompt: "Answer.", tool_groups: ["clock"] },
          { name: "batchable", description: "No tools.", system_prompt: "Answer.", tool_groups: [], model: "claude" },
          { name: "claude-tools", description: "Tools.", system_prompt: "Answer.", tool_groups: ["clock"], model: "claude" },
        ],
      },
    });
    const f = await getFeatures(tdb.db, config);
    expect(featuresSchema.safeParse(f).success).toBe(true);
    const by = Object.fromEntries(f.subagents.map((s) => [s.name, s]));
    expect(by.plain).toMatchObject({ model: "local", provider: "openai-compatible", provider_batch: false });
    expect(by.tooled).toMatchObject({ model: SIMULATOR_MODEL_ID, provider: "simulator", provider_batch: false });
    expect(by.batchable).toMatchObject({ model: "claude", provider: "anthropic", provider_batch: true });
    expect(by["claude-tools"]).toMatchObject({ model: "claude", provider: "anthropic", provider_batch: false });
    expect(by.general).toMatchObject({ model: SIMULATOR_MODEL_ID, provider: "simulator", provider_batch: false });
  });

  it("says the SQL repository is unavailable when the database does not answer", async () => {
    const down = createDatabase("postgres://postgres@127.0.0.1:1/nothing", { max: 1 });
    try {
      const f = await getFeatures(down.db, configSchema.parse({}));
      expect(f.sql_repository.available).toBe(false);
      expect(f.worker_runtime).toEqual({ alive: false, workers: 0, slots: 0, last_heartbeat_at: null });
      expect(featuresSchema.safeParse(f).success).toBe(true);
    } finally {
      await down.close();
    }
  });
});
