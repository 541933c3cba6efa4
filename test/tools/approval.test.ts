import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { ConfigError, loadConfig } from "@/server/config/load";
import { buildGroupTools } from "@/server/tools";
import { approvalMatcher, runApprovalPatterns } from "@/server/tools/approval";

/** tools.require_approval and a definition's require_approval: validated at start, matched linear-time. */

const dir = mkdtempSync(path.join(tmpdir(), "flotilla-approval-"));
function load(body: unknown) {
  const p = path.join(dir, `c${Math.random().toString(36).slice(2)}.json`);
  writeFileSync(p, JSON.stringify(body));
  return loadConfig({ env: { FLOTILLA_CONFIG: p }, cwd: dir });
}
const def = (over: Record<string, unknown>) => ({ name: "writer", description: "d", system_prompt: "p", ...over });
const fs = { mcp: { servers: { fs: { command: "node", args: ["server.js"] } } } };

describe("approval patterns in the configuration", () => {
  it("defaults to no patterns and a day's timeout", () => {
    const c = loadConfig({ env: {}, cwd: "/nonexistent" });
    expect(c.tools.require_approval).toEqual([]);
    expect(c.tools.approval_timeout_seconds).toBe(86_400);
  });

  it("accepts group and group/tool-glob patterns, globally and per definition", () => {
    const c = load({
      ...fs,
      tools: { require_approval: ["web", "mcp:fs/write_*"], approval_timeout_seconds: 60 },
      subagents: { definitions: [def({ tool_groups: ["workspace"], require_approval: ["workspace/write_file"] })] },
    });
    expect(c.tools.require_approval).toEqual(["web", "mcp:fs/write_*"]);
    expect(c.subagents.definitions[0]!.require_approval).toEqual(["workspace/write_file"]);
    expect(runApprovalPatterns(c, c.subagents.definitions[0]!.require_approval)).toEqual([
      "web",
      "mcp:fs/write_*",
      "workspace/write_file",
    ]);
  });

  it.each([
    [{ tools: { require_approval: ["sql"] } }, /tools\.require_approval\[0\]: unknown tool group "sql"/],
    [{ tools: { require_approval: ["mcp:fs/write_*"] } }, /tools\.require_approval\[0\]: unknown tool group "mcp:fs"/],
    [{ tools: { require_approval: ["web/"] } }, /tools\.require_approval\[0\]: "web\/": the tool glob after "\/" is empty/],
    [{ tools: { require_approval: ["/fetch_url"] } }, /tools\.require_approval\[0\]: "\/fetch_url": names no tool group/],
    [{ tools: { require_approval: ["web/!(a)"] } }, /tools\.require_approval\[0\]: .*not supported/],
    [{ tools: { require_approval: [""] } }, /tools\.require_approval\[0\]/],
    [{ tools: { require_approval: [`web/${"a".repeat(600)}`] } }, /tools\.require_approval\[0\]: must be at most 512/],
    [{ tools: { approval_timeout_seconds: 0 } }, /tools\.approval_timeout_seconds: .*1\.\.2592000/],
    [
      { subagents: { definitions: [def({ require_approval: ["nope/x"] })] } },
      /subagents\.definitions\[0\]\.require_approval\[0\]: unknown tool group "nope"/,
    ],
  ])("refuses %j naming the field", (body, message) => {
    expect(() => load(body)).toThrowError(ConfigError);
    expect(() => load(body)).toThrowError(message);
  });
});

describe("approvalMatcher", () => {
  it("matches a whole group, a tool glob, and an MCP tool by its own name or as the model sees it", () => {
    const m = approvalMatcher(["web", "workspace/write_*", "mcp:fs/write_*", "mcp:db/db__drop_{table,index}"]);
    expect(m("web", "fetch_url")).toBe(true);
    expect(m("workspace", "write_file")).toBe(true);
    expect(m("workspace", "read_file")).toBe(false);
    expect(m("mcp:fs", "fs__write_file")).toBe(true);
    expect(m("mcp:fs", "fs__read_file")).toBe(false);
    expect(m("mcp:db", "db__drop_table")).toBe(true);
    expect(m("mcp:db", "db__drop_database")).toBe(false);
    // The group decides: the same tool name in another group does not match.
    expect(m("clock", "write_file")).toBe(false);
    expect(m("mcp:other", "other__write_file")).toBe(false);
    // The prefix is stripped only for the group's own server.
    expect(m("mcp:fs", "db__write_file")).toBe(false);
  });

  it("never matches without patterns", () => {
    expect(approvalMatcher([])("web", "fetch_url")).toBe(false);
  });

  it("stays linear on a pathological glob and a long name", () => {
    const m = approvalMatcher([`web/${"*a".repeat(40)}b`]);
    const started = performance.now();
    expect(m("web", "a".repeat(50_000))).toBe(false);
    expect(performance.now() - started).toBeLessThan(2_000);
  });
});

describe("buildGroupTools with approval patterns", () => {
  it("marks exactly the matching tools with the AI SDK's needsApproval", async () => {
    const config = loadConfig({ env: {}, cwd: "/nonexistent" });
    const ctx = { db: null as never, config, userId: "u", threadId: null, runId: "r", signal: new AbortController().signal };
    const tools = await buildGroupTools(["clock", "text"], ctx, undefined, approvalMatcher(["text/count_*"]));
    expect(tools.count_text?.needsApproval).toBe(true);
    expect(tools.current_time?.needsApproval).toBeUndefined();
    const plain = await buildGroupTools(["clock", "text"], ctx);
    expect(plain.count_text?.needsApproval).toBeUndefined();
  });
});
