import type { ToolSet } from "ai";
import type { FlotillaConfig } from "@/lib/config";
import type { Db } from "@/server/db/client";

/** What a tool group needs about the run it serves. Built per run; never shared across users. */
export interface ToolGroupContext {
  db: Db;
  config: FlotillaConfig;
  userId: string;
  /** The thread whose workspace the run may touch; null for runs outside a thread. */
  threadId: string | null;
  /** The agent_runs row of the run that calls the tools (recorded on files it writes). */
  runId: string;
  signal: AbortSignal;
  /**
   * Batch items: the idempotency key of a tool call, by its id
   * (`<batch_id>:<item_key>:<generation>:<step>:<call>`, server/batches/steps.ts), read when the
   * tool runs. MCP servers get it as `_meta["flotilla/idempotency_key"]`; a workspace write
   * replayed under the same key writes nothing.
   */
  idempotencyKey?: (toolCallId: string) => string;
}

/**
 * One tool group: a name a definition lists in `tool_groups`, and a per-run factory of its
 * tools. One file per group under server/tools/; the registry (server/tools/index.ts) lists them.
 */
export interface ToolGroup {
  /** "clock", "text", "workspace", "web", or "mcp:<server>". */
  name: string;
  description: string;
  build(ctx: ToolGroupContext): ToolSet | Promise<ToolSet>;
}
