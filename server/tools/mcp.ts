import { createMCPClient, type MCPClient, type MCPTransport } from "@ai-sdk/mcp";
import { Experimental_StdioMCPTransport as StdioMCPTransport } from "@ai-sdk/mcp/mcp-stdio";
import { dynamicTool, jsonSchema, type ToolSet } from "ai";
import { z } from "zod";
import type { FlotillaConfig } from "@/lib/config";
import { AppError, errorText } from "@/server/errors";
import { log } from "@/server/log";
import type { ToolGroup } from "./types";
import { abortable } from "@/server/runtime/abortable";

/**
 * `mcp:<name>`: every tool of a configured MCP server, named `<name>__<tool>`. One client per
 * server per process, started on first use, shared by every run of the process, started again
 * (after a back-off) once it dies, and closed at shutdown (closeMcpClients).
 */

export type McpServerConfig = FlotillaConfig["mcp"]["servers"][string];

type ListedTools = Awaited<ReturnType<MCPClient["listTools"]>>;
type CallResult = { content?: Array<{ type: string; text?: string }>; isError?: boolean; toolResult?: unknown };

/** Where a batch item's idempotency key travels on `tools/call` (DESIGN "Durable steps"). */
export const IDEMPOTENCY_META_KEY = "flotilla/idempotency_key";

const callResultSchema = z
  .object({
    content: z.array(z.object({ type: z.string(), text: z.string().optional() }).passthrough()).optional(),
    isError: z.boolean().optional(),
    toolResult: z.unknown().optional(),
  })
  .passthrough();

/**
 * The client's own request (a JSON-RPC call with its timeout, abort and response handling):
 * `callTool` has no way to send `_meta`, which the MCP spec allows on every request's params.
 */
type RequestFn = (args: {
  request: { method: string; params?: Record<string, unknown> };
  resultSchema: { parse(value: unknown): unknown };
  options?: { signal?: AbortSignal };
}) => Promise<unknown>;

function callTool(
  client: MCPClient,
  args: { name: string; arguments: unknown; idempotencyKey?: string; signal?: AbortSignal },
): Promise<CallResult> {
  const request = (client as unknown as { request?: RequestFn }).request;
  if (typeof request !== "function") throw new Error("this MCP client cannot send tools/call with _meta");
  const params: Record<string, unknown> = { name: args.name, arguments: args.arguments };
  if (args.idempotencyKey !== undefined) params._meta = { [IDEMPOTENCY_META_KEY]: args.idempotencyKey };
  return request.call(client, {
    request: { method: "tools/call", params },
    resultSchema: callResultSchema,
    options: { signal: args.signal },
  }) as Promise<CallResult>;
}

interface Connection {
  client: MCPClient;
  transport: TransportOption;
  definitions: ListedTools;
  startedAt: number;
}

/** Time to start a server and list its tools before it counts as unavailable. */
const START_TIMEOUT_MS = 20_000;
/** A connection that lived this long resets the restart back-off. */
const STABLE_AFTER_MS = 10_000;
const MAX_BACKOFF_MS = 30_000;

/**
 * Hands the client's callbacks through, and tells us when the transport closed, which the
 * client itself only records privately.
 */
class ObservedTransport implements MCPTransport {
  onclose?: () => void;
  onerror?: (error: Error) => void;
  onmessage?: MCPTransport["onmessage"];

  constructor(
    private readonly inner: MCPTransport,
    private readonly onDead: () => void,
  ) {}

  start(): Promise<void> {
    this.inner.onclose = () => {
      this.onDead();
      this.onclose?.();
    };
    this.inner.onerror = (error) => this.onerror?.(error as Error);
    this.inner.onmessage = (message) => this.onmessage?.(message);
    return this.inner.start();
  }
  send: MCPTransport["send"] = (message, options) => this.inner.send(message, options);
  close: MCPTransport["close"] = (options) => this.inner.close(options);
  set protocolVersion(version: string | undefined) {
    this.inner.protocolVersion = version;
  }
  get protocolVersion(): string | undefined {
    return this.inner.protocolVersion;
  }
  /** The server's process id while it runs (the stdio transport keeps its child private). */
  get pid(): number | undefined {
    return (this.inner as unknown as { process?: { pid?: number } }).process?.pid;
  }
}

type TransportOption = Parameters<typeof createMCPClient>[0]["transport"];

function transportFor(spec: McpServerConfig, onDead: () => void): TransportOption {
  if ("url" in spec) {
    // Streamable HTTP has no process to die; a failed request fails the call, the next one retries.
    return { type: "http", url: spec.url, headers: spec.headers };
  }
  return new ObservedTransport(
    new StdioMCPTransport({ command: spec.command, args: spec.args, env: spec.env, cwd: spec.cwd, stderr: "inherit" }),
    onDead,
  );
}


/** The text of a tools/call result, as the model reads it. */
export function mcpResultText(result: CallResult): string {
  if (result.content === undefined) return JSON.stringify(result.toolResult ?? null);
  return result.content.map((p) => (p.type === "text" && typeof p.text === "string" ? p.text : JSON.stringify(p))).join("\n");
}

/** One configured server in this process. */
export class McpServer {
  private current: Connection | undefined;
  private starting: Promise<Connection> | undefined;
  /** Consecutive deaths or failed starts, and when the next start may begin. */
  private failures = 0;
  private retryAt = 0;
  private closed = false;
  /** Times the server was started (a restart counts; tests read it). */
  starts = 0;

