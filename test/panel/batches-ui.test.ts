import { describe, expect, it } from "vitest";
import { type BatchProjection, clampProgress, type ItemProjection, submitBatchSchema } from "@/lib/api/batches";
import { appendPage, applyRefresh, chainItems, firstPageChain, refreshIndex, replaceItem } from "@/components/batches/item-pages";
import { detectFormat, draftPrompt, expandTemplate, parseCsvRows, parseItemsInput } from "@/components/batches/new-batch/items-input";
import { buildSubmission, newSubmissionKey } from "@/components/batches/new-batch/submission";
import {
  allowedControls,
  barProgress,
  batchStatusText,
  canRetryItem,
  isActiveBatch,
  optimisticStatus,
  progressSplit,
} from "@/components/batches/status";
import { batchElapsed } from "@/components/batches/timing";
import { concurrencyText, etaText, waitingText } from "@/components/batches/waiting";
import { formatDuration, formatRate, formatTime, formatTokens, formatUsage } from "@/lib/format";

const LIMITS = { maxItems: 5000, maxLiveItems: 1000, maxRunningItems: 64 };

function batch(over: Partial<BatchProjection> = {}): BatchProjection {
  return {
    id: "b1",
    thread_id: "t1",
    status: "running",
    subagent: "general",
    total: 100,
    counts: { pending: 0, queued: 0, leased: 0, running: 0, awaiting_approval: 0, succeeded: 0, failed: 0, cancelled: 0 },
    live: 0,
    terminal: 0,
    progress: 0,
    max_live_items: 100,
    max_running_items: 3,
    max_attempts: 3,
    usage: { input_tokens: 0, output_tokens: 0, cached_input_tokens: 0, cache_write_tokens: 0 },
    model: "simulator",
    cost_usd: 0,
    budget: { max_total_tokens: null, max_cost_usd: null, used_tokens: 0, used_cost_usd: 0 },
    pause_reason: null,
    pilot: null,
    waiting_reason: null,
    waiting_until: null,
    waiting_since: null,
    eta: null,
    worker_slots: null,
    checks: [],
    verdicts: { passed: 0, failed: 0 },
    golden_set: null,
    input_fields: [],
    output_fields: [],
    created_at: "2026-01-01T00:00:00.000Z",
    updated_at: "2026-01-01T00:00:00.000Z",
    started_at: "2026-01-01T00:00:00.000Z",
    finished_at: null,
    reopened_at: null,
    variant_of: null,
    variant_of_title: null,
    title: "Label {{item}}",
    reviews: { pending: 0, accepted: 0, rejected: 0 },
    lane: "live",
    provider_batches: [],
    ...over,
  };
}

function item(n: number, status: ItemProjection["status"] = "queued"): ItemProjection {
  return {
    id: `i${n}`,
    item_key: `item-${n}`,
    input: `value ${n}`,
    position: n,
    status,
    attempts: 0,
    preview: null,
    error: null,
    tool_calls: 0,
    usage: { input_tokens: 0, output_tokens: 0, cached_input_tokens: 0, cache_write_tokens: 0 },
    cost_usd: 0,
    output: null,
    expected: null,
    reviewed_output: null,
    checks: [],
    verdict: null,
    review: null,
    started_at: null,
    finished_at: null,
  };
}

describe("why a batch waits", () => {
  it("says a batch at the provider's limit waits on it, with the rate it gets and its ETA", () => {
    const eta = { window_seconds: 60, finished_in_window: 1180, items_per_minute: 1180, remaining: 4720, eta_seconds: 240 };
    const at = batch({ status: "running", waiting_reason: "rate_limited", waiting_until: new Date().toISOString(), eta });
    expect(waitingText(at)).toBe("Waiting on the provider's limit: running at 1,180 items/min, about 4 min 00 s left.");
    expect(etaText(at)).toEqual({ throughput: "1180/min (provider's limit)", eta: "4 min 00 s" });
    // A 429 back-off before anything finished: when it lifts.
    const backoff = batch({ status: "running", waiting_reason: "rate_limited", waiting_until: null, eta: null });
    expect(waitingText(backoff)).toBe("Waiting: rate limited by the model provider.");
  });
  it("says a pilot paused the batch and what resuming runs", () => {
    const paused = batch({ status: "paused", pause_reason: "pilot", waiting_reason: "paused", pilot: 10, total: 300, terminal: 10 });
    expect(waitingText(paused)).toBe("Paused after its pilot: the first 10 items ran — check their results. Resume runs the other 290 items.");
    expect(waitingText(batch({ status: "paused", pause_reason: "user", waiting_reason: "paused" }))).toBe("Waiting: paused — resume to continue.");
  });

  it("projects the whole batch's cost from the pilot's real usage once a pilot item finished", () => {
    const base = batch({ status: "paused", pause_reason: "pilot", waiting_reason: "paused", pilot: 10, total: 5_000, terminal: 10 });
    const paused = { ...base, counts: { ...base.counts, succeeded: 9, failed: 1 }, cost_usd: 0.0005 };
    // $0.0005 over 10 items is $0.00005 an item; the other 4,990 at that rate: $0.25 in all.
    expect(waitingText(paused)).toBe(
      "Paused after its pilot: the first 10 items ran — check their results. Projected from the pilot: $0.2500 for all 5,000 items ($0.00005 an item). Resume runs the other 4,990 items.",
    );
  });
});

