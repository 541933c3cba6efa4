import { describe, expect, it } from "vitest";
import { functionLengths } from "../../scripts/function-lengths";

/**
 * No function under server/agent/ or server/worker/ goes over 100 lines (issues 33 and 38): a long
 * one is split into stages, as runSubagent (server/agent/executor/) and the swarm
 * (server/agent/swarm/) are.
 */
const LIMIT = 100;

describe("function lengths", () => {
  const lengths = functionLengths(process.cwd(), ["server/agent", "server/worker"]);

  it("measures what it reads (the executor's stages are functions of their own)", () => {
    const names = new Set(lengths.map((f) => `${f.file} ${f.name}`));
    expect(names.has("server/agent/executor.ts runSubagent")).toBe(true);
    expect(names.has("server/agent/executor/model-call.ts answerWithModel")).toBe(true);
    expect(names.has("server/agent/swarm/attempt.ts runChildAttempt")).toBe(true);
  });

  it(`keeps every function under server/agent/ and server/worker/ within ${LIMIT} lines`, () => {
    const over = lengths
      .filter((f) => f.lines > LIMIT)
      .map((f) => `${f.file}:${f.line} ${f.name} (${f.lines} lines)`);
    expect(over).toEqual([]);
  });
});
