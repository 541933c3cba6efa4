import { describe, expect, it } from "vitest";
import { submissionLimits } from "@/lib/batch-rules";
import { configSchema } from "@/lib/config";
import {
  parseJsonSubmission,
  parseNdjsonSubmission,
  readSubmission,
  submissionFormat,
} from "@/server/http/submission-input";
import { AppError } from "@/server/errors";

const limits = { maxItems: 5, maxLiveItems: 10, maxRunningItems: 4, maxTotalPromptChars: 50_000_000 };

function failure(fn: () => unknown): AppError {
  try {
    fn();
  } catch (err) {
    if (err instanceof AppError) return err;
    throw err;
  }
  throw new Error("expected an AppError");
}

async function failureAsync(p: Promise<unknown>): Promise<AppError> {
  try {
    await p;
  } catch (err) {
    if (err instanceof AppError) return err;
    throw err;
  }
  throw new Error("expected an AppError");
}

describe("submissionFormat", () => {
  it("maps content types and refuses others with 415", () => {
    expect(submissionFormat("application/json; charset=utf-8")).toBe("json");
    expect(submissionFormat(null)).toBe("json");
    expect(submissionFormat("application/x-ndjson")).toBe("ndjson");
    expect(submissionFormat("Application/X-NDJSON; charset=utf-8")).toBe("ndjson");
    const err = failure(() => submissionFormat("text/plain;charset=UTF-8"));
    expect(err.status).toBe(415);
    expect(err.message).toContain("text/plain");
  });
});

describe("parseJsonSubmission", () => {
  it("accepts strings and objects", () => {
    const input = parseJsonSubmission(
      JSON.stringify({ submission_key: "k", items: ["a", { item_key: "x", prompt: "b" }], max_live_items: 10 }),
      limits,
    );
    expect(input).toEqual({ submission_key: "k", items: ["a", { item_key: "x", prompt: "b" }], max_live_items: 10 });
  });

  it.each([
    ["not json", "{", 400, "invalid_json", "not valid JSON"],
    ["array body", "[]", 400, "validation_failed", "expected object"],
    ["missing key", JSON.stringify({ items: ["a"] }), 400, "validation_failed", "submission_key"],
    ["unknown field", JSON.stringify({ submission_key: "k", items: ["a"], colour: 1 }), 400, "validation_failed", "colour"],
    ["empty batch", JSON.stringify({ submission_key: "k", items: [] }), 400, "validation_failed", "items: must contain"],
    ["items wrong type", JSON.stringify({ submission_key: "k", items: "a" }), 400, "validation_failed", "items"],
    ["item number", JSON.stringify({ submission_key: "k", items: ["a", 3] }), 400, "validation_failed", "items.1:"],
    ["empty prompt", JSON.stringify({ submission_key: "k", items: [{ prompt: "" }] }), 400, "validation_failed", "items.0.prompt"],
    [
      "item field of a wrong type",
      JSON.stringify({ submission_key: "k", items: [{ prompt: "p", extra: null }] }),
      400,
      "validation_failed",
      "items.0.extra: must be a string, a number or a boolean",
    ],
    ["too many", JSON.stringify({ submission_key: "k", items: ["a", "b", "c", "d", "e", "f"] }), 400, "validation_failed", "at most 5"],
    ["negative live", JSON.stringify({ submission_key: "k", items: ["a"], max_live_items: -1 }), 400, "validation_failed", "max_live_items"],
    ["live too big", JSON.stringify({ submission_key: "k", items: ["a"], max_live_items: 11 }), 400, "validation_failed", "max_live_items: must be at most 10"],
    ["running too big", JSON.stringify({ submission_key: "k", items: ["a"], max_running_items: 5 }), 400, "validation_failed", "max_running_items"],
    ["running fraction", JSON.stringify({ submission_key: "k", items: ["a"], max_running_items: 1.5 }), 400, "validation_failed", "max_running_items"],
    ["template without slot", JSON.stringify({ submission_key: "k", items: ["a"], prompt_template: "x" }), 400, "validation_failed", "prompt_template"],
    [
      "duplicate explicit keys",
      JSON.stringify({ submission_key: "k", items: [{ item_key: "a", prompt: "p" }, { item_key: "a", prompt: "q" }] }),
      400,
      "validation_failed",
      'items.1: duplicate item_key "a" (first used by items.0)',
    ],
    [
      "explicit key colliding with a default key",
      JSON.stringify({ submission_key: "k", items: ["a", { item_key: "item-1", prompt: "q" }] }),
      400,
      "validation_failed",
      'items.1: duplicate item_key "item-1"',
    ],
  ])("%s → %i %s", (_name, body, status, code, message) => {
    const err = failure(() => parseJsonSubmission(body, limits));
    expect(err.status).toBe(status);
    expect(err.code).toBe(code);
    expect(err.message).toContain(message);
  });
});

