import { describe, expect, it } from "vitest";
import { getConfig } from "@/server/config/load";
import { getSubagentRuntime } from "@/server/runtime/admission";
import { getProcessCapacity } from "@/server/runtime/capacity";

// This file runs in its own process (vitest forks), so the singletons start empty here.
describe("process capacity is read once at startup", () => {
  it("builds the controller from configuration and keeps it for the life of the process", async () => {
    process.env.FLOTILLA__SUBAGENT_RUNTIME__MAX_RUNNING = "2";
    process.env.FLOTILLA__SUBAGENT_RUNTIME__MAX_QUEUED = "5";
    process.env.FLOTILLA__SUBAGENT_RUNTIME__ADMISSION_POLICY = "reject";
    const first = getProcessCapacity();
    expect(first.stats()).toMatchObject({ maxRunning: 2, maxQueued: 5, policy: "reject" });
    const held = [await first.acquire(), await first.acquire()];

    // An edited environment (or file) does not change a live process's capacity.
    process.env.FLOTILLA__SUBAGENT_RUNTIME__MAX_RUNNING = "16";
    process.env.FLOTILLA__SUBAGENT_RUNTIME__ADMISSION_POLICY = "queue";
    const again = getProcessCapacity();
    expect(again).toBe(first);
    expect(again.stats()).toMatchObject({ maxRunning: 2, running: 2, policy: "reject" });
    expect(getConfig().subagent_runtime.max_running).toBe(2);
    await expect(again.acquire()).rejects.toThrow(/subagent_runtime\.max_running/);

    // The runtime the executor uses shares that same controller.
    expect(getSubagentRuntime().capacity).toBe(first);
    for (const r of held) r();
    expect(first.stats()).toMatchObject({ running: 0, queued: 0 });
  });
});
