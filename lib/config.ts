import { z } from "zod";
import { outputSchemaSchema } from "./api/batch-data";
import { BUSY_POLICIES } from "./api/chat";
import { approvalPatternGroup, approvalPatternSchema as approvalPattern } from "./approval-pattern";

/**
 * The one configuration schema. Every bound is enforced at process start; a value
 * outside its range refuses to start the process with a message naming the field.
 * Pure: safe to import from the client (the UI reads limits from /api/features).
 */
const range = (min: number, max: number) => ({ error: `must be between ${min} and ${max} (allowed range ${min}..${max})` });
const int = (min: number, max: number, fallback: number) =>
  z.number().int({ error: "must be a whole number" }).min(min, range(min, max)).max(max, range(min, max)).default(fallback);
const optionalInt = (min: number, max: number) =>
  z.number().int({ error: "must be a whole number" }).min(min, range(min, max)).max(max, range(min, max)).optional();
const num = (min: number, max: number, fallback: number) =>
  z.number().min(min, range(min, max)).max(max, range(min, max)).default(fallback);

/** Tool groups every process has; each MCP server adds `mcp:<name>`. */
/** How a models entry is reached: an OpenAI-compatible endpoint, or a provider's native API. */
export const MODEL_PROVIDERS = ["openai-compatible", "openai", "anthropic", "google"] as const;
export type ModelProvider = (typeof MODEL_PROVIDERS)[number];

export const BUILTIN_TOOL_GROUPS = ["clock", "text", "workspace", "web"] as const;