describe("what limits a running batch", () => {
  it("names the workers' slots when they are fewer than max_running_items, else the batch's own limit, with the setting to raise", () => {
    const waiting = { pending: 0, queued: 61, leased: 0, running: 3, awaiting_approval: 0, succeeded: 0, failed: 0, cancelled: 0 };
    const byWorkers = batch({ max_running_items: 64, worker_slots: 3, counts: waiting });
    expect(waitingText(byWorkers)).toBeNull();
    expect(concurrencyText(byWorkers)).toBe(
      "Running 3 of 64 at a time: the workers have 3 slots in all, shared by every batch. To run more at once, raise subagent_runtime.max_running (each worker's slots) or start another worker.",
    );
    expect(concurrencyText(batch({ max_running_items: 3, worker_slots: 16, counts: waiting }))).toBe(
      "Running 3 of 3 at a time: this batch's max_running_items. A new batch can ask for more (Max running items in New batch; the default is subagent_batches.default_max_running_items).",
    );
    // Nothing waits for a slot, or no worker is alive (the waiting notice says so): no line.
    expect(concurrencyText(batch({ max_running_items: 64, worker_slots: 3, counts: { ...waiting, queued: 0 } }))).toBeNull();
    expect(concurrencyText(batch({ max_running_items: 64, worker_slots: null, counts: waiting }))).toBeNull();
  });
});

describe("controls", () => {
  it("shows cached input tokens beside in and out only when some input was read from the cache", () => {
    expect(formatUsage({ input_tokens: 12_345, output_tokens: 456, cached_input_tokens: 10_000 })).toBe("12.3k in · 456 out · 10.0k cached");
    expect(formatUsage({ input_tokens: 12_345, output_tokens: 456, cached_input_tokens: 0 })).toBe("12.3k in · 456 out");
  });

  it("allows each control only in the states that can take it", () => {
    expect(allowedControls("running", true)).toEqual({ pause: true, resume: false, cancel: true });
    expect(allowedControls("queued", true)).toEqual({ pause: true, resume: false, cancel: true });
    expect(allowedControls("paused", true)).toEqual({ pause: false, resume: true, cancel: true });
    for (const s of ["completed", "failed", "cancelled"] as const)
      expect(allowedControls(s, true)).toEqual({ pause: false, resume: false, cancel: false });
  });
  it("disables everything without a worker", () => {
    expect(allowedControls("running", false)).toEqual({ pause: false, resume: false, cancel: false });
    expect(canRetryItem("failed", "completed", false)).toBe(false);
  });
  it("shows resume optimistically as the server answers it: queued before the batch started, running after", () => {
    const base = { status: "paused" as const, started_at: null };
    expect(optimisticStatus("resume", base).status).toBe("queued");
    expect(optimisticStatus("resume", { ...base, started_at: "2026-01-01T00:00:00Z" }).status).toBe("running");
    expect(optimisticStatus("pause", { ...base, status: "running" }).status).toBe("paused");
    expect(optimisticStatus("cancel", base).status).toBe("cancelled");
    // A control the status forbids changes nothing on screen; the server's 409 explains.
    expect(optimisticStatus("pause", { ...base, status: "completed" }).status).toBe("completed");
  });
  it("retries only failed items outside cancelled batches", () => {
    expect(canRetryItem("failed", "completed", true)).toBe(true);
    expect(canRetryItem("failed", "running", true)).toBe(true);
    expect(canRetryItem("failed", "cancelled", true)).toBe(false);
    expect(canRetryItem("succeeded", "completed", true)).toBe(false);
  });
  it("knows which batches are still active", () => {
    expect(["queued", "running", "paused"].every((s) => isActiveBatch(s as never))).toBe(true);
    expect(["completed", "failed", "cancelled"].some((s) => isActiveBatch(s as never))).toBe(false);
  });
  it("clamps any stored progress", () => {
    expect(clampProgress(Number.NaN, 10)).toBe(0);
    expect(clampProgress(5, 0)).toBe(0);
    expect(clampProgress(20, 10)).toBe(100);
    expect(clampProgress(-3, 10)).toBe(0);
    expect(clampProgress(1, 3)).toBe(33.3);
  });
});

