import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { configSchema } from "@/lib/config";
import { sharedPrefix } from "@/lib/batch-rules";
import { buildExecutionSpec } from "@/server/batches/spec";
import { findCatalogEntry } from "@/server/models/catalog";
import { lanePromptCache, requestBuilder } from "@/server/worker/provider-lane/requests";

/**
 * The providers' batch lane builds each item's request from a template (one body built by the
 * model call stage with a marker where the item's text goes). Whatever the prompt, the body must
 * be byte for byte what the model call stage builds for it: checked here against the stage itself
 * (a second builder, which takes the stage's path for its first two items), over arbitrary text
 * (quotes, backslashes, control characters, NUL, lone surrogates, emoji, the marker's own shape),
 * on both providers, with and without a typed answer and a long shared prefix.
 */

const MODELS = [
  { name: "claude", provider: "anthropic" as const, model: "claude-sonnet-4-5", api_key_env: "LANE_TEMPLATE_KEY", base_url: "http://127.0.0.1:9/v1" },
  { name: "gpt", provider: "openai" as const, model: "gpt-4.1-mini", api_key_env: "LANE_TEMPLATE_KEY", base_url: "http://127.0.0.1:9/v1" },
];
process.env.LANE_TEMPLATE_KEY = "unused";
const config = configSchema.parse({ models: MODELS });
const LONG_PREFIX = `Label this support ticket. ${"Tickets about screens or cables are hardware. ".repeat(100)}Ticket: `;
const SCHEMA = { type: "object", properties: { label: { type: "string", enum: ["hardware", "software"] } }, required: ["label"] } as const;

function specOf(model: string, template: string, typed: boolean) {
  return buildExecutionSpec({
    userId: "u",
    threadId: "t",
    definition: { name: "labeler", description: "Labels.", systemPrompt: "You label support tickets.", toolGroups: [], maxTurns: 4, timeoutMs: 60_000 },
    allowedSubagents: ["labeler"],
    model: { name: model },
    origin: { kind: "api" },
    outputSchema: typed ? SCHEMA : null,
    promptTemplate: template,
    lane: "provider_batch",
  });
}

/** The text of an item: anything, including what JSON must escape and what looks like the marker. */
const itemText = fc.oneof(
  fc.string({ unit: "binary", maxLength: 200 }),
  fc.string({ unit: "grapheme", maxLength: 200 }),
  fc.constantFrom('"', "\\", "\u0000", "\n\r\t", "\ud800", "flotillaitem00", "</script>", "{{item}}", " ", "😀"),
);

describe("the lane's request template", () => {
  for (const model of ["claude", "gpt"] as const)
    for (const [label, template, typed] of [
      ["short prefix, text answers", "Label: {{item}}", false],
      ["long cached prefix, typed answers", `${LONG_PREFIX}{{item}}`, true],
      ["no prefix", "{{item}}", false],
    ] as const)
      it(`${model}, ${label}: every body equals the model call stage's`, async () => {
        const entry = findCatalogEntry(config, model)!;
        const spec = specOf(model, template, typed);
        const cache = lanePromptCache(entry, spec, "00000000-0000-4000-8000-000000000001");
        const prefix = sharedPrefix(template);
        const templated = requestBuilder(entry.provider as "anthropic" | "openai", entry, spec, cache);
        // Warm the template past its checks, with ordinary items.
        for (const warm of ["one", "two", "three"]) await templated(prefix + warm);
        await fc.assert(
          fc.asyncProperty(itemText, fc.boolean(), async (text, withPrefix) => {
            const prompt = withPrefix ? prefix + text : text;
            // A fresh builder takes the model call stage's own path for its first items.
            const reference = requestBuilder(entry.provider as "anthropic" | "openai", entry, spec, cache);
            expect(await templated(prompt)).toEqual(await reference(prompt));
          }),
          { numRuns: 60 },
        );
      });
});
