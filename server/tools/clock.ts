import { tool } from "ai";
import { z } from "zod";
import type { ToolGroup } from "./types";

// One schema object per process: its JSON Schema is converted once (index.ts).
const NO_INPUT = z.object({});

/** `clock`: the current time, so an agent never guesses today's date. */
export const clockGroup: ToolGroup = {
  name: "clock",
  description: "current_time: the current date and time (UTC) and the server's time zone.",
  build: () => ({
    current_time: tool({
      description: "The current date and time (ISO 8601, UTC) and the server's time zone.",
      inputSchema: NO_INPUT,
      execute: async () => ({
        now: new Date().toISOString(),
        time_zone: Intl.DateTimeFormat().resolvedOptions().timeZone,
      }),
    }),
  }),
};