describe("item input", () => {
  it("expands every {{item}} occurrence", () => {
    expect(expandTemplate("a {{item}} b {{item}}", "X")).toBe("a X b X");
    expect(expandTemplate("no placeholder", "X")).toBe("no placeholder");
  });

  it("parses pasted lines, skipping blanks and trimming", () => {
    const r = parseItemsInput("alpha\n\n  beta  \r\ngamma\n", "lines");
    expect(r.error).toBeNull();
    expect(r.items.map((i) => (i.kind === "value" ? i.value : ""))).toEqual(["alpha", "beta", "gamma"]);
  });

  it("parses JSONL strings, numbers, prompts and keyed items", () => {
    const r = parseItemsInput(
      ['"one"', "2", '{"prompt":"full prompt","item_key":"k1"}', '{"item":"four","key":"k4"}', ""].join("\n"),
      "jsonl",
    );
    expect(r.error).toBeNull();
    expect(r.items).toEqual([
      { kind: "value", value: "one" },
      { kind: "value", value: "2" },
      { kind: "prompt", prompt: "full prompt", key: "k1" },
      { kind: "value", value: "four", key: "k4" },
    ]);
  });

  it("names every bad JSONL line", () => {
    expect(parseItemsInput('"ok"\n{bad', "jsonl")).toEqual({
      items: [],
      fields: [],
      expected: false,
      errors: ["line 2: not valid JSON"],
      errorCount: 1,
      error: "line 2: not valid JSON",
    });
    expect(parseItemsInput('{bad\n"ok"\n[1]', "jsonl")).toMatchObject({
      items: [],
      errors: ["line 1: not valid JSON", 'line 3: expected a string or an object with "prompt" or "item"'],
      error: "line 1: not valid JSON (and 1 more)",
    });
    expect(parseItemsInput('"ok"\n\n[1]', "jsonl").error).toBe(
      'line 3: expected a string or an object with "prompt" or "item"',
    );
    expect(parseItemsInput('{"prompt":""}', "jsonl").error).toBe('line 1: expected a non-empty "prompt" or "item" field');
  });

  it("parses quoted CSV fields with commas, quotes and newlines, each row with its first line", () => {
    expect(parseCsvRows('a,"b, c","say ""hi"""\n"multi\nline",x\n\nlast,row\n')).toEqual({
      rows: [
        { fields: ["a", "b, c", 'say "hi"'], line: 1 },
        { fields: ["multi\nline", "x"], line: 2 },
        { fields: ["last", "row"], line: 5 },
      ],
      errors: [],
    });
  });

  it("refuses a CSV with an unclosed quote instead of merging rows, naming the line", () => {
    const r = parseItemsInput('item\nLisbon\n"Oslo\nNairobi\nLima\n', "csv");
    expect(r.items).toEqual([]);
    expect(r.errors).toEqual(['line 3: a quoted field is never closed (unclosed ")']);
    expect(r.errorCount).toBe(1);
  });

  it("lists every bad CSV row with its line and reason", () => {
    const r = parseItemsInput('item_key,item\nk1,apples\nk2\nk3,\nk4,a"b"\nk5,pears,extra\n', "csv");
    expect(r.items).toEqual([]);
    expect(r.errors).toEqual([
      "line 3: 1 field where the header has 2",
      "line 4: the item column is empty",
      "line 6: 3 fields where the header has 2",
    ]);
    const bad = parseItemsInput('item\n"a"b\n', "csv");
    expect(bad.errors[0]).toMatch(/^line 2: /);
    const many = parseItemsInput(`item,x\n${"a\n".repeat(30)}`, "csv");
    expect(many.errorCount).toBe(30);
    expect(many.errors).toHaveLength(20);
    expect(many.error).toBe("line 2: 1 field where the header has 2 (and 29 more)");
  });

  it("reads a CSV's columns by its header: prompts, one value column, or fields", () => {
    const withHeader = parseItemsInput("item_key,item\nk1,apples\nk2,pears\n", "csv");
    expect(withHeader.items).toEqual([
      { kind: "value", value: "apples", key: "k1" },
      { kind: "value", value: "pears", key: "k2" },
    ]);
    const prompts = parseItemsInput('prompt\n"Summarise, briefly"\n', "csv");
    expect(prompts.items).toEqual([{ kind: "prompt", prompt: "Summarise, briefly", key: undefined }]);
    // Any other header names fields: the first row is always the header.
    const fields = parseItemsInput("paris,france\nrome,italy\n", "csv");
    expect(fields.fields).toEqual(["paris", "france"]);
    expect(fields.items).toEqual([{ kind: "object", fields: { paris: "rome", france: "italy" }, key: undefined }]);
    expect(parseItemsInput("item\nok\n\"\"\n", "csv").error).toBeNull();
    expect(parseItemsInput("id,item\nk,ok\nj,\n", "csv").error).toBe("line 3: the item column is empty");
    // Beside other columns, item is a field like any (empty is a value).
    expect(parseItemsInput("item,other\nok,1\n,2\n", "csv").items[1]).toEqual({ kind: "object", fields: { item: "", other: "2" }, key: undefined });
  });

  it("detects the format from the file name, then the content", () => {
    expect(detectFormat("a.jsonl", "x")).toBe("jsonl");
    expect(detectFormat("a.NDJSON", "x")).toBe("jsonl");
    expect(detectFormat("a.csv", "x")).toBe("csv");
    expect(detectFormat("a.txt", '"json"')).toBe("lines");
    expect(detectFormat(null, '{"prompt":"x"}\n')).toBe("jsonl");
    expect(detectFormat(null, '"quoted but" not json')).toBe("lines");
    expect(detectFormat(null, "plain")).toBe("lines");
  });
});

