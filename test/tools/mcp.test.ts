import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { configSchema } from "@/lib/config";
import { AppError } from "@/server/errors";
import { buildGroupTools, ToolCallRecorder } from "@/server/tools";
import { closeMcpClients, mcpServer } from "@/server/tools/mcp";
import { mcpTestServers } from "./support";

/** The MCP client against the real servers from npm, over stdio. */

const dir = mkdtempSync(path.join(tmpdir(), "flotilla-mcp-"));
writeFileSync(path.join(dir, "notes.txt"), "The lighthouse keeper logs every ship.\n");
const config = configSchema.parse({ mcp: { servers: mcpTestServers(dir) }, tools: { max_output_chars: 200 } });
const ctx = { db: undefined as never, config, userId: "u", threadId: null, runId: "r", signal: new AbortController().signal };
const call = (id: string) => ({ toolCallId: id, messages: [] });

afterAll(async () => {
  await closeMcpClients();
});

describe("mcp groups", () => {
  it("names every tool <server>__<tool> and runs calls on the filesystem server", async () => {
    const recorder = new ToolCallRecorder();
    const tools = await buildGroupTools(["mcp:fs"], ctx, recorder);
    expect(Object.keys(tools)).toEqual(expect.arrayContaining(["fs__read_text_file", "fs__write_file", "fs__list_directory"]));
    expect(Object.keys(tools).every((n) => n.startsWith("fs__"))).toBe(true);
    const text = await tools.fs__read_text_file.execute?.({ path: path.join(dir, "notes.txt") }, call("a"));
    expect(text).toBe("The lighthouse keeper logs every ship.\n");
    await tools.fs__write_file.execute?.({ path: path.join(dir, "out.md"), content: "# Written" }, call("b"));
    const listing = await tools.fs__list_directory.execute?.({ path: dir }, call("c"));
    expect(listing).toMatch(/\[FILE\] out\.md/);
    expect(recorder.calls.map((c) => [c.name, c.status])).toEqual([
      ["fs__read_text_file", "ok"],
      ["fs__write_file", "ok"],
      ["fs__list_directory", "ok"],
    ]);
  });

  it("returns the server's own error as a tool error (the run goes on)", async () => {
    const recorder = new ToolCallRecorder();
    const tools = await buildGroupTools(["mcp:fs"], ctx, recorder);
    await expect(tools.fs__read_text_file.execute?.({ path: "/etc/passwd" }, call("x"))).rejects.toThrow(/outside allowed|Access denied/i);
    expect(recorder.calls[0]).toMatchObject({ name: "fs__read_text_file", status: "error" });
  });

  it("bounds output at tools.max_output_chars", async () => {
    writeFileSync(path.join(dir, "long.txt"), "y".repeat(5_000));
    const tools = await buildGroupTools(["mcp:fs"], ctx);
    const out = (await tools.fs__read_text_file.execute?.({ path: path.join(dir, "long.txt") }, call("l"))) as string;
    expect(out).toBe(`${"y".repeat(200)}\n[output cut at 200 characters]`);
  });

  it("keeps one client per server per process, shared by runs", async () => {
    const server = mcpServer("fs", config.mcp.servers.fs);
    await buildGroupTools(["mcp:fs"], ctx);
    const starts = server.starts;
    const pid = server.pid;
    await Promise.all([buildGroupTools(["mcp:fs"], ctx), buildGroupTools(["mcp:fs"], ctx)]);
    expect(server.starts).toBe(starts);
    expect(server.pid).toBe(pid);
  });

  it("concurrent first uses start the server once, and concurrent calls after a death restart it once", async () => {
    const cold = configSchema.parse({ mcp: { servers: { cold: mcpTestServers(dir).fs } } });
    const coldCtx = { ...ctx, config: cold };
    const built = await Promise.all(Array.from({ length: 5 }, () => buildGroupTools(["mcp:cold"], coldCtx)));
    const server = mcpServer("cold", cold.mcp.servers.cold);
    expect(server.starts).toBe(1);
    const pid = server.pid as number;
    process.kill(pid, "SIGKILL");
    // Wait until the death is noticed, then five runs call at once.
    for (let i = 0; i < 100 && server.pid === pid; i++) await new Promise((r) => setTimeout(r, 20));
    const texts = await Promise.all(
      built.map((tools, i) => tools.cold__read_text_file.execute?.({ path: path.join(dir, "notes.txt") }, call(`r${i}`))),
    );
    expect(texts.every((t) => String(t).includes("lighthouse"))).toBe(true);
    expect(server.starts).toBe(2);
  });

  it("runs the memory server's tools (a knowledge graph kept across calls)", async () => {
    const tools = await buildGroupTools(["mcp:memory"], ctx);
    await tools.memory__create_entities.execute?.(
      { entities: [{ name: "Ada", entityType: "person", observations: ["keeps the harbour log"] }] },
      call("m1"),
    );
    const graph = (await tools.memory__read_graph.execute?.({}, call("m2"))) as string;
    expect(graph).toContain("keeps the harbour log");
  });

  it("a server killed mid-run fails the call in flight as a tool error and is restarted on next use", async () => {
    const recorder = new ToolCallRecorder();
    const tools = await buildGroupTools(["mcp:fs"], ctx, recorder);
    const server = mcpServer("fs", config.mcp.servers.fs);
    const starts = server.starts;
    const pid = server.pid as number;
    expect(pid).toBeGreaterThan(0);
    const inFlight = tools.fs__read_text_file.execute?.({ path: path.join(dir, "notes.txt") }, call("k1"));
    process.kill(pid, "SIGKILL");
    await expect(inFlight).rejects.toThrow(/closed/i);
    // The same run's tools keep working: the next call starts the server again.
    const text = await tools.fs__read_text_file.execute?.({ path: path.join(dir, "notes.txt") }, call("k2"));
    expect(text).toContain("lighthouse");
    expect(server.starts).toBe(starts + 1);
    expect(server.pid).not.toBe(pid);
    expect(recorder.calls.map((c) => c.status)).toEqual(["error", "ok"]);
  });

  it("a server whose command does not exist is tool_unavailable, and the process keeps running", async () => {
    const ghost = configSchema.parse({ mcp: { servers: { ghost: { command: "/nonexistent/mcp-ghost", args: [] } } } });
    const err = await buildGroupTools(["mcp:ghost"], { ...ctx, config: ghost }).catch((e) => e);
    expect(err).toBeInstanceOf(AppError);
    expect(err).toMatchObject({ code: "tool_unavailable" });
    expect(err.message).toMatch(/MCP server "ghost" is unavailable: .*ENOENT/);
  });

  it("a group this process does not have is tool_unavailable, naming it", async () => {
    await expect(buildGroupTools(["mcp:elsewhere"], ctx)).rejects.toMatchObject({
      code: "tool_unavailable",
      message: expect.stringMatching(/tool group "mcp:elsewhere" is not available in this process/),
    });
  });

  it("closes its clients at shutdown (the server process exits)", async () => {
    await buildGroupTools(["mcp:fs"], ctx);
    const pid = mcpServer("fs", config.mcp.servers.fs).pid as number;
    await closeMcpClients();
    const deadline = Date.now() + 5_000;
    let alive = true;
    while (alive && Date.now() < deadline) {
      try {
        process.kill(pid, 0);
        await new Promise((r) => setTimeout(r, 50));
      } catch {
        alive = false;
      }
    }
    expect(alive).toBe(false);
  });
});
