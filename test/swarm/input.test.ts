import { describe, expect, it } from "vitest";
import { configSchema } from "@/lib/config";
import { parseSwarmInput } from "@/server/agent/swarm/input";
import { AppError } from "@/server/errors";

const config = configSchema.parse({});
const known = (name: string) => name === "general" || name === "researcher";
const parse = (raw: unknown, cfg = config) => parseSwarmInput(raw, cfg, known);
const rejection = (raw: unknown, cfg = config): string => {
  try {
    parse(raw, cfg);
  } catch (error) {
    expect(error).toBeInstanceOf(AppError);
    expect((error as AppError).code).toBe("validation_failed");
    return (error as AppError).message;
  }
  throw new Error("expected a rejection");
};
const RUN_A = "0b8e5a52-8f0e-4a8c-9d8f-3c1f1f1f1f1a";
const RUN_B = "7d2c0f2e-1111-4222-8333-944455556666";

describe("agent_swarm input: template form", () => {
  it("replaces every placeholder and numbers the items in order", () => {
    const plan = parse({ profile: "researcher", prompt_template: "Review {{item}}; then re-check {{item}}.", items: ["a", "b$&", "c"] });
    expect(plan.form).toBe("template");
    expect(plan.items).toEqual([
      { item_id: "item-1", profile: "researcher", task: "Review a; then re-check a." },
      { item_id: "item-2", profile: "researcher", task: "Review b$&; then re-check b$&." },
      { item_id: "item-3", profile: "researcher", task: "Review c; then re-check c." },
    ]);
    expect(plan.concurrency).toBe(3);
  });

  it("defaults the profile to general", () => {
    expect(parse({ prompt_template: "x {{item}}", items: ["1"] }).items[0].profile).toBe("general");
  });

  it("rejects duplicate expanded tasks, naming both items", () => {
    expect(rejection({ prompt_template: "Do {{item}}", items: ["a", "b", "a"] })).toContain("items[2]: expands to the same task as items[0]");
  });

  it("rejects a template without the placeholder, object items and unknown profiles", () => {
    expect(rejection({ prompt_template: "no placeholder", items: ["a"] })).toContain("prompt_template: must contain {{item}}");
    expect(rejection({ prompt_template: "{{item}}", items: [{ item_id: "x", profile: "general", task: "t" }] })).toContain(
      "items: with prompt_template, items must be plain strings",
    );
    expect(rejection({ prompt_template: "{{item}}", profile: "wizard", items: ["a"] })).toContain('profile: unknown sub-agent profile "wizard"');
    expect(rejection({ prompt_template: "{{item}}", items: [] })).toContain("items: a template batch needs at least one string item");
    expect(rejection({ prompt_template: "{{item}}", items: ["a", " "] })).toContain("items[1]: must not be empty");
  });
});

describe("agent_swarm input: explicit form", () => {
  it("keeps the given ids, profiles and order", () => {
    const plan = parse({
      items: [
        { item_id: "runtime", profile: "general", task: "Review runtime" },
        { item_id: "ui", profile: "researcher", task: "Review UI" },
      ],
      concurrency: 2,
    });
    expect(plan.form).toBe("explicit");
    expect(plan.items.map((i) => i.item_id)).toEqual(["runtime", "ui"]);
    expect(plan.concurrency).toBe(2);
  });

  it("rejects duplicate ids, bad ids, reserved ids, empty tasks, unknown profiles and a shared profile", () => {
    const message = rejection({
      profile: "general",
      items: [
        { item_id: "a", profile: "general", task: "x" },
        { item_id: "a", profile: "general", task: "y" },
        { item_id: "bad id", profile: "general", task: "z" },
        { item_id: "resume-1", profile: "general", task: "z" },
        { item_id: "e", profile: "nope", task: "" },
      ],
    });
    expect(message).toContain("profile: only the template form takes a shared profile");
    expect(message).toContain("items[1].item_id: duplicates items[0].item_id");
    expect(message).toContain("items[2].item_id: must be 1..64");
    expect(message).toContain('items[3].item_id: "resume-1" is reserved');
    expect(message).toContain('items[4].profile: unknown sub-agent profile "nope"');
    expect(message).toContain("items[4].task: must not be empty");
  });

  it("rejects string items without a template and unknown fields", () => {
    expect(rejection({ items: ["a"] })).toContain("plain string items need a prompt_template");
    expect(rejection({ items: [{ item_id: "a", profile: "general", task: "t", extra: 1 }] })).toMatch(/items\[0\]/);
    expect(rejection({ items: [], surprise: true })).toMatch(/surprise|Unrecognized/);
  });
});

describe("agent_swarm input: bounds", () => {
  it("accepts 1..max_items and rejects 0 and max_items + 1 (resumes count too)", () => {
    const items = (n: number) => Array.from({ length: n }, (_, i) => `t${i}`);
    expect(parse({ prompt_template: "{{item}}", items: items(32) }).items).toHaveLength(32);
    expect(rejection({ prompt_template: "{{item}}", items: items(33) })).toContain("33 entries (0 resumes + 33 items) exceed the limit of 32");
    expect(rejection({})).toContain("items: give 1..32 items or resume_run_ids");
    expect(rejection({ prompt_template: "{{item}}", items: items(31), resume_run_ids: { [RUN_A]: "go on", [RUN_B]: "more" } })).toContain(
      "33 entries (2 resumes + 31 items)",
    );
    const small = configSchema.parse({ swarm: { max_items: 2, default_concurrency: 1, max_concurrency: 1 } });
    expect(rejection({ prompt_template: "{{item}}", items: items(3) }, small)).toContain("exceed the limit of 2");
  });

  it("defaults concurrency from configuration and caps it at max_concurrency", () => {
    const base = { prompt_template: "{{item}}", items: ["a"] };
    expect(parse(base).concurrency).toBe(3);
    expect(parse({ ...base, concurrency: 9 }).concurrency).toBe(5);
    expect(parse({ ...base, max_concurrency: 4 }).concurrency).toBe(4);
    expect(rejection({ ...base, concurrency: 0 })).toContain("concurrency: must be a whole number of at least 1");
    expect(rejection({ ...base, concurrency: 1.5 })).toContain("concurrency");
    expect(rejection({ ...base, concurrency: 2, max_concurrency: 3 })).toContain("not two different values");
  });
});

describe("agent_swarm input: resumes", () => {
  it("puts resumes first in map insertion order and allows a resume-only call", () => {
    const plan = parse({ resume_run_ids: { [RUN_B]: "continue B", [RUN_A]: "continue A" } });
    expect(plan.form).toBe("resume_only");
    expect(plan.resumes).toEqual([
      { item_id: "resume-1", source_run_id: RUN_B, prompt: "continue B" },
      { item_id: "resume-2", source_run_id: RUN_A, prompt: "continue A" },
    ]);
  });

  it("rejects malformed run ids and empty prompts", () => {
    const message = rejection({ resume_run_ids: { "not-a-run": "x", [RUN_A]: "  " } });
    expect(message).toContain('resume_run_ids["not-a-run"]: is not a child run id');
    expect(message).toContain(`resume_run_ids["${RUN_A}"]: the prompt must not be empty`);
  });
});
