import type { UIMessageStreamWriter } from "ai";
import type { FlotillaConfig } from "@/lib/config";
import type { Db } from "@/server/db/client";
import type { ResolvedModel } from "@/server/models/types";

/** What decides which batch tools a lead response gets: a live worker, batches in its thread (batchToolFacts). */
export interface BatchToolFacts {
  alive: boolean;
  history: boolean;
}

/** Everything a lead-agent tool needs about the response it serves. */
export interface LeadToolContext {
  db: Db;
  config: FlotillaConfig;
  userId: string;
  threadId: string;
  /** The lead run (agent_runs row, kind "lead") of this response. */
  runId: string;
  model: ResolvedModel;
  abortSignal: AbortSignal;
  /** Live UI updates (data parts) while the response streams. */
  writer?: UIMessageStreamWriter;
  /** What a call's approval card shows besides its arguments, by tool call id (batch_task's estimate); the response records it with the call's row. */
  approvalDetails?: Map<string, unknown>;
  /** The batch tools' facts when the caller read them already, beside its own work (batchToolFacts); read here otherwise. */
  batchFacts?: Promise<BatchToolFacts | null>;
}
