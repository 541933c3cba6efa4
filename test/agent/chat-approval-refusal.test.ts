import { beforeAll, describe, expect, it } from "vitest";
import { runSubagent } from "@/server/agent/executor";
import type { SubagentDefinition } from "@/server/agent/registry";
import { buildLeadTools } from "@/server/agent/tools/index";
import { listFiles } from "@/server/workspace/files";
import { createTestDatabase, type TestDatabase } from "../helpers/db";
import { recordingSimulator, runtimeFor, testConfig, userAndThread } from "./support";

/**
 * tools.require_approval in the chat: a task or swarm child (and the lead) cannot ask a person
 * yet, so a call the policy matches is refused as a tool error and never runs; other tools run.
 */

let database: TestDatabase;
let ids: { userId: string; threadId: string };

beforeAll(async () => {
  database = await createTestDatabase();
  ids = await userAndThread(database.db, "approval-chat");
});

const POLICY = { FLOTILLA__TOOLS__REQUIRE_APPROVAL: JSON.stringify(["workspace/write_file"]) };

const writer: SubagentDefinition = {
  name: "writer",
  description: "writes files",
  systemPrompt: "You write files.",
  toolGroups: ["workspace", "clock"],
  maxTurns: 4,
  timeoutMs: 30_000,
  builtin: false,
};

describe("a tool that needs approval, called from the chat", () => {
  it("is refused for a task child, naming the policy, and the file is not written; other tools still run", async () => {
    const result = await runSubagent(database.db, {
      ...ids,
      kind: "task",
      definition: writer,
      prompt: 'Write it [[tool:write_file {"path":"notes/plan.md","content":"hello"}]] then [[tool:current_time {}]]',
      model: recordingSimulator(1),
      signal: new AbortController().signal,
      runtime: runtimeFor(POLICY),
    });
    expect(result.status).toBe("completed");
    const calls = result.toolCalls.map((c) => [c.name, c.status]);
    expect(calls).toEqual([
      ["write_file", "error"],
      ["current_time", "ok"],
    ]);
    expect(result.toolCalls[0]?.result_preview).toMatch(/needs a person's approval \(tools\.require_approval matches workspace\/write_file\)/);
    expect(await listFiles(database.db, ids)).toEqual([]);
  });

  it("runs the same call when no policy matches it", async () => {
    const result = await runSubagent(database.db, {
      ...ids,
      kind: "task",
      definition: writer,
      prompt: 'Write it [[tool:write_file {"path":"notes/free.md","content":"hello"}]]',
      model: recordingSimulator(1),
      signal: new AbortController().signal,
      runtime: runtimeFor(),
    });
    expect(result.toolCalls.map((c) => [c.name, c.status])).toEqual([["write_file", "ok"]]);
    expect((await listFiles(database.db, ids)).map((f) => f.path)).toEqual(["notes/free.md"]);
  });

  it("is refused for the lead's own tool groups too", async () => {
    const config = testConfig({ ...POLICY, FLOTILLA__LEAD__TOOL_GROUPS: JSON.stringify(["workspace"]) });
    const tools = await buildLeadTools({
      db: database.db,
      config,
      ...ids,
      runId: "00000000-0000-0000-0000-000000000001",
      model: recordingSimulator(1),
      abortSignal: new AbortController().signal,
    });
    await expect(
      tools.write_file!.execute!({ path: "lead.md", content: "x" } as never, { toolCallId: "c1", messages: [], abortSignal: new AbortController().signal }),
    ).rejects.toThrow(/needs a person's approval/);
    expect(await listFiles(database.db, ids)).not.toContainEqual(expect.objectContaining({ path: "lead.md" }));
  });
});