describe("buildSubmission", () => {
  const values = parseItemsInput("a\nb [[fail]]\nc", "lines").items;

  it("sends plain values with the template and the server accepts the shape", () => {
    const r = buildSubmission({ submissionKey: "k", subagent: "general", template: "Do {{item}}", items: values }, LIMITS);
    expect(r.error).toBeNull();
    expect(r.body).toEqual({
      submission_key: "k",
      subagent: "general",
      items: ["a", "b [[fail]]", "c"],
      prompt_template: "Do {{item}}",
    });
    expect(submitBatchSchema.safeParse(r.body).success).toBe(true);
  });

  it("expands keyed values and keeps explicit prompts", () => {
    const items = parseItemsInput('{"item":"x","item_key":"kx"}\n{"prompt":"P"}\n"y"', "jsonl").items;
    const r = buildSubmission({ submissionKey: "k", template: "T {{item}}", items, maxRunningItems: 8 }, LIMITS);
    expect(r.body).toEqual({
      submission_key: "k",
      items: [{ item_key: "kx", prompt: "T x" }, { prompt: "P" }, "y"],
      prompt_template: "T {{item}}",
      max_running_items: 8,
    });
    expect(submitBatchSchema.safeParse(r.body).success).toBe(true);
    expect(draftPrompt(items[0], "T {{item}}")).toBe("T x");
  });

  it("omits the template when no plain value needs it", () => {
    const items = parseItemsInput('{"prompt":"P1"}\n{"prompt":"P2"}', "jsonl").items;
    const r = buildSubmission({ submissionKey: "k", template: "", items }, LIMITS);
    expect(r.body).toEqual({ submission_key: "k", items: [{ prompt: "P1" }, { prompt: "P2" }] });
  });

  it("reports what the server would reject, before sending", () => {
    expect(buildSubmission({ submissionKey: "k", template: "{{item}}", items: [] }, LIMITS).error).toBe(
      "Add at least one item.",
    );
    expect(buildSubmission({ submissionKey: "k", template: "no slot", items: values }, LIMITS).error).toBe(
      "The prompt template must contain {{item}}.",
    );
    expect(
      buildSubmission({ submissionKey: "k", template: "{{item}}", items: values }, { ...LIMITS, maxItems: 2 }).error,
    ).toBe("At most 2 items per batch (got 3).");
    expect(
      buildSubmission({ submissionKey: "k", template: "{{item}}", items: values, maxLiveItems: 0 }, LIMITS).error,
    ).toBe("Max live items must be a whole number from 1 to 1000.");
    expect(
      buildSubmission({ submissionKey: "k", template: "{{item}}", items: values, maxRunningItems: 65 }, LIMITS).error,
    ).toBe("Max running items must be a whole number from 1 to 64.");
    const dup = parseItemsInput('"a"\n{"item":"b","item_key":"item-1"}', "jsonl").items;
    expect(buildSubmission({ submissionKey: "k", template: "{{item}}", items: dup }, LIMITS).error).toBe(
      'Item 2: duplicate key "item-1" (first used by item 1).',
    );
  });

  it("makes a fresh submission key each time", () => {
    const a = newSubmissionKey();
    expect(a).toMatch(/^panel:[0-9a-f-]{32,36}$/);
    expect(newSubmissionKey()).not.toBe(a);
  });
});

