import { describe, expect, it } from "vitest";
import { functionLengths } from "../../scripts/function-lengths";

/**
 * No function under server/agent/ or server/worker/ goes over 100 lines (issue 33). The functions
 * listed below are over it still, waiting to be split into stages like runSubagent: each may only
 * shrink (lower its number when it does; remove it once it is under the limit).
 */
const LIMIT = 100;
const NOT_YET_SPLIT: Record<string, number> = {
  "server/agent/lead.ts startLeadResponse": 114,
};

describe("function lengths", () => {
  const lengths = functionLengths(process.cwd(), ["server/agent", "server/worker"]);

  it("measures what it reads (the executor's stages are functions of their own)", () => {
    const names = new Set(lengths.map((f) => `${f.file} ${f.name}`));
    expect(names.has("server/agent/executor.ts runSubagent")).toBe(true);
    expect(names.has("server/agent/executor/model-call.ts answerWithModel")).toBe(true);
  });

  it(`keeps every function under server/agent/ and server/worker/ within ${LIMIT} lines`, () => {
    const over = lengths
      .filter((f) => f.lines > (NOT_YET_SPLIT[`${f.file} ${f.name}`] ?? LIMIT))
      .map((f) => `${f.file}:${f.line} ${f.name} (${f.lines} lines)`);
    expect(over).toEqual([]);
  });
});