export const configSchema = z
  .object({
    subagent_runtime: z
      .object({
        max_running: int(1, 64, 3),
        max_queued: int(0, 10_000, 64),
        admission_policy: z.enum(["queue", "reject"]).default("queue"),
        queue_timeout_seconds: num(1, 86_400, 300),
      })
      .strict()
      .prefault({}),
    subagents: z
      .object({
        enabled: z.boolean().default(true),
        max_concurrent: int(1, 64, 3),
        max_total_per_run: int(1, 50, 6),
        max_per_thread: int(1, 256, 8),
        max_depth: int(1, 5, 1),
        max_active_per_root: int(1, 256, 8),
        timeout_seconds: num(1, 86_400, 600),
        max_turns: int(1, 100, 8),
        definitions: z
          .array(
            z
              .object({
                name: z.string().regex(/^[a-z][a-z0-9_-]{0,39}$/),
                description: z.string().min(1).max(500),
                system_prompt: z.string().min(1).max(20_000),
                tool_groups: z.array(z.string()).default([]),
                model: z.string().optional(),
                max_turns: int(1, 100, 8),
                timeout_seconds: num(1, 86_400, 600),
                /** Typed results for every run of this sub-agent (task, swarm child, batch item). */
                output_schema: outputSchemaSchema.optional(),
                /** Approval patterns for this sub-agent's runs, on top of tools.require_approval. */
                require_approval: z.array(approvalPattern).default([]),
              })
              .strict(),
          )
          .default([]),
      })
      .strict()
      .prefault({}),
    subagent_batches: z
      .object({
        enabled: z.boolean().default(true),
        poll_interval_seconds: num(0.05, 60, 1),
        lease_seconds: num(1, 3_600, 120),
        // A worker's statements run at most this long (statement_timeout of its connections): a
        // pass past it is abandoned and logged, and the loop goes on.
        worker_statement_timeout_seconds: num(1, 600, 30),
        // The longest a worker's statement waits for a lock (lock_timeout), within the above.
        worker_lock_timeout_seconds: num(0.1, 600, 10),
        // A worker whose loop made no progress (no pass ended) for this long exits, whatever its
        // heartbeat timer does, and `npm start` starts a new one.
        worker_stall_seconds: num(2, 3_600, 90),
        max_items_per_batch: int(1, 100_000, 5_000),
        default_max_live_items: int(1, 10_000, 100),
        max_live_items_per_batch: int(1, 10_000, 1_000),
        default_max_running_items: int(1, 1_024, 3),
        max_running_items_per_batch: int(1, 1_024, 64),
        max_attempts: int(1, 20, 3),
        max_result_chars: int(1, 10_000_000, 100_000),
        result_preview_max_chars: int(1, 100_000, 2_000),
        // Start the lead agent once in the submitting thread when a lead-submitted batch settles.
        wake_lead: z.boolean().default(true),
        // Total characters of all expanded prompts of one batch, refused before expansion.
        max_total_prompt_chars: int(1_000, 1_000_000_000, 50_000_000),
        // A lead's batch_task estimated over this many US dollars waits for the person's approval
        // (0: always asks; null: never).
        confirm_over_usd: z.number().min(0).max(1_000_000).nullable().default(1),
      })
      .strict()
      .prefault({}),
    // The providers' batch lanes (server/batches/provider-lane/): `lane: "provider_batch"` batches.
    provider_batch: z
      .object({
        // Each provider batch is polled this often, by one worker at a time under a lease.
        poll_seconds: num(0.05, 3_600, 30),
        // Requests per provider batch, under the provider's own limit (OpenAI 50,000, Anthropic 100,000).
        max_requests: int(1, 100_000, 10_000),
        // An expired request: run it on the live lane, or fail the item.
        on_expiry: z.enum(["live", "fail"]).default("live"),
        // The poller's lease on a provider_batches row; a crashed poller's lapses and another takes over.
        lease_seconds: num(1, 3_600, 120),
        // A provider batch not ended this long after it was taken is cancelled at the provider and its
        // requests end here as expired ones (on_expiry): the providers' 24 h completion window and an hour.
        deadline_seconds: num(1, 604_800, 90_000),
      })
      .strict()
      .prefault({}),
    chat: z
      .object({
        busy_policy: z.enum(BUSY_POLICIES).default("enqueue"),
        // Messages one thread may have waiting for its turn (one more: 429 queue_full).
        max_queued_messages: int(1, 1_000, 20),
        // Lead responses nobody typed (wake-ups) in a row before the thread waits for a person.
        max_system_turns: int(1, 100, 10),
      })
      .strict()
      .prefault({}),
    swarm: z
      .object({
        max_items: int(1, 32, 32),
        default_concurrency: int(1, 32, 3),
        max_concurrency: int(1, 32, 5),
      })
      .strict()
      .prefault({}),
    simulator: z
      .object({ latency_ms: int(0, 600_000, 300) })
      .strict()
      .prefault({}),
    rate_limits: z
      .object({
        // 0 disables the shared limiter for that dimension.
        requests_per_minute: int(0, 1_000_000, 0),
        tokens_per_minute: int(0, 100_000_000, 0),
        max_deferrals: int(0, 1_000, 20),
      })
      .strict()
      .prefault({}),
    http: z
      .object({
        max_body_bytes: int(1_024, 100 * 1024 * 1024, 10 * 1024 * 1024),
        // Proxies whose X-Forwarded-For names the client (CIDRs or single addresses); none by default.
        trusted_proxies: z
          .array(z.union([z.cidrv4(), z.cidrv6(), z.ipv4(), z.ipv6()], { error: "must be a CIDR such as 10.0.0.0/8 or an IP address" }))
          .default([]),
      })
      .strict()
      .prefault({}),
    metrics: z
      .object({
        worker_port: int(0, 65_535, 0),
        // Optional bearer token that lets a scraper (Prometheus) read /api/metrics without an admin session.
        token: z.string().min(16, { error: "must be at least 16 characters" }).optional(),
      })
      .strict()
      .prefault({}),
    lead: z
      .object({ tool_groups: z.array(z.string()).default([]) })
      .strict()
      .prefault({}),
    tools: z
      .object({
        max_output_chars: int(100, 1_000_000, 20_000),
        call_timeout_seconds: num(1, 600, 30),
        // Hosts fetch_url may reach although they resolve to a loopback or private address.
        web_allow_hosts: z.array(z.string().min(1)).default([]),
        // Calls that wait for a person: "group" or "group/tool-glob" (server/tools/approval.ts).
        require_approval: z.array(approvalPattern).default([]),
        // A call waiting longer than this is denied.
        approval_timeout_seconds: int(1, 30 * 86_400, 86_400),
      })
      .strict()
      .prefault({}),
    webhooks: z
      .object({
        // Hosts (or host:port) webhook URLs may name although they are not https to a public address.
        allow_hosts: z.array(z.string().min(1)).default([]),
      })
      .strict()
      .prefault({}),
    exports: z
      .object({
        // The longest an export (results.csv / results.jsonl) holds its connection and snapshot.
        max_seconds: int(1, 86_400, 600),
      })
      .strict()
      .prefault({}),
    mcp: z
      .object({
        servers: z
          .record(
            z.string().regex(/^[a-z][a-z0-9_-]{0,39}$/, { error: "server names are lowercase letters, digits, - and _" }),
            z.union([
              z
                .object({
                  command: z.string().min(1),
                  args: z.array(z.string()).default([]),
                  env: z.record(z.string(), z.string()).optional(),
                  cwd: z.string().optional(),
                })
                .strict(),
              z
                .object({ url: z.url({ protocol: /^https?$/ }), headers: z.record(z.string(), z.string()).optional() })
                .strict(),
            ]),
          )
          .default({}),
      })
      .strict()
      .prefault({}),
    models: z
      .array(
        z
          .object({
            name: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$/),
            provider: z.enum(MODEL_PROVIDERS).default("openai-compatible"),
            // Required for openai-compatible (checked below); a native provider defaults to its own API.
            base_url: z.url({ protocol: /^https?$/ }).optional(),
            api_key_env: z.string().regex(/^[A-Z_][A-Z0-9_]*$/).optional(),
            model: z.string().min(1),
            price_per_million_input: z.number().min(0).optional(),
            price_per_million_output: z.number().min(0).optional(),
            // Cache reads and writes; each defaults to the input price.
            price_per_million_cached_input: z.number().min(0).optional(),
            price_per_million_cache_write: z.number().min(0).optional(),
            // The share of the price a provider batch costs; default 0.5 for openai and anthropic.
            batch_discount: z.number().min(0).max(1).optional(),
            // Unset = rate_limits.* for this entry too; 0 = no limit for this entry.
            requests_per_minute: optionalInt(0, 1_000_000),
            tokens_per_minute: optionalInt(0, 100_000_000),
          })
          .strict(),
      )
      .default([]),
    // A catalog name; unset = "default" when MODEL_* is configured, else "simulator".
    default_model: z.string().optional(),
    workspace: z
      .object({
        max_file_bytes: int(1, 1024 * 1024 * 1024, 10 * 1024 * 1024),
        max_thread_bytes: int(1, 100 * 1024 * 1024 * 1024, 200 * 1024 * 1024),
      })
      .strict()
      .prefault({}),
    quotas: z
      .object({
        max_active_batches: int(1, 100_000, 20),
        max_queued_items: int(1, 100_000_000, 100_000),
        // 0 = no daily token quota.
        max_tokens_per_day: int(0, 1_000_000_000_000, 0),
        // A user's workspace files (every thread) and /v1 files together.
        max_storage_bytes: int(1, 1024 ** 5, 1024 ** 3),
      })
      .strict()
      .prefault({}),
    auth: z
      .object({ registration: z.enum(["open", "invite", "closed"]).default("invite") })
      .strict()
      .prefault({}),
    compat: z
      .object({
        // The providers' own limits for a batch input file, raised here when a deployment needs more.
        max_file_bytes: int(1, 10 * 1024 * 1024 * 1024, 200 * 1024 * 1024),
        max_requests_per_file: int(1, 10_000_000, 50_000),
      })
      .strict()
      .prefault({}),
  })
  .strict()
  .superRefine((c, ctx) => {
    // Names are checked here, at start, never lazily on a request.
    const groups = new Set<string>([...BUILTIN_TOOL_GROUPS, ...Object.keys(c.mcp.servers).map((n) => `mcp:${n}`)]);
    const checkGroups = (list: string[], path: (string | number)[]) => {
      list.forEach((g, i) => {
        if (!groups.has(g))
          ctx.addIssue({
            code: "custom",
            path: [...path, i],
            message: `unknown tool group "${g}" (known: ${[...groups].join(", ")})`,
          });
      });
    };
    checkGroups(c.lead.tool_groups, ["lead", "tool_groups"]);
    const checkApproval = (list: string[], path: (string | number)[]) => {
      list.forEach((p, i) => {
        const group = approvalPatternGroup(p);
        if (!groups.has(group))
          ctx.addIssue({
            code: "custom",
            path: [...path, i],
            message: `unknown tool group "${group}" (known: ${[...groups].join(", ")})`,
          });
      });
    };
    checkApproval(c.tools.require_approval, ["tools", "require_approval"]);
    c.subagents.definitions.forEach((d, i) => {
      checkApproval(d.require_approval, ["subagents", "definitions", i, "require_approval"]);
    });
    c.subagents.definitions.forEach((d, i) => {
      checkGroups(d.tool_groups, ["subagents", "definitions", i, "tool_groups"]);
    });
    const models = new Set<string>(["simulator", "default", ...c.models.map((m) => m.name)]);
    const seen = new Set<string>();
    c.models.forEach((m, i) => {
      if (m.name === "simulator" || m.name === "default" || seen.has(m.name))
        ctx.addIssue({ code: "custom", path: ["models", i, "name"], message: `"${m.name}" is reserved or used twice` });
      seen.add(m.name);
      if (m.provider === "openai-compatible" && !m.base_url)
        ctx.addIssue({
          code: "custom",
          path: ["models", i, "base_url"],
          message: 'required for provider "openai-compatible" (the endpoint, e.g. http://localhost:11434/v1)',
        });
    });
    const checkModel = (name: string | undefined, path: (string | number)[]) => {
      if (name !== undefined && !models.has(name))
        ctx.addIssue({ code: "custom", path, message: `unknown model "${name}" (known: ${[...models].join(", ")})` });
    };
    checkModel(c.default_model, ["default_model"]);
    c.subagents.definitions.forEach((d, i) => {
      checkModel(d.model, ["subagents", "definitions", i, "model"]);
    });

    const b = c.subagent_batches;
    if (b.default_max_live_items > b.max_live_items_per_batch)
      ctx.addIssue({
        code: "custom",
        path: ["subagent_batches", "default_max_live_items"],
        message: `must be at most max_live_items_per_batch (${b.max_live_items_per_batch})`,
      });
    if (b.default_max_running_items > b.max_running_items_per_batch)
      ctx.addIssue({
        code: "custom",
        path: ["subagent_batches", "default_max_running_items"],
        message: `must be at most max_running_items_per_batch (${b.max_running_items_per_batch})`,
      });
    if (b.result_preview_max_chars > b.max_result_chars)
      ctx.addIssue({
        code: "custom",
        path: ["subagent_batches", "result_preview_max_chars"],
        message: `must be at most max_result_chars (${b.max_result_chars})`,
      });
    if (c.swarm.default_concurrency > c.swarm.max_concurrency)
      ctx.addIssue({
        code: "custom",
        path: ["swarm", "default_concurrency"],
        message: `must be at most swarm.max_concurrency (${c.swarm.max_concurrency})`,
      });
  });

export type FlotillaConfig = z.output<typeof configSchema>;
export type FlotillaConfigInput = z.input<typeof configSchema>;

/** Hard ceiling on ordinary per-response delegation, whatever is configured. */
export const HARD_MAX_CONCURRENT_SUBAGENTS = 64;

/** The single resolved per-response concurrency for ordinary `task` delegation. */
export function effectiveTaskConcurrency(config: FlotillaConfig, requested = config.subagents.max_concurrent): number {
  return Math.max(1, Math.min(requested, config.subagent_runtime.max_running, HARD_MAX_CONCURRENT_SUBAGENTS));
}

/** Formats zod issues as "section.field: message" lines; list indices as [n] (`subagents.definitions[0].tool_groups[1]`). */
export function describeConfigIssues(error: z.ZodError): string[] {
  return error.issues.map((issue) => {
    const path = issue.path.map((p, i) => (typeof p === "number" ? `[${p}]` : `${i === 0 ? "" : "."}${String(p)}`)).join("");
    return `${path || "(root)"}: ${issue.message}`;
  });
}
