import { expect } from "vitest";
import { send, type WebServer } from "./web-server";

/**
 * Runs `work` while /api/health is asked over a fresh socket every 20 ms (each answer must be
 * 200): its result, how long it took and the slowest health answer. The server may share the
 * test's process: a blocked event loop then shows as one late answer.
 */
export async function underHealthProbe<T>(server: Pick<WebServer, "port">, work: () => Promise<T>): Promise<{ result: T; ms: number; slowestHealthMs: number; probes: number }> {
  let done = false;
  const healthMs: number[] = [];
  const probe = (async () => {
    while (!done) {
      const started = performance.now();
      const res = await send(server, "/api/health", { timeoutMs: 120_000 });
      healthMs.push(performance.now() - started);
      expect(res.status).toBe(200);
      await new Promise((r) => setTimeout(r, 20));
    }
  })();
  const started = performance.now();
  try {
    const result = await work();
    return { result, ms: performance.now() - started, slowestHealthMs: Math.max(0, ...healthMs), probes: healthMs.length };
  } finally {
    done = true;
    await probe;
  }
}
