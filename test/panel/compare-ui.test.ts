import { describe, expect, it } from "vitest";
import type { BatchProjection } from "@/lib/api/batches";
import { ApiError } from "@/lib/api/client";
import type { VariantDraft } from "@/lib/api/variants";
import { titleFrom } from "@/lib/batch-title";
import { compareCandidates, compareOrder } from "@/components/batches/batch-menu";
import { serverFieldError, variantChanges, variantProblems, type VariantValues } from "@/components/batches/new-batch/variant";
import { passRate } from "@/components/compare/batch-sides";
import { valueText } from "@/components/compare/clipped-text";

/** The browser's side of variants and comparisons: what a variant request carries, where a 400 shows, which batch is A. */

const DRAFT: VariantDraft = {
  subagent: "general",
  model: "simulator",
  prompt_template: "Label {{text}}",
  output_schema: { type: "object", properties: { label: { type: "string" } }, required: ["label"] },
  checks: [{ name: "has_label", type: "regex", pattern: "\\w", path: "/label" }],
  golden_set: null,
  max_running_items: 8,
  review: { when: "failed" },
  models: ["simulator", "claude-fake"],
};

const unchanged = (): VariantValues => ({
  subagent: DRAFT.subagent,
  model: DRAFT.model,
  template: DRAFT.prompt_template!,
  outputSchema: structuredClone(DRAFT.output_schema!),
  checks: structuredClone(DRAFT.checks),
  maxRunningItems: DRAFT.max_running_items,
  items: "all",
  review: { when: "failed" },
  examples: null,
});

describe("variantChanges: only what the person changed", () => {
  it("sends nothing for the prefilled draft as it is", () => {
    expect(variantChanges(DRAFT, unchanged())).toEqual({});
  });
  it("sends each changed setting, and the items picked", () => {
    const v = { ...unchanged(), template: "Label {{text}} carefully", model: "claude-fake", maxRunningItems: 2, items: "failed_verdict" as const };
    expect(variantChanges(DRAFT, v)).toEqual({
      prompt_template: "Label {{text}} carefully",
      model: "claude-fake",
      max_running_items: 2,
      only: { verdict: "failed" },
    });
    expect(variantChanges(DRAFT, { ...unchanged(), items: "failed" })).toEqual({ only: { status: ["failed"] } });
  });
  it("a changed review policy is sent, and None drops the original's", () => {
    expect(variantChanges(DRAFT, { ...unchanged(), review: { when: "sample", rate: 0.25 } })).toEqual({ review: { when: "sample", rate: 0.25 } });
    expect(variantChanges(DRAFT, { ...unchanged(), review: null })).toEqual({ review: null });
    expect(variantChanges({ ...DRAFT, review: null }, { ...unchanged(), review: null })).toEqual({});
  });
  it("an emptied Checks field asks for no checks; a changed schema is sent whole", () => {
    expect(variantChanges(DRAFT, { ...unchanged(), checks: undefined })).toEqual({ checks: [] });
    const schema = { type: "object" as const, properties: { label: { type: "string" as const, enum: ["a", "b"] } } };
    expect(variantChanges(DRAFT, { ...unchanged(), outputSchema: schema })).toEqual({ output_schema: schema });
  });
  it("examples added, changed or dropped are sent; the original's as they were are not", () => {
    const examples = { golden_set: "9d7c1c52-0000-4000-8000-000000000001", version: 2, count: 5 };
    expect(variantChanges(DRAFT, { ...unchanged(), examples })).toEqual({ examples });
    expect(variantChanges({ ...DRAFT, examples }, { ...unchanged(), examples })).toEqual({});
    expect(variantChanges({ ...DRAFT, examples }, { ...unchanged(), examples: { ...examples, count: 3 } })).toEqual({ examples: { ...examples, count: 3 } });
    expect(variantChanges({ ...DRAFT, examples }, { ...unchanged(), examples: null })).toEqual({ examples: null });
  });
  it("an emptied template is a problem of the draft; an emptied schema asks for none", () => {
    expect(variantProblems(DRAFT, { template: " " })).toEqual({ template: "Prompt template: must not be empty." });
    expect(variantProblems(DRAFT, { template: "x" })).toEqual({ template: null });
    expect(variantChanges(DRAFT, { ...unchanged(), outputSchema: null })).toEqual({ output_schema: null });
    expect(variantChanges({ ...DRAFT, output_schema: null }, { ...unchanged(), outputSchema: null })).toEqual({});
  });
});

