import { expect, type Locator } from "@playwright/test";

/** Every box inside `scope` stays within it horizontally, and `scope` within the viewport. */
export async function expectFits(scope: Locator, viewportWidth: number) {
  const problems = await scope.evaluate((root, vw) => {
    const out: string[] = [];
    const outer = root.getBoundingClientRect();
    if (outer.right > vw + 1) out.push(`the section ends at ${Math.round(outer.right)} px, past the ${vw} px window`);
    for (const el of root.querySelectorAll<HTMLElement>("*")) {
      const r = el.getBoundingClientRect();
      if (r.width === 0 || r.height === 0 || el.closest(".sr-only")) continue;
      if (r.right > outer.right + 1 || r.left < outer.left - 1)
        out.push(`${el.tagName.toLowerCase()} "${(el.textContent ?? "").trim().slice(0, 30)}" spans ${Math.round(r.left)}..${Math.round(r.right)}`);
    }
    // Headers are read whole (no "ATTEM").
    for (const th of root.querySelectorAll<HTMLElement>("th"))
      if (th.scrollWidth > th.clientWidth + 1) out.push(`header "${th.textContent}" is cut`);
    return out;
  }, viewportWidth);
  expect(problems).toEqual([]);
}
