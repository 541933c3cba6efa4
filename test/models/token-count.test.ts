import { readFileSync } from "node:fs";
import { getEncoding } from "js-tiktoken";
import { describe, expect, it } from "vitest";
import { tokenCounter } from "@/server/models/token-count";

/**
 * The bounded counter (server/models/token-count.ts) counts what js-tiktoken's own encoder
 * counts, on both encodings: natural text and code, and random mixes of letters, CJK, emoji,
 * combining marks, contractions, whitespace runs and special-token text (counted as plain text),
 * kept short enough for js-tiktoken's quadratic merge.
 */

const ALPHABET = [
  ..."abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 \n\r\t.,;:!?'\"-_/\\()[]{}<>éüßñ中文日本語한국어😀👍🏽\u0301\u200b\u00a0",
  "<|endoftext|>",
  "'s",
  "'LL",
  "    ",
  "\n\n",
];

/** A deterministic pseudo-random text (so a failure repeats). */
function randomText(seed: number, length: number): string {
  let x = seed;
  const next = () => {
    x = (x * 1_103_515_245 + 12_345) % 2_147_483_648;
    return x / 2_147_483_648;
  };
  return Array.from({ length }, () => ALPHABET[Math.floor(next() * ALPHABET.length)]).join("");
}

describe("tokenCounter", () => {
  for (const [model, encoding] of [
    ["gpt-4o-mini", "o200k_base"],
    ["gpt-4", "cl100k_base"],
  ] as const)
    it(`${model}: the same count as js-tiktoken's ${encoding}`, async () => {
      const counter = await tokenCounter({ provider: "openai", model });
      const reference = getEncoding(encoding);
      expect(counter.method).toBe("tiktoken");
      const texts = [
        "",
        "a",
        readFileSync("docs/ARCHITECTURE.md", "utf8"),
        readFileSync("server/runtime/pattern-thread.ts", "utf8"),
        "a".repeat(1_000),
        "中".repeat(300),
        "😀".repeat(100),
        ...Array.from({ length: 150 }, (_, i) => randomText(i + 1, 1 + (i % 150))),
      ];
      for (const text of texts) expect(await counter.count(text), JSON.stringify(text.slice(0, 80))).toBe(reference.encode(text, [], []).length);
    }, 120_000);

  it("another model: about 4 characters a token", async () => {
    for (const provider of ["anthropic", "simulator", "openai-compatible"]) {
      const counter = await tokenCounter({ provider, model: "claude-sonnet-4-5" });
      expect(counter.method).toBe("approx");
      expect(await counter.count("x".repeat(10))).toBe(3);
    }
  });
});
