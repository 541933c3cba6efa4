import { withSpan } from "@/server/telemetry";
import { asSchema, type Schema, type Tool, type ToolSet } from "ai";
import { BUILTIN_TOOL_GROUPS, type FlotillaConfig } from "@/lib/config";
import type { ToolCallRecord } from "@/lib/api/runs";
import { AppError, errorText } from "@/server/errors";
import { type ApprovalMatcher, NO_APPROVAL } from "./approval";
import { clockGroup } from "./clock";
import { mcpGroup } from "./mcp";
import { textGroup } from "./text";
import type { ToolGroup, ToolGroupContext } from "./types";
import { webGroup } from "./web";
import { workspaceGroup } from "./workspace";

/**
 * The tool-group registry: the one place a group is added. A definition (or `lead.tool_groups`)
 * names groups; buildGroupTools turns the names into the run's tools, each wrapped so a call is
 * bounded in time and output, recorded, and a failure reaches the model as a tool error.
 */

/** Groups built into this process, one file each: a new group is one file and one entry here. */
const BUILTIN_GROUPS: readonly ToolGroup[] = [clockGroup, textGroup, workspaceGroup, webGroup];

export type { ToolGroup, ToolGroupContext } from "./types";

/** The group called `name` under this configuration, or undefined when this process lacks it. */
export function findToolGroup(config: FlotillaConfig, name: string): ToolGroup | undefined {
  const builtin = BUILTIN_GROUPS.find((g) => g.name === name);
  if (builtin) return builtin;
  if (name.startsWith("mcp:")) {
    const server = name.slice(4);
    const spec = config.mcp.servers[server];
    return spec ? mcpGroup(server, spec) : undefined;
  }
  return undefined;
}

/** Every group name this configuration knows, in table order (README, validation messages). */
export function knownToolGroups(config: FlotillaConfig): string[] {
  return [...BUILTIN_TOOL_GROUPS, ...Object.keys(config.mcp.servers).map((n) => `mcp:${n}`)];
}

/** Groups from `names` this process cannot build (a batch spec from another configuration). */
export function missingToolGroups(config: FlotillaConfig, names: readonly string[]): string[] {
  return names.filter((n) => !findToolGroup(config, n));
}

/** Characters of a call's arguments and result kept on the run record. */
export const TOOL_PREVIEW_CHARS = 300;

function preview(value: unknown): string {
  const text = typeof value === "string" ? value : (JSON.stringify(value) ?? "");
  return text.length > TOOL_PREVIEW_CHARS ? `${text.slice(0, TOOL_PREVIEW_CHARS - 1)}…` : text;
}


/** Collects the calls of one run, in the order they finish. */
export class ToolCallRecorder {
  readonly calls: ToolCallRecord[] = [];
  add(call: ToolCallRecord): void {
    this.calls.push(call);
  }
}

/** Cuts a tool's output to `max` characters, saying so, so one call cannot flood the context. */
export function boundOutput(output: unknown, max: number): unknown {
  if (typeof output === "string")
    return output.length > max ? `${output.slice(0, max)}\n[output cut at ${max} characters]` : output;
  const json = JSON.stringify(output);
  if (json !== undefined && json.length > max) return `${json.slice(0, max)}\n[output cut at ${max} characters]`;
  return output;
}

class ToolTimeoutError extends Error {
  constructor(name: string, seconds: number) {
    super(`tool ${name} did not finish within ${seconds}s (tools.call_timeout_seconds)`);
    this.name = "ToolTimeoutError";
  }
}

/**
 * The AI SDK converts a zod input schema to JSON Schema on every model call (measured on issue
 * 22: about an eighth of a batch worker's CPU per item); converted once per schema object here,
 * so groups that keep their schemas in module constants pay it once per process.
 */
const converted = new WeakMap<object, Schema>();
function convertedOnce(inputSchema: Tool["inputSchema"]): Tool["inputSchema"] {
  if (typeof inputSchema !== "object" || inputSchema === null) return inputSchema;
  let schema = converted.get(inputSchema);
  if (!schema) {
    schema = asSchema(inputSchema);
    converted.set(inputSchema, schema);
  }
  return schema;
}

/**
 * Wraps one tool: records every call; with `bounds`, also limits its time (the call's signal is
 * aborted and the model gets a timeout error) and its output.
 */
export function wrapTool(
  name: string,
  t: Tool,
  opts: { recorder?: ToolCallRecorder; bounds?: { timeoutSeconds: number; maxOutputChars: number } },
): Tool {
  const execute = t.execute;
  if (!execute) return t;
  const { recorder, bounds } = opts;
  const inputSchema = convertedOnce(t.inputSchema);
  const wrapped: Tool["execute"] = traced(name, async (input, options) => {
    const started = performance.now();
    const record = (status: "ok" | "error", result: unknown) =>
      recorder?.add({
        id: options.toolCallId,
        name,
        args_preview: preview(input),
        result_preview: preview(result),
        status,
        duration_ms: Math.round(performance.now() - started),
      });
    let timer: ReturnType<typeof setTimeout> | undefined;
    try {
      let output: unknown;
      if (bounds) {
        const controller = new AbortController();
        const parent = options.abortSignal;
        const onAbort = () => controller.abort(parent?.reason);
        if (parent?.aborted) onAbort();
        else parent?.addEventListener("abort", onAbort, { once: true });
        const timeout = new Promise<never>((_, reject) => {
          timer = setTimeout(() => {
            const err = new ToolTimeoutError(name, bounds.timeoutSeconds);
            controller.abort(err);
            reject(err);
          }, bounds.timeoutSeconds * 1000);
        });
        try {
          output = await Promise.race([
            Promise.resolve(execute(input, { ...options, abortSignal: controller.signal })),
            timeout,
          ]);
        } finally {
          parent?.removeEventListener("abort", onAbort);
        }
        output = boundOutput(output, bounds.maxOutputChars);
      } else output = await execute(input, options);
      record("ok", output);
      return output;
    } catch (err) {
      record("error", errorText(err));
      throw err;
    } finally {
      clearTimeout(timer);
    }
  });
  return { ...t, inputSchema, execute: wrapped } as Tool;
}

