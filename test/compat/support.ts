import { type ChildProcess, spawn } from "node:child_process";
import type { TestDatabase } from "../helpers/db";

/** A real worker process (`npm run worker`) on the suite's database, with the simulator as the model. */
export function spawnWorker(tdb: TestDatabase, env: Record<string, string> = {}): ChildProcess {
  const base = Object.fromEntries(
    Object.entries(process.env).filter(([k]) => !k.startsWith("FLOTILLA__") && !k.startsWith("MODEL_")),
  );
  const child = spawn(process.execPath, ["--import", "tsx", "server/worker/main.ts"], {
    env: {
      ...base,
      DATABASE_URL: tdb.url,
      LOG_LEVEL: "warn",
      NODE_ENV: "production",
      FLOTILLA__SUBAGENT_RUNTIME__MAX_RUNNING: "4",
      FLOTILLA__SUBAGENT_BATCHES__POLL_INTERVAL_SECONDS: "0.1",
      FLOTILLA__SIMULATOR__LATENCY_MS: "20",
      ...env,
    },
    stdio: ["ignore", "ignore", "inherit"],
  });
  return child;
}

/** SIGTERM and wait for the exit (call from afterAll: a hook registered inside beforeAll never runs). */
export async function stopWorker(child: ChildProcess | undefined): Promise<void> {
  if (!child || child.exitCode !== null || child.signalCode !== null) return;
  await new Promise<void>((resolve) => {
    child.once("exit", () => resolve());
    child.kill("SIGTERM");
  });
}

/** Polls `read` until `done` holds (or fails after `timeoutMs`), returning the last value. */
export async function until<T>(read: () => Promise<T>, done: (value: T) => boolean, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await read();
    if (done(value)) return value;
    if (Date.now() > deadline) throw new Error(`condition not met within ${timeoutMs} ms: ${JSON.stringify(value)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** One OpenAI batch input line for the chat-completions endpoint. */
export function chatLine(customId: string, content: string, extra: Record<string, unknown> = {}): string {
  return JSON.stringify({
    custom_id: customId,
    method: "POST",
    url: "/v1/chat/completions",
    body: { model: "simulator", messages: [{ role: "user", content }], ...extra },
  });
}

export function jsonl(lines: string[]): string {
  return `${lines.join("\n")}\n`;
}
