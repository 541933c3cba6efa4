import { goldenItems } from "@/server/batches/golden-sets";
import { goldenSetScope, parseGoldenItemsQuery } from "@/server/http/batch-scope";
import { downloadResponse, pagedStream } from "@/server/http/download";
import { handle } from "@/server/http/route";

export const dynamic = "force-dynamic";

type Ctx = { params: Promise<{ setId: string }> };

const PAGE = 500;

/** Every item of a version (`version`, the newest by default), one JSON line each in item_key order, pulled a page at a time. */
export const GET = handle(async (req: Request, ctx: Ctx) => {
  const { db, userId, setId } = await goldenSetScope(req, await ctx.params);
  const { version: asked } = parseGoldenItemsQuery(new URL(req.url).searchParams, false);
  // The first page answers 404 / 400 before the download starts, and fixes the version it reads.
  const first = await goldenItems(db, { userId, setId, version: asked, limit: PAGE });
  const { version } = first;
  const lines = (page: typeof first) => page.items.map((item) => `${JSON.stringify(item)}\n`).join("");
  const body = pagedStream(lines(first), first.next_cursor, async (cursor) => {
    const page = await goldenItems(db, { userId, setId, version, cursor, limit: PAGE });
    return { text: lines(page), cursor: page.next_cursor };
  });
  return downloadResponse(body, "application/x-ndjson; charset=utf-8", `golden-set-${setId}-v${version}.jsonl`);
});