  constructor(
    readonly name: string,
    private readonly spec: McpServerConfig,
  ) {}

  /** The live connection, starting (or restarting after the back-off) the server when needed. */
  async connection(signal?: AbortSignal): Promise<Connection> {
    if (this.closed) throw new AppError("tool_unavailable", `MCP server "${this.name}" is shut down`);
    if (this.current) return this.current;
    this.starting ??= this.start().finally(() => {
      this.starting = undefined;
    });
    return abortable(this.starting, signal);
  }

  private async start(): Promise<Connection> {
    const wait = this.retryAt - Date.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    this.starts++;
    let connection: Connection | undefined;
    const onDead = () => {
      if (this.current && this.current === connection) {
        this.current = undefined;
        if (Date.now() - connection.startedAt > STABLE_AFTER_MS) this.failures = 0;
        if (!this.closed) {
          this.failed();
          log.warn({ mcp_server: this.name }, `MCP server ${this.name} exited; it restarts on next use`);
        }
      }
    };
    try {
      const transport = transportFor(this.spec, onDead);
      const client = await createMCPClient({
        transport,
        clientName: "flotilla",
        initializationOptions: { timeout: START_TIMEOUT_MS },
        onUncaughtError: (err) => log.warn({ mcp_server: this.name, err }, "MCP client error"),
      });
      const definitions = await client.listTools({ options: { timeout: START_TIMEOUT_MS } });
      connection = { client, transport, definitions, startedAt: Date.now() };
      if (this.closed) {
        await client.close().catch(() => {});
        throw new AppError("tool_unavailable", `MCP server "${this.name}" is shut down`);
      }
      this.current = connection;
      return connection;
    } catch (err) {
      if (err instanceof AppError) throw err;
      this.failed();
      throw new AppError("tool_unavailable", `MCP server "${this.name}" is unavailable: ${errorText(err)}`);
    }
  }

  /** The first restart is immediate; a server that keeps dying waits 250 ms × 2^n, at most 30 s. */
  private failed(): void {
    this.retryAt = this.failures === 0 ? 0 : Date.now() + Math.min(MAX_BACKOFF_MS, 250 * 2 ** (this.failures - 1));
    this.failures++;
  }

  /** Calls one tool on the live connection (restarting the server if it died since the run began). */
  async call(tool: string, args: unknown, signal: AbortSignal | undefined, idempotencyKey?: string): Promise<string> {
    const connection = await this.connection(signal);
    if (!connection.definitions.tools.some((d) => d.name === tool))
      throw new Error(`MCP server "${this.name}" no longer offers the tool "${tool}"`);
    signal?.throwIfAborted();
    const result = await callTool(connection.client, { name: tool, arguments: args, idempotencyKey, signal });
    const text = mcpResultText(result);
    // The server's own error result is the model's tool error, not a crash.
    if (result.isError) throw new Error(text || `${tool} failed`);
    return text;
  }

  /** The gateway tools of this server, from the live connection's tool list. */
  async tools(signal: AbortSignal, idempotencyKey?: (toolCallId: string) => string): Promise<ToolSet> {
    const connection = await this.connection(signal);
    const out: ToolSet = {};
    for (const def of connection.definitions.tools) {
      out[`${this.name}__${def.name}`] = dynamicTool({
        description: def.description ?? `${def.name} (MCP server ${this.name})`,
        inputSchema: jsonSchema({ ...def.inputSchema, properties: def.inputSchema.properties ?? {} } as never),
        execute: (args, options) => this.call(def.name, args, options.abortSignal, idempotencyKey?.(options.toolCallId)),
      });
    }
    return out;
  }

  /** Stops the server (for good: a closed handle never starts again). */
  async close(): Promise<void> {
    this.closed = true;
    const pending = this.starting;
    const connection = this.current;
    this.current = undefined;
    await connection?.client.close().catch(() => {});
    if (pending) await pending.then((c) => c.client.close()).catch(() => {});
  }

  /** The running server's process id (stdio servers; operators' logs and tests). */
  get pid(): number | undefined {
    const transport = this.current?.transport;
    return transport instanceof ObservedTransport ? transport.pid : undefined;
  }
}

// Keyed by name and configuration, so a test or worker with another config never shares a server.
const servers = new Map<string, McpServer>();

export function mcpServer(name: string, spec: McpServerConfig): McpServer {
  const key = `${name}\u0000${JSON.stringify(spec)}`;
  let server = servers.get(key);
  if (!server) {
    server = new McpServer(name, spec);
    servers.set(key, server);
  }
  return server;
}

/** Closes every MCP client this process started (shutdown of web and worker). */
export async function closeMcpClients(): Promise<void> {
  const all = [...servers.values()];
  servers.clear();
  await Promise.all(all.map((s) => s.close()));
}

/** The group `mcp:<name>` for a configured server. */
export function mcpGroup(name: string, spec: McpServerConfig): ToolGroup {
  return {
    name: `mcp:${name}`,
    description: `Every tool of the MCP server "${name}", named ${name}__<tool>.`,
    build: (ctx) => mcpServer(name, spec).tools(ctx.signal, ctx.idempotencyKey),
  };
}
