import { tool } from "ai";
import { z } from "zod";
import type { ToolGroup } from "./types";

// One schema object per process: its JSON Schema is converted once (index.ts).
const TEXT_INPUT = z.object({ text: z.string().max(1_000_000) });

/** `text`: exact counts, which models are bad at estimating. */
export const textGroup: ToolGroup = {
  name: "text",
  description: "count_text: exact character, word and line counts of a text.",
  build: () => ({
    count_text: tool({
      description: "Exact character, word and line counts of a text (for length limits and summaries).",
      inputSchema: TEXT_INPUT,
      execute: async ({ text }) => ({
        characters: text.length,
        words: text.trim() === "" ? 0 : text.trim().split(/\s+/).length,
        lines: text === "" ? 0 : text.split(/\r\n|\r|\n/).length,
      }),
    }),
  }),
};
