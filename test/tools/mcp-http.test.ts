import http from "node:http";
import type { AddressInfo } from "node:net";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { configSchema } from "@/lib/config";
import { buildGroupTools, ToolCallRecorder } from "@/server/tools";
import { closeMcpClients } from "@/server/tools/mcp";

/**
 * An MCP server over streamable HTTP (the MCP SDK's own server, on loopback): the same group,
 * naming, bounds and tool errors as over stdio, with the configured headers sent.
 */

let server: http.Server;
let url: string;
const seenAuth: string[] = [];

beforeAll(async () => {
  server = http.createServer(async (req, res) => {
    seenAuth.push(String(req.headers.authorization ?? ""));
    // Stateless: one MCP server and transport per request.
    const mcp = new McpServer({ name: "harbour", version: "1.0.0" });
    mcp.registerTool(
      "tide",
      { description: "High tide at a pier", inputSchema: { pier: z.string() } },
      async ({ pier }) => ({ content: [{ type: "text", text: `High tide at ${pier}: 06:12` }] }),
    );
    mcp.registerTool("broken", { description: "Always fails", inputSchema: {} }, async () => ({
      isError: true,
      content: [{ type: "text", text: "the tide gauge is offline" }],
    }));
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
    res.on("close", () => {
      void transport.close();
      void mcp.close();
    });
    await mcp.connect(transport);
    await transport.handleRequest(req, res);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`;
});

afterAll(async () => {
  await closeMcpClients();
  server.closeAllConnections();
  await new Promise((r) => server.close(r));
});

describe("mcp over streamable HTTP", () => {
  it("offers the server's tools as <server>__<tool>, sends the headers, and reports the server's errors as tool errors", async () => {
    const config = configSchema.parse({ mcp: { servers: { harbour: { url, headers: { authorization: "Bearer harbour-key" } } } } });
    const ctx = { db: undefined as never, config, userId: "u", threadId: null, runId: "r", signal: new AbortController().signal };
    const recorder = new ToolCallRecorder();
    const tools = await buildGroupTools(["mcp:harbour"], ctx, recorder);
    expect(Object.keys(tools).sort()).toEqual(["harbour__broken", "harbour__tide"]);
    expect(await tools.harbour__tide.execute?.({ pier: "north" }, { toolCallId: "a", messages: [] })).toBe("High tide at north: 06:12");
    await expect(tools.harbour__broken.execute?.({}, { toolCallId: "b", messages: [] })).rejects.toThrow("the tide gauge is offline");
    expect(recorder.calls.map((c) => c.status)).toEqual(["ok", "error"]);
    expect(seenAuth.length).toBeGreaterThan(0);
    expect(seenAuth.every((h) => h === "Bearer harbour-key")).toBe(true);
  });
});
