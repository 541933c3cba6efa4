import type { z } from "zod";
import { swarmInputSchema } from "@/lib/api/swarm";
import type { FlotillaConfig } from "@/lib/config";
import { AppError } from "@/server/errors";

/** Bounds on what one call may carry (besides swarm.max_items from configuration). */
export const SWARM_LIMITS = {
  itemIdMax: 64,
  taskMaxChars: 20_000,
  templateMaxChars: 20_000,
  templateItemMaxChars: 4_000,
  resumePromptMaxChars: 20_000,
} as const;

export const PLACEHOLDER = "{{item}}";
const ITEM_ID = /^[A-Za-z0-9][A-Za-z0-9._:-]*$/;
const RUN_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
/** Ids given to resume entries; explicit items may not reuse them. */
export const resumeItemId = (n: number) => `resume-${n}`;
const RESUME_ID = /^resume-\d+$/;


export interface PlannedItem {
  item_id: string;
  profile: string;
  task: string;
}

export interface PlannedResume {
  item_id: string;
  source_run_id: string;
  prompt: string;
}

export interface SwarmPlan {
  form: "explicit" | "template" | "resume_only";
  /** Resumes first, in map insertion order. */
  resumes: PlannedResume[];
  items: PlannedItem[];
  concurrency: number;
  /** Answer at once and run the items after the response (server/agent/background.ts). */
  background: boolean;
}

class Issues {
  readonly list: string[] = [];
  add(path: string, message: string) {
    if (this.list.length < 20) this.list.push(`${path}: ${message}`);
  }
}

function describeZodIssues(error: z.ZodError): string[] {
  return error.issues.slice(0, 20).map((i) => `${i.path.length ? formatPath(i.path) : "(input)"}: ${i.message}`);
}

function formatPath(path: PropertyKey[]): string {
  let out = "";
  for (const p of path) out += typeof p === "number" ? `[${p}]` : out ? `.${String(p)}` : String(p);
  return out;
}

/**
 * Validates a whole agent_swarm input before anything starts. Throws
 * AppError("validation_failed") naming every offending field.
 */
