import { asSchema, type ToolSet } from "ai";
import { beforeAll, describe, expect, it } from "vitest";
import { runSubagent } from "@/server/agent/executor";
import { getSubagentDefinition } from "@/server/agent/registry";
import { createRun } from "@/server/agent/runs";
import { resolveModel } from "@/server/models/index";
import { createSubagentRuntime } from "@/server/runtime/admission";
import { workspaceGroup } from "@/server/tools/workspace";
import { listFiles, putFile, workspaceLimits } from "@/server/workspace/files";
import { makeOwner, testConfig } from "../batches/support";
import { createTestDatabase, type TestDatabase } from "../helpers/db";

/** The workspace group's tools, built as a run would get them, called through their execute functions. */

let tdb: TestDatabase;
const config = testConfig({
  tools: { max_output_chars: 100 },
  workspace: { max_file_bytes: 300, max_thread_bytes: 500 },
});

beforeAll(async () => {
  tdb = await createTestDatabase();
});

async function toolsFor(owner: { userId: string; threadId: string | null }): Promise<{ tools: ToolSet; runId: string }> {
  const run = await createRun(tdb.db, {
    userId: owner.userId,
    threadId: owner.threadId,
    kind: "batch_item",
    definition: "general",
    model: "simulator",
  });
  const tools = await workspaceGroup.build({
    db: tdb.db,
    config,
    userId: owner.userId,
    threadId: owner.threadId,
    runId: run.id,
    signal: new AbortController().signal,
  });
  return { tools, runId: run.id };
}

async function exec(tools: ToolSet, name: string, input: unknown): Promise<Record<string, unknown>> {
  const execute = tools[name]?.execute;
  if (!execute) throw new Error(`no tool ${name}`);
  return (await execute(input as never, { toolCallId: "call-1", messages: [] })) as Record<string, unknown>;
}

const limits = workspaceLimits(config);