describe("timing", () => {
  const t0 = Date.parse("2026-01-01T00:00:00.000Z");

  it("runs from the start to now while running, and stops the clock at finish", () => {
    expect(batchElapsed(batch(), t0 + 10_000)).toEqual({ elapsedMs: 10_000, sinceRetry: false });
    const done = batchElapsed(batch({ status: "completed", finished_at: "2026-01-01T00:00:20.000Z" }), t0 + 99_000);
    expect(done).toEqual({ elapsedMs: 20_000, sinceRetry: false });
    // Not started yet: from its creation.
    expect(batchElapsed(batch({ status: "queued", started_at: null }), t0 + 3_000).elapsedMs).toBe(3_000);
  });

  it("counts a retried batch from the retry, not across the time it sat finished", () => {
    // Ran 20 s, sat finished until 10:00, retried then: 9 s into the retry, and 15 s once it settled again.
    const reopened = { started_at: "2026-01-01T00:00:00.000Z", reopened_at: "2026-01-01T10:00:00.000Z" };
    expect(batchElapsed(batch({ ...reopened, status: "running" }), Date.parse("2026-01-01T10:00:09.000Z"))).toEqual({
      elapsedMs: 9_000,
      sinceRetry: true,
    });
    const settled = batch({ ...reopened, status: "completed", finished_at: "2026-01-01T10:00:15.000Z" });
    expect(batchElapsed(settled, Date.parse("2026-01-01T11:00:00.000Z"))).toEqual({ elapsedMs: 15_000, sinceRetry: true });
  });

  it("survives malformed stored values", () => {
    expect(batchElapsed(batch({ started_at: "garbage", created_at: "garbage" }), t0).elapsedMs).toBe(0);
    expect(batchElapsed(batch({ reopened_at: "garbage" }), t0 + 5_000)).toEqual({ elapsedMs: 5_000, sinceRetry: false });
  });

  it("formats durations, rates and tokens (the chat's cards use the same lib/format)", () => {
    expect(formatDuration(0)).toBe("0 ms");
    expect(formatDuration(850)).toBe("850 ms");
    expect(formatDuration(1_500)).toBe("1.5 s");
    expect(formatDuration(42_400)).toBe("42 s");
    expect(formatDuration(185_000)).toBe("3 min 05 s");
    expect(formatDuration(2 * 3600_000 + 7 * 60_000)).toBe("2 h 07 min");
    expect(formatDuration(Number.NaN)).toBe("—");
    expect(formatDuration(null)).toBe("—");
    expect(formatRate(12.34)).toBe("12.3/s");
    expect(formatRate(0.075)).toBe("4.5/min");
    expect(formatRate(null)).toBe("—");
    expect(formatTokens(950)).toBe("950");
    expect(formatTokens(12_340)).toBe("12.3k");
    expect(formatTokens(4_100_000)).toBe("4.1M");
  });
});

