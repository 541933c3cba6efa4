import type { ModelMessage } from "ai";
import { and, eq } from "drizzle-orm";
import type { Db } from "@/server/db/client";
import { agentRuns } from "@/server/db/schema";
import { AppError } from "@/server/errors";
import type { PlannedResume } from "./input";

/**
 * Resume preflight. A resume continues an earlier child run of this thread in a fresh run
 * (resumed_from_run_id = source) that replays the source's stored transcript and then sends
 * the new prompt. It fails closed unless, for the source and every ancestor reached through
 * resumed_from_run_id / retry_of_run_id:
 *   - it is a child run (task or swarm_child) of this user's thread;
 *   - it ran the same profile and model as the source, and that model is the current one;
 *   - it is terminal and its transcript is replayable (starts with the user, every tool call
 *     has its result);
 * and the source has no resume successor yet (in the database or claimed by a running swarm).
 */

export interface ResolvedResume extends PlannedResume {
  profile: string;
  history: ModelMessage[];
}

const TERMINAL = new Set(["completed", "failed", "cancelled", "timed_out", "interrupted"]);
const CHILD_KINDS = new Set(["task", "swarm_child"]);
/** Longest lineage walked; a longer chain is refused rather than walked forever. */
const MAX_LINEAGE = 64;

/** Sources claimed by swarms running in this process (released when the swarm settles). */
const claimed = new Set<string>();

/** Why a stored transcript cannot be replayed, or null when it can. */
export function replayProblem(transcript: unknown): string | null {
  if (!Array.isArray(transcript) || transcript.length === 0) return "has no stored history";
  const first = transcript[0] as { role?: unknown };
  if (first?.role !== "user") return "history does not start with a user message";
  const open = new Set<string>();
  for (const message of transcript as Array<{ role?: unknown; content?: unknown }>) {
    if (!message || typeof message !== "object") return "history holds a malformed message";
    const { role, content } = message;
    if (role !== "user" && role !== "assistant" && role !== "tool" && role !== "system")
      return "history holds a message of unknown role";
    if (!Array.isArray(content)) {
      if (typeof content !== "string") return "history holds a malformed message";
      continue;
    }
    for (const part of content as Array<{ type?: unknown; toolCallId?: unknown }>) {
      if (part?.type === "tool-call" && typeof part.toolCallId === "string") open.add(part.toolCallId);
      if (part?.type === "tool-result" && typeof part.toolCallId === "string") open.delete(part.toolCallId);
    }
  }
  return open.size ? "history ends inside a tool call without its result" : null;
}

type RunRow = typeof agentRuns.$inferSelect;

/**
 * The safely materialized part of a stored transcript: everything up to the last point where
 * every tool call has its result (a trailing assistant message whose calls never got results is
 * dropped, so its calls are made again rather than replayed half-done). Undefined when nothing
 * replayable is left (no user message at the start).
 */
export function materializedHistory(transcript: unknown): ModelMessage[] | undefined {
  if (!Array.isArray(transcript)) return undefined;
  const messages = transcript as ModelMessage[];
  for (let end = messages.length; end > 0; end--) {
    const prefix = messages.slice(0, end);
    if (replayProblem(prefix) === null) return prefix;
  }
  return undefined;
}

/**
 * What a retry of `runId` (a child that hit a rate limit) continues from: the attempt's prompt,
 * tool calls and results exactly as they happened, so the retry sends no second prompt and does
 * not run finished tool calls again. Undefined when the attempt recorded nothing to replay.
 */
export async function retryHistory(db: Db, runId: string): Promise<ModelMessage[] | undefined> {
  const [row] = await db.select({ transcript: agentRuns.transcript }).from(agentRuns).where(eq(agentRuns.id, runId));
  return materializedHistory(row?.transcript);
}

function refuse(path: string, message: string): never {
  throw new AppError("validation_failed", `${path}: ${message}`);
}

export async function preflightResumes(
  db: Db,
  args: {
    userId: string;
    threadId: string;
    modelName: string;
    resumes: PlannedResume[];
    isKnownProfile: (name: string) => boolean;
  },
): Promise<ResolvedResume[]> {
  const out: ResolvedResume[] = [];
  const seen = new Set<string>();
  for (const resume of args.resumes) {
    const path = `resume_run_ids["${resume.source_run_id}"]`;
    if (seen.has(resume.source_run_id)) refuse(path, "is listed twice");
    seen.add(resume.source_run_id);

    const load = async (id: string): Promise<RunRow | undefined> => {
      const [row] = await db
        .select()
        .from(agentRuns)
        .where(and(eq(agentRuns.id, id), eq(agentRuns.userId, args.userId), eq(agentRuns.threadId, args.threadId)));
      return row;
    };
    const source = await load(resume.source_run_id);
    if (!source || !CHILD_KINDS.has(source.kind) || !source.parentRunId)
      refuse(path, "is not a child run of this thread");
    if (source.model !== args.modelName)
      refuse(path, `ran on model "${source.model}", but this thread now uses "${args.modelName}"`);
    if (!args.isKnownProfile(source.definition)) refuse(path, `its profile "${source.definition}" no longer exists`);

    // The source and every ancestor must be a consistent, replayable chain.
    let run: RunRow | undefined = source;
    for (let depth = 0; run; depth++) {
      if (depth >= MAX_LINEAGE) refuse(path, `its lineage is longer than ${MAX_LINEAGE} runs`);
      const label = run.id === source.id ? "the run" : `its ancestor ${run.id}`;
      if (!CHILD_KINDS.has(run.kind) || !run.parentRunId) refuse(path, `${label} is not a child run of this thread`);
      if (run.definition !== source.definition)
        refuse(path, `${label} used profile "${run.definition}", not "${source.definition}"`);
      if (run.model !== source.model) refuse(path, `${label} used model "${run.model}", not "${source.model}"`);
      if (!TERMINAL.has(run.status)) refuse(path, `${label} is still ${run.status}; only finished runs can be resumed`);
      const problem = replayProblem(run.transcript);
      if (problem) refuse(path, `${label} ${problem}`);
      const parentId: string | null = run.resumedFromRunId ?? run.retryOfRunId;
      if (!parentId) break;
      const parent = await load(parentId);
      if (!parent) refuse(path, `${label} continues a run that is not in this thread`);
      run = parent;
    }

    const [successor] = await db
      .select({ id: agentRuns.id })
      .from(agentRuns)
      .where(eq(agentRuns.resumedFromRunId, source.id))
      .limit(1);
    if (successor) refuse(path, `was already resumed by run ${successor.id}; resume that run instead`);
    if (claimed.has(source.id)) refuse(path, "is being resumed by another swarm right now");

    out.push({ ...resume, profile: source.definition, history: source.transcript as ModelMessage[] });
  }
  return out;
}

/**
 * Claims the sources for the life of one swarm so two concurrent calls cannot both resume
 * the same run; returns the release. Throws when another swarm took one in the meantime.
 */
export function claimResumeSources(sourceRunIds: string[]): () => void {
  const taken = sourceRunIds.filter((id) => claimed.has(id));
  if (taken.length) refuse(`resume_run_ids["${taken[0]}"]`, "is being resumed by another swarm right now");
  for (const id of sourceRunIds) claimed.add(id);
  let released = false;
  return () => {
    if (released) return;
    released = true;
    for (const id of sourceRunIds) claimed.delete(id);
  };
}