describe("serverFieldError: a 400 shows under the field it names", () => {
  const bad = (message: string) => new ApiError(message, 400, "validation_failed");
  it.each([
    ["prompt_template: must contain {{item}}", "template", "prompt_template: must contain {{item}}"],
    ["checks.1.pattern: does not compile", "checks", "Check 2 pattern: does not compile"],
    ["output_schema.properties.x: bad", "schema", "Output schema properties.x: bad"],
    ['model: unknown model "x" (not in the model catalog)', "model", 'model: unknown model "x" (not in the model catalog)'],
    ["only: matches no item of this batch", "items", "only: matches no item of this batch"],
    ["pilot: must be at most 100", "pilot", "pilot: must be at most 100"],
    ["batch: a batch over files has no variants yet", "other", "batch: a batch over files has no variants yet"],
  ])("%s → %s", (message, field, shown) => {
    expect(serverFieldError(bad(message))).toEqual({ field, message: shown });
  });
  it("anything but a 400 shows above Start", () => {
    expect(serverFieldError(new ApiError("prompt_template: x", 409, "conflict"))?.field).toBe("other");
    expect(serverFieldError(null)).toBeNull();
  });
});

function batch(id: string, created_at: string, variant_of: string | null = null): BatchProjection {
  return { id, created_at, variant_of } as BatchProjection;
}

describe("Compare with…: which batches, in which order, and which is A", () => {
  const original = batch("orig", "2026-01-01T00:00:00Z");
  const variant = batch("var", "2026-01-01T01:00:00Z", "orig");
  const sibling = batch("sib", "2026-01-01T02:00:00Z", "orig");
  const unrelated = batch("other", "2026-01-01T03:00:00Z");
  it("related batches first, then the newest", () => {
    expect(compareCandidates(variant, [original, variant, sibling, unrelated]).map((c) => [c.batch.id, c.relation])).toEqual([
      ["sib", "another variant of the same original"],
      ["orig", "this batch's original"],
      ["other", null],
    ]);
    expect(compareCandidates(original, [original, variant]).map((c) => c.relation)).toEqual(["a variant of this batch"]);
  });
  it("the original is A, else the older batch", () => {
    expect(compareOrder(original, variant)).toEqual({ a: "orig", b: "var" });
    expect(compareOrder(variant, original)).toEqual({ a: "orig", b: "var" });
    expect(compareOrder(unrelated, original)).toEqual({ a: "orig", b: "other" });
    expect(compareOrder(original, unrelated)).toEqual({ a: "orig", b: "other" });
  });
});

describe("the comparison's words", () => {
  it("pass rates", () => {
    expect(passRate(null)).toBe("—");
    expect(passRate(2 / 37)).toBe("5.4%");
    expect(passRate(31 / 37)).toBe("84%");
    expect(passRate(1)).toBe("100%");
  });
  it("values as text: strings as they are, JSON indented, nothing empty", () => {
    expect(valueText("<b>x</b>")).toBe("<b>x</b>");
    expect(valueText({ a: 1 })).toBe('{\n  "a": 1\n}');
    expect(valueText(null)).toBe("");
  });
  it("a batch's title is its template's first line, else its sub-agent", () => {
    expect(titleFrom("Label {{text}}\nsecond line", "general")).toBe("Label {{text}}");
    expect(titleFrom(null, "general")).toBe("general");
    expect(titleFrom("x".repeat(100), "general")).toHaveLength(80);
  });
});
