import type { LanguageModelV3, LanguageModelV3CallOptions } from "@ai-sdk/provider";
import { eq } from "drizzle-orm";
import { loadConfig } from "@/server/config/load";
import { createThread } from "@/server/chat/threads";
import type { Db } from "@/server/db/client";
import { agentRuns } from "@/server/db/schema";
import { SIMULATED } from "../swarm/support";
import { createSimulatorModel } from "@/server/models/simulator";
import { latestUserText } from "@/server/models/simulator/prompt";
import type { ResolvedModel } from "@/server/models/types";
import { createSubagentRuntime } from "@/server/runtime/admission";
import { makeUser } from "../chat/support";

/** Shared by the agent suites: configs, a recording simulator, users/threads and row reads. */

export function testConfig(env: Record<string, string> = {}) {
  return loadConfig({ env, cwd: "/nonexistent" });
}

export function runtimeFor(env: Record<string, string> = {}) {
  return createSubagentRuntime(testConfig(env));
}

export interface ModelCall {
  userText: string;
  tools: string[];
}

/** The real simulator, plus a log of what each call offered (tool names) and asked (user text). */
export function recordingSimulator(latencyMs = 10): ResolvedModel & { calls: ModelCall[] } {
  const inner = createSimulatorModel({ latencyMs });
  const calls: ModelCall[] = [];
  const note = (o: LanguageModelV3CallOptions) =>
    calls.push({
      userText: latestUserText(o.prompt),
      tools: (o.tools ?? []).map((t) => t.name).sort(),
    });
  const model: LanguageModelV3 = {
    specificationVersion: "v3",
    provider: inner.provider,
    modelId: inner.modelId,
    supportedUrls: inner.supportedUrls,
    doGenerate: (o) => {
      note(o);
      return inner.doGenerate(o);
    },
    doStream: (o) => {
      note(o);
      return inner.doStream(o);
    },
  };
  return { ...SIMULATED, model, calls };
}

export async function userAndThread(db: Db, prefix = "agent") {
  const user = await makeUser(db, prefix);
  const thread = await createThread(db, { userId: user.id, title: "runtime test" });
  return { userId: user.id, threadId: thread.id };
}

export async function runRow(db: Db, id: string) {
  const [row] = await db.select().from(agentRuns).where(eq(agentRuns.id, id));
  return row;
}

export async function childRows(db: Db, parentRunId: string) {
  return db.select().from(agentRuns).where(eq(agentRuns.parentRunId, parentRunId));
}

export async function waitFor<T>(fn: () => Promise<T | undefined | false> | T | undefined | false, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v as T;
    if (Date.now() > deadline) throw new Error("waitFor: condition not met in time");
    await new Promise((r) => setTimeout(r, 15));
  }
}