describe("parseNdjsonSubmission", () => {
  const params = (q: string) => new URLSearchParams(q);

  it("reads items line by line, skipping blank lines, with fields from the query", () => {
    const input = parseNdjsonSubmission(
      '"a"\r\n\n{"item_key":"x","prompt":"b"}\n',
      params("submission_key=k&max_live_items=3&prompt_template=do%20%7B%7Bitem%7D%7D"),
      limits,
    );
    expect(input).toEqual({
      submission_key: "k",
      max_live_items: 3,
      prompt_template: "do {{item}}",
      items: ["a", { item_key: "x", prompt: "b" }],
    });
  });

  it.each([
    ["bad JSON line", '"a"\n"b"\n{oops\n', "submission_key=k", "line 3: not valid JSON"],
    ["number line", '"a"\n42\n', "submission_key=k", "line 2: expected a string"],
    ["empty prompt", '{"prompt":""}\n', "submission_key=k", "line 1: prompt: must not be empty"],
    ["item field of a wrong type", '{"prompt":"p","x":{}}\n', "submission_key=k", "line 1: x: must be a string, a number or a boolean"],
    ["empty string", '""\n', "submission_key=k", "line 1: must not be empty"],
    ["no items", "\n\n", "submission_key=k", "items: must contain at least one item"],
    ["too many", '"a"\n"b"\n"c"\n"d"\n"e"\n\n"f"\n', "submission_key=k", "line 7: at most 5 items"],
    ["duplicate keys", '{"item_key":"a","prompt":"p"}\n\n{"item_key":"a","prompt":"p"}\n', "submission_key=k", 'line 3: duplicate item_key "a" (first used by line 1)'],
    ["missing submission_key", '"a"\n', "", "submission_key"],
    ["unknown query parameter", '"a"\n', "submission_key=k&colour=red", "colour: unknown query parameter"],
    ["repeated query parameter", '"a"\n', "submission_key=k&submission_key=j", "submission_key: given more than once"],
    ["negative limit", '"a"\n', "submission_key=k&max_live_items=-1", "max_live_items"],
    ["zero limit", '"a"\n', "submission_key=k&max_running_items=0", "max_running_items"],
    ["text limit", '"a"\n', "submission_key=k&max_running_items=many", "max_running_items"],
    ["limit above config", '"a"\n', "submission_key=k&max_running_items=5", "max_running_items: must be at most 4"],
  ])("%s", (_name, body, query, message) => {
    const err = failure(() => parseNdjsonSubmission(body, params(query), limits));
    expect(err.status).toBe(400);
    expect(err.message).toContain(message);
  });
});

describe("readSubmission", () => {
  const config = configSchema.parse({ http: { max_body_bytes: 2048 } });

  it("refuses a body above the cap with 413 without reading it whole", async () => {
    let pulled = 0;
    const chunk = new Uint8Array(1024).fill(0x20);
    const body = new ReadableStream<Uint8Array>({
      pull(controller) {
        pulled++;
        if (pulled > 100) controller.close();
        else controller.enqueue(chunk);
      },
    });
    const req = new Request("http://x/api", {
      method: "POST",
      body,
      headers: { "content-type": "application/json" },
      duplex: "half",
    } as RequestInit);
    const err = await failureAsync(readSubmission(req, config));
    expect(err.status).toBe(413);
    expect(pulled).toBeLessThan(10);
  });

  it("refuses query parameters alongside a JSON body", async () => {
    const req = new Request("http://x/api?submission_key=k", {
      method: "POST",
      body: JSON.stringify({ submission_key: "k", items: ["a"] }),
      headers: { "content-type": "application/json" },
    });
    const err = await failureAsync(readSubmission(req, config));
    expect(err.status).toBe(400);
    expect(err.message).toContain("submission_key");
  });

  it("uses the configured limits", () => {
    expect(submissionLimits(configSchema.parse({}).subagent_batches)).toEqual({
      maxItems: 5000,
      maxLiveItems: 1000,
      maxRunningItems: 64,
      maxTotalPromptChars: 50_000_000,
    });
  });
});