type Execute = NonNullable<Tool["execute"]>;

/** Each call runs in its `execute_tool <name>` span (GenAI conventions; a no-op while tracing is off). */
function traced(name: string, execute: Execute): Execute {
  return (input, options) =>
    withSpan(
      `execute_tool ${name}`,
      { "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, "gen_ai.tool.call.id": options.toolCallId },
      async () => execute(input, options),
    );
}

/**
 * Tools with no other wrapper (the lead's delegation tools), each call in its execute_tool span,
 * their schemas converted once per process (convertedOnce): the lead builds them every turn.
 */
export function traceTools(tools: ToolSet): ToolSet {
  return Object.fromEntries(
    Object.entries(tools).map(([name, t]) => [
      name,
      { ...t, inputSchema: convertedOnce(t.inputSchema), ...(t.execute ? { execute: traced(name, t.execute) } : {}) } as Tool,
    ]),
  );
}

/** Records the calls of tools that keep their own bounds (delegation: task). */
export function recordTools(tools: ToolSet, recorder: ToolCallRecorder): ToolSet {
  return Object.fromEntries(Object.entries(tools).map(([name, t]) => [name, wrapTool(name, t, { recorder })]));
}

/**
 * The tools `groups` grant a run, wrapped with the configured bounds. Throws
 * AppError("tool_unavailable") naming a group this process cannot provide or whose tools
 * cannot be had right now (an MCP server that does not start).
 */
export async function buildGroupTools(
  groups: readonly string[],
  ctx: ToolGroupContext,
  recorder?: ToolCallRecorder,
  /** Calls that wait for a person: the tool gets the AI SDK's `needsApproval` (server/tools/approval.ts). */
  needsApproval: ApprovalMatcher = NO_APPROVAL,
  /**
   * What a call that needs a person does: `ask` gives the tool the AI SDK's `needsApproval`
   * (a batch item parks; the lead's response ends on the request), and `verify` runs right
   * before an approved call; `wait` has the call await `gate` (chat children: it returns once
   * the call is approved and throws the denial). A policy that asks is never skipped.
   */
  onApproval: ApprovalHandling = { mode: "ask" },
): Promise<ToolSet> {
  const missing = missingToolGroups(ctx.config, groups);
  if (missing.length)
    throw new AppError(
      "tool_unavailable",
      `tool group ${missing.map((g) => `"${g}"`).join(", ")} is not available in this process ` +
        `(it has: ${knownToolGroups(ctx.config)
          .filter((g) => findToolGroup(ctx.config, g))
          .join(", ")})`,
    );
  const bounds = { timeoutSeconds: ctx.config.tools.call_timeout_seconds, maxOutputChars: ctx.config.tools.max_output_chars };
  const out: ToolSet = {};
  for (const name of groups) {
    const group = findToolGroup(ctx.config, name) as ToolGroup;
    const tools = await group.build(ctx);
    for (const [toolName, t] of Object.entries(tools)) {
      const wrapped = wrapTool(toolName, t, { recorder, bounds });
      if (!needsApproval(name, toolName)) out[toolName] = wrapped;
      else if (onApproval.mode === "wait") out[toolName] = gateTool(toolName, wrapped, onApproval.gate, recorder);
      else out[toolName] = { ...(onApproval.verify ? gateTool(toolName, wrapped, onApproval.verify) : wrapped), needsApproval: true };
    }
  }
  return out;
}

/** One call that needs a person, as its gate sees it. */
export interface GatedCall {
  toolName: string;
  toolCallId: string;
  input: unknown;
  signal?: AbortSignal;
}

/** Resolves when the call may run; throws why not (the model reads it as the tool's error). */
export type ApprovalGate = (call: GatedCall) => Promise<void>;

export type ApprovalHandling = { mode: "ask"; verify?: ApprovalGate } | { mode: "wait"; gate: ApprovalGate };

/**
 * A tool whose call passes `gate` first, outside the call's time bound (a person's decision
 * takes as long as it takes); a refused call is recorded as the failed call it is.
 */
function gateTool(name: string, t: Tool, gate: ApprovalGate, recorder?: ToolCallRecorder): Tool {
  const execute = t.execute;
  if (!execute) return t;
  const gated: Tool["execute"] = async (input, options) => {
    try {
      await gate({ toolName: name, toolCallId: options.toolCallId, input, signal: options.abortSignal });
    } catch (err) {
      recorder?.add({
        id: options.toolCallId,
        name,
        args_preview: preview(input),
        result_preview: preview(errorText(err)),
        status: "error",
        duration_ms: 0,
      });
      throw err;
    }
    return execute(input, options);
  };
  return { ...t, execute: gated } as Tool;
}
