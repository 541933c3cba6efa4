import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { type LineResult, newFileSchemas, splitLines, validateOpenAiLine } from "@/server/compat/requests";

/** Properties of the OpenAI batch-line validator (pure: no database). */

const ENDPOINT = "/v1/chat/completions";
const MODELS = new Set(["simulator", "flotilla:general"]);
const checkModel = (name: string) => (MODELS.has(name) ? null : `model ${JSON.stringify(name)} is unknown`);

const content = fc.oneof(
  fc.string({ maxLength: 40 }),
  fc.array(fc.record({ type: fc.constant("text"), text: fc.string({ maxLength: 20 }) }), { minLength: 1, maxLength: 3 }),
);
const validBody = fc.record(
  {
    model: fc.constantFrom(...MODELS),
    messages: fc.array(fc.record({ role: fc.constantFrom("system", "developer", "user", "assistant"), content }), {
      minLength: 1,
      maxLength: 4,
    }),
    temperature: fc.double({ min: 0, max: 2, noNaN: true }),
    max_tokens: fc.integer({ min: 1, max: 4096 }),
    stop: fc.oneof(fc.string({ maxLength: 5 }), fc.array(fc.string({ maxLength: 5 }), { maxLength: 4 })),
  },
  { requiredKeys: ["model", "messages"] },
);
const customId = fc.string({ minLength: 1, maxLength: 64 });
const validLine = fc.record({ custom_id: customId, method: fc.constant("POST"), url: fc.constant(ENDPOINT), body: validBody });

type Line = { custom_id: unknown; method: unknown; url: unknown; body: Record<string, unknown> };

/** One way to break a valid line, and the error code it must produce. */
const breakage: fc.Arbitrary<[string, (l: Line) => Line]> = fc.constantFrom(
  ["invalid_request", (l: Line) => ({ ...l, custom_id: 42 })],
  ["invalid_request", (l: Line) => ({ ...l, custom_id: "" })],
  ["invalid_method", (l: Line) => ({ ...l, method: "GET" })],
  ["mismatched_url", (l: Line) => ({ ...l, url: "/v1/embeddings" })],
  ["invalid_body", (l: Line) => ({ ...l, body: { ...l.body, messages: [] } })],
  ["invalid_body", (l: Line) => ({ ...l, body: { ...l.body, temperature: 3 } })],
  ["invalid_body", (l: Line) => ({ ...l, body: { ...l.body, stream: true } })],
  ["invalid_body", (l: Line) => ({ ...l, body: { ...l.body, messages: [{ role: "user", content: [{ type: "image_url" }] }] } })],
  ["invalid_body", (l: Line) => ({ ...l, body: { ...l.body, tools: [{ type: "function" }] } })],
  ["invalid_body", (l: Line) => ({ ...l, body: { ...l.body, response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: 7 } } } } })],
  ["invalid_body", (l: Line) => ({ ...l, body: { ...l.body, response_format: { type: "yaml" } } })],
  ["model_not_found", (l: Line) => ({ ...l, body: { ...l.body, model: "gpt-unknown" } })],
);

const validate = (text: string, line: number, seen = new Set<string>()): LineResult =>
  validateOpenAiLine(text, line, { endpoint: ENDPOINT, seen, checkModel, schemas: newFileSchemas() });

describe("validateOpenAiLine", () => {
  it("accepts every well-formed line and keeps its custom_id, model and user text", () => {
    fc.assert(
      fc.property(validLine, fc.integer({ min: 1, max: 50_000 }), (line, n) => {
        const seen = new Set<string>();
        const r = validate(JSON.stringify(line), n, seen);
        if (!r.ok) throw new Error(JSON.stringify(r.error));
        expect(r.customId).toBe(line.custom_id);
        expect(r.request.model).toBe(line.body.model);
        expect(seen.has(line.custom_id)).toBe(true);
        const turns = line.body.messages.filter((m) => m.role === "user" || m.role === "assistant");
        expect(r.request.messages).toHaveLength(turns.length);
        if (line.body.stop !== undefined) expect(Array.isArray(r.request.stop)).toBe(true);
      }),
    );
  });

  it("rejects each kind of broken line with its code, naming the line, and records nothing", () => {
    fc.assert(
      fc.property(validLine, breakage, fc.integer({ min: 1, max: 50_000 }), (line, [code, breakIt], n) => {
        const seen = new Set<string>();
        const r = validate(JSON.stringify(breakIt(line as Line)), n, seen);
        expect(r.ok).toBe(false);
        if (r.ok) return;
        expect(r.error.code).toBe(code);
        expect(r.error.line).toBe(n);
        expect(r.error.message).toContain(`Line ${n}`);
        expect(seen.size).toBe(0);
      }),
    );
  });

  it("never throws, whatever the text: anything that is not a valid line is an error entry", () => {
    fc.assert(
      fc.property(fc.oneof(fc.string(), fc.json(), fc.jsonValue().map((v) => JSON.stringify(v))), (text) => {
        const r = validate(text, 1);
        if (!r.ok) expect(typeof r.error.code).toBe("string");
      }),
    );
  });

  it("accepts a custom_id once: the second use is duplicate_custom_id", () => {
    fc.assert(
      fc.property(validLine, validLine, (a, b) => {
        const seen = new Set<string>();
        expect(validate(JSON.stringify(a), 1, seen).ok).toBe(true);
        const second = validate(JSON.stringify({ ...b, custom_id: a.custom_id }), 2, seen);
        expect(second.ok ? null : second.error.code).toBe("duplicate_custom_id");
      }),
    );
  });
});

describe("splitLines", () => {
  it("yields the same lines however the bytes are chunked (CRLF, multi-byte characters, no final newline)", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.string({ unit: "grapheme", maxLength: 30 }).filter((s) => !/[\r\n]/.test(s)), { maxLength: 20 }),
        fc.constantFrom("\n", "\r\n"),
        fc.boolean(),
        fc.array(fc.integer({ min: 1, max: 7 }), { minLength: 1, maxLength: 10 }),
        async (lines, eol, finalNewline, cuts) => {
          const bytes = Buffer.from(lines.join(eol) + (finalNewline && lines.length ? eol : ""), "utf8");
          const chunks: Uint8Array[] = [];
          for (let at = 0, i = 0; at < bytes.length; i++) {
            const size = cuts[i % cuts.length]!;
            chunks.push(bytes.subarray(at, at + size));
            at += size;
          }
          const out: { line: number; text: string }[] = [];
          for await (const l of splitLines((async function* () { yield* chunks; })())) out.push(l);
          const expected = lines.map((text, i) => ({ line: i + 1, text })).filter((l) => l.text.trim() !== "");
          expect(out).toEqual(expected);
        },
      ),
    );
  });
});
