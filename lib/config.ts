import { z } from "zod";

/**
 * The one configuration schema. Every bound is enforced at process start; a value
 * outside its range refuses to start the process with a message naming the field.
 * Pure: safe to import from the client (the UI reads limits from /api/features).
 */
const range = (min: number, max: number) => ({ error: `must be between ${min} and ${max} (allowed range ${min}..${max})` });
const int = (min: number, max: number, fallback: number) =>
  z.number().int({ error: "must be a whole number" }).min(min, range(min, max)).max(max, range(min, max)).default(fallback);
const num = (min: number, max: number, fallback: number) =>
  z.number().min(min, range(min, max)).max(max, range(min, max)).default(fallback);

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
        max_items_per_batch: int(1, 100_000, 5_000),
        default_max_live_items: int(1, 10_000, 100),
        max_live_items_per_batch: int(1, 10_000, 1_000),
        default_max_running_items: int(1, 1_024, 3),
        max_running_items_per_batch: int(1, 1_024, 64),
        max_attempts: int(1, 20, 3),
        max_result_chars: int(1, 10_000_000, 100_000),
        result_preview_max_chars: int(1, 100_000, 2_000),
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
      .object({ max_body_bytes: int(1_024, 100 * 1024 * 1024, 10 * 1024 * 1024) })
      .strict()
      .prefault({}),
    metrics: z
      .object({ worker_port: int(0, 65_535, 0) })
      .strict()
      .prefault({}),
  })
  .strict()
  .superRefine((c, ctx) => {
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

/** Formats zod issues as "section.field: message" lines. */
export function describeConfigIssues(error: z.ZodError): string[] {
  return error.issues.map((issue) => `${issue.path.join(".") || "(root)"}: ${issue.message}`);
}
