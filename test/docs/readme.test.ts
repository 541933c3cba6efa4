import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { configSchema } from "@/lib/config";

/**
 * The README is what a self-hoster reads first: its configuration table names every field the
 * configuration schema takes (a field missing from it, like confirm_over_usd once, is a setting
 * nobody finds), and it says how to turn Next.js's telemetry off.
 */

const readme = readFileSync("README.md", "utf8");
const table = readme.slice(readme.indexOf("## Configuration"), readme.indexOf("## Adding workers"));

describe("README", () => {
  it("has a row in the configuration table for every field of every section", () => {
    const defaults = configSchema.parse({}) as Record<string, unknown>;
    const missing: string[] = [];
    for (const [section, value] of Object.entries(defaults)) {
      const fields = value !== null && typeof value === "object" && !Array.isArray(value) ? Object.keys(value) : [null];
      for (const field of fields) {
        const name = field === null ? section : `${section}.${field}`;
        // A row starts with the field's name (`mcp.servers.<name>`, `models` / `default_model`).
        if (!table.includes(`| \`${name}`) && !table.includes(`/ \`${name}\``)) missing.push(name);
      }
    }
    expect(missing).toEqual([]);
  });

  it("says what subagent_batches.confirm_over_usd does and how a self-hoster turns Next.js telemetry off", () => {
    expect(table).toMatch(/\| `subagent_batches\.confirm_over_usd` \| 1\.00 \| .*waits on a card in the chat/);
    expect(readme).toContain("NEXT_TELEMETRY_DISABLED=1");
  });
});
