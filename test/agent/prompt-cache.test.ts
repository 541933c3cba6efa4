import type { ModelMessage } from "ai";
import { describe, expect, it } from "vitest";
import { sharedPrefix } from "@/lib/batch-rules";
import { withPromptCache } from "@/server/agent/executor/prompt-cache";

/** What one model call sends for the provider's prompt cache (the stored transcript is never changed). */

const LONG = "x".repeat(4_200); // over 1,024 tokens at 4 characters a token
const user = (content: string): ModelMessage[] => [{ role: "user", content }];
const EPHEMERAL = { anthropic: { cacheControl: { type: "ephemeral" } } };

describe("sharedPrefix", () => {
  it("is the template's text before its first placeholder, {{item}} or a field", () => {
    expect(sharedPrefix("Context...\nQ: {{item}} and {{item}}")).toBe("Context...\nQ: ");
    expect(sharedPrefix("Review {{title}} by {{author}}")).toBe("Review ");
    expect(sharedPrefix("{{item}} first")).toBe("");
    expect(sharedPrefix(null)).toBe("");
  });
});

describe("withPromptCache", () => {
  it("anthropic: marks a long system prompt and the shared prefix as its own first block", () => {
    const messages = user(`${LONG}Q: one`);
    const sent = withPromptCache(
      { provider: "anthropic", modelId: "claude-sonnet-4-5", sharedPrefix: `${LONG}Q: ` },
      { system: LONG, messages, toolChars: () => 0 },
    );
    expect(sent.system).toEqual({ role: "system", content: LONG, providerOptions: EPHEMERAL });
    expect(sent.messages).toEqual([
      {
        role: "user",
        content: [
          { type: "text", text: `${LONG}Q: `, providerOptions: EPHEMERAL },
          { type: "text", text: "one" },
        ],
      },
    ]);
    expect(messages).toEqual(user(`${LONG}Q: one`)); // the caller's transcript is untouched
    expect(sent.providerOptions).toBeUndefined();
  });

  it("anthropic: nothing marked below the model's minimum (tools count before the system prompt); Haiku needs 2,048 tokens", () => {
    const short = withPromptCache({ provider: "anthropic", modelId: "claude-sonnet-4-5" }, { system: "short", messages: user("hi"), toolChars: () => 100 });
    expect(short.system).toBe("short");
    const withTools = withPromptCache({ provider: "anthropic", modelId: "claude-sonnet-4-5" }, { system: "short", messages: user("hi"), toolChars: () => 4_200 });
    expect(withTools.system).toMatchObject({ providerOptions: EPHEMERAL });
    const haiku = withPromptCache({ provider: "anthropic", modelId: "claude-haiku-4-5" }, { system: LONG, messages: user("hi"), toolChars: () => 0 });
    expect(haiku.system).toBe(LONG);
    // The prefix's mark counts what comes before it: a short system prompt plus a long prefix is long enough.
    const prefixOnly = withPromptCache(
      { provider: "anthropic", modelId: "claude-sonnet-4-5", sharedPrefix: LONG },
      { system: "short", messages: user(`${LONG}rest`), toolChars: () => 0 },
    );
    expect(prefixOnly.system).toBe("short");
    expect((prefixOnly.messages[0]!.content as Array<{ providerOptions?: unknown }>)[0]!.providerOptions).toEqual(EPHEMERAL);
  });

  it("a prompt that does not start with the prefix (an explicit prompt item) is sent as it is", () => {
    const messages = user("An explicit prompt");
    expect(withPromptCache({ provider: "anthropic", modelId: "claude-sonnet-4-5", sharedPrefix: LONG }, { system: LONG, messages, toolChars: () => 0 }).messages).toBe(messages);
  });

  it("openai: prompt_cache_key flotilla:<batch_id>, the shared prefix first, no marks", () => {
    const sent = withPromptCache(
      { provider: "openai", modelId: "gpt-4o-mini", key: "flotilla:b1", sharedPrefix: "Context: " },
      { system: LONG, messages: user("Context: one"), toolChars: () => 0 },
    );
    expect(sent.providerOptions).toEqual({ openai: { promptCacheKey: "flotilla:b1" } });
    expect(sent.system).toBe(LONG);
    expect(sent.messages[0]!.content).toEqual([
      { type: "text", text: "Context: " },
      { type: "text", text: "one" },
    ]);
  });

  it("openai-compatible, google and the simulator: sent as they are", () => {
    for (const provider of ["openai-compatible", "google", undefined] as const) {
      const measured: string[] = [];
      const call = { system: LONG, messages: user(`${LONG}x`), toolChars: () => measured.push(String(provider)) };
      const sent = withPromptCache({ provider, modelId: "m", key: "flotilla:b1", sharedPrefix: LONG }, call);
      expect(sent).toEqual({ system: call.system, messages: call.messages });
      expect(sent.messages).toBe(call.messages);
      // Measuring the tools costs a JSON Schema conversion each: only Anthropic's cache needs it.
      expect(measured).toEqual([]);
    }
  });
});
