import path from "node:path";

/**
 * Tests, and the processes they start (which inherit this environment), use only the
 * configuration they are given: never the checkout's flotilla.config.json (FLOTILLA_CONFIG names
 * an empty file, so the loader looks nowhere else) nor the shell's FLOTILLA__* / MODEL_* variables.
 * A suite that wants a setting passes it (loadConfig's env, process.env at its top, a child's env).
 */
for (const key of Object.keys(process.env)) {
  if (key.startsWith("FLOTILLA__") || key.startsWith("MODEL_")) delete process.env[key];
}
process.env.FLOTILLA_CONFIG = path.resolve(__dirname, "../fixtures/no-config.json");
