import { describe, expect, it } from "vitest";
import { matchingAs, matchPattern } from "@/server/runtime/pattern-thread";

/**
 * The matching thread is one per process, shared by every user: jobs wait in one queue per owner
 * and the thread takes the owners in turn. Real matches in the real thread: one user queues six
 * slow ones (1 MiB subjects each, distinct so none share a message), another user then queues
 * one; the second user's match is answered right after the job that was already running, not
 * after all six.
 */

const PATTERN = "(?:alpha|beta|gamma|delta)+z";
const subject = (n: number) => `${"alpha".repeat(200_000)}${n}`;

describe("the matching thread", () => {
  it("takes owners in turn: one user's queue of slow matches delays another's by one job", async () => {
    const answered: string[] = [];
    const track = (who: string, p: Promise<boolean>) => p.then((matched) => answered.push(`${who}:${matched}`));
    // Warm the thread up (its modules load once), so the queue below is what is measured.
    await matchingAs("warm", () => matchPattern(PATTERN, "", subject(99)));

    const heavy = Array.from({ length: 6 }, (_, i) => matchingAs("user-a", () => track(`a${i}`, matchPattern(PATTERN, "", subject(i)))));
    const light = matchingAs("user-b", () => track("b", matchPattern(PATTERN, "", subject(7))));
    await Promise.all([...heavy, light]);

    expect(answered).toHaveLength(7);
    // a0 was running when b arrived; b comes next (it would be last in one shared queue).
    expect(answered.indexOf("b:false")).toBeLessThanOrEqual(1);
    // Each owner's own jobs keep their order.
    expect(answered.filter((a) => a.startsWith("a"))).toEqual(["a0:false", "a1:false", "a2:false", "a3:false", "a4:false", "a5:false"]);
  }, 60_000);
});