export function parseSwarmInput(
  raw: unknown,
  config: FlotillaConfig,
  isKnownProfile: (name: string) => boolean,
): SwarmPlan {
  const parsed = swarmInputSchema.safeParse(raw);
  if (!parsed.success) throw new AppError("validation_failed", describeZodIssues(parsed.error).join("; "));
  const input = parsed.data;
  const issues = new Issues();
  const max = config.swarm.max_items;

  // Concurrency: default from configuration, clamped to the configured cap.
  const requested = input.concurrency ?? input.max_concurrency;
  if (input.concurrency !== undefined && input.max_concurrency !== undefined && input.concurrency !== input.max_concurrency)
    issues.add("concurrency", "give either concurrency or max_concurrency, not two different values");
  if (requested !== undefined && (!Number.isInteger(requested) || requested < 1))
    issues.add(input.concurrency !== undefined ? "concurrency" : "max_concurrency", "must be a whole number of at least 1");
  const concurrency = Math.min(
    config.swarm.max_concurrency,
    requested !== undefined && Number.isInteger(requested) && requested >= 1 ? requested : config.swarm.default_concurrency,
  );

  // Resumes.
  const resumes: PlannedResume[] = [];
  for (const [runId, prompt] of Object.entries(input.resume_run_ids ?? {})) {
    const path = `resume_run_ids["${runId.slice(0, 40)}"]`;
    if (!RUN_ID.test(runId)) issues.add(path, "is not a child run id");
    if (!prompt.trim()) issues.add(path, "the prompt must not be empty");
    else if (prompt.length > SWARM_LIMITS.resumePromptMaxChars)
      issues.add(path, `the prompt must be at most ${SWARM_LIMITS.resumePromptMaxChars} characters`);
    resumes.push({ item_id: resumeItemId(resumes.length + 1), source_run_id: runId.toLowerCase(), prompt });
  }

  // New items: explicit or template, never both.
  const rawItems = input.items ?? [];
  const strings = rawItems.filter((i) => typeof i === "string").length;
  const objects = rawItems.length - strings;
  const template = input.prompt_template;
  let form: SwarmPlan["form"];
  const items: PlannedItem[] = [];

  if (template !== undefined) {
    form = "template";
    if (objects > 0) issues.add("items", "with prompt_template, items must be plain strings (not {item_id, profile, task})");
    if (!template.includes(PLACEHOLDER)) issues.add("prompt_template", `must contain ${PLACEHOLDER}`);
    if (template.length > SWARM_LIMITS.templateMaxChars)
      issues.add("prompt_template", `must be at most ${SWARM_LIMITS.templateMaxChars} characters`);
    const profile = input.profile ?? "general";
    if (!isKnownProfile(profile)) issues.add("profile", `unknown sub-agent profile "${profile.slice(0, 40)}"`);
    if (rawItems.length === 0) issues.add("items", "a template batch needs at least one string item");
    const seen = new Map<string, number>();
    rawItems.forEach((value, index) => {
      if (typeof value !== "string") return;
      if (!value.trim()) issues.add(`items[${index}]`, "must not be empty");
      if (value.length > SWARM_LIMITS.templateItemMaxChars)
        issues.add(`items[${index}]`, `must be at most ${SWARM_LIMITS.templateItemMaxChars} characters`);
      // Every occurrence is replaced (split/join is literal, unlike a regex with `$` patterns).
      const task = template.split(PLACEHOLDER).join(value);
      const first = seen.get(task);
      if (first !== undefined) issues.add(`items[${index}]`, `expands to the same task as items[${first}]`);
      else seen.set(task, index);
      items.push({ item_id: `item-${index + 1}`, profile, task });
    });
  } else {
    form = rawItems.length === 0 ? "resume_only" : "explicit";
    if (input.profile !== undefined)
      issues.add("profile", "only the template form takes a shared profile; give each explicit item its own");
    if (strings > 0) issues.add("items", "plain string items need a prompt_template containing {{item}}");
    const ids = new Map<string, number>();
    rawItems.forEach((value, index) => {
      if (typeof value === "string") return;
      const path = `items[${index}]`;
      if (!ITEM_ID.test(value.item_id) || value.item_id.length > SWARM_LIMITS.itemIdMax)
        issues.add(`${path}.item_id`, `must be 1..${SWARM_LIMITS.itemIdMax} letters, digits or . _ : - (starting with a letter or digit)`);
      else if (RESUME_ID.test(value.item_id)) issues.add(`${path}.item_id`, `"${value.item_id}" is reserved for resumed runs`);
      const first = ids.get(value.item_id);
      if (first !== undefined) issues.add(`${path}.item_id`, `duplicates items[${first}].item_id`);
      else ids.set(value.item_id, index);
      if (!isKnownProfile(value.profile)) issues.add(`${path}.profile`, `unknown sub-agent profile "${value.profile.slice(0, 40)}"`);
      if (!value.task.trim()) issues.add(`${path}.task`, "must not be empty");
      else if (value.task.length > SWARM_LIMITS.taskMaxChars)
        issues.add(`${path}.task`, `must be at most ${SWARM_LIMITS.taskMaxChars} characters`);
      items.push({ item_id: value.item_id, profile: value.profile, task: value.task });
    });
  }

  const total = resumes.length + items.length;
  if (total === 0) issues.add("items", `give 1..${max} items or resume_run_ids`);
  else if (total > max)
    issues.add("items", `${total} entries (${resumes.length} resumes + ${items.length} items) exceed the limit of ${max} per call`);

  if (issues.list.length) throw new AppError("validation_failed", issues.list.join("; "));
  return { form, resumes, items, concurrency, background: input.background === true };
}
