import { describe, expect, it } from "vitest";
import type { GoldenSetSummary } from "@/lib/api/golden-sets";
import { chosenSet, examplesDraftOf, examplesOf, goldenSetRef, NO_EXAMPLES } from "@/components/batches/new-batch/golden-source";

const SETS: GoldenSetSummary[] = [
  { id: "11111111-1111-4111-8111-111111111111", name: "labels", version: 3, items: 6, updated_at: "2026-12-07T10:00:00.000Z" },
  { id: "22222222-2222-4222-8222-222222222222", name: "tiny", version: 1, items: 2, updated_at: "2026-12-06T10:00:00.000Z" },
];

describe("the New batch dialog's golden set: items and examples", () => {
  it("the set chosen, else the most recently changed; its version only when picked", () => {
    expect(chosenSet(SETS, SETS[1]!.id)).toBe(SETS[1]);
    expect(chosenSet(SETS, "")).toBe(SETS[0]);
    expect(chosenSet([], "")).toBeUndefined();
    expect(goldenSetRef(SETS[0]!, null)).toEqual({ id: SETS[0]!.id });
    expect(goldenSetRef(SETS[0]!, 2)).toEqual({ id: SETS[0]!.id, version: 2 });
  });
  it("examples off send nothing; on, the set, the version picked and the count", () => {
    expect(examplesOf(NO_EXAMPLES, SETS)).toEqual({ value: null });
    expect(examplesOf({ on: true, choice: { setId: "", version: null }, count: "5" }, SETS)).toEqual({ value: { golden_set: SETS[0]!.id, count: 5 } });
    expect(examplesOf({ on: true, choice: { setId: SETS[0]!.id, version: 2 }, count: "3" }, SETS)).toEqual({
      value: { golden_set: SETS[0]!.id, version: 2, count: 3 },
    });
  });
  it("a count outside 1..20, not whole, or above the set's size is the draft's problem", () => {
    const on = (count: string, setId = SETS[0]!.id) => examplesOf({ on: true, choice: { setId, version: null }, count }, SETS);
    expect(on("0")).toEqual({ error: "Examples: a count from 1 to 20." });
    expect(on("21")).toEqual({ error: "Examples: a count from 1 to 20." });
    expect(on("2.5")).toEqual({ error: "Examples: a count from 1 to 20." });
    expect(on("")).toEqual({ error: "Examples: a count from 1 to 20." });
    expect(on("3", SETS[1]!.id)).toEqual({ error: "Examples: tiny holds 2 items, fewer than 3." });
    expect(examplesOf({ on: true, choice: { setId: "", version: null }, count: "1" }, [])).toEqual({
      error: "Examples: choose a golden set (you have none yet).",
    });
  });
  it("a variant's examples start as its original's, version pinned", () => {
    expect(examplesDraftOf(null)).toEqual(NO_EXAMPLES);
    expect(examplesDraftOf({ golden_set: SETS[0]!.id, version: 2, count: 4 })).toEqual({ on: true, choice: { setId: SETS[0]!.id, version: 2 }, count: "4" });
  });
});
