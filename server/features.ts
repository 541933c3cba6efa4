import { and, eq, isNull, sql } from "drizzle-orm";
import { type Features, providerBatchLane } from "@/lib/api/batches";
import type { FlotillaConfig } from "@/lib/config";
import { listSubagents, type SubagentDefinition } from "@/server/agent/registry";
import type { Db } from "@/server/db/client";
import { workerHeartbeats } from "@/server/db/schema";
import { log } from "@/server/log";
import { resolveModel } from "@/server/models";
import { type CatalogEntry, catalogEntries, findCatalogEntry } from "@/server/models/catalog";
import { liveWorkerSlots, livenessWindowSeconds } from "@/server/runtime/heartbeat";

/**
 * What this deployment can do right now, for the UI: the SQL repository (reads and export work
 * whenever the database answers) and the worker runtime (controls and progress need a live
 * worker) are reported separately, so history stays readable with no worker running.
 */
export async function getFeatures(db: Db, config: FlotillaConfig): Promise<Features> {
  let available = false;
  let workers = 0;
  let slots = 0;
  let lastHeartbeatAt: string | null = null;
  try {
    await db.execute(sql`select 1`);
    available = true;
    ({ workers, slots } = await liveWorkerSlots(db, livenessWindowSeconds(config.subagent_batches.lease_seconds)));
    const [row] = await db
      .select({ last: sql<Date | string | null>`max(${workerHeartbeats.lastHeartbeatAt})` })
      .from(workerHeartbeats)
      .where(and(eq(workerHeartbeats.kind, "worker"), isNull(workerHeartbeats.stoppedAt)));
    // A raw aggregate comes back as text from the driver; normalize to ISO 8601.
    if (row?.last) lastHeartbeatAt = new Date(row.last).toISOString();
  } catch (err) {
    log.warn({ err }, "features: database unavailable");
  }
  const b = config.subagent_batches;
  const model = resolveModel(config);
  return {
    sql_repository: { available },
    worker_runtime: { alive: workers > 0, workers, slots, last_heartbeat_at: lastHeartbeatAt },
    batches: {
      enabled: b.enabled,
      max_items_per_batch: b.max_items_per_batch,
      default_max_live_items: b.default_max_live_items,
      max_live_items_per_batch: b.max_live_items_per_batch,
      default_max_running_items: b.default_max_running_items,
      max_running_items_per_batch: b.max_running_items_per_batch,
      max_attempts: b.max_attempts,
      max_total_prompt_chars: b.max_total_prompt_chars,
    },
    model: { name: model.name, simulator: model.simulator },
    subagents: listSubagents(config).map((s) => subagentFacts(config, s, model.name)),
    models: catalogEntries(config).map((e) => ({ name: e.name, provider: providerOf(e) })),
  };
}

const providerOf = (entry: CatalogEntry | undefined) => (!entry || entry.simulator ? "simulator" : (entry.provider ?? "openai-compatible"));

/**
 * A sub-agent as the New batch dialog needs it: the model its batches run on (its own, else the
 * caller's default), that model's provider, and whether the provider's batch lane takes them.
 */
function subagentFacts(config: FlotillaConfig, d: SubagentDefinition, defaultModel: string): Features["subagents"][number] {
  const modelName = d.model ?? defaultModel;
  const provider = providerOf(findCatalogEntry(config, modelName));
  return {
    name: d.name,
    description: d.description,
    model: modelName,
    provider,
    provider_batch: providerBatchLane(provider) && d.toolGroups.length === 0,
    tool_groups: [...d.toolGroups],
  };
}
