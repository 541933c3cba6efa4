import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import { parse as parseYaml } from "yaml";
import { configSchema, describeConfigIssues, type FlotillaConfig } from "@/lib/config";

export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`Invalid Flotilla configuration:\n  ${problems.join("\n  ")}`);
    this.name = "ConfigError";
  }
}

const FILE_NAMES = ["flotilla.config.json", "flotilla.config.yaml", "flotilla.config.yml"];
const ENV_PREFIX = "FLOTILLA__";

function readConfigFile(dir: string, explicit?: string): Record<string, unknown> {
  // Read at run time from the working directory, never bundled: keep the build's file tracer
  // from following it into the whole project.
  const file = explicit ?? FILE_NAMES.map((n) => path.join(/*turbopackIgnore: true*/ dir, n)).find((p) => existsSync(p));
  if (!file) return {};
  const text = readFileSync(file, "utf8");
  try {
    const parsed = file.endsWith(".json") ? JSON.parse(text) : parseYaml(text);
    return (parsed ?? {}) as Record<string, unknown>;
  } catch (err) {
    throw new ConfigError([`${path.basename(file)}: cannot be parsed (${(err as Error).message})`]);
  }
}

/** `FLOTILLA__SECTION__FIELD=value` → { section: { field: value } }; values are JSON when they parse as JSON. */
function readEnvOverrides(env: Record<string, string | undefined>): Record<string, unknown> {
  const out: Record<string, Record<string, unknown>> = {};
  const top: Record<string, unknown> = {};
  for (const [key, raw] of Object.entries(env)) {
    if (!key.startsWith(ENV_PREFIX) || raw === undefined) continue;
    const [section, field, ...rest] = key.slice(ENV_PREFIX.length).toLowerCase().split("__");
    if (!section || rest.length) throw new ConfigError([`${key}: expected FLOTILLA__<SECTION>__<FIELD>`]);
    let value: unknown = raw;
    try {
      value = JSON.parse(raw);
    } catch {
      // plain string such as "queue"
    }
    // A top-level scalar such as FLOTILLA__DEFAULT_MODEL has no field part.
    if (!field) {
      top[section] = value;
      continue;
    }
    out[section] ??= {};
    out[section][field] = value;
  }
  return { ...out, ...top };
}

/** Reads the config file (if any) and the environment once; the environment wins. Throws ConfigError. */
export function loadConfig(options: { env?: Record<string, string | undefined>; cwd?: string } = {}): FlotillaConfig {
  const env = options.env ?? process.env;
  const fromFile = readConfigFile(options.cwd ?? process.cwd(), env.FLOTILLA_CONFIG);
  const merged: Record<string, unknown> = { ...fromFile };
  for (const [section, fields] of Object.entries(readEnvOverrides(env))) {
    const base = merged[section];
    merged[section] =
      fields && typeof fields === "object" && !Array.isArray(fields)
        ? { ...(base && typeof base === "object" ? base : {}), ...fields }
        : fields;
  }
  const result = configSchema.safeParse(merged);
  if (!result.success) throw new ConfigError(describeConfigIssues(result.error));
  return result.data;
}

let cached: FlotillaConfig | undefined;

/** The process configuration, validated once and fixed for the life of the process (no hot reload). */
export function getConfig(): FlotillaConfig {
  cached ??= loadConfig();
  return cached;
}
