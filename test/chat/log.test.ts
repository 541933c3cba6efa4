import { describe, expect, it } from "vitest";
import { wantsPrettyLogs } from "@/server/log";

describe("log format", () => {
  it("is pretty on a terminal and JSON when piped or asked for", () => {
    expect(wantsPrettyLogs({}, true)).toBe(true);
    expect(wantsPrettyLogs({}, false)).toBe(false);
    expect(wantsPrettyLogs({ LOG_FORMAT: "json" }, true)).toBe(false);
    expect(wantsPrettyLogs({ LOG_FORMAT: "JSON", NODE_ENV: "development" }, true)).toBe(false);
    expect(wantsPrettyLogs({ LOG_FORMAT: "pretty" }, false)).toBe(true);
    expect(wantsPrettyLogs({ NODE_ENV: "development" }, false)).toBe(true);
  });
});