describe("workspace tool group", () => {
  it("offers exactly list_files, read_file and write_file", async () => {
    const { tools } = await toolsFor(await makeOwner(tdb.db));
    expect(Object.keys(tools).sort()).toEqual(["list_files", "read_file", "write_file"]);
    expect(workspaceGroup.name).toBe("workspace");
  });

  it("two runs' tools share their input schemas (converted to JSON Schema once per process); read_file's follows the cap", async () => {
    const owner = await makeOwner(tdb.db);
    const [a, b] = [(await toolsFor(owner)).tools, (await toolsFor(owner)).tools];
    for (const name of ["list_files", "read_file", "write_file"]) expect(a[name]!.inputSchema).toBe(b[name]!.inputSchema);
    const other = await workspaceGroup.build({
      db: tdb.db,
      config: testConfig({ tools: { max_output_chars: 200 } }),
      userId: owner.userId,
      threadId: owner.threadId,
      runId: "unused",
      signal: new AbortController().signal,
    });
    expect(other.read_file!.inputSchema).not.toBe(a.read_file!.inputSchema);
    expect(JSON.stringify(asSchema(other.read_file!.inputSchema).jsonSchema)).toContain("cap 200");
  });

  it("write_file stores a file recorded with the run; list_files and read_file see it", async () => {
    const owner = await makeOwner(tdb.db);
    const { tools, runId } = await toolsFor(owner);
    const wrote = await exec(tools, "write_file", { path: "out/summary.md", content: "# Sum\nall good" });
    expect(wrote).toMatchObject({ path: "out/summary.md", size: 14 });
    const [row] = await listFiles(tdb.db, owner);
    expect(row).toMatchObject({ path: "out/summary.md", createdByRunId: runId, contentType: "text/markdown; charset=utf-8" });

    await putFile(tdb.db, { ...owner, limits }, { path: "in/a.txt", bytes: Buffer.from("upload"), contentType: "text/plain" });
    expect(await exec(tools, "list_files", {})).toEqual({
      files: [
        { path: "in/a.txt", size: 6, content_type: "text/plain", written_by: "upload" },
        { path: "out/summary.md", size: 14, content_type: "text/markdown; charset=utf-8", written_by: `run ${runId}` },
      ],
      total: 2,
    });
    expect(((await exec(tools, "list_files", { prefix: "in/" })).files as unknown[]).length).toBe(1);
    expect(await exec(tools, "read_file", { path: "out/summary.md" })).toEqual({
      path: "out/summary.md",
      offset: 0,
      text: "# Sum\nall good",
      total_chars: 14,
      next_offset: null,
    });
  });

  it("read_file pages with offset/limit and never returns more than tools.max_output_chars", async () => {
    const owner = await makeOwner(tdb.db);
    const { tools } = await toolsFor(owner);
    const text = Array.from({ length: 250 }, (_, i) => String.fromCharCode(97 + (i % 26))).join("");
    await putFile(tdb.db, { ...owner, limits }, { path: "long.txt", bytes: Buffer.from(text), contentType: "text/plain" });
    const first = await exec(tools, "read_file", { path: "long.txt" });
    expect(first).toMatchObject({ offset: 0, text: text.slice(0, 100), total_chars: 250, next_offset: 100 });
    const capped = await exec(tools, "read_file", { path: "long.txt", offset: 100, limit: 1000 });
    expect(capped).toMatchObject({ text: text.slice(100, 200), next_offset: 200 });
    const small = await exec(tools, "read_file", { path: "long.txt", offset: 245, limit: 3 });
    expect(small).toMatchObject({ text: text.slice(245, 248), next_offset: 248 });
    const tail = await exec(tools, "read_file", { path: "long.txt", offset: 240 });
    expect(tail).toMatchObject({ text: text.slice(240), next_offset: null });
  });

  it("read_file says a binary file is binary instead of returning its bytes", async () => {
    const owner = await makeOwner(tdb.db);
    const { tools } = await toolsFor(owner);
    const bytes = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x00, 0xff, 0xfe]);
    await putFile(tdb.db, { ...owner, limits }, { path: "img.png", bytes, contentType: "image/png" });
    const res = await exec(tools, "read_file", { path: "img.png" });
    expect(res).toMatchObject({ binary: true, size: 7, content_type: "image/png" });
    expect(res.message).toContain("binary file");
    expect(res).not.toHaveProperty("text");
  });

  it("errors are tool errors naming the problem, and nothing is written", async () => {
    const owner = await makeOwner(tdb.db);
    const { tools } = await toolsFor(owner);
    await expect(exec(tools, "read_file", { path: "missing.txt" })).rejects.toThrow('file "missing.txt" not found');
    await expect(exec(tools, "write_file", { path: "../x.txt", content: "x" })).rejects.toThrow('must not contain a ".." segment');
    await expect(exec(tools, "write_file", { path: "big.txt", content: "x".repeat(301) })).rejects.toThrow(
      "workspace.max_file_bytes",
    );
    await exec(tools, "write_file", { path: "a.txt", content: "a".repeat(300) });
    await expect(exec(tools, "write_file", { path: "b.txt", content: "b".repeat(201) })).rejects.toThrow(
      "workspace.max_thread_bytes",
    );
    expect((await listFiles(tdb.db, owner)).map((f) => f.path)).toEqual(["a.txt"]);
  });

  it("is scoped to the run's own user and thread", async () => {
    const alice = await makeOwner(tdb.db);
    const bob = await makeOwner(tdb.db);
    await putFile(tdb.db, { ...alice, limits }, { path: "secret.txt", bytes: Buffer.from("alice"), contentType: "text/plain" });
    const { tools } = await toolsFor(bob);
    expect(await exec(tools, "list_files", {})).toEqual({ files: [], total: 0 });
    await expect(exec(tools, "read_file", { path: "secret.txt" })).rejects.toThrow("not found");
    // A run outside any thread has no workspace.
    const { tools: crossed } = await toolsFor({ userId: bob.userId, threadId: null });
    await expect(exec(crossed, "list_files", {})).rejects.toThrow("no thread");
    // Bob's run pointed at Alice's thread: the thread is not his.
    const forged = await workspaceGroup.build({
      db: tdb.db,
      config,
      userId: bob.userId,
      threadId: alice.threadId,
      runId: (await toolsFor(bob)).runId,
      signal: new AbortController().signal,
    });
    await expect(exec(forged, "read_file", { path: "secret.txt" })).rejects.toThrow("not found");
    await expect(exec(forged, "write_file", { path: "planted.txt", content: "x" })).rejects.toThrow("thread not found");
    expect((await listFiles(tdb.db, alice)).map((f) => f.path)).toEqual(["secret.txt"]);
  });
});

describe("through a sub-agent run", () => {
  it("a definition with the workspace group reads and writes files; a failing call reaches the model as a tool error", async () => {
    const owner = await makeOwner(tdb.db);
    const runConfig = testConfig({
      simulator: { latency_ms: 1 },
      subagents: {
        definitions: [{ name: "reader", description: "reads files", system_prompt: "Read.", tool_groups: ["workspace"] }],
      },
    });
    await putFile(tdb.db, { ...owner, limits }, { path: "in.txt", bytes: Buffer.from("needle in a file"), contentType: "text/plain" });
    const result = await runSubagent(tdb.db, {
      ...owner,
      kind: "batch_item",
      definition: getSubagentDefinition("reader", runConfig),
      prompt:
        '[[tool:read_file {"path":"in.txt"}]] [[tool:read_file {"path":"nope.txt"}]] ' +
        '[[tool:write_file {"path":"out.txt","content":"done"}]]',
      model: resolveModel(runConfig, {}),
      signal: new AbortController().signal,
      runtime: createSubagentRuntime(runConfig),
    });
    expect(result.status).toBe("completed");
    // One model step per directive, in order; the answer repeats each output verbatim.
    expect(result.text).toContain("Ran 3 tool calls.");
    expect(result.text).toContain('read_file:\n{"path":"in.txt","offset":0,"text":"needle in a file"');
    expect(result.text).toContain(`read_file:\nerror: file "nope.txt" not found`);
    const files = await listFiles(tdb.db, owner);
    expect(files.map((f) => [f.path, f.createdByRunId])).toEqual([
      ["in.txt", null],
      ["out.txt", result.runId],
    ]);
  });
});
