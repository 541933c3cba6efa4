import { fileContent } from "@/server/compat/openai-files";
import { compatHandle, jsonlResponse, requireApiKey } from "@/server/http/compat";
import { getDatabase } from "@/server/db/client";

export const dynamic = "force-dynamic";

type Ctx = { params: Promise<{ fileId: string }> };

/** OpenAI files.content: the bytes, streamed (uploaded files chunk by chunk, result files generated from the items). */
export const GET = compatHandle("openai", async (req: Request, ctx: Ctx) => {
  const { userId } = await requireApiKey(req);
  const { fileId } = await ctx.params;
  const { body, filename } = await fileContent(getDatabase().db, { userId, fileId });
  return jsonlResponse(body, filename);
});
