import { spawnSync } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { ConfigError, loadConfig } from "@/server/config/load";
import { findToolGroup, knownToolGroups } from "@/server/tools";

/** Unknown tool groups and models refuse the start, naming the field (schema, not a lazy check). */

const dir = mkdtempSync(path.join(tmpdir(), "flotilla-config-"));
function file(name: string, body: unknown): string {
  const p = path.join(dir, name);
  writeFileSync(p, JSON.stringify(body));
  return p;
}
const def = (over: Record<string, unknown>) => ({ name: "reader", description: "d", system_prompt: "p", ...over });

describe("tool groups and models in the configuration", () => {
  it.each([
    [{ subagents: { definitions: [def({ tool_groups: ["clock", "sql"] })] } }, /subagents\.definitions\[0\]\.tool_groups\[1\]: unknown tool group "sql"/],
    [{ lead: { tool_groups: ["mcp:fs"] } }, /lead\.tool_groups\[0\]: unknown tool group "mcp:fs" \(known: clock, text, workspace, web\)/],
    [{ subagents: { definitions: [def({ model: "gpt-9" })] } }, /subagents\.definitions\[0\]\.model: unknown model "gpt-9"/],
    [{ default_model: "nope" }, /default_model: unknown model "nope"/],
  ])("refuses %j naming the field", (body, message) => {
    const config = file("bad.json", body);
    expect(() => loadConfig({ env: { FLOTILLA_CONFIG: config }, cwd: dir })).toThrowError(ConfigError);
    expect(() => loadConfig({ env: { FLOTILLA_CONFIG: config }, cwd: dir })).toThrowError(message);
  });

  it("accepts an mcp:<server> group for a configured server, and the registry knows it", () => {
    const config = loadConfig({
      env: {
        FLOTILLA_CONFIG: file("good.json", {
          mcp: { servers: { fs: { command: "node", args: ["server.js"] } } },
          subagents: { definitions: [def({ tool_groups: ["mcp:fs", "web"] })] },
        }),
      },
      cwd: dir,
    });
    expect(knownToolGroups(config)).toEqual(["clock", "text", "workspace", "web", "mcp:fs"]);
    expect(findToolGroup(config, "mcp:fs")?.name).toBe("mcp:fs");
    expect(findToolGroup(config, "mcp:other")).toBeUndefined();
  });

  it("a worker process refuses to start on an unknown group, naming the field", () => {
    const config = file("worker.json", { subagents: { definitions: [def({ tool_groups: ["text", "mcp:missing"] })] } });
    const env: NodeJS.ProcessEnv = { ...process.env, DATABASE_URL: "postgres://127.0.0.1:9/none" };
    for (const key of Object.keys(env)) if (key.startsWith("FLOTILLA")) delete env[key];
    const run = spawnSync(process.execPath, ["--import", "tsx", "server/worker/main.ts"], {
      cwd: process.cwd(),
      env: { ...env, FLOTILLA_CONFIG: config },
      encoding: "utf8",
      timeout: 60_000,
    });
    expect(run.status).toBe(1);
    expect(run.stderr).toMatch(/subagents\.definitions\[0\]\.tool_groups\[1\]: unknown tool group "mcp:missing"/);
  }, 70_000);
});
