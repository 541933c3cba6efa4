import { describe, expect, it } from "vitest";
import { OutageBackoff } from "@/server/ops/backoff";

describe("OutageBackoff", () => {
  it("doubles the wait per consecutive failure with equal jitter, capped, and resets on success", () => {
    let r = 0;
    const b = new OutageBackoff(100, 1_000, () => r);
    const now = 1_000_000;
    expect(b.holding(now)).toBe(false);
    r = 0;
    expect(b.failed(now)).toBe(100); // cap 200 → 100 + 0
    expect(b.holding(now + 99)).toBe(true);
    expect(b.holding(now + 100)).toBe(false);
    r = 1;
    expect(b.failed(now)).toBe(400); // cap 400 → 200 + 200
    r = 0.5;
    expect(b.failed(now)).toBe(600); // cap 800 → 400 + 200
    expect(b.failed(now)).toBe(750); // cap 1000 (max) → 500 + 250
    expect(b.failed(now)).toBe(750);
    expect(b.consecutiveFailures).toBe(5);
    b.succeeded();
    expect(b.holding(now)).toBe(false);
    r = 0;
    expect(b.failed(now)).toBe(100);
  });

  it("spreads a fleet's retries: different random draws give different delays within [cap/2, cap]", () => {
    const delays = Array.from({ length: 50 }, () => {
      const b = new OutageBackoff(1_000, 10_000);
      b.failed(0);
      b.failed(0);
      return b.failed(0); // cap 8,000
    });
    expect(Math.min(...delays)).toBeGreaterThanOrEqual(4_000);
    expect(Math.max(...delays)).toBeLessThanOrEqual(8_000);
    expect(new Set(delays.map((d) => Math.round(d))).size).toBeGreaterThan(40);
  });
});