describe("page chain", () => {
  const page = (ns: number[], next: string | null) => ({ items: ns.map((n) => item(n)), next_cursor: next });

  it("appends only the page that continues the chain", () => {
    let c = firstPageChain(page([1, 2], "c2"));
    c = appendPage(c, "c2", page([3, 4], "c4"));
    expect(chainItems(c).map((i) => i.position)).toEqual([1, 2, 3, 4]);
    expect(appendPage(c, "c2", page([3, 4], "c4"))).toBe(c); // a doubled click changes nothing
    c = appendPage(c, "c4", page([5], null));
    expect(c.nextCursor).toBeNull();
  });

  it("refreshes one page per tick, round-robin", () => {
    let c = appendPage(firstPageChain(page([1, 2], "c2")), "c2", page([3, 4], null));
    expect(refreshIndex(c)).toBe(0);
    c = applyRefresh(c, 0, null, { items: [item(1, "succeeded"), item(2)], next_cursor: "c2" });
    expect(refreshIndex(c)).toBe(1);
    c = applyRefresh(c, 1, "c2", { items: [item(3, "failed"), item(4)], next_cursor: null });
    expect(refreshIndex(c)).toBe(0);
    expect(chainItems(c).map((i) => i.status)).toEqual(["succeeded", "queued", "failed", "queued"]);
  });

  it("relinks the next cursor when a filtered page shifts, and drops pages past a new end", () => {
    let c = appendPage(firstPageChain(page([1, 2], "c2")), "c2", page([5, 6], null));
    // an item entered the filter at position 2; page one now ends earlier
    c = applyRefresh(c, 0, null, page([1, 2], "c2b"));
    expect(c.pages[1].cursor).toBe("c2b");
    expect(c.pages).toHaveLength(2);
    // page one is now the whole set
    c = applyRefresh(c, 0, null, page([1], null));
    expect(c.pages).toHaveLength(1);
    expect(c.nextCursor).toBeNull();
  });

  it("ignores a refresh that raced with a relink, and dedupes overlap", () => {
    let c = appendPage(firstPageChain(page([1, 2], "c2")), "c2", page([2, 3], null));
    expect(chainItems(c).map((i) => i.position)).toEqual([1, 2, 3]);
    c = applyRefresh(c, 0, null, page([1, 2], "other"));
    const stale = applyRefresh(c, 1, "c2", page([9], null));
    expect(chainItems(stale).map((i) => i.position)).toEqual([1, 2, 3]);
    expect(stale.tick).toBe(c.tick + 1);
  });

  it("replaces a retried item wherever it is loaded", () => {
    const c = appendPage(firstPageChain(page([1], "c1")), "c1", page([2], null));
    const next = replaceItem(c, { ...item(2), status: "queued", attempts: 0 });
    expect(chainItems(next)[1].status).toBe("queued");
  });
});

describe("batch status in words", () => {
  const counts = (succeeded: number, failed = 0, cancelled = 0) => ({ succeeded, failed, cancelled });
  it("says a finished batch's failures and cancellations, in amber", () => {
    expect(batchStatusText("completed", counts(5))).toEqual({ label: "completed", tone: "ok" });
    expect(batchStatusText("completed", counts(3, 2))).toEqual({ label: "completed · 2 failed", tone: "warn" });
    expect(batchStatusText("completed", counts(30, 0, 20))).toEqual({ label: "completed · 20 cancelled", tone: "warn" });
    expect(batchStatusText("cancelled", counts(30, 0, 20))).toEqual({ label: "cancelled", tone: "neutral" });
    expect(batchStatusText("running", counts(1))).toEqual({ label: "running", tone: "active" });
  });
  it("shows done / total with the split instead of a 100% that hides failures", () => {
    expect(progressSplit(5, counts(3, 2))).toBe("3 / 5 done · 2 failed");
    expect(progressSplit(50, counts(30, 0, 20))).toBe("30 / 50 done · 20 cancelled");
    expect(progressSplit(1200, counts(1000))).toBe("1,000 / 1,200 done");
  });
});

describe("cancelled bar and times", () => {
  it("a cancelled batch's bar shows the share that ran, never a full bar", () => {
    const c = { pending: 0, queued: 0, leased: 0, running: 0, awaiting_approval: 0, succeeded: 30, failed: 10, cancelled: 60 };
    expect(barProgress({ status: "cancelled", total: 100, terminal: 100, counts: c })).toBe(40);
    expect(barProgress({ status: "completed", total: 100, terminal: 100, counts: { ...c, succeeded: 90, cancelled: 0 } })).toBe(100);
    expect(barProgress({ status: "running", total: 200, terminal: 50, counts: c })).toBe(25);
  });

  it("prints a moment one way: the time today, a short date before", () => {
    const now = new Date(2026, 11, 1, 16, 0, 0).getTime();
    expect(formatTime(new Date(2026, 11, 1, 9, 5, 7).toISOString(), now)).toBe("09:05:07");
    expect(formatTime(new Date(2026, 10, 28, 14, 3, 0).toISOString(), now)).toBe("28 Nov 14:03");
    expect(formatTime(new Date(2025, 10, 28, 14, 3, 0).toISOString(), now)).toBe("28 Nov 2025 14:03");
    expect(formatTime(null, now)).toBe("—");
    expect(formatTime("garbage", now)).toBe("—");
  });
});
