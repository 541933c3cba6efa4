import { randomUUID } from "node:crypto";
import type { UIMessageStreamWriter } from "ai";
import { and, asc, eq } from "drizzle-orm";
import { type FlotillaConfig, configSchema, type FlotillaConfigInput } from "@/lib/config";
import { createRun } from "@/server/agent/runs";
import type { SwarmContext } from "@/server/agent/swarm/run";
import type { SwarmLiveData } from "@/lib/api/swarm";
import type { Db } from "@/server/db/client";
import { agentRuns, runEvents, threads, users } from "@/server/db/schema";
import { SIMULATOR_ENTRY } from "@/server/models/catalog";
import { createSimulatorModel } from "@/server/models/simulator";
import type { ResolvedModel } from "@/server/models/types";
import { createSubagentRuntime, type SubagentRuntime } from "@/server/runtime/admission";

/** The simulator's catalog identity, for tests that build their own simulator-backed models. */
export const SIMULATED: Omit<ResolvedModel, "model"> = {
  name: "simulator",
  simulator: true,
  catalogName: "simulator",
  entry: SIMULATOR_ENTRY,
  endpoint: "simulator|simulator",
};
export const simulator: ResolvedModel = { ...SIMULATED, model: createSimulatorModel({ latencyMs: 0 }) };

export function swarmConfig(input: FlotillaConfigInput = {}): FlotillaConfig {
  return configSchema.parse({
    ...input,
    subagent_runtime: { max_running: 8, max_queued: 64, ...input.subagent_runtime },
    subagents: { max_per_thread: 32, ...input.subagents },
  });
}

export async function seedUserThread(db: Db): Promise<{ userId: string; threadId: string }> {
  const [user] = await db
    .insert(users)
    .values({ email: `swarm-${randomUUID()}@example.com`, passwordHash: "scrypt$unused" })
    .returning();
  const [thread] = await db.insert(threads).values({ userId: user.id, title: "swarm" }).returning();
  return { userId: user.id, threadId: thread.id };
}

export async function leadRun(db: Db, who: { userId: string; threadId: string }, model = simulator): Promise<string> {
  const row = await createRun(db, {
    userId: who.userId,
    threadId: who.threadId,
    kind: "lead",
    definition: "lead",
    model: model.name,
    status: "running",
  });
  return row.id;
}

/** Collects the live data-swarm parts a swarm writes. */
export function recordingWriter(): { writer: UIMessageStreamWriter; parts: Array<{ id?: string; data: SwarmLiveData }> } {
  const parts: Array<{ id?: string; data: SwarmLiveData }> = [];
  const writer = {
    write(part: { type: string; id?: string; data?: unknown }) {
      if (part.type === "data-swarm") parts.push({ id: part.id, data: structuredClone(part.data as SwarmLiveData) });
    },
    merge() {},
    onError: undefined,
  } as unknown as UIMessageStreamWriter;
  return { writer, parts };
}

export interface SwarmHarness {
  ctx: SwarmContext;
  parts: Array<{ id?: string; data: SwarmLiveData }>;
  controller: AbortController;
}

export async function harness(
  db: Db,
  who: { userId: string; threadId: string },
  opts: { config?: FlotillaConfig; runtime?: SubagentRuntime; timings?: SwarmContext["timings"]; model?: ResolvedModel } = {},
): Promise<SwarmHarness> {
  const config = opts.config ?? swarmConfig();
  const model = opts.model ?? simulator;
  const leadRunId = await leadRun(db, who, model);
  const controller = new AbortController();
  const { writer, parts } = recordingWriter();
  return {
    controller,
    parts,
    ctx: {
      db,
      config,
      userId: who.userId,
      threadId: who.threadId,
      leadRunId,
      model,
      signal: controller.signal,
      toolCallId: `call_${randomUUID().slice(0, 8)}`,
      writer,
      runtime: opts.runtime ?? createSubagentRuntime(config),
      timings: opts.timings,
    },
  };
}

export async function childRuns(db: Db, leadRunId: string) {
  return db
    .select()
    .from(agentRuns)
    .where(and(eq(agentRuns.parentRunId, leadRunId), eq(agentRuns.kind, "swarm_child")))
    .orderBy(asc(agentRuns.createdAt));
}

export async function eventsOf(db: Db, runId: string) {
  return db.select().from(runEvents).where(eq(runEvents.runId, runId)).orderBy(asc(runEvents.id));
}
