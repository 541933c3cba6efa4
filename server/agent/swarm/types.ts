import type { ModelMessage, UIMessageStreamWriter } from "ai";
import type { FlotillaConfig } from "@/lib/config";
import type { Db } from "@/server/db/client";
import type { ResolvedModel } from "@/server/models/types";
import type { SubagentRuntime } from "@/server/runtime/admission";
import type { Clock, SwarmTimings } from "./clock";
import type { AttemptOutcome } from "./scheduler";

/** What one agent_swarm call runs with: the lead's run, thread, model, signal and live writer. */
export interface SwarmContext {
  db: Db;
  config: FlotillaConfig;
  userId: string;
  threadId: string;
  /** The lead run that called the tool (parent of every child). */
  leadRunId: string;
  /** Root of the delegation tree; defaults to the lead run. */
  rootRunId?: string;
  /** Depth of the caller (0 for the lead). */
  depth?: number;
  model: ResolvedModel;
  /** The lead's stop signal: cancels the whole swarm. */
  signal: AbortSignal;
  toolCallId: string;
  writer?: UIMessageStreamWriter;
  runtime?: SubagentRuntime;
  timings?: Partial<SwarmTimings>;
  clock?: Clock;
}

/** One item as the scheduler runs it: a fresh task or a resume of an earlier child run. */
export interface SwarmEntry {
  item_id: string;
  profile: string;
  prompt: string;
  history?: ModelMessage[];
  resumedFrom: string | null;
}

/** How one attempt of a child ended, with its answer or error. */
export interface ChildOutcome extends AttemptOutcome {
  text: string;
  error: string | null;
}

export const bound = (text: string, max: number) => (text.length > max ? `${text.slice(0, max - 1)}…` : text);
