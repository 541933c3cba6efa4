import type { ItemPage, ItemProjection } from "@/lib/api/batches";

/**
 * The item pages a user has loaded, as a cursor chain. Polling refreshes one page per tick,
 * round-robin, so the request budget is one page read per interval however many pages are
 * loaded; a refresh re-links the next page's cursor, and a page that is now last drops the
 * pages after it.
 */
export interface PageChain {
  pages: { cursor: string | null; items: ItemProjection[] }[];
  nextCursor: string | null;
  /** which page the next poll refreshes */
  tick: number;
  /** Rows before the first loaded page, dropped to keep the loaded pages bounded. */
  dropped: number;
}

/** Most pages kept loaded: "Load more" past this drops the oldest page, so the rows in the tree stay bounded. */
export const MAX_LOADED_PAGES = 20;

export function firstPageChain(page: ItemPage): PageChain {
  return { pages: [{ cursor: null, items: page.items }], nextCursor: page.next_cursor, tick: 0, dropped: 0 };
}

export function refreshIndex(chain: PageChain | undefined): number {
  if (!chain || chain.pages.length === 0) return 0;
  return chain.tick % chain.pages.length;
}

/** Applies a refreshed page fetched with `cursor` at `index`; ignored if the chain moved on. */
export function applyRefresh(chain: PageChain, index: number, cursor: string | null, page: ItemPage): PageChain {
  const at = chain.pages[index];
  if (!at || at.cursor !== cursor) return { ...chain, tick: chain.tick + 1 };
  const pages = chain.pages.slice(0, index + 1);
  pages[index] = { cursor, items: page.items };
  if (page.next_cursor === null) return { ...chain, pages, nextCursor: null, tick: chain.tick + 1 };
  const rest = chain.pages.slice(index + 1);
  if (rest.length === 0) return { ...chain, pages, nextCursor: page.next_cursor, tick: chain.tick + 1 };
  rest[0] = { ...rest[0], cursor: page.next_cursor };
  return { ...chain, pages: [...pages, ...rest], tick: chain.tick + 1 };
}

/**
 * Appends the page fetched with `cursor` by "Load more"; ignored unless it continues the chain.
 * Past `maxPages` the oldest pages are dropped (counted in `dropped`).
 */
export function appendPage(chain: PageChain, cursor: string, page: ItemPage, maxPages = MAX_LOADED_PAGES): PageChain {
  if (chain.nextCursor !== cursor) return chain;
  const pages = [...chain.pages, { cursor, items: page.items }];
  const cut = Math.max(0, pages.length - Math.max(1, maxPages));
  const dropped = pages.slice(0, cut).reduce((n, p) => n + p.items.length, chain.dropped);
  return { pages: pages.slice(cut), nextCursor: page.next_cursor, tick: chain.tick, dropped };
}

/** Items in order, each once (pages may overlap briefly while a filtered set shifts). */
export function chainItems(chain: PageChain | undefined): ItemProjection[] {
  if (!chain) return [];
  const seen = new Set<string>();
  const out: ItemProjection[] = [];
  for (const p of chain.pages)
    for (const item of p.items) {
      if (seen.has(item.id)) continue;
      seen.add(item.id);
      out.push(item);
    }
  return out;
}

/** Replaces one item wherever it is loaded (after a retry). */
export function replaceItem(chain: PageChain, item: ItemProjection): PageChain {
  return {
    ...chain,
    pages: chain.pages.map((p) => ({ ...p, items: p.items.map((i) => (i.id === item.id ? item : i)) })),
  };
}
